package priority

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestCompute(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	w := Weights{Age: 1000, Fairshare: 10000, JobSize: 100, Partition: 10, QOS: 2000, Nice: 1}
	tests := []struct {
		name string
		in   Input
		cfg  Config
		want Factors
	}{
		{name: "age capped at max age", in: Input{Submit: now.Add(-48 * time.Hour)}, cfg: Config{Weights: w, MaxAge: 24 * time.Hour},
			want: Factors{Age: 1, Nice: 0.5}},
		{name: "half max age", in: Input{Submit: now.Add(-12 * time.Hour)}, cfg: Config{Weights: w, MaxAge: 24 * time.Hour},
			want: Factors{Age: 0.5, Nice: 0.5}},
		{name: "all factors", in: Input{Submit: now, Fairshare: 0.25, GPUs: 8, ClusterGPUs: 32, Tier: 1, MaxTier: 2, QOS: 100, MaxQOS: 1000, Nice: -10000},
			cfg: Config{Weights: w}, want: Factors{Fairshare: 0.25, JobSize: 0.25, Partition: 0.5, QOS: 0.1, Nice: 1}},
		{name: "favor small", in: Input{Submit: now, GPUs: 8, ClusterGPUs: 32, Nice: 10000}, cfg: Config{Weights: w, FavorSmall: true},
			want: Factors{JobSize: 0.75}},
		{name: "out of range clamped", in: Input{Submit: now.Add(time.Hour), Fairshare: 2}, cfg: Config{Weights: w},
			want: Factors{Fairshare: 1, Nice: 0.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Compute(tc.in, now, tc.cfg)
			if diff := cmp.Diff(tc.want, got.Factors, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("factors (-want +got):\n%s", diff)
			}
			f := got.Factors
			total := w.Age*f.Age + w.Fairshare*f.Fairshare + w.JobSize*f.JobSize + w.Partition*f.Partition + w.QOS*f.QOS + w.Nice*f.Nice
			if d := float64(got.Total) - total; d > 0.5 || d < -0.5 {
				t.Errorf("total %d, want ≈ %v", got.Total, total)
			}
		})
	}
}
