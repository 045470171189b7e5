package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestHeartbeatOfLiveNodeSkipsOwnerLoop: the heartbeat of a registered
// node that is up returns while the owner loop is busy (it changes only
// the node's time), and that time counts for the node timeout and shows
// in the node's view. A DOWN node's heartbeat still goes through the
// loop, and brings the node back. Before, every heartbeat queued for the
// loop: here it would wait until its 2 s deadline and fail.
func TestHeartbeatOfLiveNodeSkipsOwnerLoop(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 0)
	h.mu.Lock()
	h.now = h.now.Add(20 * time.Second)
	h.mu.Unlock()
	ctx := context.Background()
	err := h.c.query(ctx, func() error {
		// The loop is busy here.
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return h.c.Heartbeat(hctx, root, "n1", nil)
	})
	if err != nil {
		t.Fatalf("heartbeat of a live node while the owner loop is busy: %v; want it answered off the loop", err)
	}
	nodes, _ := h.c.Nodes(ctx)
	if got := nodes[0].LastHeartbeat.Time; !got.Equal(h.now) {
		t.Errorf("last heartbeat shown = %v, want %v (the heartbeat answered off the loop)", got, h.now)
	}
	h.advance(25 * time.Second) // 25 s since that heartbeat: under the 30 s timeout
	if nodes, _ = h.c.Nodes(ctx); nodes[0].State == spec.NodeDown {
		t.Fatalf("node DOWN (%s) 25 s after a heartbeat with a 30 s timeout", nodes[0].Reason)
	}
	h.advance(10 * time.Second)
	if nodes, _ = h.c.Nodes(ctx); nodes[0].State != spec.NodeDown {
		t.Fatalf("node = %s 35 s after its last heartbeat, want DOWN", nodes[0].State)
	}
	if err := h.c.Heartbeat(ctx, root, "n1", nil); err != nil {
		t.Fatal(err)
	}
	if nodes, _ = h.c.Nodes(ctx); nodes[0].State == spec.NodeDown {
		t.Fatalf("node still DOWN after a heartbeat; want it back (the heartbeat of a DOWN node goes through the loop)")
	}
	// An unknown node's heartbeat is still refused.
	if err := h.c.Heartbeat(ctx, root, "nobody", nil); err == nil {
		t.Error("heartbeat of an unregistered node accepted")
	}
}
