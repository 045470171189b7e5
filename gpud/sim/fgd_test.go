package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// fgdJobs is a random openb-like task mix: shares, whole and multi-GPU
// tasks, CPU-only tasks, CPUs and memory in the trace's units.
func fgdJobs(n int, seed uint64) []Job {
	r := rand.New(rand.NewPCG(seed, 1))
	jobs := make([]Job, n)
	for i := range jobs {
		j := Job{Name: fmt.Sprint(i), Nodes: 1, CPUMilli: 1000 * (1 + r.IntN(16)), MemMiB: int64(1024 * (1 + r.IntN(64))), TraceWait: -1}
		switch x := r.IntN(10); {
		case x < 4:
			j.GPUsPerNode, j.GPUMilli = 1, []int{230, 320, 470, 650, 810}[r.IntN(5)]
		case x < 7:
			j.GPUsPerNode = 1
		case x < 9:
			j.GPUsPerNode = []int{2, 4, 8}[r.IntN(3)]
		}
		jobs[i] = j
	}
	return jobs
}

func fgdCluster() []NodeSpec {
	var nodes []NodeSpec
	for i, shape := range []struct {
		gpus, cpus int
		mem        int64
	}{{8, 96, 393216}, {8, 64, 262144}, {2, 104, 524288}, {2, 16, 122880}, {4, 32, 131072}, {1, 8, 32768}, {8, 96, 393216}, {4, 48, 376832}} {
		nodes = append(nodes, NodeSpec{Name: fmt.Sprintf("n%d", i), GPUs: shape.gpus, CPUs: shape.cpus, MemMiB: shape.mem, Model: "g"})
	}
	return nodes
}

// One Schedule call over the whole arrival sequence decides every task as
// one call per arrival, applied in turn, would (RunSched relies on it).
func TestFGDBatchEqualsSequential(t *testing.T) {
	t.Parallel()
	nodes := fgdCluster()
	jobs := fgdJobs(300, 7)
	for _, pol := range sched.Placements {
		t.Run(string(pol), func(t *testing.T) {
			t.Parallel()
			arr := Arrivals(jobs, TotalGPUs(nodes), 300, 42)
			work := Workload(jobs, true)
			batch := &sched.Snapshot{Nodes: fgdNodes(nodes), Workload: work}
			for i := range arr {
				batch.Jobs = append(batch.Jobs, sched.Job{ID: spec.JobID(i + 1), SubmitTime: Epoch.Add(time.Duration(i)), Req: request(&arr[i], true)})
			}
			cfg := sched.Config{Placement: pol}
			want := sched.Schedule(batch, Epoch, cfg).Starts
			seq := fgdNodes(nodes)
			var got []sched.Start
			for i := range arr {
				snap := &sched.Snapshot{Nodes: seq, Workload: work, Jobs: []sched.Job{batch.Jobs[i]}}
				plan := sched.Schedule(snap, Epoch, cfg)
				if err := sched.VerifyPlan(snap, Epoch, cfg, plan); err != nil {
					t.Fatal(err)
				}
				for _, s := range plan.Starts {
					got = append(got, s)
					for _, a := range s.Nodes {
						applyAlloc(&seq[slices.IndexFunc(seq, func(n sched.Node) bool { return n.Name == a.Node })], a)
					}
				}
			}
			if len(want) < 30 || len(want) == len(arr) {
				t.Fatalf("%d of %d tasks placed; the test needs a cluster that fills up", len(want), len(arr))
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("batch vs sequential starts (-batch +sequential):\n%s", diff)
			}
		})
	}
}

func TestArrivals(t *testing.T) {
	t.Parallel()
	jobs := fgdJobs(100, 3)
	a, b, c := Arrivals(jobs, 200, 100, 42), Arrivals(jobs, 200, 100, 42), Arrivals(jobs, 200, 100, 43)
	if !cmp.Equal(a, b) || cmp.Equal(a, c) {
		t.Errorf("arrivals: equal seeds must give equal orders, different seeds different ones")
	}
	sum, last := 0.0, 0.0
	for _, j := range a {
		last = j.GPUs()
		sum += last
	}
	if sum < 200 || sum-last >= 200 || len(a) <= len(jobs) {
		t.Errorf("arrivals sum to %g GPUs over %d tasks; want the first to reach 200 (the trace repeated)", sum, len(a))
	}
	if got := Arrivals([]Job{{Nodes: 1}}, 8, 100, 1); len(got) != 1 {
		t.Errorf("CPU-only trace: %d arrivals, want one pass", len(got))
	}
}

// In a replay, shares of one GPU run side by side, and the GPU is free
// for a whole-GPU job only when the last sharer ends.
func TestRunSharesGPU(t *testing.T) {
	t.Parallel()
	nodes, _ := ParseCluster("1x1")
	jobs := []Job{
		{Name: "a", Runtime: s(50), Nodes: 1, GPUsPerNode: 1, GPUMilli: 500, TraceWait: -1},
		{Name: "b", Runtime: s(100), Nodes: 1, GPUsPerNode: 1, GPUMilli: 500, TraceWait: -1},
		{Name: "whole", Submit: s(1), Runtime: s(10), Nodes: 1, GPUsPerNode: 1, TraceWait: -1},
	}
	for _, name := range []string{"fcfs", "fcfs-easy"} {
		p, _ := Named(name, sched.Config{}, nil)
		r, err := Run(jobs, Options{Nodes: nodes, Estimate: Estimate{Mode: "exact"}, Policy: p})
		if err != nil {
			t.Fatal(err)
		}
		var got []time.Duration
		for _, x := range r.Res {
			got = append(got, x.Start)
		}
		if want := []time.Duration{0, 0, s(100)}; !cmp.Equal(got, want) {
			t.Errorf("%s: starts %v, want %v", name, got, want)
		}
	}
}
