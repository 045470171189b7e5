package sim

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched"
)

func TestParseCluster(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		spec      string
		wantNodes int
		wantGPUs  int
		wantModel string
		wantErr   bool
	}{
		{name: "h100", spec: "100x8:h100", wantNodes: 100, wantGPUs: 800, wantModel: "h100"},
		{name: "swf", spec: "256x1", wantNodes: 256, wantGPUs: 256},
		{name: "mixed", spec: "2x8:a100+3x4:t4", wantNodes: 5, wantGPUs: 28, wantModel: "a100"},
		{name: "bad", spec: "8:h100", wantErr: true},
		{name: "zero nodes", spec: "0x8", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes, err := ParseCluster(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseCluster(%q) error = %v, want error %v", tc.spec, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if len(nodes) != tc.wantNodes || TotalGPUs(nodes) != tc.wantGPUs || nodes[0].Model != tc.wantModel {
				t.Errorf("ParseCluster(%q) = %d nodes, %d GPUs, model %q; want %d, %d, %q",
					tc.spec, len(nodes), TotalGPUs(nodes), nodes[0].Model, tc.wantNodes, tc.wantGPUs, tc.wantModel)
			}
		})
	}
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	j := &Job{Runtime: 100 * time.Second, Estimate: 300 * time.Second}
	noEst := &Job{Runtime: 100 * time.Second}
	tests := []struct {
		name      string
		in        string
		job       *Job
		want      time.Duration
		wantLimit bool
		wantErr   bool
	}{
		{name: "exact", in: "exact", job: j, want: 100 * time.Second},
		{name: "trace", in: "trace", job: j, want: 300 * time.Second},
		{name: "user is a limit", in: "user", job: j, want: 300 * time.Second, wantLimit: true},
		{name: "user falls back to runtime", in: "user", job: noEst, want: 100 * time.Second, wantLimit: true},
		{name: "factor", in: "x2.5", job: j, want: 250 * time.Second},
		{name: "bad", in: "x0", wantErr: true},
		{name: "bad word", in: "guess", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := ParseEstimate(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseEstimate(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got := e.Of(tc.job); got != tc.want || e.Limit != tc.wantLimit {
				t.Errorf("ParseEstimate(%q).Of = %v (limit %v), want %v (limit %v)", tc.in, got, e.Limit, tc.want, tc.wantLimit)
			}
		})
	}
}

func s(n int) time.Duration { return time.Duration(n) * time.Second }

// backfillJobs on two single-GPU nodes: j1 holds one node until 100; j2
// needs both (the head from t=1); j3 fits now and ends before 100, so EASY
// backfills it; j4 fits now but would run past 100, so it must wait.
func backfillJobs() []Job {
	return []Job{
		{Name: "j1", Submit: s(0), Runtime: s(100), Nodes: 1, GPUsPerNode: 1, User: "a", TraceWait: -1},
		{Name: "j2", Submit: s(1), Runtime: s(10), Nodes: 2, GPUsPerNode: 1, User: "b", TraceWait: -1},
		{Name: "j3", Submit: s(2), Runtime: s(50), Nodes: 1, GPUsPerNode: 1, User: "a", TraceWait: -1},
		{Name: "j4", Submit: s(3), Runtime: s(500), Nodes: 1, GPUsPerNode: 1, User: "b", TraceWait: -1},
		// Bigger than the cluster: reported, never simulated.
		{Name: "j5", Submit: s(4), Runtime: s(5), Nodes: 3, GPUsPerNode: 1, TraceWait: -1},
	}
}

func TestRunPolicies(t *testing.T) {
	t.Parallel()
	nodes, err := ParseCluster("2x1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		policy    string
		wantStart []time.Duration // j1..j4
	}{
		{policy: "fcfs", wantStart: []time.Duration{s(0), s(100), s(110), s(110)}},
		{policy: "fcfs-easy", wantStart: []time.Duration{s(0), s(100), s(2), s(110)}},
		{policy: "fcfs-easy-sim", wantStart: []time.Duration{s(0), s(100), s(2), s(110)}},
		{policy: "fcfs-conservative", wantStart: []time.Duration{s(0), s(100), s(2), s(110)}},
		{policy: "sjf-easy-sim", wantStart: []time.Duration{s(0), s(100), s(2), s(110)}},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			p, err := Named(tc.policy, sched.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Run(backfillJobs(), Options{Nodes: nodes, Estimate: Estimate{Mode: "exact"}, Policy: p})
			if err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			for _, x := range r.Res[:4] {
				if !x.Started {
					t.Fatalf("a job never started: %+v", r.Res)
				}
				got = append(got, x.Start)
			}
			if diff := cmp.Diff(tc.wantStart, got); diff != "" {
				t.Errorf("start times (-want +got):\n%s", diff)
			}
			if !r.Res[4].Unfittable {
				t.Errorf("j5 (3 nodes on a 2-node cluster) not marked unfittable")
			}
			m := Measure(r)
			if m.Jobs != 4 || m.Unfittable != 1 {
				t.Errorf("Measure: %d jobs, %d unfittable; want 4, 1", m.Jobs, m.Unfittable)
			}
			// Determinism: a second run gives the same result.
			r2, _ := Run(backfillJobs(), Options{Nodes: nodes, Estimate: Estimate{Mode: "exact"}, Policy: p})
			if diff := cmp.Diff(r.Res, r2.Res); diff != "" {
				t.Errorf("second run differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestRunTimeLimitKills(t *testing.T) {
	t.Parallel()
	nodes, _ := ParseCluster("1x1")
	jobs := []Job{
		{Name: "over", Submit: 0, Runtime: s(100), Estimate: s(60), Nodes: 1, GPUsPerNode: 1, TraceWait: -1},
		{Name: "next", Submit: s(1), Runtime: s(10), Estimate: s(20), Nodes: 1, GPUsPerNode: 1, TraceWait: -1},
	}
	p, _ := Named("fcfs", sched.Config{}, nil)
	est, _ := ParseEstimate("user")
	r, err := Run(jobs, Options{Nodes: nodes, Estimate: est, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Res[0].Killed || r.Res[0].End != s(60) || r.Res[1].Start != s(60) {
		t.Errorf("results %+v: want job 0 killed at 60 s and job 1 started then", r.Res)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	if got := BoundedSlowdown(s(99), s(1)); got != 10 {
		t.Errorf("BoundedSlowdown(99s, 1s) = %v, want 10 (10 s floor)", got)
	}
	if got := BoundedSlowdown(0, s(1)); got != 1 {
		t.Errorf("BoundedSlowdown(0, 1s) = %v, want 1", got)
	}
	if got := Jain([]float64{1, 1, 1, 1}); got != 1 {
		t.Errorf("Jain(equal) = %v, want 1", got)
	}
	if got := Jain([]float64{1, 0, 0, 0}); math.Abs(got-0.25) > 1e-12 {
		t.Errorf("Jain(one takes all) = %v, want 0.25", got)
	}
	if got := Percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95); got != 10 {
		t.Errorf("Percentile(1..10, 95) = %v, want 10", got)
	}
}

func TestWindow(t *testing.T) {
	t.Parallel()
	jobs := []Job{{Submit: s(5)}, {Submit: s(7)}, {Submit: s(9)}}
	w := Window(jobs, 1, 5)
	if len(w) != 2 || w[0].Submit != 0 || w[1].Submit != s(2) || jobs[1].Submit != s(7) {
		t.Errorf("Window = %+v; want 2 jobs shifted to 0 and the input untouched", w)
	}
	a, b := WindowStarts(10000, 1024, 10, 7), WindowStarts(10000, 1024, 10, 7)
	if diff := cmp.Diff(a, b); diff != "" || len(a) != 10 || a[9] > 10000-1024 {
		t.Errorf("WindowStarts not deterministic or out of range: %v %v", a, b)
	}
}
