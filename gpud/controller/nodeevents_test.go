package controller

import (
	"context"
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
