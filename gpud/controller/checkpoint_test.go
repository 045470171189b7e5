package controller

import (
	"context"
	"errors"
	"strings"
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

// TestUnhealthyGPUMovesItsJobs: a GPU reported unhealthy is taken out of
// service; the requeue-able job on it checkpoints and is requeued onto a
// healthy GPU, a job on another GPU and a --no-requeue job stay, and the
// mark survives re-registration until the node is resumed.
func TestUnhealthyGPUMovesItsJobs(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	h.register("n1", 3)
	gpu1 := func(j *spec.JobSpec) {
		j.Requeue = true
		j.Ckpt = spec.Duration(10 * time.Minute)
		j.Resources.GPUsPerNode = 1
	}
	moved := h.submit(alice, gpu1)
	stays := h.submit(alice, gpu1)
	pinned := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	uuid := h.job(moved).GPUs[0]
	if h.job(stays).GPUs[0] == uuid || h.job(pinned).GPUs[0] == uuid {
		t.Fatal("jobs share a GPU")
	}
	sick := []spec.GPUProblem{{UUID: uuid, Problem: "temperature 91C above 85C for 1m0s"}}
	if err := h.c.GPUHealth(ctx, alice, "n1", sick, nil); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("GPUHealth by a user = %v, want permission denied", err)
	}
	if err := h.c.GPUHealth(ctx, root, "n1", sick, nil); err != nil {
		t.Fatal(err)
	}
	as := h.assignments("n1")
	for _, a := range as {
		wantStop := a.Job.ID == moved
		if a.Stop != wantStop || (wantStop && (a.StopState != spec.StateRequeued || !a.Checkpoint)) {
			t.Errorf("job %d: stop %v %s checkpoint %v; want stop=%v (REQUEUED, checkpoint first)", a.Job.ID, a.Stop, a.StopState, a.Checkpoint, wantStop)
		}
	}
	nodes, _ := h.c.Nodes(ctx)
	if want := "GPU 0 temperature 91C above 85C for 1m0s"; !strings.Contains(nodes[0].Reason, "temperature 91C") {
		t.Errorf("node reason %q, want it to name the sick GPU (%q)", nodes[0].Reason, want)
	}
	// Re-sent: nothing changes. Re-registration keeps the mark.
	if err := h.c.GPUHealth(ctx, root, "n1", sick, nil); err != nil {
		t.Fatal(err)
	}
	h.register("n1", 3)
	j := h.job(moved)
	h.checkpointed("n1", j, 5, 1, h.clock(), 10)
	h.exit("n1", j, spec.StateRequeued, 0)
	got := h.job(moved)
	// Two GPUs left, both busy: it waits rather than going back on the
	// sick one.
	if got.State != spec.StatePending || got.LastCheckpoint.Seq != 1 {
		t.Fatalf("moved job %s (checkpoint %+v), want PENDING with its checkpoint", got.State, got.LastCheckpoint)
	}
	h.exit("n1", h.job(stays), spec.StateCompleted, 0)
	got = h.job(moved)
	if got.State != spec.StateRunning || got.GPUs[0] == uuid || got.Attempt != 2 {
		t.Fatalf("moved job %s on %v attempt %d, want RUNNING attempt 2 off %s", got.State, got.GPUs, got.Attempt, uuid)
	}
	if _, err := h.c.NodeAction(ctx, root, "n1", ActionResume, ""); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := h.c.Nodes(ctx); nodes[0].Reason != "" {
		t.Errorf("after resume node reason %q, want none", nodes[0].Reason)
	}
}

// TestDrainCheckpointsJobsFirst: drain requeues running jobs that take
// checkpoints (checkpoint first); jobs that do not, finish on the node.
func TestDrainCheckpointsJobsFirst(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	h.register("n1", 0)
	ck := h.submit(alice, func(j *spec.JobSpec) {
		j.Requeue, j.Ckpt, j.Resources.CPUsPerNode = true, spec.Duration(time.Minute), 1
	})
	plain := h.submit(alice, func(j *spec.JobSpec) { j.Requeue, j.Resources.CPUsPerNode = true, 1 })
	if h.job(ck).State != spec.StateRunning || h.job(plain).State != spec.StateRunning {
		t.Fatal("jobs did not start")
	}
	n, err := h.c.NodeAction(ctx, root, "n1", ActionDrain, "maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if n.Reason != "maintenance" {
		t.Errorf("reason %q", n.Reason)
	}
	for _, a := range h.assignments("n1") {
		wantStop := a.Job.ID == ck
		if a.Stop != wantStop || (wantStop && !a.Checkpoint) {
			t.Errorf("job %d: stop %v checkpoint %v, want stop=%v with checkpoint", a.Job.ID, a.Stop, a.Checkpoint, wantStop)
		}
	}
	h.exit("n1", h.job(ck), spec.StateRequeued, 0)
	if j := h.job(ck); j.State != spec.StatePending {
		t.Errorf("drained checkpointing job %s, want PENDING (no other node)", j.State)
	}
	if j := h.job(plain); j.State != spec.StateRunning {
		t.Errorf("plain job %s, want RUNNING to its end", j.State)
	}
}

// TestCRIUModeRefusedWithReason: --checkpoint-mode=criu is refused at
// submit with each node's reason when no node of the partition passes
// criu check.
func TestCRIUModeRefusedWithReason(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	for _, n := range []spec.Inventory{
		{Name: "n1", CPUs: 8, MemMiB: 1000, CRIU: "criu check failed: Could not initialize kernel features detection."},
		{Name: "n2", CPUs: 8, MemMiB: 1000},
	} {
		if _, err := h.c.Register(ctx, root, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"criu", []string{"no node of partition", "n1: criu check failed: Could not initialize", "n2: its agent does not report", "use --checkpoint"}},
		{"magic", []string{`"magic" is not a checkpoint mode`}},
	} {
		_, err := h.c.Submit(ctx, alice, spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", CkptMode: tc.mode})
		if !errors.Is(err, spec.ErrInvalid) {
			t.Fatalf("mode %s: err = %v, want invalid", tc.mode, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("mode %s: error %q lacks %q", tc.mode, err, w)
			}
		}
	}
	if _, err := h.c.Submit(ctx, alice, spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", CkptMode: "cooperative"}); err != nil {
		t.Errorf("cooperative mode refused: %v", err)
	}
}
