package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func (h *harness) checkpointed(node string, j spec.Job, seq uint64, ckptSeq int, at time.Time, bytes int64) {
	h.t.Helper()
	_, err := h.c.NodeEvents(context.Background(), root, node, []NodeEvent{{Seq: seq, AllocID: j.Alloc.ID, JobID: j.ID,
		Kind: EventCheckpointed, Time: at, CkptSeq: ckptSeq, CkptBytes: bytes}})
	if err != nil {
		h.t.Fatal(err)
	}
}

func TestCheckpointedEventIsStoredOnce(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	h.register("n1", 0)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Ckpt = spec.Duration(10 * time.Minute) })
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("job %s, want RUNNING", j.State)
	}
	at := t0.Add(10 * time.Minute)
	h.checkpointed("n1", j, 2, 1, at, 4096)
	h.checkpointed("n1", j, 2, 1, at, 4096) // re-sent: the ack was lost
	want := spec.CheckpointRef{Attempt: 1, Seq: 1, Time: spec.NewTime(at), Bytes: 4096}
	got := h.job(id)
	if diff := cmp.Diff(want, got.LastCheckpoint); diff != "" || got.Checkpoints != 1 {
		t.Errorf("checkpoints = %d, last (-want +got):\n%s", got.Checkpoints, diff)
	}
	store.mu.Lock()
	stored := store.jobs[id]
	store.mu.Unlock()
	if stored.LastCheckpoint != want || stored.Checkpoints != 1 {
		t.Errorf("stored checkpoint = %d %+v, want 1 %+v", stored.Checkpoints, stored.LastCheckpoint, want)
	}
	// A stale allocation's checkpoint (an older attempt) is ignored.
	old := j
	old.Alloc = &spec.Alloc{ID: "stale"}
	h.checkpointed("n1", old, 3, 5, at, 1)
	if got := h.job(id); got.Checkpoints != 1 || got.LastCheckpoint.Seq != 1 {
		t.Errorf("stale checkpoint changed the job: %d %+v", got.Checkpoints, got.LastCheckpoint)
	}
}

func TestRequeueAsksForCheckpointFirst(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	h.register("n1", 0)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Ckpt = spec.Duration(10 * time.Minute) })
	plain := h.submit(alice, nil)
	j := h.job(id)
	h.advance(time.Minute)
	for _, jid := range []spec.JobID{id, plain} {
		if _, err := h.c.JobAction(ctx, alice, jid, ActionRequeue, ""); err != nil {
			t.Fatal(err)
		}
	}
	as := h.assignments("n1")
	if len(as) != 2 {
		t.Fatalf("assignments = %+v, want 2", as)
	}
	for _, a := range as {
		wantCkpt := a.Job.ID == id
		if !a.Stop || a.StopState != spec.StateRequeued || a.Checkpoint != wantCkpt {
			t.Errorf("job %d: stop %v %s checkpoint %v; want stop REQUEUED checkpoint %v", a.Job.ID, a.Stop, a.StopState, a.Checkpoint, wantCkpt)
		}
	}
	// The node checkpoints (sealed 3s before it reports the exit), then
	// stops the job: it is pending again with its id, then runs again.
	sealed := h.clock().Add(-3 * time.Second)
	h.checkpointed("n1", j, 5, 4, sealed, 100)
	h.exit("n1", j, spec.StateRequeued, 0)
	got := h.job(id)
	if got.State != spec.StateRunning || got.Attempt != 2 || got.ID != id {
		t.Fatalf("after requeue: job %d %s attempt %d, want %d RUNNING attempt 2", got.ID, got.State, got.Attempt, id)
	}
	if got.Checkpoints != 1 || got.LastCheckpoint.Seq != 4 || got.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoint = %d %+v, want 1, seq 4 of attempt 1", got.Checkpoints, got.LastCheckpoint)
	}
	if got.LostWork != spec.Duration(3*time.Second) {
		t.Errorf("lost work = %v, want 3s (time since the checkpoint)", got.LostWork.Std())
	}
	if got.StopCheckpoint {
		t.Errorf("the new attempt still carries the checkpoint-first stop")
	}
	// Cancel during a checkpoint-first requeue does not wait for it.
	if _, err := h.c.JobAction(ctx, alice, id, ActionRequeue, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	for _, a := range h.assignments("n1") {
		if a.Job.ID == id && (a.Checkpoint || a.StopState != spec.StateCancelled) {
			t.Errorf("after cancel: stop %s checkpoint %v, want CANCELLED without checkpoint", a.StopState, a.Checkpoint)
		}
	}
}
