package controller

import (
	"context"
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestSubmitIdempotencyKey: a submission sent twice with the same key
// makes one job and answers both with its id (also for an array, and
// after a restart that reloads the store, as a new HA leader does);
// another user's submission with the same key, or one without a key, is a
// job of its own.
func TestSubmitIdempotencyKey(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ctx := context.Background()
	js := spec.JobSpec{Name: "k", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp"}
	submit := func(c *Controller, who Caller, js spec.JobSpec, key string) []spec.JobID {
		t.Helper()
		ids, err := c.SubmitKeyed(ctx, who, js, key)
		if err != nil {
			t.Fatalf("SubmitKeyed(%s, %q): %v", who.User, key, err)
		}
		return ids
	}
	first := submit(h.c, alice, js, "key-1")
	again := submit(h.c, alice, js, "key-1")
	if !slices.Equal(first, again) {
		t.Errorf("a resend with the same key made %v; want the first submission's %v", again, first)
	}
	if other := submit(h.c, bob, js, "key-1"); slices.Equal(other, first) {
		t.Errorf("bob's submission with alice's key answered alice's job %v", other)
	}
	if plain := submit(h.c, alice, js, ""); slices.Equal(plain, first) {
		t.Errorf("a submission without a key answered %v", plain)
	}
	arr := js
	arr.Array = "0-3"
	tasks := submit(h.c, alice, arr, "key-arr")
	if again := submit(h.c, alice, arr, "key-arr"); len(tasks) != 4 || !slices.Equal(again, tasks) {
		t.Errorf("array resend: %v, first %v; want the same 4 ids", again, tasks)
	}
	jobs, err := h.c.ListJobs(ctx, JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3+4 {
		t.Errorf("%d jobs; want 7 (alice's keyed job, bob's, alice's plain one, 4 array tasks)", len(jobs))
	}
	if j := h.job(first[0]); j.IdempotencyKey != "key-1" {
		t.Errorf("job %d keeps key %q; want key-1", first[0], j.IdempotencyKey)
	}

	// A controller that loads the store (a restart, an HA member taking
	// the lead) knows the keys.
	h.stop()
	h2 := newHarness(t, store, nil)
	if again := submit(h2.c, alice, js, "key-1"); !slices.Equal(again, first) {
		t.Errorf("after a reload a resend made %v; want %v", again, first)
	}
	if again := submit(h2.c, alice, arr, "key-arr"); !slices.Equal(again, tasks) {
		t.Errorf("after a reload an array resend made %v; want %v", again, tasks)
	}
}
