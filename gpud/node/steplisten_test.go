package node

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/node/step"
)

// testCA is a cluster CA with node certificates signed on demand.
type testCA struct {
	ca   *auth.CA
	pool *x509.CertPool
}

func newTestCA(t *testing.T) testCA {
	t.Helper()
	files, err := auth.EnsureTLS(t.TempDir(), "test", []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := auth.LoadCA(files, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{ca: ca, pool: ca.Pool()}
}

func (c testCA) nodeCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	keyPEM, csrPEM, err := auth.NodeKey(name)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := c.ca.SignNode(csrPEM, name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// stepAnswer dials the listener at addr as node (with cert, or none),
// expecting the listener to be node-1's, sends hello and returns the
// first answer frame (or the error reaching it).
//
// An answer that node-1 has not started its part yet is asked again, as
// srun does, for up to 10 s: the tests connect once the fake container
// exists, which can be before the runner has made its part (a flake of
// TestStepListenerRevocation under -race). Other answers with Retry are
// what the tests look for, and come back at once.
func stepAnswer(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate, hello api.StepHello) (api.StepMsg, error) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m, err := stepAnswerOnce(addr, pool, cert, hello)
		if err != nil || !m.Retry || !strings.Contains(m.Error, "node node-1 has not started") || time.Now().After(end) {
			return m, err
		}
	}
}

func stepAnswerOnce(addr string, pool *x509.CertPool, cert *tls.Certificate, hello api.StepHello) (api.StepMsg, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, auth.StepClientTLS(pool, "node-1", cert))
	if err != nil {
		return api.StepMsg{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(hello); err != nil {
		return api.StepMsg{}, err
	}
	return api.ReadStepFrame(bufio.NewReader(c))
}

// TestStepListenerRefuses: node-1's step listener admits a peer only
// with a node certificate of the cluster CA, for an allocation both are
// in, and srun only with the allocation's ticket; a listener with a
// foreign certificate, or another node's, is refused by the caller.
func TestStepListenerRefuses(t *testing.T) {
	ca := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	e := newEnv(t, func(e *env) {
		e.opts = append(e.opts, WithStepNet(StepNet{Listener: ln, Cert: ca.nodeCert(t, "node-1"), CA: ca.pool}))
	})
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	ticket := e.fc.Ticket("a7", 7, auth.TokenCredential("jti-alice"))
	otherKey, err := auth.NewStepTicketSigner([]byte("another controller's step ticket key 0123"), nil)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := otherKey.Issue("a7", 7, auth.TokenCredential("jti-alice"))
	run := &api.StepRequest{Args: []string{"true"}}

	peer0, peer9 := ca.nodeCert(t, "node-0"), ca.nodeCert(t, "node-9")
	part := &api.StepPart{Step: 0, Tasks: []int{0}, Args: []string{"true"}}
	for _, tc := range []struct {
		name  string
		cert  *tls.Certificate
		hello api.StepHello
		want  string
	}{
		{"peer not in the allocation", &peer9, api.StepHello{Alloc: "a7", Part: part}, "node node-9 is not in allocation a7"},
		{"allocation not on this node", &peer0, api.StepHello{Alloc: "a8", Part: part}, "runs no part of allocation \"a8\""},
		{"part with a flag this agent does not know", &peer0, api.StepHello{Alloc: "a7", Part: &api.StepPart{Tasks: []int{0}, Args: []string{"true"}, Flags: []string{"warp-drive"}}}, `does not know step flag "warp-drive"`},
		{"part without a node certificate", nil, api.StepHello{Alloc: "a7", Part: part}, "only a node agent with its node certificate"},
		{"guessed ticket", nil, api.StepHello{Alloc: "a7", Ticket: "guess", Step: run}, "not one the controller signed"},
		{"ticket signed with another key", nil, api.StepHello{Alloc: "a7", Ticket: forged, Step: run}, "not one the controller signed"},
		{"no ticket", nil, api.StepHello{Alloc: "a7", Step: run}, "no step ticket for allocation a7"},
		{"ticket of another allocation", nil, api.StepHello{Alloc: "a8", Ticket: ticket, Step: run}, "step ticket is for allocation a7, not a8"},
	} {
		m, err := stepAnswer(t, addr, ca.pool, tc.cert, tc.hello)
		if err != nil || m.Kind != api.StepError || !strings.Contains(m.Error, tc.want) {
			t.Errorf("%s: answer %+v, %v; want an error saying %q", tc.name, m, err, tc.want)
		}
	}

	// A resumed TLS session (peers cache them) still names the peer: the
	// listener judges it as on the first connection.
	cache := tls.NewLRUClientSessionCache(4)
	for i := range 2 {
		cfg := auth.StepClientTLS(ca.pool, "node-1", &peer9)
		cfg.ClientSessionCache = cache
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = json.NewEncoder(c).Encode(api.StepHello{Alloc: "a7", Part: part})
		m, err := api.ReadStepFrame(bufio.NewReader(c))
		resumed := c.ConnectionState().DidResume
		c.Close()
		if err != nil || !strings.Contains(m.Error, "node node-9 is not in allocation a7") {
			t.Errorf("connection %d (resumed %v): %+v, %v; want node-9 refused", i, resumed, m, err)
		}
		if i == 1 && !resumed {
			t.Errorf("the second connection did not resume the TLS session")
		}
	}

	// A peer certificate from another CA fails the handshake.
	other := newTestCA(t)
	bad := other.nodeCert(t, "node-0")
	if m, err := stepAnswer(t, addr, ca.pool, &bad, api.StepHello{Alloc: "a7", Part: part}); err == nil {
		t.Errorf("a node certificate of another CA was admitted: %+v", m)
	}
	// The caller checks the listener: another CA's pool, or a listener
	// that is not the node dialled, is refused before anything is sent.
	if _, err := stepAnswer(t, addr, other.pool, &peer0, api.StepHello{Alloc: "a7", Part: part}); err == nil || !strings.Contains(err.Error(), "not from the cluster CA") {
		t.Errorf("dialling with another CA's pool: %v; want the listener refused", err)
	}
	c, err := tls.Dial("tcp", addr, auth.StepClientTLS(ca.pool, "node-0", &peer0))
	if err == nil {
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), `is node "node-1"'s`) {
		t.Errorf("dialling node-0 but reaching node-1: %v; want refused", err)
	}
}

// TestStepListenerPlainFlood (issue 24 hole 5): plain TCP connections
// that never start TLS keep at most their address's share of the
// connections in their handshake; another address's peer is served
// meanwhile, and so is a peer from the flooding address itself (its
// newest connection evicts the oldest idle one).
func TestStepListenerPlainFlood(t *testing.T) {
	ca := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	e := newEnv(t, func(e *env) {
		e.opts = append(e.opts, WithStepNet(StepNet{Listener: ln, Cert: ca.nodeCert(t, "node-1"), CA: ca.pool}))
	})
	waitFor(t, "the revocation list from the registration", func() bool { return e.agent.rev.Check() == nil }, e.on()...)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for _, src := range []string{"127.0.0.2", "127.0.0.1"} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		for range 2 * step.Limits.MaxPending {
			c, err := d.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			idle = append(idle, c)
		}
	}
	peer := ca.nodeCert(t, "node-0")
	m, err := stepAnswer(t, addr, ca.pool, &peer, api.StepHello{Alloc: "none", Part: &api.StepPart{Tasks: []int{0}, Args: []string{"true"}}})
	if err != nil || !strings.Contains(m.Error, "runs no part") {
		t.Errorf("a peer from an address holding %d idle connections: %+v, %v; want it served (and refused: no such allocation)", 2*step.Limits.MaxPending, m, err)
	}
	// Each address kept its share; the rest were closed at once.
	open := 0
	for _, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			open++
		}
	}
	if open > 2*step.Limits.MaxPendingPerAddr {
		t.Errorf("%d idle connections still open; want at most %d (each address's share)", open, 2*step.Limits.MaxPendingPerAddr)
	}
}

// TestStepListenerRevocation (issue 24 hole 1, node side): the step
// listener checks the peer's node certificate and the credential a step
// ticket was obtained with against the node's copy of the controller's
// revocation lists, which comes with the answers the agent polls for;
// and a node whose copy the controller has not confirmed within its
// bound trusts nobody.
func TestStepListenerRevocation(t *testing.T) {
	ca := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	e := newEnv(t, func(e *env) {
		e.opts = append(e.opts, WithStepNet(StepNet{Listener: ln, Cert: ca.nodeCert(t, "node-1"), CA: ca.pool}))
	})
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	peer0 := ca.nodeCert(t, "node-0")
	leaf, err := x509.ParseCertificate(peer0.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	ticket := e.fc.Ticket("a7", 7, auth.TokenCredential("jti-alice"))
	part := api.StepHello{Alloc: "a7", Part: &api.StepPart{Tasks: []int{0}, Args: []string{"true"}}}
	srun := api.StepHello{Alloc: "a7", Ticket: ticket, Step: &api.StepRequest{Args: []string{"true"}}}
	// Admitted: a part then fails as the fake runtime cannot exec, a
	// step as node-0 (the allocation's other node) serves no steps here;
	// either answer says so, not a refusal.
	const admitted, admittedStep = "cannot start processes", "node node-0 of the allocation has no step listener"
	ask := func(what string, cert *tls.Certificate, h api.StepHello, want string) {
		t.Helper()
		m, err := stepAnswer(t, addr, ca.pool, cert, h)
		if err != nil || !strings.Contains(m.Error, want) {
			t.Errorf("%s: %+v, %v; want an answer saying %q", what, m, err, want)
		}
	}
	ask("node-0's part", &peer0, part, admitted)
	ask("alice's ticket", nil, srun, admittedStep)

	e.fc.Revoke([]string{auth.Serial(leaf)}, []string{"jti-alice"})
	waitFor(t, "the new lists reach the node", func() bool { return e.agent.rev.List().Revoked(auth.TokenCredential("jti-alice")) }, e.on()...)
	ask("node-0's part after its certificate was revoked", &peer0, part, "certificate "+auth.Serial(leaf)+" was revoked")
	ask("alice's ticket after her token was revoked", nil, srun, "token jti-alice was revoked")
	other := e.fc.Ticket("a7", 7, auth.TokenCredential("jti-bob"))
	ask("a ticket obtained with another token", nil, api.StepHello{Alloc: "a7", Ticket: other, Step: srun.Step}, admittedStep)

	// Cut off from the controller: once the copy is older than its bound
	// (90 % of node_timeout; 3 heartbeats of 1 s by default here), the
	// node trusts nobody, not even a credential it trusted before.
	for _, ep := range []string{epRegister, epHeartbeat, epAssignments} {
		e.fc.Fail(ep, true)
	}
	waitFor(t, "the copy goes stale", func() bool { return e.agent.rev.Check() != nil }, e.on()...)
	ask("a ticket while the node's list is stale", nil, api.StepHello{Alloc: "a7", Ticket: other, Step: srun.Step}, "last confirmed by the controller")
	for _, ep := range []string{epRegister, epHeartbeat, epAssignments} {
		e.fc.Fail(ep, false)
	}
	waitFor(t, "the copy is confirmed again", func() bool { return e.agent.rev.Check() == nil }, e.on()...)
	ask("a ticket once the list is confirmed again", nil, api.StepHello{Alloc: "a7", Ticket: other, Step: srun.Step}, admittedStep)
}
