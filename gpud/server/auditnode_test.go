package server_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/spec"
)

// TestAuditSkipsAbandonedNodeCalls: a heartbeat its node gave up on
// (cancelled while its body was being read: a heartbeat past its timeout)
// fails with 400 but is no refusal, so it is not recorded; a real
// refusal (a node speaking for another) still is. In the 10,000-node
// loadtest such abandoned heartbeats filled the audit queue, and
// heartbeats then waited for room in it. Before, the abandoned one was
// recorded (the log here held two entries, not one).
func TestAuditSkipsAbandonedNodeCalls(t *testing.T) {
	db := openAcct(t)
	s := secureServer(t, server.WithAudit(db, nil))
	ctx := ctxT(t)
	root := client(t, s.unix)
	if _, err := root.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	// n1's heartbeat over TLS (HTTP/2, as node agents speak), abandoned
	// mid-body: the stream is reset and its context cancelled.
	n1tok := s.token(t, auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, time.Hour)
	n1 := s.client(t, n1tok)
	pr, pw := io.Pipe()
	hctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(hctx, http.MethodPost, s.https+"/v1/nodes/n1/heartbeat", pr)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+n1tok)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := n1.HTTPClient().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	if _, err := pw.Write([]byte(`{"running":[`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the handler is reading the body
	cancel()
	pw.CloseWithError(context.Canceled)
	<-done
	time.Sleep(300 * time.Millisecond) // the server saw the reset and answered
	// A refusal: node n2's token heartbeating for n1.
	n2 := s.client(t, s.token(t, auth.Claims{User: "n2", Role: auth.RoleNode, Node: "n2"}, time.Hour))
	err := n2.Heartbeat(ctx, "n1", nil)
	wantStatus(t, "n2 heartbeating for n1", err, 403, spec.ErrPermissionDenied, "")
	got := waitAudit(t, root, 2)
	if len(got) != 1 || got[0].ActorName != "node:n2" {
		t.Errorf("audit = %+v; want only n2's refused heartbeat, not n1's abandoned one", got)
	}
}
