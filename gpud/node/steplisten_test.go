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
func stepAnswer(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate, hello api.StepHello) (api.StepMsg, error) {
	t.Helper()
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
	a.StepTicket = "ticket-of-a7-0123456789abcdef0123456789"
	e.fc.Set(a)
	e.waitStarted(t, cid)

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
		{"wrong ticket", nil, api.StepHello{Alloc: "a7", Ticket: "guess", Step: &api.StepRequest{Args: []string{"true"}}}, "wrong step ticket for allocation a7"},
		{"no ticket", nil, api.StepHello{Alloc: "a7", Step: &api.StepRequest{Args: []string{"true"}}}, "wrong step ticket"},
		{"ticket of another allocation", nil, api.StepHello{Alloc: "a8", Ticket: a.StepTicket, Step: &api.StepRequest{Args: []string{"true"}}}, "runs no part"},
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

// TestStepListenerGreetingCap: connections that never finish their
// handshake hold at most step.MaxGreetings places; one more is closed at
// once, and the places come back when they go.
func TestStepListenerGreetingCap(t *testing.T) {
	ca := newTestCA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	newEnv(t, func(e *env) {
		e.opts = append(e.opts, WithStepNet(StepNet{Listener: ln, Cert: ca.nodeCert(t, "node-1"), CA: ca.pool}))
	})
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range step.MaxGreetings {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("connection %d beyond the cap: read %d, %v; want it closed at once", step.MaxGreetings+1, n, err)
	}
	extra.Close()
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	// The places come back: a peer's connection is served again.
	peer := ca.nodeCert(t, "node-0")
	var m api.StepMsg
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m, err = stepAnswer(t, addr, ca.pool, &peer, api.StepHello{Alloc: "none", Part: &api.StepPart{Tasks: []int{0}, Args: []string{"true"}}}); err == nil {
			break
		}
	}
	if err != nil || !strings.Contains(m.Error, "runs no part") {
		t.Errorf("after the idle connections closed: %+v, %v; want the peer served (and refused: no such allocation)", m, err)
	}
}
