package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Issue 25 B: a leader change never costs running work.

func (h *harness) nodeState(name string) spec.NodeState {
	h.t.Helper()
	nodes, err := h.c.Nodes(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == name {
			return n.State
		}
	}
	return ""
}

func (h *harness) heartbeat(name string, running ...string) {
	h.t.Helper()
	if err := h.c.Heartbeat(context.Background(), root, name, running); err != nil {
		h.t.Fatal(err)
	}
}

// A controller that takes the lead (here: follows, then leads again, as an
// HA member does; a restart is the same) counts no silence from before: a
// node it has not heard from gets FailoverNodeGrace, not node_timeout; a
// node it heard from since is judged by node_timeout again.
func TestNewLeaderGivesNodesGrace(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second; c.FailoverNodeGrace = 2 * time.Minute })
	ctx := context.Background()
	h.register("n1", 0)
	h.register("n2", 0)
	job := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.CPUsPerNode = 8; j.Resources.Nodes = 2 })
	if j := h.job(job); j.State != spec.StateRunning {
		t.Fatalf("job %s, want RUNNING", j.State)
	}
	h.advance(20 * time.Second) // silent 20 s under the old leadership
	if err := h.c.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	h.advance(2 * time.Second) // the election
	if err := h.c.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	h.advance(35 * time.Second) // 57 s without a heartbeat, 35 s since the lead
	if s := h.nodeState("n1"); s == spec.NodeDown {
		t.Fatalf("n1 DOWN 35 s after the lead; want the 2m grace")
	}
	h.heartbeat("n2")           // n2 finds the new leader ...
	h.advance(31 * time.Second) // ... and goes silent: node_timeout applies
	if s := h.nodeState("n2"); s != spec.NodeDown {
		t.Fatalf("n2 = %s 31 s after its heartbeat to the new leader; want DOWN", s)
	}
	if s := h.nodeState("n1"); s == spec.NodeDown {
		t.Fatalf("n1 DOWN 66 s after the lead; want the 2m grace")
	}
	h.advance(55 * time.Second) // 121 s since the lead
	if s := h.nodeState("n1"); s != spec.NodeDown {
		t.Fatalf("n1 = %s 121 s after the lead, never heard; want DOWN", s)
	}
}

// A controller restarted on its state gives the nodes the same grace.
func TestRestartGivesNodesGrace(t *testing.T) {
	st := newFakeStore()
	h := newHarness(t, st, func(c *Config) { c.NodeTimeout = 30 * time.Second })
	h.register("n1", 0)
	job := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.CPUsPerNode = 8 })
	if j := h.job(job); j.State != spec.StateRunning {
		t.Fatalf("job %s, want RUNNING", j.State)
	}
	h.stop()
	h2 := newHarnessAt(t, st, func(c *Config) { c.NodeTimeout = 30 * time.Second }, h.clock().Add(10*time.Second))
	h2.advance(100 * time.Second)
	if s := h2.nodeState("n1"); s == spec.NodeDown {
		t.Fatal("n1 DOWN 100 s after a restart; want the default 2m grace")
	}
	if j := h2.job(job); j.State != spec.StateRunning {
		t.Fatalf("job %s after the restart, want RUNNING", j.State)
	}
	h2.advance(21 * time.Second)
	if s := h2.nodeState("n1"); s != spec.NodeDown {
		t.Fatalf("n1 = %s 121 s after a restart, never heard; want DOWN", s)
	}
}

// A node marked DOWN for silence that comes back with its job's run
// (heartbeat lists the allocation) before the job started again resumes
// it: same allocation and attempt, steps kept, nothing requeued for good.
func TestReturningNodeResumesItsRun(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	h.stepEvent("n1", j, 1, EventStepStarted, spec.Step{ID: "0", Name: "train", State: spec.StateRunning, Nodes: []string{"n1"}})
	alloc := j.Alloc.ID
	h.advance(31 * time.Second)
	if s := h.nodeState("n1"); s != spec.NodeDown {
		t.Fatalf("n1 = %s, want DOWN", s)
	}
	got := h.job(id)
	if got.State != spec.StatePending || got.Interrupted == nil || got.Interrupted.Alloc.ID != alloc {
		t.Fatalf("job = %s interrupted %v, want PENDING keeping run %s", got.State, got.Interrupted, alloc)
	}
	h.heartbeat("n1", alloc)
	got = h.job(id)
	if got.State != spec.StateRunning || got.Alloc == nil || got.Alloc.ID != alloc || got.Attempt != 1 || got.Interrupted != nil {
		t.Fatalf("after n1 came back: job = %s alloc %v attempt %d, want RUNNING on %s, attempt 1", got.State, got.Alloc, got.Attempt, alloc)
	}
	if len(got.Steps) == 0 || got.Steps[len(got.Steps)-1].State != spec.StateRunning {
		t.Fatalf("steps after the resume = %+v; want step 0 still running", got.Steps)
	}
	if as := h.assignments("n1"); len(as) != 1 || as[0].Alloc.ID != alloc || as[0].Stop {
		t.Fatalf("n1's assignments = %+v; want its run, not stopped", as)
	}
	h.exit("n1", got, spec.StateCompleted, 0)
	if got := h.job(id); got.State != spec.StateCompleted || got.Attempt != 1 {
		t.Fatalf("job = %s attempt %d, want COMPLETED on its first attempt", got.State, got.Attempt)
	}
}

// A node back just past node_timeout registers before its first
// heartbeat (an agent restarted, or one whose controller forgot it):
// its registration says which runs it still has, and the run resumes as
// the node comes back, before a scheduling cycle could start the job's
// next attempt on the node the registration just brought back (the old
// run, alive, was then fenced a heartbeat later). A registration that
// does not list the run (an older agent) leaves the job to start again.
func TestRegisteringNodeResumesItsRun(t *testing.T) {
	for _, listed := range []bool{true, false} {
		h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
		h.register("n1", 1)
		id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
		alloc := h.job(id).Alloc.ID
		h.advance(31 * time.Second)
		if got := h.job(id); got.State != spec.StatePending || got.Interrupted == nil {
			t.Fatalf("job = %s interrupted %v, want PENDING keeping its run", got.State, got.Interrupted)
		}
		var running []string
		if listed {
			running = []string{alloc}
		}
		inv := spec.Inventory{Name: "n1", CPUs: 8, MemMiB: 1000, GPUs: []spec.GPU{{UUID: "GPU-n1-0", Model: "h100"}}}
		if _, err := h.c.RegisterRunning(context.Background(), root, inv, running); err != nil {
			t.Fatal(err)
		}
		h.advance(time.Second) // a scheduling cycle, before any heartbeat
		got := h.job(id)
		switch {
		case listed && (got.State != spec.StateRunning || got.Alloc == nil || got.Alloc.ID != alloc || got.Attempt != 1):
			t.Fatalf("registered with its run: job = %s alloc %v attempt %d; want RUNNING on %s, attempt 1", got.State, got.Alloc, got.Attempt, alloc)
		case !listed && (got.State != spec.StateRunning || got.Attempt != 2):
			t.Fatalf("registered without its run: job = %s attempt %d; want its second attempt", got.State, got.Attempt)
		}
		h.stop()
	}
}

// The run's end reported by the returning node (it ended while the node
// was cut off) resumes and ends the job: it ran once, it is not run again.
func TestReturningNodeReportsTheRunsEnd(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	h.advance(31 * time.Second)
	if h.job(id).State != spec.StatePending {
		t.Fatal("job not requeued")
	}
	h.exit("n1", j, spec.StateCompleted, 0) // the outbox, delivered before any heartbeat
	if got := h.job(id); got.State != spec.StateCompleted || got.Attempt != 1 {
		t.Fatalf("job = %s attempt %d, want COMPLETED on attempt 1", got.State, got.Attempt)
	}
	if s := h.nodeState("n1"); s == spec.NodeDown {
		t.Fatal("n1 still DOWN after it delivered events")
	}
}

// Once the job started again elsewhere, the old run never comes back: the
// returning node's heartbeat listing it changes nothing, and its
// assignments do not list it (the agent fences it).
func TestRunStartedElsewhereIsNotResumed(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	old := h.job(id).Alloc.ID
	h.advance(20 * time.Second)
	h.register("n2", 1)
	h.advance(6 * time.Second)
	h.heartbeat("n2")
	h.advance(5 * time.Second) // n1 silent 31 s: DOWN; the job starts on n2
	got := h.job(id)
	if got.State != spec.StateRunning || got.Attempt != 2 || got.Interrupted != nil {
		t.Fatalf("job = %s attempt %d interrupted %v, want RUNNING attempt 2 on n2", got.State, got.Attempt, got.Interrupted)
	}
	h.heartbeat("n1", old)
	if got := h.job(id); got.Alloc.ID == old || got.Attempt != 2 {
		t.Fatalf("job went back to its old run %s", got.Alloc.ID)
	}
	for _, a := range h.assignments("n1") {
		if a.Alloc.ID == old && !a.Stop {
			t.Fatalf("n1 still told to run %s", old)
		}
	}
}

// A run with a part on a node that still answers is stopped there when
// the other goes silent: it cannot resume, and the job is requeued.
func TestRunWithAnAnsweringNodeIsNotKept(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
	h.register("n1", 1)
	h.register("n2", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1; j.Resources.Nodes = 2 })
	j := h.job(id)
	h.advance(20 * time.Second)
	h.heartbeat("n2", j.Alloc.ID)
	h.advance(11 * time.Second) // n1 silent 31 s
	h.exit("n2", j, spec.StateCancelled, 0)
	if got := h.job(id); got.State != spec.StatePending || got.Interrupted != nil {
		t.Fatalf("job = %s interrupted %v, want PENDING, nothing kept", got.State, got.Interrupted)
	}
}

// Both nodes of a run silent (a rack cut off): the run is kept, and
// resumes once both are back and list it; a follower that took the lead
// meanwhile knows it (it is stored with the job).
func TestSilentRackResumesAcrossALeaderChange(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second })
	ctx := context.Background()
	h.register("n1", 1)
	h.register("n2", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1; j.Resources.Nodes = 2 })
	alloc := h.job(id).Alloc.ID
	h.advance(31 * time.Second)
	if got := h.job(id); got.State != spec.StatePending || got.Interrupted == nil {
		t.Fatalf("job = %s interrupted %v, want PENDING with its run kept", got.State, got.Interrupted)
	}
	if err := h.c.Follow(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Lead(ctx); err != nil {
		t.Fatal(err)
	}
	h.heartbeat("n1", alloc)
	if got := h.job(id); got.State != spec.StatePending {
		t.Fatalf("job = %s with only n1 back, want PENDING", got.State)
	}
	h.heartbeat("n2", alloc)
	if got := h.job(id); got.State != spec.StateRunning || got.Alloc.ID != alloc || len(got.Alloc.Nodes) != 2 {
		t.Fatalf("job = %s alloc %v with both back, want RUNNING on %s", got.State, got.Alloc, alloc)
	}
}

// A node that missed two heartbeats is not responding (UNKNOWN): no new
// job is placed on it (one would start on its other nodes only, behind a
// cut link), though it is not DOWN and its running jobs stay; its next
// heartbeat brings it back.
func TestLateNodeGetsNoNewJobs(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = 30 * time.Second; c.HeartbeatInterval = 5 * time.Second })
	h.register("n1", 1)
	running := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	h.register("n2", 1)
	h.advance(6 * time.Second)
	h.heartbeat("n1")
	h.advance(5 * time.Second) // n2 silent 11 s, n1 5 s
	if s := h.nodeState("n2"); s != spec.NodeUnknown {
		t.Fatalf("n2 = %s after 11 s of silence, want UNKNOWN (not responding)", s)
	}
	waiting := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if j := h.job(waiting); j.State != spec.StatePending {
		t.Fatalf("job = %s on %v; want PENDING: the only free GPU is on a node not responding", j.State, j.Nodes)
	}
	if j := h.job(running); j.State != spec.StateRunning {
		t.Fatalf("running job = %s, want RUNNING", j.State)
	}
	h.heartbeat("n2")
	if j := h.job(waiting); j.State != spec.StateRunning || j.Nodes[0] != "n2" {
		t.Fatalf("job = %s on %v after n2 answered; want RUNNING on n2", j.State, j.Nodes)
	}
}

// A listing that runs in the same batch as a submission (the group commit
// gathers both) does not see the job, whose view is published only at the
// commit: before, it met the nil view and panicked (found by the chaos
// suite: squeue answered "internal error ... nil pointer dereference").
func TestListInTheBatchOfASubmission(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	before := h.submit(alice, nil)
	err := h.c.query(context.Background(), func() error {
		rec := &jobRec{job: spec.Job{ID: h.c.st.nextID, JobSpec: spec.JobSpec{Name: "j"}, User: "alice", UID: 1000, State: spec.StatePending}}
		h.c.st.nextID++
		h.c.st.addJob(rec) // as Submit does before the commit
		got := h.c.listJobs(JobFilter{All: true})
		if len(got) != 1 || got[0].job.ID != before {
			t.Errorf("listed %d jobs; want only the committed job %d", len(got), before)
		}
		if got := h.c.listJobs(JobFilter{IDs: []spec.JobID{rec.job.ID}}); len(got) != 0 {
			t.Errorf("listed the uncommitted job by id")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
