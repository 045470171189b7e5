package api

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// loadedAssignment is job i's assignment as the loadtest's look: one GPU
// of an 8-GPU node, a running batch step.
func loadedAssignment(i int) Assignment {
	id := spec.JobID(1000 + i)
	alloc := spec.Alloc{ID: fmt.Sprintf("a-%d-1", id), JobID: id, Attempt: 1, StartTime: spec.NewTime(time.Now()),
		Nodes: []spec.NodeAlloc{{Node: "node0001", CPUs: 2, MemMiB: 8192, GPUs: []string{fmt.Sprintf("GPU-%08d", i)}}}}
	job := spec.Job{ID: id, JobSpec: spec.JobSpec{Name: "bench", Partition: "gpu", Account: "acct",
		Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1}, TimeLimit: spec.Duration(time.Hour),
		Script: "#!/bin/sh\ntrue\n", Env: []string{"LOADTEST_RUN_MS=5000", "PATH=/usr/bin:/bin"}, WorkDir: "/tmp", SubmitDir: "/tmp"},
		User: "root", State: spec.StateRunning, Priority: 100, SubmitTime: spec.NewTime(time.Now()), StartTime: spec.NewTime(time.Now()),
		Attempt: 1, Nodes: []string{"node0001"}, GPUs: alloc.Nodes[0].GPUs, Alloc: &alloc,
		Steps: []spec.Step{{ID: spec.StepBatch, Name: "batch", State: spec.StateRunning, StartTime: spec.NewTime(time.Now()), Nodes: []string{"node0001"}, NTasks: 1}}}
	return Assignment{Job: job, Alloc: alloc, ClusterName: "gpud", Gate: "off"}
}

func ids(as []Assignment) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Alloc.ID)
	}
	return out
}

// TestHeldSetApply: whole sets replace, deltas add, change and remove
// (the set kept in allocation order), and a delta that does not follow
// the held generation, or comes before any whole set, changes nothing.
// The set handed out is a copy: the node's changes to it (its start
// times) stay out of the held set.
func TestHeldSetApply(t *testing.T) {
	a, b, c := loadedAssignment(1), loadedAssignment(2), loadedAssignment(3)
	var h heldSet
	early := AssignmentsResponse{Generation: 4, Delta: true, Base: 3, Assignments: []Assignment{a}}
	if err := h.apply(&early, false); !errors.Is(err, ErrWatchOutOfStep) {
		t.Fatalf("a delta before any whole set: %v; want ErrWatchOutOfStep", err)
	}
	r := AssignmentsResponse{Generation: 5, Assignments: []Assignment{a, c}}
	if err := h.apply(&r, false); err != nil || !slices.Equal(ids(r.Assignments), []string{a.Alloc.ID, c.Alloc.ID}) {
		t.Fatalf("whole set: %v, %v", ids(r.Assignments), err)
	}
	r.Assignments[0].Alloc.StartTime = spec.Time{} // the node's own change
	stopped := c
	stopped.Stop, stopped.StopState = true, spec.StateCancelled
	r = AssignmentsResponse{Generation: 7, Delta: true, Base: 5, Assignments: []Assignment{stopped, b}}
	if err := h.apply(&r, false); err != nil {
		t.Fatal(err)
	}
	if got := ids(r.Assignments); !slices.Equal(got, []string{a.Alloc.ID, b.Alloc.ID, c.Alloc.ID}) || !r.Assignments[2].Stop || r.Delta || r.Base != 0 {
		t.Fatalf("after the delta: %v (c stopped %v, delta %v base %d); want a, b and c stopped, as a whole set", got, r.Assignments[2].Stop, r.Delta, r.Base)
	}
	if r.Assignments[0].Alloc.StartTime.IsZero() {
		t.Fatal("the node's change to a handed-out set reached the held set")
	}
	lost := AssignmentsResponse{Generation: 9, Delta: true, Base: 8, Removed: []string{a.Alloc.ID}}
	if err := h.apply(&lost, false); !errors.Is(err, ErrWatchOutOfStep) {
		t.Fatalf("a delta on 8 with 7 held: %v; want ErrWatchOutOfStep", err)
	}
	r = AssignmentsResponse{Generation: 7, Delta: true, Base: 7} // quiet: unchanged
	if err := h.apply(&r, false); err != nil || len(r.Assignments) != 3 || r.Generation != 7 {
		t.Fatalf("an empty delta after the lost one: %v, %v; want the held set of 7 unchanged", ids(r.Assignments), err)
	}
	r = AssignmentsResponse{Generation: 8, Delta: true, Base: 7, Removed: []string{a.Alloc.ID, c.Alloc.ID}}
	if err := h.apply(&r, false); err != nil || !slices.Equal(ids(r.Assignments), []string{b.Alloc.ID}) {
		t.Fatalf("after removing a and c: %v, %v; want b", ids(r.Assignments), err)
	}
}

// TestHeldSetBorrowed: a set handed borrowed (AssignmentsRequest.Borrow)
// is, at every line, the set a copying stream hands: the same
// allocations in allocation order, each as its latest line had it. The
// lines add an allocation before, between and after those held (an
// insert, not an append), change one, remove some, and start from a
// whole set out of order (sorted once held).
func TestHeldSetBorrowed(t *testing.T) {
	as := make([]Assignment, 6)
	for i := range as {
		as[i] = loadedAssignment(i + 1) // a-1001-1 ... a-1006-1
	}
	signalled := as[3]
	signalled.Signal, signalled.SignalSeq = "USR1", 1
	lines := []AssignmentsResponse{
		{Generation: 1, Assignments: []Assignment{as[3], as[1]}},
		{Generation: 2, Delta: true, Base: 1, Assignments: []Assignment{as[0], as[5], as[2]}},
		{Generation: 3, Delta: true, Base: 2, Assignments: []Assignment{signalled}, Removed: []string{as[0].Alloc.ID}},
		{Generation: 4, Delta: true, Base: 3, Assignments: []Assignment{as[4], as[0]}, Removed: []string{as[5].Alloc.ID, as[2].Alloc.ID}},
		{Generation: 5, Delta: true, Base: 4},
	}
	want := [][]string{
		{as[1].Alloc.ID, as[3].Alloc.ID},
		{as[0].Alloc.ID, as[1].Alloc.ID, as[2].Alloc.ID, as[3].Alloc.ID, as[5].Alloc.ID},
		{as[1].Alloc.ID, as[2].Alloc.ID, as[3].Alloc.ID, as[5].Alloc.ID},
		{as[0].Alloc.ID, as[1].Alloc.ID, as[3].Alloc.ID, as[4].Alloc.ID},
		{as[0].Alloc.ID, as[1].Alloc.ID, as[3].Alloc.ID, as[4].Alloc.ID},
	}
	var copied, borrowed heldSet
	for i, l := range lines {
		c, b := l, l
		c.Assignments, b.Assignments = slices.Clone(l.Assignments), slices.Clone(l.Assignments)
		if err := copied.apply(&c, false); err != nil {
			t.Fatalf("line %d, copied: %v", i, err)
		}
		if err := borrowed.apply(&b, true); err != nil {
			t.Fatalf("line %d, borrowed: %v", i, err)
		}
		if got := ids(b.Assignments); !slices.Equal(got, want[i]) {
			t.Errorf("line %d: borrowed set %v; want %v", i, got, want[i])
		}
		if got := ids(c.Assignments); !slices.Equal(got, want[i]) {
			t.Errorf("line %d: copied set %v; want %v", i, got, want[i])
		}
		for j := range b.Assignments {
			if b.Assignments[j].SignalSeq != c.Assignments[j].SignalSeq {
				t.Errorf("line %d: %s signal seq %d borrowed, %d copied", i, b.Assignments[j].Alloc.ID, b.Assignments[j].SignalSeq, c.Assignments[j].SignalSeq)
			}
		}
		if i >= 2 && b.Assignments[slices.IndexFunc(b.Assignments, func(a Assignment) bool { return a.Alloc.ID == signalled.Alloc.ID })].SignalSeq != 1 {
			t.Errorf("line %d: the signalled job's change is not in the borrowed set", i)
		}
		if len(b.Assignments) > 0 && &b.Assignments[0] != &borrowed.asgs[0] {
			t.Errorf("line %d: the borrowed set is a copy", i)
		}
	}
}

// BenchmarkWatchLine is what a node does with one line of its watch
// stream when 8 one-GPU jobs run on it and one of them changed (one ended
// and another was placed): the whole set (every line before deltas), or
// the delta (the new job and the gone one's ID) applied to the set held,
// the set handed over borrowed as the node agent asks
// (AssignmentsRequest.Borrow); delta-copy hands a copy instead.
func BenchmarkWatchLine(b *testing.B) {
	var held []Assignment
	for i := range 8 {
		held = append(held, loadedAssignment(i))
	}
	placed := loadedAssignment(8)
	whole := AssignmentsResponse{Generation: 43, Now: time.Now().UTC(), ControllerID: "0123456789abcdef0123456789abcdef", StepTicketKey: "MCowBQYDK2VwAyEA0123456789abcdef0123456789abcdef0123"}
	whole.Assignments = append(slices.Clone(held[1:]), placed)
	delta := whole
	delta.Delta, delta.Base, delta.Assignments, delta.Removed = true, 42, []Assignment{placed}, []string{held[0].Alloc.ID}
	for _, c := range []struct {
		name   string
		line   AssignmentsResponse
		borrow bool
	}{{"whole", whole, true}, {"delta", delta, true}, {"delta-copy", delta, false}} {
		body := c.line.AppendJSON(nil)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			h := heldSet{ok: true}
			for b.Loop() {
				// The set held before the line (a copy of 8: in both).
				h.gen, h.asgs = 42, append(h.asgs[:0], held...)
				var r AssignmentsResponse
				if err := r.UnmarshalJSON(body); err != nil {
					b.Fatal(err)
				}
				if err := h.apply(&r, c.borrow); err != nil || len(r.Assignments) != 8 {
					b.Fatal(err, len(r.Assignments))
				}
			}
			b.ReportMetric(float64(len(body)), "bytes/line")
		})
	}
}
