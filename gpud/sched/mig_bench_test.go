package sched_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// migBenchCluster is nodes × 8 H100s in dynamic MIG mode, all empty.
func migBenchCluster(nodes int) []sched.Node {
	profiles := sched.H100MIGProfiles()
	out := make([]sched.Node, 0, nodes)
	for i := range nodes {
		n := sched.Node{Name: fmt.Sprintf("n%05d", i), State: spec.NodeIdle, CPUs: 256, FreeCPUs: 256, MemMiB: 2 << 20, FreeMemMiB: 2 << 20}
		for g := range 8 {
			n.GPUs = append(n.GPUs, sched.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "h100", Free: true, FreeFraction: 1,
				MIGEnabled: true, MIG: &sched.MIGGPU{Dynamic: true, Profiles: profiles}})
		}
		out = append(out, n)
	}
	return out
}

// migUtil is the share of the cluster's compute slices the plan's starts
// use.
func migUtil(snap *sched.Snapshot, plan sched.Plan) float64 {
	size := map[string]int{"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}
	used, total := 0, 0
	for _, n := range snap.Nodes {
		total += 7 * len(n.GPUs)
	}
	for _, s := range plan.Starts {
		for _, a := range s.Nodes {
			for _, m := range a.MIG {
				used += size[m.Profile]
			}
		}
	}
	return float64(used) / float64(total)
}

// BenchmarkMIGSchedule places 10,000 pending one-slice (1g.10gb) jobs on
// 1,000 dynamic-MIG nodes (56,000 slices): one full cycle per op.
func BenchmarkMIGSchedule(b *testing.B) {
	snap := &sched.Snapshot{Nodes: migBenchCluster(1000)}
	for i := range 10000 {
		snap.Jobs = append(snap.Jobs, sched.Job{ID: spec.JobID(i + 1), SubmitTime: bt0.Add(time.Duration(i) * time.Second),
			Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: 1, GPUProfile: "1g.10gb"}})
	}
	var plan sched.Plan
	b.ReportAllocs()
	for b.Loop() {
		plan = sched.Schedule(snap, bt0, sched.Config{})
	}
	if len(plan.Starts) != 10000 {
		b.Fatalf("%d of 10000 jobs started", len(plan.Starts))
	}
	// Packing: 10,000 one-slice jobs fill 10000/7 GPUs, not more.
	gpus := map[string]bool{}
	for _, s := range plan.Starts {
		gpus[s.Nodes[0].MIG[0].GPU] = true
	}
	b.ReportMetric(float64(len(gpus)), "GPUs-used")
}

// BenchmarkMIGScheduleOversubscribed places 30,000 pending jobs of mixed
// profiles (1g 40%, 2g 25%, 3g 20%, 4g 10%, 7g 5%: about 1.2 times the
// 56,000 compute slices of 1,000 dynamic-MIG nodes) and reports the share
// of compute slices the plan uses.
func BenchmarkMIGScheduleOversubscribed(b *testing.B) {
	snap := &sched.Snapshot{Nodes: migBenchCluster(1000)}
	rng := xorshift(88172645463325252)
	for i := range 30000 {
		var p string
		switch r := rng.intn(100); {
		case r < 40:
			p = "1g.10gb"
		case r < 65:
			p = "2g.20gb"
		case r < 85:
			p = "3g.40gb"
		case r < 95:
			p = "4g.40gb"
		default:
			p = "7g.80gb"
		}
		snap.Jobs = append(snap.Jobs, sched.Job{ID: spec.JobID(i + 1), SubmitTime: bt0.Add(time.Duration(i) * time.Second),
			Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: 1, GPUProfile: p}})
	}
	var plan sched.Plan
	b.ReportAllocs()
	for b.Loop() {
		plan = sched.Schedule(snap, bt0, sched.Config{})
	}
	if err := sched.Verify(snap, plan); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(100*migUtil(snap, plan), "%slices-used")
}
