package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestEndedCheckpoints: of a node's sealed checkpoint directories, the
// controller names those no job will restart from (a terminal job's, an
// unknown ID's, another job's of the ID) and never a pending, running or
// requeued job's, even one whose part exited 0 while a stop-to-requeue
// was in flight (the requeue rule), nor an untagged one of a live job.
func TestEndedCheckpoints(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	h.register("n1", 0)
	ckpt := func(j *spec.JobSpec) { j.Ckpt = spec.Duration(10 * time.Minute) }
	done := h.submit(alice, ckpt)
	requeued := h.submit(alice, ckpt)
	held := h.submit(alice, func(j *spec.JobSpec) { ckpt(j); j.Hold = true })
	cancelled := h.submit(alice, ckpt)
	// Placed before anything is asked of them (h.job runs the cycle a
	// submission left due): the cycle's pacing is the wall clock's, and
	// under load a job could still be pending at its cancel, without the
	// allocation h.exit reports on.
	for _, id := range []spec.JobID{done, requeued, cancelled} {
		if j := h.job(id); j.State != spec.StateRunning {
			t.Fatalf("job %d %s, want RUNNING", id, j.State)
		}
	}
	if _, err := h.c.JobAction(ctx, alice, cancelled, ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", h.job(cancelled), spec.StateCancelled, 0)
	h.exit("n1", h.job(done), spec.StateCompleted, 0)
	if _, err := h.c.JobAction(ctx, alice, requeued, ActionRequeue, ""); err != nil {
		t.Fatal(err)
	}
	tag := func(id spec.JobID) string { return spec.CheckpointTag(h.job(id).SubmitTime.UnixNano()) }
	ended := func() []CkptDir {
		t.Helper()
		h.settle()
		var dirs []CkptDir
		for _, id := range []spec.JobID{done, requeued, held, cancelled} {
			dirs = append(dirs, CkptDir{Job: id, Tag: tag(id)}, CkptDir{Job: id})
		}
		dirs = append(dirs,
			CkptDir{Job: requeued, Tag: spec.CheckpointTag(1)}, // another job of the ID (a reset state's)
			CkptDir{Job: 999, Tag: spec.CheckpointTag(2)},      // no job of the ID
			CkptDir{Job: 998})
		got, err := h.c.EndedCheckpoints(ctx, root, dirs)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := []CkptDir{
		{Job: done, Tag: tag(done)}, {Job: done},
		{Job: cancelled, Tag: tag(cancelled)}, {Job: cancelled},
		{Job: requeued, Tag: spec.CheckpointTag(1)},
		{Job: 999, Tag: spec.CheckpointTag(2)}, {Job: 998},
	}
	if j := h.job(requeued); j.State != spec.StateCompleting || j.StopState != spec.StateRequeued {
		t.Fatalf("requeued job %s (stop %s), want COMPLETING to be requeued", j.State, j.StopState)
	}
	if got := ended(); !slices.Equal(got, want) {
		t.Errorf("stop to requeue in flight: ended = %+v\nwant %+v", got, want)
	}
	// Its part exits 0 before the stop reached it: it is requeued all
	// the same, and its directory is still never named.
	h.exit("n1", h.job(requeued), spec.StateCompleted, 0)
	if j := h.job(requeued); j.State.Terminal() || j.Attempt != 2 {
		t.Fatalf("requeued job %s attempt %d, want requeued (attempt 2)", j.State, j.Attempt)
	}
	if got := ended(); !slices.Equal(got, want) {
		t.Errorf("after the requeue: ended = %+v\nwant %+v", got, want)
	}
	if _, err := h.c.EndedCheckpoints(ctx, alice, []CkptDir{{Job: done}}); err == nil {
		t.Error("a user asked which checkpoints may be removed; want refused")
	}
}
