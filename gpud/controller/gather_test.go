package controller

import (
	"context"
	"testing"
	"time"
)

// gatherOf runs gatherMore on a controller whose recent batches were
// recent, whose last commit took took, with a wait of at most max, and
// fails if it does not return within 10 s.
func gatherOf(t *testing.T, c *Controller, batch []*op) []*op {
	t.Helper()
	done := make(chan []*op, 1)
	go func() { done <- c.gatherMore(context.Background(), batch) }()
	select {
	case b := <-done:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("gatherMore did not return in 10 s")
		return nil
	}
}

func gatherController(max, took time.Duration, recent ...int) *Controller {
	c := &Controller{ops: make(chan *op, 64)}
	c.gather.max, c.gather.took = max, took
	copy(c.gather.recent[:], recent)
	return c
}

// A batch as large as the recent ones (a lone client's) is committed at
// once, whatever the wait allowed: gatherMore neither waits nor takes a
// request queued after it.
func TestGroupCommitLoneClientNeverWaits(t *testing.T) {
	c := gatherController(time.Hour, time.Hour, 1, 1, 1)
	b := gatherOf(t, c, []*op{{}})
	if len(b) != 1 {
		t.Fatalf("batch of %d; want 1", len(b))
	}
	if c.gather.recent[0] != 1 {
		t.Errorf("recent sizes %v; want this batch's size noted", c.gather.recent)
	}
	// Nor when the group commit is off (a single controller).
	c = gatherController(0, time.Hour, 8)
	if b := gatherOf(t, c, []*op{{}}); len(b) != 1 {
		t.Fatalf("batch of %d with the group commit off; want 1", len(b))
	}
}

// A batch smaller than recent ones waits for the requests that come, and
// is committed as soon as it is as large as the largest recent one.
func TestGroupCommitWaitsForClients(t *testing.T) {
	c := gatherController(time.Hour, time.Hour, 2, 4, 3)
	go func() {
		for range 5 {
			time.Sleep(time.Millisecond)
			c.ops <- &op{}
		}
	}()
	b := gatherOf(t, c, []*op{{}})
	if len(b) != 4 {
		t.Fatalf("batch of %d; want 4 (the largest recent one)", len(b))
	}
}

// The wait ends at half the last commit's duration (or max): a burst that
// ended costs a batch no more than that.
func TestGroupCommitWaitIsBounded(t *testing.T) {
	c := gatherController(time.Hour, 20*time.Millisecond, 8, 8)
	if b := gatherOf(t, c, []*op{{}}); len(b) != 1 {
		t.Fatalf("batch of %d; want 1 (nothing else came)", len(b))
	}
	c = gatherController(5*time.Millisecond, time.Hour, 8, 8)
	if b := gatherOf(t, c, []*op{{}}); len(b) != 1 {
		t.Fatalf("batch of %d; want 1 (nothing else came)", len(b))
	}
}
