package controller

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestCancelJobs: scancel by filter ends every matching job the caller may
// cancel in one store commit, skipping others' jobs; an empty filter is
// refused.
func TestCancelJobs(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	var mine []spec.JobID
	for range 50 {
		mine = append(mine, h.submit(alice, func(js *spec.JobSpec) { js.Hold = true }))
	}
	other := h.submit(alice, func(js *spec.JobSpec) { js.Name = "keep"; js.Hold = true })
	bobs := h.submit(bob, func(js *spec.JobSpec) { js.Hold = true })
	h.settle()
	store.mu.Lock()
	before := store.applies
	store.mu.Unlock()

	ctx := context.Background()
	got, skipped, err := h.c.CancelJobs(ctx, alice, CancelFilter{JobFilter: JobFilter{States: []spec.JobState{spec.StatePending}}, Names: []string{"j"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, mine) {
		t.Errorf("cancelled %v, want %v", got, mine)
	}
	if skipped != 1 {
		t.Errorf("skipped %d, want 1 (bob's job)", skipped)
	}
	store.mu.Lock()
	commits := store.applies - before
	store.mu.Unlock()
	if commits != 1 {
		t.Errorf("%d store commits for 50 cancels, want 1", commits)
	}
	for _, id := range mine {
		if st := h.job(id).State; st != spec.StateCancelled {
			t.Fatalf("job %d is %s, want CANCELLED", id, st)
		}
	}
	for _, id := range []spec.JobID{other, bobs} {
		if st := h.job(id).State; st != spec.StatePending {
			t.Errorf("job %d is %s, want it left PENDING", id, st)
		}
	}
	if _, _, err := h.c.CancelJobs(ctx, alice, CancelFilter{}, ""); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("empty filter: %v, want invalid", err)
	}
}

// TestSignalJob: scancel --signal on a running job reaches its node's
// assignment once per request, only for the current allocation; a pending
// job or a bad signal is refused.
func TestSignalJob(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	pending := h.submit(alice, func(js *spec.JobSpec) { js.Hold = true })
	if _, err := h.c.JobAction(ctx, alice, pending, ActionSignal, "USR1"); !errors.Is(err, spec.ErrConflict) {
		t.Errorf("signalling a pending job: %v, want conflict", err)
	}
	h.register("n1", 1)
	id := h.submit(alice, nil)
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("job is %s, want RUNNING", j.State)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionSignal, "sigusr2"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.JobAction(ctx, bob, id, ActionSignal, "USR2"); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Errorf("bob signalling alice's job: %v, want permission denied", err)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionSignal, "NOPE"); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("bad signal: %v, want invalid", err)
	}
	var got []string
	for _, a := range h.assignments("n1") {
		if a.Job.ID == id {
			got = append(got, a.Signal+"#"+strconv.Itoa(a.SignalSeq))
		}
	}
	if !slices.Equal(got, []string{"USR2#1"}) {
		t.Errorf("assignments carry %v, want [USR2#1]", got)
	}
	if j := h.job(id); j.State != spec.StateRunning {
		t.Errorf("signalled job is %s, want still RUNNING", j.State)
	}
}
