package schedtest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/preempt"
	"github.com/gpud/gpud/gpud/spec"
)

// genCluster draws a random cluster, QOS set and queue into a harness.
func genCluster(t *rapid.T) *Harness {
	h := New(t)
	nodes := rapid.IntRange(1, 6).Draw(t, "nodes")
	for i := range nodes {
		b := MakeNode(fmt.Sprintf("n%d", i)).CPUs(rapid.IntRange(4, 32).Draw(t, "cpus")).Mem(int64(rapid.IntRange(1, 8).Draw(t, "memG")) << 10)
		if rapid.Bool().Draw(t, "a100") {
			b.Model("a100")
		}
		b.GPUs(rapid.IntRange(0, 8).Draw(t, "gpus"))
		n := b.Obj()
		if rapid.Bool().Draw(t, "topology") {
			// Two NUMA nodes; NVLink pairs on half the nodes.
			pairs := rapid.Bool().Draw(t, "nvlink")
			for k := range n.GPUs {
				n.GPUs[k].NUMANode = 2 * k / max(len(n.GPUs), 1)
				if pairs {
					n.GPUs[k].NVLinkGroup = 1 + k/2
				}
			}
		}
		h.Nodes = append(h.Nodes, n)
	}
	h.Cfg.Placement = rapid.SampledFrom(sched.Placements).Draw(t, "placement")
	h.QOS = qosSet()
	if rapid.Bool().Draw(t, "checkpoint") {
		h.QOS[2].PreemptMode = preempt.ModeCheckpoint
	}
	h.QOS[1].MaxGPUsPerUser = rapid.IntRange(0, 16).Draw(t, "maxGPUsPerUser")
	h.Cfg.BackfillDepth = rapid.IntRange(0, 5).Draw(t, "depth")
	if rapid.Bool().Draw(t, "window") {
		h.Cfg.BackfillWindow = time.Duration(rapid.IntRange(10, 300).Draw(t, "windowMin")) * time.Minute
	}
	h.Cfg.PreemptMinRuntime = time.Duration(rapid.IntRange(0, 30).Draw(t, "minRunMin")) * time.Minute
	h.Cfg.CheckpointGrace = time.Minute
	return h
}

func genJob(t *rapid.T, id spec.JobID) (sched.Job, time.Duration) {
	qos := rapid.SampledFrom([]string{"low", "normal", "high"}).Draw(t, "qos")
	limit := time.Duration(rapid.IntRange(0, 120).Draw(t, "limitMin")) * time.Minute
	b := qjob(id, qos, rapid.IntRange(0, 8).Draw(t, "jgpus"), limit).
		CPUs(rapid.IntRange(1, 8).Draw(t, "jcpus")).Mem(int64(rapid.IntRange(0, 4).Draw(t, "jmemG"))<<10).
		Nodes(rapid.IntRange(1, 3).Draw(t, "jnodes")).
		Account(rapid.SampledFrom([]string{"a", "b"}).Draw(t, "acct"), rapid.SampledFrom([]string{"u", "v"}).Draw(t, "user"))
	if rapid.IntRange(0, 9).Draw(t, "model") == 0 {
		b.Model("a100")
	}
	if rapid.IntRange(0, 9).Draw(t, "excl") == 0 {
		b.Exclusive()
	} else if rapid.IntRange(0, 5).Draw(t, "frac") == 0 {
		b.GPUs(0).Nodes(1).Fraction(float64(rapid.IntRange(1, 9).Draw(t, "tenths")) / 10)
	}
	run := limit
	if limit == 0 || rapid.Bool().Draw(t, "early") {
		run = time.Duration(rapid.IntRange(1, 120).Draw(t, "runMin")) * time.Minute
	}
	return b.Obj(), run
}

// TestPropertyInvariants: over random clusters, queues and arrivals, every
// cycle's plan passes VerifyPlan (no over-allocation, reservations never
// delayed, only lower priority/QOS preempted, gangs whole), and a job
// with a time limit never has its expected start move later than a
// cycle earlier unless higher-priority work arrived or was requeued.
func TestPropertyInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		h := genCluster(t)
		next := spec.JobID(1)
		cycles := rapid.IntRange(1, 15).Draw(t, "cycles")
		for range cycles {
			for range rapid.IntRange(0, 4).Draw(t, "arrivals") {
				j, run := genJob(t, next)
				next++
				h.SubmitRuns(j, run)
			}
			h.Cycle() // fatals on an invariant violation
			h.Advance(time.Duration(rapid.IntRange(0, 30).Draw(t, "stepMin")) * time.Minute)
		}
	})
}

// TestPropertyDeterministic: the plan does not depend on input order.
func TestPropertyDeterministic(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		h := genCluster(t)
		for id := range spec.JobID(rapid.IntRange(1, 30).Draw(t, "jobs")) {
			j, run := genJob(t, id+1)
			h.SubmitRuns(j, run)
		}
		h.Cycle()
		h.Advance(5 * time.Minute)
		for id := range spec.JobID(rapid.IntRange(0, 10).Draw(t, "more")) {
			j, run := genJob(t, id+100)
			h.SubmitRuns(j, run)
		}
		snap := h.Snapshot()
		want := sched.Schedule(snap, h.Now, h.Cfg)
		perm := rapid.Permutation(snap.Jobs).Draw(t, "perm")
		nodes := slices.Clone(snap.Nodes)
		slices.Reverse(nodes)
		running := slices.Clone(snap.Running)
		slices.Reverse(running)
		shuffled := *snap
		shuffled.Jobs, shuffled.Nodes, shuffled.Running = perm, nodes, running
		got := sched.Schedule(&shuffled, h.Now, h.Cfg)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("plan depends on input order (-want +got):\n%s", diff)
		}
	})
}
