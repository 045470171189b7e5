package server_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// TestNodeCallsShareOneConnection: a node agent's assignments long poll
// and its heartbeats go over one TLS connection (HTTP/2), so a fleet of N
// nodes costs the controller N descriptors, not 2N. Before, the server
// pinned HTTP/1.1 and every heartbeat sent during a long poll dialled a
// second connection (gpud loadtest ran out of open files near 10,000
// nodes).
func TestNodeCallsShareOneConnection(t *testing.T) {
	s := joinServer(t, "tok")
	node, err := s.join(t, "n0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	tr := node.HTTPClient().Transport.(*http.Transport)
	tr.CloseIdleConnections() // the join's
	var dials atomic.Int32
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	ctx := ctxT(t)
	if _, err := node.Register(ctx, inventory("n0", 1)); err != nil {
		t.Fatal(err)
	}
	first, err := node.Assignments(ctx, "n0", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	poll := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := node.Assignments(ctx, "n0", first.Generation, 2*time.Second)
		poll <- err
	}()
	time.Sleep(200 * time.Millisecond) // the long poll is waiting
	for range 3 {
		if err := node.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := node.Events(ctx, "n0", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-poll; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Fatalf("the long poll answered after %v, before its 2 s wait: the test did not hold it open", d)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("register, a long poll, 3 heartbeats and an events call dialled %d connections; want 1 (HTTP/2)", n)
	}
}
