package server_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
)

// TestRevocationsReachNodes: the nodes get the revocation lists with the
// answers they poll for anyway, named by a version: the lists only when
// the node holds another version. A node's assignments long poll is
// answered as soon as the lists change, so a revocation reaches every
// node within a round trip, not at its next heartbeat.
func TestRevocationsReachNodes(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	s := joinServer(t, joinToken)
	ctx := ctxT(t)
	n1, _ := joinWithCert(t, s, "n1", joinToken)
	empty, _ := auth.NewRevocationList(nil, nil)
	reg, err := n1.RegisterNode(ctx, api.RegisterRequest{Inventory: inventory("n1", 1), Revocations: "none-yet"})
	if err != nil {
		t.Fatal(err)
	}
	if r := reg.Revocations; r == nil || r.Version != empty.Version || r.Lists == nil || len(r.Lists.Certs)+len(r.Lists.Tokens) != 0 {
		t.Fatalf("registration answer's revocations = %+v; want version %s with (empty) lists", r, empty.Version)
	}
	hb, err := n1.HeartbeatAnswer(ctx, "n1", api.HeartbeatRequest{Revocations: empty.Version})
	if err != nil {
		t.Fatal(err)
	}
	if r := hb.Revocations; r == nil || r.Version != empty.Version || r.Lists != nil {
		t.Errorf("heartbeat answer to a node holding the current version: %+v; want the version alone", r)
	}
	// An agent from before revocation lists asks for none and gets none.
	if hb, err := n1.HeartbeatAnswer(ctx, "n1", api.HeartbeatRequest{}); err != nil || hb.Revocations != nil {
		t.Errorf("heartbeat without a version: %+v, %v; want no revocations", hb.Revocations, err)
	}
	first, err := n1.PollAssignments(ctx, "n1", api.AssignmentsRequest{Revocations: empty.Version})
	if err != nil {
		t.Fatal(err)
	}
	type polled struct {
		res  api.AssignmentsResponse
		err  error
		took time.Duration
	}
	done := make(chan polled, 1)
	go func() {
		start := time.Now()
		res, err := n1.PollAssignments(ctx, "n1", api.AssignmentsRequest{After: first.Generation, Wait: 60 * time.Second, Revocations: empty.Version})
		done <- polled{res, err, time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond) // the poll is waiting
	s.srv.SetRevocations([]string{"0A:BC"}, []string{"jti-1"})
	var p polled
	select {
	case p = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting assignments long poll was not answered when the revocation lists changed")
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	r := p.res.Revocations
	if r == nil || r.Lists == nil || !slices.Equal(r.Lists.Certs, []string{"abc"}) || !slices.Equal(r.Lists.Tokens, []string{"jti-1"}) ||
		r.Version != s.srv.Revocations().Version() || p.res.Generation != first.Generation {
		t.Errorf("long poll answered after %v with %+v (generation %d); want the new lists (certs [abc], tokens [jti-1]) and the same generation", p.took, r, p.res.Generation)
	}
	// A node still holding the old version is answered at once.
	start := time.Now()
	res, err := n1.PollAssignments(ctx, "n1", api.AssignmentsRequest{After: first.Generation, Wait: 30 * time.Second, Revocations: empty.Version})
	if err != nil || time.Since(start) > 5*time.Second || res.Revocations == nil || res.Revocations.Lists == nil {
		t.Errorf("long poll from a node with an old version: %v after %v, %+v; want the lists at once", err, time.Since(start), res.Revocations)
	}
}

// TestRevocationClosesLiveConnections: revoking a node certificate or a
// token ends the connections already made with it, long polls included,
// not only the next request; a connection of another credential stays.
func TestRevocationClosesLiveConnections(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	s := joinServer(t, joinToken)
	ctx := ctxT(t)
	n1, cert1 := joinWithCert(t, s, "n1", joinToken)
	n2, _ := joinWithCert(t, s, "n2", joinToken)
	tok := s.token(t, auth.Claims{User: "n3", Role: auth.RoleNode, Node: "n3"}, time.Hour)
	n3 := s.client(t, tok)
	gens := map[string]uint64{}
	for name, c := range map[string]*api.Client{"n1": n1, "n2": n2, "n3": n3} {
		if _, err := c.Register(ctx, inventory(name, 1)); err != nil {
			t.Fatal(err)
		}
		res, err := c.Assignments(ctx, name, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		gens[name] = res.Generation
	}
	poll := func(c *api.Client, name string) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := c.Assignments(ctx, name, gens[name], 20*time.Second)
			ch <- err
		}()
		return ch
	}
	p1, p2, p3 := poll(n1, "n1"), poll(n2, "n2"), poll(n3, "n3")
	time.Sleep(300 * time.Millisecond)
	claims, err := s.keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	s.srv.SetRevocations([]string{fmt.Sprintf("%x", cert1.SerialNumber)}, []string{claims.ID})
	for name, ch := range map[string]chan error{"n1 (revoked certificate)": p1, "n3 (revoked token)": p3} {
		select {
		case err := <-ch:
			var ae *api.Error
			if err == nil || errors.As(err, &ae) {
				t.Errorf("%s: long poll ended with %v; want its connection closed", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: its long poll went on after the revocation", name)
		}
	}
	select {
	case err := <-p2:
		t.Errorf("n2's long poll (not revoked) ended early: %v", err)
	case <-time.After(time.Second):
	}
	if n := s.srv.Revocations().Tracked(); n < 1 {
		t.Errorf("%d connections tracked after the revocation; want n2's", n)
	}
	err = onNewConn(t, func() error { return n1.Heartbeat(ctx, "n1", nil) })
	wantStatus(t, "revoked node on a new connection", err, 401, nil, "revoked")
}

// onNewConn runs call, and once more when it failed for its connection
// (closed by a revocation) rather than with the server's answer: the
// client may try the closed connection before it notices.
func onNewConn(t *testing.T, call func() error) error {
	t.Helper()
	err := call()
	if ae := (*api.Error)(nil); err != nil && !errors.As(err, &ae) {
		t.Logf("call on the closed connection: %v; again on a new one", err)
		err = call()
	}
	return err
}
