package step

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestWaitGang: the batch node waits until every other node of the
// allocation holds its part (its container runs), returns as soon as they
// do, and after gangWait names the node that does not and why; a stop
// ends the wait.
func TestWaitGang(t *testing.T) {
	defer func(d time.Duration) { gangWait = d }(gangWait)
	gangWait = time.Second
	peers := NewPeers()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(name string) (*Node, *fakeHost) {
		h := &fakeHost{allocs: map[string]*Alloc{}, next: map[string]int{}}
		n := NewNode(Config{Node: name, Clock: realClock{}, Log: log, Peers: peers}, h)
		t.Cleanup(n.Run(context.Background()))
		return n, h
	}
	n1, _ := mk("n1")
	n2, h2 := mk("n2")
	mk("n3")
	nodes := []spec.NodeAlloc{{Node: "n1"}, {Node: "n2", Rank: 1}, {Node: "n3", Rank: 2}}
	asg := &api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "7.1", Nodes: nodes}}

	// n2 starts its part a little late; n3 never does.
	al2 := n2.NewAlloc("7.1", 7)
	h2.add("7.1", al2)
	go func() {
		time.Sleep(200 * time.Millisecond)
		al2.Ready(asg, nodes[1], "c2", t.TempDir(), []string{"A=1"}, log)
		al2.Started()
	}()
	err := n1.WaitGang(context.Background(), "7.1", nodes, nil)
	if err == nil || !strings.Contains(err.Error(), "node n3 did not start its part within 1s: node n3 has not started its part of allocation 7.1 yet") ||
		strings.Contains(err.Error(), "n2") {
		t.Errorf("WaitGang: %v; want node n3 (and only it) named as not holding its part", err)
	}
	if err := n1.WaitGang(context.Background(), "7.1", nodes[:2], nil); err != nil {
		t.Errorf("WaitGang over n1 and n2, both holding their parts: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if err := n1.WaitGang(context.Background(), "7.1", nodes, stop); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("WaitGang after a stop: %v; want it to end", err)
	}
}
