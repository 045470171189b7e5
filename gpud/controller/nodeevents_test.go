package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/spec"
)

// Drain, resume, a node going silent and coming back reach accounting's
// node_events with reason and actor, which gpuq report cluster turns into
// down GPU-hours.
func TestNodeEventsReachAccounting(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Minute }, t0, WithRecorder(db))
	h.register("n1", 4)
	if _, err := h.c.NodeAction(ctx, alice, "n1", ActionDrain, "bad fan"); err == nil {
		t.Fatal("alice drained a node")
	}
	if _, err := h.c.NodeAction(ctx, root, "n1", ActionDrain, "bad fan"); err != nil {
		t.Fatal(err)
	}
	h.advance(10 * time.Second)
	if _, err := h.c.NodeAction(ctx, root, "n1", ActionResume, ""); err != nil {
		t.Fatal(err)
	}
	h.advance(2 * time.Minute) // silent past NodeTimeout: down
	// Housekeeping first: a heartbeat arriving while it runs would count.
	h.settle()
	if err := h.c.Heartbeat(ctx, root, "n1", nil); err != nil {
		t.Fatal(err)
	}
	want := []spec.NodeEvent{
		{Time: t0, Node: "n1", Event: spec.NodeEventDrain, Reason: "bad fan", Actor: "root"},
		{Time: t0.Add(10 * time.Second), Node: "n1", Event: spec.NodeEventResume, Actor: "root"},
		{Time: t0.Add(130 * time.Second), Node: "n1", Event: spec.NodeEventDown, Reason: reasonNotResponding, Actor: "gpud"},
		{Time: t0.Add(130 * time.Second), Node: "n1", Event: spec.NodeEventUp, Reason: "responding again", Actor: "gpud"},
	}
	var got []spec.NodeEvent
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, err = db.NodeEvents(ctx, "n1", time.Time{}, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if len(got) >= len(want) {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("node events = %+v, want %+v", got, want)
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) || got[i].Event != want[i].Event || got[i].Reason != want[i].Reason || got[i].Actor != want[i].Actor {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// failingEvents refuses its first node-event batch.
type failingEvents struct {
	fakeRecorder
	mu    sync.Mutex
	fails int
	evs   []spec.NodeEvent
}

func (r *failingEvents) RecordNodeEvents(_ context.Context, evs []spec.NodeEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fails > 0 {
		r.fails--
		return errors.New("database is locked")
	}
	r.evs = append(r.evs, evs...)
	return nil
}

// A batch the recorder refuses is retried, not lost, and the request that
// caused it does not wait for it.
func TestNodeEventsRetried(t *testing.T) {
	rec := &failingEvents{fails: 1}
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithRecorder(rec))
	h.register("n1", 1)
	if _, err := h.c.NodeAction(context.Background(), root, "n1", ActionDrain, "x"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rec.mu.Lock()
		n, fails := len(rec.evs), rec.fails
		rec.mu.Unlock()
		if n > 0 {
			if n != 1 || fails != 0 {
				t.Fatalf("%d events recorded after %d failures left; want the drain once after the failure", n, fails)
			}
			return
		}
	}
	t.Fatal("the drain event was not recorded after the recorder's failure")
}
