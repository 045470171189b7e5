package server_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
)

// countingVerifier counts the token verifications the server asks for.
type countingVerifier struct {
	keys *auth.Keys
	n    atomic.Int32
}

func (v *countingVerifier) Verify(raw string) (auth.Claims, error) {
	v.n.Add(1)
	return v.keys.Verify(raw)
}

// TestNodeTokenVerifiedOncePerConnection: a node agent's calls over its
// one connection verify its token once, not on every call (verification
// was 15 % of an idle 9,000-node controller's CPU); a revoked token is
// refused at its next call all the same; a token past its expiry is
// verified again (and refused). Before the memo every call verified.
func TestNodeTokenVerifiedOncePerConnection(t *testing.T) {
	files, tlsCfg, keys := testTLS(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	v := &countingVerifier{keys: keys}
	s := secure{ca: files.CA, keys: keys}
	s.unix, _, _ = servertest.Start(t, nil, servertest.Options{
		ServerOptions: []server.Option{server.WithTokens(v), server.WithClock(clock)},
		TLS:           tlsCfg, TLSAddr: &s.https, Server: &s.srv,
	})
	ctx := ctxT(t)

	tok := s.token(t, auth.Claims{User: "n0", Role: auth.RoleNode, Node: "n0"}, time.Hour)
	node := s.client(t, tok)
	if _, err := node.Register(ctx, inventory("n0", 1)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := node.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := node.Events(ctx, "n0", nil); err != nil {
		t.Fatal(err)
	}
	if n := v.n.Load(); n != 1 {
		t.Errorf("register, 5 heartbeats and an events call on one connection verified the token %d times; want 1", n)
	}

	// Another connection with the same token verifies it once itself.
	other := s.client(t, tok)
	if err := other.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := v.n.Load(); n != 2 {
		t.Errorf("a second connection's first call: %d verifications in all; want 2", n)
	}

	// Revocation still holds on the remembered connection.
	c, err := keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	// (The revocation closes the connection itself: a call on it may
	// fail as a broken connection before the client dials a new one.)
	s.srv.SetRevoked([]string{c.ID})
	err = onNewConn(t, func() error { return node.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}) })
	wantStatus(t, "heartbeat with a revoked token", err, http.StatusUnauthorized, nil, "revoked")
	s.srv.SetRevoked(nil)

	// Past the token's expiry (by the server's clock) the memo is not
	// used: the token is verified again.
	node = s.client(t, tok)
	if err := node.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}); err != nil {
		t.Fatal(err)
	}
	before := v.n.Load()
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	_ = node.SendHeartbeat(ctx, "n0", api.HeartbeatRequest{}) // the keys' own clock still takes it
	if n := v.n.Load(); n != before+1 {
		t.Errorf("a call after the token's expiry verified it %d times; want 1 (the memo must not outlive the token)", n-before)
	}
}
