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
	if err := h.apply(&early); !errors.Is(err, ErrWatchOutOfStep) {
		t.Fatalf("a delta before any whole set: %v; want ErrWatchOutOfStep", err)
	}
	r := AssignmentsResponse{Generation: 5, Assignments: []Assignment{a, c}}
	if err := h.apply(&r); err != nil || !slices.Equal(ids(r.Assignments), []string{a.Alloc.ID, c.Alloc.ID}) {
		t.Fatalf("whole set: %v, %v", ids(r.Assignments), err)
	}
	r.Assignments[0].Alloc.StartTime = spec.Time{} // the node's own change
	stopped := c
	stopped.Stop, stopped.StopState = true, spec.StateCancelled
	r = AssignmentsResponse{Generation: 7, Delta: true, Base: 5, Assignments: []Assignment{stopped, b}}
	if err := h.apply(&r); err != nil {
		t.Fatal(err)
	}
	if got := ids(r.Assignments); !slices.Equal(got, []string{a.Alloc.ID, b.Alloc.ID, c.Alloc.ID}) || !r.Assignments[2].Stop || r.Delta || r.Base != 0 {
		t.Fatalf("after the delta: %v (c stopped %v, delta %v base %d); want a, b and c stopped, as a whole set", got, r.Assignments[2].Stop, r.Delta, r.Base)
	}
	if r.Assignments[0].Alloc.StartTime.IsZero() {
		t.Fatal("the node's change to a handed-out set reached the held set")
	}
	lost := AssignmentsResponse{Generation: 9, Delta: true, Base: 8, Removed: []string{a.Alloc.ID}}
	if err := h.apply(&lost); !errors.Is(err, ErrWatchOutOfStep) {
		t.Fatalf("a delta on 8 with 7 held: %v; want ErrWatchOutOfStep", err)
	}
	r = AssignmentsResponse{Generation: 7, Delta: true, Base: 7} // quiet: unchanged
	if err := h.apply(&r); err != nil || len(r.Assignments) != 3 || r.Generation != 7 {
		t.Fatalf("an empty delta after the lost one: %v, %v; want the held set of 7 unchanged", ids(r.Assignments), err)
	}
	r = AssignmentsResponse{Generation: 8, Delta: true, Base: 7, Removed: []string{a.Alloc.ID, c.Alloc.ID}}
	if err := h.apply(&r); err != nil || !slices.Equal(ids(r.Assignments), []string{b.Alloc.ID}) {
		t.Fatalf("after removing a and c: %v, %v; want b", ids(r.Assignments), err)
	}
}

// BenchmarkWatchLine is what a node does with one line of its watch
// stream when 8 one-GPU jobs run on it and one of them changed (one ended
// and another was placed): the whole set (every line before deltas), or
// the delta (the new job and the gone one's ID) applied to the set held.
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
		name string
		line AssignmentsResponse
	}{{"whole", whole}, {"delta", delta}} {
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
				if err := h.apply(&r); err != nil || len(r.Assignments) != 8 {
					b.Fatal(err, len(r.Assignments))
				}
			}
			b.ReportMetric(float64(len(body)), "bytes/line")
		})
	}
}
