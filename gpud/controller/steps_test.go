package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/spec"
)

func (h *harness) stepEvent(node string, j spec.Job, seq uint64, kind string, s spec.Step) {
	h.t.Helper()
	_, err := h.c.NodeEvents(context.Background(), root, node, []NodeEvent{{Seq: seq, AllocID: j.Alloc.ID, JobID: j.ID,
		Kind: kind, Time: h.clock(), Step: &s}})
	if err != nil {
		h.t.Fatal(err)
	}
}

// TestStepsReachAccounting: the batch step and srun's steps, as the node
// reports them, are kept on the running job (gpuq show, squeue -s) and
// reach accounting when they end (sacct N.0) and with the job's end
// (N.batch, and a step still running then ends CANCELLED). A re-sent
// start after the end does not reopen the step.
func TestStepsReachAccounting(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0, WithRecorder(db))
	h.register("n1", 2)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2 })
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("job %s, want RUNNING", j.State)
	}
	if _, err := h.c.NodeEvents(ctx, root, "n1", []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: id, Kind: EventStarted, Time: t0}}); err != nil {
		t.Fatal(err)
	}
	s0 := spec.Step{ID: "0", Name: "hostname", State: spec.StateRunning, StartTime: spec.NewTime(t0), Nodes: []string{"n1"}, NTasks: 2}
	h.stepEvent("n1", j, 2, EventStepStarted, s0)
	s1 := spec.Step{ID: "1", Name: "python", State: spec.StateRunning, StartTime: spec.NewTime(t0), Nodes: []string{"n1"}, NTasks: 1, GPUs: 1}
	h.stepEvent("n1", j, 3, EventStepStarted, s1)
	j = h.job(id)
	if len(j.Steps) != 3 || j.Steps[0].ID != spec.StepBatch || j.Steps[0].GPUs != 2 || !j.Steps[1].Running() {
		t.Fatalf("running job's steps = %+v, want batch, 0, 1 running", j.Steps)
	}
	// Bob may not touch alice's steps; a step that does not exist is named.
	if _, err := h.c.StepAction(ctx, bob, spec.JobRef{ID: id}, "1", ""); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Errorf("bob cancelling alice's step: %v, want permission denied", err)
	}
	if _, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: id}, "7", ""); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("cancel of step 7: %v, want not found", err)
	}
	if _, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: id}, "1", ""); err != nil {
		t.Fatal(err)
	}
	as := h.assignments("n1")
	if len(as) != 1 || len(as[0].Job.StepSignals) != 1 || !as[0].Job.StepSignals[0].Cancel || as[0].Job.StepSignals[0].Step != 1 {
		t.Fatalf("assignment's step signals = %+v, want a cancel of step 1", as[0].Job.StepSignals)
	}

	h.advance(time.Minute)
	s0.State, s0.ExitCode, s0.EndTime = spec.StateFailed, 3, spec.NewTime(h.clock())
	h.stepEvent("n1", j, 4, EventStepEnded, s0)
	s0run := s0
	s0run.State, s0run.EndTime = spec.StateRunning, spec.Time{}
	h.stepEvent("n1", j, 5, EventStepStarted, s0run)                                // re-sent start
	waitSteps(t, db, id, func(got []accounting.Step) bool { return len(got) == 0 }) // no job row yet: listed with the job
	if j = h.job(id); j.Steps[1].State != spec.StateFailed {
		t.Errorf("step 0 after a re-sent start = %s, want FAILED", j.Steps[1].State)
	}
	h.exit("n1", j, spec.StateCompleted, 0)
	got := waitSteps(t, db, id, func(got []accounting.Step) bool { return len(got) == 3 })
	want := []struct {
		id    string
		state spec.JobState
		code  int
	}{{"batch", spec.StateCompleted, 0}, {"0", spec.StateFailed, 3}, {"1", spec.StateCancelled, 0}}
	for i, w := range want {
		if got[i].ID != w.id || got[i].State != w.state || got[i].ExitCode != w.code || got[i].EndTime.IsZero() {
			t.Errorf("accounted step %d = %+v, want %s %s exit %d, ended", i, got[i], w.id, w.state, w.code)
		}
	}
	if got[1].Elapsed != 60 {
		t.Errorf("step 0 elapsed %d s, want 60", got[1].Elapsed)
	}
	if _, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: id}, "1", ""); !errors.Is(err, spec.ErrConflict) {
		t.Errorf("cancel of an ended job's step: %v, want conflict", err)
	}
}

func waitSteps(t *testing.T, db *accounting.DB, id spec.JobID, ok func([]accounting.Step) bool) []accounting.Step {
	t.Helper()
	var got []accounting.Step
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m, err := db.Steps(context.Background(), []spec.JobID{id})
		if err != nil {
			t.Fatal(err)
		}
		if got = m[id]; ok(got) {
			return got
		}
	}
	t.Fatalf("accounted steps of job %d = %+v", id, got)
	return nil
}

// TestStepsSurviveRestart: a running job's steps and a pending step
// cancel are in state.db: a restarted controller (as after kill -9) still
// shows the running step, still asks its node to cancel it, and records
// the step's end the node reports afterwards.
func TestStepsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/state.db"
	h, _ := storeHarness(t, path)
	h.register("n1", 1)
	id := h.submit(alice, nil)
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("job %s, want RUNNING", j.State)
	}
	s0 := spec.Step{ID: "0", Name: "train", State: spec.StateRunning, StartTime: spec.NewTime(t0), Nodes: []string{"n1"}, NTasks: 1}
	h.stepEvent("n1", j, 1, EventStepStarted, s0)
	if _, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: id}, "0", ""); err != nil {
		t.Fatal(err)
	}
	h.settle()
	h.stop()

	h2, _ := storeHarness(t, path)
	h2.register("n1", 1)
	j = h2.job(id)
	if len(j.Steps) != 1 || j.Steps[0].ID != "0" || !j.Steps[0].Running() {
		t.Fatalf("steps after the restart = %+v, want step 0 running", j.Steps)
	}
	as := h2.assignments("n1")
	if len(as) != 1 || len(as[0].Job.StepSignals) != 1 || !as[0].Job.StepSignals[0].Cancel {
		t.Fatalf("step signals after the restart = %+v, want the cancel of step 0", as)
	}
	s0.State, s0.EndTime, s0.Signal = spec.StateCancelled, spec.NewTime(t0.Add(time.Second)), 15
	h2.stepEvent("n1", j, 2, EventStepEnded, s0)
	if j = h2.job(id); j.Steps[0].State != spec.StateCancelled || j.Steps[0].Signal != 15 {
		t.Errorf("step 0 after its end = %+v, want CANCELLED by signal 15", j.Steps[0])
	}
}

// TestStepSignalsTrimmedInANewArray: past maxStepSignals the oldest
// requests are dropped, and a job returned before (a published view, a
// reader's copy) keeps what it had: the trim used to shift the shared
// array under its readers.
func TestStepSignalsTrimmedInANewArray(t *testing.T) {
	ctx := context.Background()
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0)
	h.register("n1", 2)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	if _, err := h.c.NodeEvents(ctx, root, "n1", []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: id, Kind: EventStarted, Time: t0}}); err != nil {
		t.Fatal(err)
	}
	h.stepEvent("n1", j, 2, EventStepStarted, spec.Step{ID: "0", Name: "sleep", State: spec.StateRunning, StartTime: spec.NewTime(t0), Nodes: []string{"n1"}, NTasks: 1})
	var before spec.Job
	for i := range maxStepSignals + 3 {
		out, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: id}, "0", "USR1")
		if err != nil {
			t.Fatal(err)
		}
		if i == maxStepSignals-1 {
			before = out
		}
	}
	if len(before.StepSignals) != maxStepSignals || before.StepSignals[0].Seq != 1 {
		t.Fatalf("the job as returned at the %dth signal: %d requests from seq %d, want %d from seq 1 (it changed after it was returned)",
			maxStepSignals, len(before.StepSignals), before.StepSignals[0].Seq, maxStepSignals)
	}
	now := h.job(id).StepSignals
	if len(now) != maxStepSignals || now[0].Seq != 4 || now[len(now)-1].Seq != maxStepSignals+3 {
		t.Errorf("step signals kept: %d from seq %d to %d, want the newest %d (4..%d)", len(now), now[0].Seq, now[len(now)-1].Seq, maxStepSignals, maxStepSignals+3)
	}
}
