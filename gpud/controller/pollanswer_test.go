package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// pollersOf returns how many polls wait on node name's next change,
// read on the owner loop.
func pollersOf(t *testing.T, h *harness, name string) (waiting int) {
	t.Helper()
	err := h.c.query(context.Background(), func() error {
		for _, p := range h.c.st.nodes[name].pollers {
			if !p.gone.Load() {
				waiting++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return waiting
}

// waitPollers waits (up to 10 s) until n polls wait on node name.
func waitPollers(t *testing.T, h *harness, name string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); pollersOf(t, h, name) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d assignments polls of %s waiting after 10 s, want %d", pollersOf(t, h, name), name, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCommitAnswersWaitingPoll: the commit that places a job on a node
// answers that node's waiting assignments poll itself, so the node hears
// of the start with no further turn of the owner loop. Before, the woken
// poll queued a read behind the next batch (its requests, its cycle and
// its commit's fsync), and a busy owner loop held every start's delivery
// back that long: here the loop is held right after the commit and the
// poll must still be answered.
func TestCommitAnswersWaitingPoll(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	h.register("n1", 2)
	ctx := context.Background()
	gen, _, err := h.c.Assignments(ctx, root, "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		gen uint64
		as  []Assignment
		err error
	}
	got := make(chan answer, 1)
	go func() {
		g, as, err := h.c.Assignments(ctx, root, "n1", gen, time.Minute)
		got <- answer{g, as, err}
	}()
	waitPollers(t, h, "n1", 1)

	held, release := make(chan struct{}), make(chan struct{})
	hold := &op{fn: func(*txn) error { close(held); <-release; return nil }, done: make(chan struct{})}
	var once sync.Once
	unhold := func() { once.Do(func() { close(release); <-hold.done }) }
	defer unhold()
	var ids []spec.JobID
	err = h.c.call(ctx, func(tx *txn) error {
		h.c.sched.lastEnd = time.Time{} // the cycle's pacing due: started in this commit
		var err error
		ids, err = h.c.submitIn(tx, alice, spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp",
			Resources: spec.Resources{GPUsPerNode: 1}}, "")
		// Next in line after this batch: the owner loop is held as soon
		// as the batch is committed, before anything the commit woke
		// can be served.
		h.c.ops <- hold
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	<-held
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.gen != gen+1 || len(a.as) != 1 || a.as[0].Job.ID != ids[0] || a.as[0].Alloc.ID == "" {
			t.Fatalf("poll answered gen %d with %d assignments %+v, want gen %d with job %d's allocation", a.gen, len(a.as), a.as, gen+1, ids[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("job %d placed on n1 by a commit, but n1's waiting poll was not answered while the owner loop was busy after it", ids[0])
	}
	unhold() // pollersOf needs the owner loop
	if n := pollersOf(t, h, "n1"); n != 0 {
		t.Fatalf("%d polls still waiting on n1 after the bump", n)
	}
}

// TestAbandonedPollsDropped: polls that stop waiting (cancelled, as an
// agent's repoll does) are dropped, not kept until the node next changes.
func TestAbandonedPollsDropped(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	gen, _, err := h.c.Assignments(context.Background(), root, "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := h.c.Assignments(ctx, root, "n1", gen, time.Minute)
			done <- err
		}()
		waitPollers(t, h, "n1", 1)
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a cancelled poll returned no error")
		}
	}
	var kept int
	if err := h.c.query(context.Background(), func() error { kept = len(h.c.st.nodes["n1"].pollers); return nil }); err != nil {
		t.Fatal(err)
	}
	if kept > 1 {
		t.Fatalf("%d polls kept on n1 after 20 cancelled ones, want at most 1 (each new poll drops the ones that stopped)", kept)
	}
}
