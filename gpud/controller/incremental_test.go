package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// alwaysIncremental answers events incrementally however cheap the full
// cycle was.
func alwaysIncremental(c *Controller) { c.sched.incMin = 0 }

// fullCycles is how many full cycles (snapshots) the controller has run.
func (h *harness) fullCycles() uint64 {
	h.t.Helper()
	h.settle()
	var n uint64
	if err := h.c.query(context.Background(), func() error { n = h.c.sched.snapID; return nil }); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestIncrementalCycles: after a full cycle, plain submissions and job ends
// are answered through sched.State without a new snapshot, never giving a
// GPU twice; anything else (a hold) brings back a full cycle.
func TestIncrementalCycles(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, alwaysIncremental)
	h.register("n1", 2)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }
	a := h.submit(alice, gpu)
	full := h.fullCycles()
	b := h.submit(alice, gpu)
	c := h.submit(alice, gpu)
	if n := h.fullCycles(); n != full {
		t.Fatalf("%d full cycles for two plain submissions, want 0", n-full)
	}
	ja, jb, jc := h.job(a), h.job(b), h.job(c)
	if ja.State != spec.StateRunning || jb.State != spec.StateRunning || jc.State != spec.StatePending {
		t.Fatalf("states %s %s %s, want RUNNING RUNNING PENDING", ja.State, jb.State, jc.State)
	}
	if ja.GPUs[0] == jb.GPUs[0] {
		t.Fatalf("jobs %d and %d both got %s", a, b, ja.GPUs[0])
	}
	if jc.Reason == "" {
		t.Fatalf("job %d pending without a reason", c)
	}
	// A job end frees its GPU; the waiting job takes exactly that one.
	h.exit("n1", ja, spec.StateCompleted, 0)
	if jc = h.job(c); jc.State != spec.StateRunning || jc.GPUs[0] != ja.GPUs[0] {
		t.Fatalf("after %d ended: job %d %s on %v, want RUNNING on %s", a, c, jc.State, jc.GPUs, ja.GPUs[0])
	}
	if n := h.fullCycles(); n != full {
		t.Fatalf("%d full cycles for a job end, want 0", n-full)
	}
	// A hold is not something the last full cycle knows: full cycle.
	d := h.submit(alice, gpu)
	if _, err := h.c.JobAction(context.Background(), alice, d, ActionHold, ""); err != nil {
		t.Fatal(err)
	}
	if n := h.fullCycles(); n == full {
		t.Fatal("a hold did not bring a full cycle")
	}
	h.exit("n1", jb, spec.StateCompleted, 0)
	if j := h.job(d); j.State != spec.StatePending || !j.Hold {
		t.Fatalf("held job %d = %s (held %v) after a GPU freed, want PENDING and held", d, j.State, j.Hold)
	}
	// The timer's periodic cycle is a full one.
	full = h.fullCycles()
	h.advance(2 * DefaultConfig().SchedInterval)
	if n := h.fullCycles(); n == full {
		t.Fatal("no full cycle after the scheduling interval")
	}
}

// TestMaxStartsPerCycle: a cycle that reaches the start limit asks for the
// next one, so every job starts, a limit's worth per cycle.
func TestMaxStartsPerCycle(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.MaxStartsPerCycle = 2 })
	h.register("n1", 5)
	var ids []spec.JobID
	for i := range 5 {
		js := spec.JobSpec{Script: "x", WorkDir: "/tmp", Resources: spec.Resources{GPUsPerNode: 1}, Hold: i > 0}
		id, err := h.c.Submit(context.Background(), alice, js)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	h.settle()
	for _, id := range ids[1:] {
		if _, err := h.c.JobAction(context.Background(), alice, id, ActionRelease, ""); err != nil {
			t.Fatal(err)
		}
	}
	h.settle() // starts two
	running := func() int {
		n := 0
		for _, id := range ids {
			if h.job(id).State == spec.StateRunning { // job() settles: one more cycle each
				n++
			}
		}
		return n
	}
	if n := running(); n != 5 {
		t.Fatalf("%d of 5 jobs running after the follow-up cycles, want 5", n)
	}
}

// TestMaxStartsPerCycleResumes: a full cycle that reaches the start
// limit is followed by cycles that go on through the queue it ordered
// (sched.State.Resume), not by a full cycle (a snapshot of every node
// and pending job) per limit's worth of starts: in the 100,000-job
// loadtest those full cycles were a fifth of the controller's CPU. A job
// whose QOS may preempt brings a full cycle back.
func TestMaxStartsPerCycleResumes(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.MaxStartsPerCycle = 2 }, t0, alwaysIncremental)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }
	var ids []spec.JobID
	for range 7 {
		ids = append(ids, h.submit(alice, gpu)) // no node yet: pending
	}
	full := h.fullCycles()
	h.register("n1", 8) // a node change: one full cycle, then resumes
	for _, id := range ids {
		if j := h.job(id); j.State != spec.StateRunning {
			t.Fatalf("job %d %s, want RUNNING", id, j.State)
		}
	}
	if n := h.fullCycles(); n != full+1 {
		t.Errorf("%d full cycles to start 7 jobs 2 per cycle, want 1 (the rest resumed)", n-full)
	}
	gpus := map[string]bool{}
	for _, id := range ids {
		for _, g := range h.job(id).GPUs {
			if gpus[g] {
				t.Fatalf("GPU %s given twice", g)
			}
			gpus[g] = true
		}
	}
}

// TestNoPeriodicCycleWithNothingPending: the scheduling interval's full
// cycle (a snapshot of every node) runs only while some job is pending,
// and so does the cycle after a node registers;
// an idle cluster of 10,000 nodes spent a fifth of its controller's CPU
// on it (gpud loadtest, docs/fleet.md). Before, every interval ran one.
func TestNoPeriodicCycleWithNothingPending(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0)
	h.register("n1", 1)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }
	a := h.submit(alice, gpu)
	if j := h.job(a); j.State != spec.StateRunning {
		t.Fatalf("job %d %s, want RUNNING", a, j.State)
	}
	full := h.fullCycles()
	for range 5 {
		h.advance(h.c.cfg.SchedInterval)
	}
	if n := h.fullCycles(); n != full {
		t.Errorf("%d full cycles over 5 scheduling intervals with nothing pending; want 0", n-full)
	}
	// Nodes joining an empty queue run no full cycle either.
	for i := range 3 {
		h.register(fmt.Sprintf("m%d", i), 1)
	}
	if n := h.fullCycles(); n != full {
		t.Errorf("%d full cycles for 3 registrations with nothing pending; want 0", n-full)
	}
	// A pending job brings the periodic cycle back (the new nodes' GPUs
	// taken first).
	for range 3 {
		h.submit(alice, gpu)
	}
	b := h.submit(alice, gpu)
	if j := h.job(b); j.State != spec.StatePending {
		t.Fatalf("job %d %s, want PENDING (every GPU taken)", b, j.State)
	}
	full = h.fullCycles()
	h.advance(h.c.cfg.SchedInterval)
	if n := h.fullCycles(); n != full+1 {
		t.Errorf("%d full cycles in a scheduling interval with job %d pending; want 1", n-full, b)
	}
}
