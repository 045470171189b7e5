package sim

import (
	"math"
	"testing"

	"github.com/gpud/gpud/gpud/sched"
)

// Identical 0.6-GPU tasks on two 1-GPU nodes: each GPU takes one, so the
// allocation rate stops at 60% while the arrived demand grows; the tune
// step stops arrivals before 130% (4 tasks, 120%). Every paper policy and
// every sched placement gives the same curve.
func TestPaperCurveSmall(t *testing.T) {
	t.Parallel()
	nodes := []NodeSpec{{Name: "a", GPUs: 1, CPUs: 8, MemMiB: 1 << 20}, {Name: "b", GPUs: 1, CPUs: 8, MemMiB: 1 << 20},
		{Name: "cpu", CPUs: 64, MemMiB: 1 << 20}}
	jobs := []Job{{Name: "x", Nodes: 1, GPUsPerNode: 1, GPUMilli: 600, CPUMilli: 1000, TraceWait: -1}}
	s, err := newPaperSetup(jobs, nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.nodes) != 2 {
		t.Fatalf("%d nodes take part, want the 2 GPU nodes", len(s.nodes))
	}
	check := func(name string, r *PaperResult) {
		t.Helper()
		if r.Arrived != 4 || r.Placed != 2 || len(r.Alloc) != 131 {
			t.Fatalf("%s: arrived %d placed %d, %d curve points; want 4, 2, 131", name, r.Arrived, r.Placed, len(r.Alloc))
		}
		for k, want := range map[int]float64{30: 30, 31: 30, 60: 60, 90: 60, 120: 60} {
			if got := r.Alloc[k]; math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: allocation at %d%% arrived = %g, want %g", name, k, got, want)
			}
		}
		if !math.IsNaN(r.Alloc[100]) || !math.IsNaN(r.Alloc[0]) {
			t.Errorf("%s: k=0 and k=100 have no arrival within ±1, want NaN: %g, %g", name, r.Alloc[0], r.Alloc[100])
		}
	}
	for _, pol := range PaperPolicies {
		r, err := s.run(pol, PaperOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		check(string(pol), r)
	}
	ps := &PaperSetup{s}
	for _, pl := range sched.Placements {
		r, err := ps.RunSched(pl, PaperOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		check("sched:"+string(pl), r)
	}
	if _, err := s.run("tetris", PaperOptions{}); err == nil {
		t.Error("unknown policy accepted")
	}
	if _, err := newPaperSetup(jobs, []NodeSpec{{Name: "cpu", CPUs: 8}}, true); err == nil {
		t.Error("a cluster without GPUs accepted")
	}
}
