package sched

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func node(name string, cpus int, mem int64, model string, gpus int) Node {
	n := Node{Name: name, State: spec.NodeIdle, Partitions: []string{"batch"}, CPUs: cpus, FreeCPUs: cpus, MemMiB: mem, FreeMemMiB: mem}
	for i := range gpus {
		n.GPUs = append(n.GPUs, GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, Free: true, FreeFraction: 1})
	}
	return n
}

func job(id spec.JobID, cpus, gpus int, mod ...func(*Job)) Job {
	j := Job{ID: id, Partition: "batch", SubmitTime: t0.Add(time.Duration(id) * time.Second),
		Req: spec.Resources{Nodes: 1, CPUsPerNode: cpus, GPUsPerNode: gpus}}
	for _, m := range mod {
		m(&j)
	}
	return j
}

func TestSchedule(t *testing.T) {
	t.Parallel()
	busy := node("a", 8, 1000, "h100", 2)
	busy.GPUs[0].Free = false
	busy.FreeCPUs = 2
	busy.Allocs = 1
	tests := []struct {
		name        string
		nodes       []Node
		jobs        []Job
		wantStarts  []Start
		wantPending []Pending
	}{
		{
			name:       "one job fits first node by name",
			nodes:      []Node{node("b", 8, 1000, "h100", 2), node("a", 8, 1000, "h100", 2)},
			jobs:       []Job{job(1, 2, 1)},
			wantStarts: []Start{{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 2, GPUs: []string{"GPU-a-0"}}}}},
		},
		{
			name:  "priority order, then resources then priority reason",
			nodes: []Node{node("a", 8, 1000, "h100", 2)},
			jobs: []Job{job(1, 1, 2), job(2, 1, 2, func(j *Job) { j.Priority = 10 }), job(3, 1, 1),
				job(4, 1, 0)},
			wantStarts: []Start{
				{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0", "GPU-a-1"}}}},
				{JobID: 4, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1}}},
			},
			wantPending: []Pending{
				{JobID: 1, Reason: spec.ReasonResources, Detail: "needs 1 node(s) with 1 CPUs, 2× gpu; 0 of 1 nodes fit now"},
				{JobID: 3, Reason: spec.ReasonPriority, Detail: "needs 1 node(s) with 1 CPUs, 1× gpu; 0 of 1 nodes fit now"},
			},
		},
		{
			name:  "GPU model must match",
			nodes: []Node{node("a", 8, 1000, "a100", 4), node("b", 8, 1000, "h100", 1)},
			jobs:  []Job{job(1, 1, 1, func(j *Job) { j.Req.GPUModel = "h100" })},
			wantStarts: []Start{
				{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "b", CPUs: 1, GPUs: []string{"GPU-b-0"}}}},
			},
		},
		{
			// The openb trace's gpu_spec lists the models a task may use.
			name:  "GPU model list: any of the models separated by |",
			nodes: []Node{node("a", 8, 1000, "t4", 4), node("b", 8, 1000, "v100m32", 1), node("c", 8, 1000, "g2", 8)},
			jobs: []Job{
				job(1, 1, 1, func(j *Job) { j.Req.GPUModel = "v100m16|v100m32" }),
				job(2, 1, 1, func(j *Job) { j.Req.GPUModel = "p100|v100m16" }),
			},
			wantStarts: []Start{
				{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "b", CPUs: 1, GPUs: []string{"GPU-b-0"}}}},
			},
			wantPending: []Pending{
				{JobID: 2, Reason: spec.ReasonResources, Detail: "needs 1 node(s) with 1 CPUs, 1× p100|v100m16; 0 of 3 nodes fit now"},
			},
		},
		{
			name:  "gang takes N distinct nodes or none",
			nodes: []Node{node("a", 8, 1000, "h100", 1), node("b", 8, 1000, "h100", 1), node("c", 8, 1000, "h100", 0)},
			jobs: []Job{
				job(1, 1, 1, func(j *Job) { j.Req.Nodes = 3 }),
				job(2, 1, 1, func(j *Job) { j.Req.Nodes = 2 }),
			},
			wantStarts: []Start{{JobID: 2, Nodes: []spec.NodeAlloc{
				{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0"}},
				{Node: "b", Rank: 1, CPUs: 1, GPUs: []string{"GPU-b-0"}},
			}}},
			wantPending: []Pending{{JobID: 1, Reason: spec.ReasonResources, Detail: "needs 3 node(s) with 1 CPUs, 1× gpu; 2 of 3 nodes fit now"}},
		},
		{
			name:  "skips held, future begin, down and drained nodes",
			nodes: []Node{func() Node { n := node("a", 8, 1000, "", 0); n.State = spec.NodeDown; return n }(), func() Node { n := node("b", 8, 1000, "", 0); n.State = spec.NodeDrain; return n }(), node("c", 8, 1000, "", 0)},
			jobs: []Job{
				job(1, 1, 0, func(j *Job) { j.Held = true }),
				job(2, 1, 0, func(j *Job) { j.BeginTime = t0.Add(time.Hour) }),
				job(3, 1, 0),
			},
			wantStarts: []Start{{JobID: 3, Nodes: []spec.NodeAlloc{{Node: "c", CPUs: 1}}}},
			wantPending: []Pending{
				{JobID: 1, Reason: spec.ReasonHeld},
				{JobID: 2, Reason: spec.ReasonBeginTime, Detail: "begins at 2025-01-01T13:00:00Z"},
			},
		},
		{
			name:  "an ineligible job waits with the controller's reason and blocks nothing",
			nodes: []Node{node("a", 8, 1000, "", 0)},
			jobs: []Job{
				job(1, 9, 0, func(j *Job) {
					j.Ineligible, j.IneligibleDetail = spec.ReasonAccountNotAllowed, "account a may not use partition p"
				}),
				job(2, 1, 0),
			},
			wantStarts:  []Start{{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1}}}},
			wantPending: []Pending{{JobID: 1, Reason: spec.ReasonAccountNotAllowed, Detail: "account a may not use partition p"}},
		},
		{
			name:  "nodelist, exclude, constraint and partition",
			nodes: []Node{node("a", 8, 1000, "", 0), func() Node { n := node("b", 8, 1000, "", 0); n.Features = []string{"ib", "nvme"}; return n }(), node("c", 8, 1000, "", 0), func() Node { n := node("d", 8, 1000, "", 0); n.Partitions = []string{"debug"}; return n }()},
			jobs: []Job{
				job(1, 1, 0, func(j *Job) { j.Req.NodeList = []string{"c"} }),
				job(2, 1, 0, func(j *Job) { j.Req.Exclude = []string{"a", "b"} }),
				job(3, 1, 0, func(j *Job) { j.Req.Constraint = "ib&nvme" }),
				job(4, 1, 0, func(j *Job) { j.Partition = "debug" }),
				job(5, 1, 0, func(j *Job) { j.Req.Constraint = "ib&gpu" }),
			},
			wantStarts: []Start{
				{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "c", CPUs: 1}}},
				{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "c", CPUs: 1}}},
				{JobID: 3, Nodes: []spec.NodeAlloc{{Node: "b", CPUs: 1}}},
				{JobID: 4, Nodes: []spec.NodeAlloc{{Node: "d", CPUs: 1}}},
			},
			wantPending: []Pending{{JobID: 5, Reason: spec.ReasonResources, Detail: "needs 1 node(s) with 1 CPUs; 0 of 4 nodes fit now"}},
		},
		{
			name:  "exclusive needs an empty node and takes all of it",
			nodes: []Node{busy, node("b", 4, 500, "h100", 1)},
			jobs:  []Job{job(1, 1, 0, func(j *Job) { j.Req.Exclusive = true }), job(2, 1, 0)},
			wantStarts: []Start{
				{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "b", CPUs: 4, MemMiB: 500, GPUs: []string{"GPU-b-0"}}}},
				{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: nil}}},
			},
		},
		{
			name:       "already allocated GPU and memory are respected",
			nodes:      []Node{busy},
			jobs:       []Job{job(1, 1, 2), job(2, 1, 1, func(j *Job) { j.Req.MemMiB = 2000 }), job(3, 2, 1, func(j *Job) { j.Req.MemMiB = 1000 })},
			wantStarts: []Start{{JobID: 3, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 2, MemMiB: 1000, GPUs: []string{"GPU-a-1"}}}}},
			wantPending: []Pending{
				{JobID: 1, Reason: spec.ReasonResources, Detail: "needs 1 node(s) with 1 CPUs, 2× gpu; 0 of 1 nodes fit now"},
				{JobID: 2, Reason: spec.ReasonPriority, Detail: "needs 1 node(s) with 1 CPUs, 2000 MiB, 1× gpu; 0 of 1 nodes fit now"},
			},
		},
		{
			// --mem=0: all of a node's memory, so only a node with none
			// of it allocated takes the job, which then holds all of it.
			name:  "mem=0 takes a node's whole memory",
			nodes: []Node{func() Node { n := node("a", 8, 1000, "", 0); n.FreeMemMiB = 600; return n }(), node("b", 8, 2000, "", 0)},
			jobs: []Job{
				job(1, 1, 0, func(j *Job) { j.Req.MemWholeNode = true }),
				job(2, 1, 0, func(j *Job) { j.Req.MemWholeNode = true }),
				job(3, 1, 0, func(j *Job) { j.Req.MemMiB = 600 }),
			},
			wantStarts: []Start{
				{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "b", CPUs: 1, MemMiB: 2000}}},
				{JobID: 3, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, MemMiB: 600}}},
			},
			wantPending: []Pending{{JobID: 2, Reason: spec.ReasonResources, Detail: "needs 1 node(s) with 1 CPUs, all its memory; 0 of 2 nodes fit now"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snap := &Snapshot{Nodes: tc.nodes, Jobs: tc.jobs}
			got := Schedule(snap, t0, Config{})
			if err := Verify(snap, got); err != nil {
				t.Fatalf("invariants: %v", err)
			}
			if diff := cmp.Diff(tc.wantStarts, got.Starts); diff != "" {
				t.Errorf("Starts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPending, got.Pending); diff != "" {
				t.Errorf("Pending (-want +got):\n%s", diff)
			}
		})
	}
}

// TestScheduleDeterministic runs a crowded cycle with jobs in shuffled input
// orders; the plan must not depend on input order.
func TestScheduleDeterministic(t *testing.T) {
	t.Parallel()
	snap := bigSnapshot(40, 400)
	want := Schedule(snap, t0, Config{})
	if err := Verify(snap, want); err != nil {
		t.Fatal(err)
	}
	if len(want.Starts) == 0 {
		t.Fatal("no job started")
	}
	for k := 1; k < 5; k++ {
		rev := &Snapshot{Nodes: append([]Node(nil), snap.Nodes...), Jobs: append([]Job(nil), snap.Jobs...)}
		// A deterministic permutation (rotate by k*37).
		off := k * 37 % len(rev.Jobs)
		rev.Jobs = append(rev.Jobs[off:], rev.Jobs[:off]...)
		got := Schedule(rev, t0, Config{})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("plan depends on input order (-want +got):\n%s", diff)
		}
	}
}

// TestVerifyCatchesViolations makes sure the invariant check can fail.
func TestVerifyCatchesViolations(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Nodes: []Node{node("a", 2, 100, "h100", 1)}, Jobs: []Job{job(1, 2, 1), job(2, 1, 1)}}
	bad := Plan{Starts: []Start{
		{JobID: 1, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 2, GPUs: []string{"GPU-a-0"}}}},
		{JobID: 2, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0"}}}},
	}}
	err := Verify(snap, bad)
	if err == nil {
		t.Fatal("Verify accepted a double-booked GPU and an over-full node")
	}
	for _, want := range []string{"already held", "over CPU capacity"} {
		if !contains(err.Error(), want) {
			t.Errorf("Verify error %q lacks %q", err, want)
		}
	}
}

func contains(s, sub string) bool { return len(s) >= len(sub) && (s == sub || indexOf(s, sub) >= 0) }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func bigSnapshot(nodes, jobs int) *Snapshot {
	snap := &Snapshot{}
	for i := range nodes {
		snap.Nodes = append(snap.Nodes, node(fmt.Sprintf("n%03d", i), 64, 512000, "h100", 8))
	}
	for i := range jobs {
		id := spec.JobID(i + 1)
		snap.Jobs = append(snap.Jobs, job(id, 1+i%16, i%5, func(j *Job) {
			j.Priority = int64(i % 7)
			j.Req.Nodes = 1 + i%3
			j.Req.MemMiB = int64(i%4) * 1000
		}))
	}
	return snap
}

func BenchmarkScheduleCycle(b *testing.B) {
	snap := bigSnapshot(100, 10000)
	b.ReportAllocs()
	for b.Loop() {
		Schedule(snap, t0, Config{})
	}
}
