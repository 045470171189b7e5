package preempt

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	c := func(id spec.JobID, prio int64, startAgo, ckptAgo time.Duration) Candidate {
		x := Candidate{ID: id, Priority: prio, Start: now.Add(-startAgo)}
		if ckptAgo > 0 {
			x.LastCheckpoint = now.Add(-ckptAgo)
		}
		return x
	}
	// Each candidate frees one unit; need says how many units are needed.
	tests := []struct {
		name  string
		cands []Candidate
		need  int
		want  []spec.JobID
		ok    bool
	}{
		{name: "lowest priority first", cands: []Candidate{c(1, 5, time.Hour, 0), c(2, 1, time.Hour, 0)}, need: 1, want: []spec.JobID{2}, ok: true},
		{name: "most recent checkpoint", cands: []Candidate{c(1, 1, time.Hour, 30*time.Minute), c(2, 1, time.Hour, time.Minute)}, need: 1, want: []spec.JobID{2}, ok: true},
		{name: "least run time", cands: []Candidate{c(1, 1, time.Hour, 0), c(2, 1, time.Minute, 0)}, need: 1, want: []spec.JobID{2}, ok: true},
		{name: "two needed", cands: []Candidate{c(1, 1, time.Hour, 0), c(2, 1, time.Minute, 0), c(3, 9, time.Minute, 0)}, need: 2, want: []spec.JobID{2, 1}, ok: true},
		{name: "not enough", cands: []Candidate{c(1, 1, time.Hour, 0)}, need: 2},
		{name: "nothing needed", cands: []Candidate{c(1, 1, time.Hour, 0)}, need: 0, ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Choose(tc.cands, func(v []Candidate) bool { return len(v) >= tc.need })
			var ids []spec.JobID
			for _, v := range got {
				ids = append(ids, v.ID)
			}
			if ok != tc.ok || !cmp.Equal(tc.want, ids) {
				t.Errorf("Choose = %v, %v; want %v, %v", ids, ok, tc.want, tc.ok)
			}
		})
	}
}

// Pruning drops a victim that turned out unnecessary: exactly what is needed.
func TestChoosePrunes(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	small := Candidate{ID: 1, Priority: 1, Start: now} // frees 1
	big := Candidate{ID: 2, Priority: 2, Start: now}   // frees 4
	size := map[spec.JobID]int{1: 1, 2: 4}
	got, ok := Choose([]Candidate{big, small}, func(v []Candidate) bool {
		n := 0
		for _, x := range v {
			n += size[x.ID]
		}
		return n >= 4
	})
	if !ok || len(got) != 1 || got[0].ID != 2 {
		t.Errorf("Choose = %+v, %v; want only job 2", got, ok)
	}
}
