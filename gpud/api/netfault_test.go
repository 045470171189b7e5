package api_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Issue 25 A: a controller behind a cut link answers no SYN and no
// packet of a connection already open. These tests make both on
// loopback: blackhole is an address whose dials hang, freezer a proxy
// that stops forwarding without closing anything.

// blackhole returns an address whose TCP dials hang, as a host behind a
// cut link does: a listener with a backlog of one that never accepts,
// its queue filled, so the kernel drops further SYNs.
func blackhole(t *testing.T, scheme string) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return scheme + "://" + addr // the queue is full: dials hang
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("blackhole: every dial was accepted")
	return ""
}

// silent returns an address that accepts TCP connections and never says
// a word: a TLS handshake there waits forever.
func silent(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "https://" + ln.Addr().String()
}

// freezer forwards TCP to target until frozen; then it forwards nothing
// and closes nothing, as a cut link does to a connection that is open.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if f.frozen.Load() {
				f.keep(c)
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.keep(c, up)
			go f.pipe(c, up)
			go f.pipe(up, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) keep(cs ...net.Conn) {
	f.mu.Lock()
	f.conns = append(f.conns, cs...)
	f.mu.Unlock()
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for f.frozen.Load() {
			time.Sleep(10 * time.Millisecond) // swallowed: never delivered
			n = 0
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

func (f *freezer) URL() string { return "https://" + f.ln.Addr().String() }

// tlsCtl is a controller of the test group over https with HTTP/2, as
// gpud serves it.
func tlsCtl(t *testing.T, role string) *ctl {
	t.Helper()
	c := &ctl{t: t, role: role}
	c.srv = httptestTLS2(c)
	c.URL = c.srv.URL
	t.Cleanup(c.srv.Close)
	return c
}

// With the first controller of the list behind a cut link (its dials
// hang), reads and keyed submissions are answered by the next one at
// once, not after a dial timeout: the next member is tried beside the
// first one 250 ms after it made no connection.
func TestFailoverHedgesUnreachableMember(t *testing.T) {
	leader := newCtl(t, "leader", false)
	cut := blackhole(t, "http")
	cl, err := api.NewClientWith(list(cut, leader.URL), api.ClientOptions{DialTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cl.Nodes(ctxT(t)); err != nil {
		t.Fatalf("read with the first member cut off: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("read took %s with the first member cut off; want about 250ms", d)
	}
	// A fresh client (a new sbatch), with a key: the same.
	cl, _ = api.NewClientWith(list(cut, leader.URL), api.ClientOptions{DialTimeout: 20 * time.Second})
	start = time.Now()
	r, err := cl.Submit(ctxT(t), api.SubmitRequest{Job: spec.JobSpec{Name: "j"}, IdempotencyKey: api.NewIdempotencyKey()})
	if err != nil || r.ID != 42 {
		t.Fatalf("keyed submission with the first member cut off: %+v %v", r, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("keyed submission took %s with the first member cut off; want about 250ms", d)
	}
	// A write without a key is never sent to two members: it waits for
	// the cut member's dial to fail (bounded by DialTimeout), then goes
	// to the next, once.
	cl, _ = api.NewClientWith(list(cut, leader.URL), api.ClientOptions{DialTimeout: 700 * time.Millisecond})
	before := leader.count()
	start = time.Now()
	if _, err := cl.NodeAction(ctxT(t), "n1", "drain", api.NodeActionRequest{}); err != nil {
		t.Fatalf("unkeyed write with the first member cut off: %v", err)
	}
	d := time.Since(start)
	if d < 600*time.Millisecond || d > 3*time.Second {
		t.Errorf("unkeyed write took %s; want the dial timeout (700ms) and then the next member", d)
	}
	if n := leader.count() - before; n != 1 {
		t.Errorf("leader got the unkeyed write %d times; want once", n)
	}
}

// A TLS handshake that never ends is bounded like a dial.
func TestFailoverHandshakeTimeout(t *testing.T) {
	leader := tlsCtl(t, "leader")
	mute := silent(t)
	cl, err := api.NewClientWith(list(mute, leader.URL), api.ClientOptions{CAFile: caFile(t, leader), Token: "tok", HandshakeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cl.NodeAction(ctxT(t), "n1", "drain", api.NodeActionRequest{}); err != nil {
		t.Fatalf("write with the first member mute: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("write took %s with the first member mute; want about the 500ms handshake timeout", d)
	}
}

// The failover budget bounds the whole call, dials included, and the
// error says what each member did.
func TestFailoverBudgetBoundsTheCall(t *testing.T) {
	a, b := blackhole(t, "http"), blackhole(t, "http")
	cl, err := api.NewClientWith(list(a, b), api.ClientOptions{FailoverTimeout: time.Second, DialTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = cl.Nodes(ctxT(t))
	d := time.Since(start)
	if d < 900*time.Millisecond || d > 2*time.Second {
		t.Errorf("every member cut off: the call took %s; want the 1s budget", d)
	}
	if !errors.Is(err, spec.ErrUnavailable) || !strings.Contains(err.Error(), "no controller of") ||
		!strings.Contains(err.Error(), "within 1s") || !strings.Contains(err.Error(), a+": no connection") {
		t.Errorf("every member cut off: %v; want unavailable naming the budget and each member's state", err)
	}
	// A long poll may wait for its answer beyond the budget.
	slow := newCtl(t, "leader", false)
	slow.hang = func(w http.ResponseWriter, r *http.Request) bool {
		time.Sleep(1500 * time.Millisecond)
		return true
	}
	cl, _ = api.NewClientWith(list(slow.URL, newCtl(t, "follower", false).URL), api.ClientOptions{FailoverTimeout: time.Second})
	if res, err := cl.Assignments(ctxT(t), "n1", 3, 2*time.Second); err != nil || res.Generation != 7 {
		t.Errorf("long poll answered after 1.5s of a 2s wait: %+v %v; want its answer", res, err)
	}
}

// A connection that goes dead (a cut link: nothing arrives, nothing is
// closed) is found by HTTP/2 pings; a heartbeat waiting on it is sent
// again to the next member, and later calls go there.
func TestFailoverDeadConnection(t *testing.T) {
	old := tlsCtl(t, "leader")
	next := tlsCtl(t, "follower")
	fr := newFreezer(t, strings.TrimPrefix(old.URL, "https://"))
	cl, err := api.NewClientWith(list(fr.URL(), next.URL), api.ClientOptions{CAFile: caFile(t, old), Token: "tok",
		PingAfter: 300 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Heartbeat(ctxT(t), "n1", nil); err != nil {
		t.Fatalf("heartbeat before the cut: %v", err)
	}
	fr.frozen.Store(true)
	next.set("leader", "")
	start := time.Now()
	if err := cl.Heartbeat(ctxT(t), "n1", nil); err != nil {
		t.Fatalf("heartbeat after the cut: %v; want it sent again to the next member", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("heartbeat over a dead connection took %s; want about ping interval + ping timeout (0.6s)", d)
	}
	if n := next.count(); n != 1 {
		t.Errorf("next member got %d requests; want the heartbeat", n)
	}
}

func httptestTLS2(c *ctl) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	return srv
}

// The leader, listed first, is cut off (its dials hang) while the
// followers still name it: a keyed submission does not wait for the dial
// into the cut link before asking the others again, so it is
// acknowledged as soon as one of them leads (within the backoff), not
// after the dial timeout.
func TestFailoverElectionBehindCutLeader(t *testing.T) {
	cut := blackhole(t, "http")
	f2, f3 := newCtl(t, "follower", false), newCtl(t, "follower", false)
	f2.set("follower", cut)
	f3.set("follower", cut)
	cl, err := api.NewClientWith(list(cut, f2.URL, f3.URL), api.ClientOptions{DialTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	elected := time.AfterFunc(700*time.Millisecond, func() { f3.set("leader", "") })
	defer elected.Stop()
	start := time.Now()
	r, err := cl.Submit(ctxT(t), api.SubmitRequest{Job: spec.JobSpec{Name: "j"}, IdempotencyKey: api.NewIdempotencyKey()})
	if err != nil || r.ID != 42 {
		t.Fatalf("keyed submission during the election: %+v %v", r, err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("keyed submission acknowledged %s after its start, the new leader elected at 700ms; want within the 250ms backoff of it", d)
	}
}

// A read answered by a follower that names a leader behind a cut link is
// not held for that leader's dial: the follower's answer stands once the
// leader's try has made no connection for staleWait (1 s).
func TestFailoverStaleReadCutLeader(t *testing.T) {
	cut := blackhole(t, "http")
	f2 := newCtl(t, "follower", false)
	f2.set("follower", cut)
	cl, err := api.NewClientWith(list(cut, f2.URL), api.ClientOptions{DialTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nodes, err := cl.Nodes(ctxT(t))
	if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+f2.URL {
		t.Fatalf("read with the named leader cut off: %+v %v; want the follower's answer", nodes, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("read took %s with the named leader cut off; want about 1s (staleWait)", d)
	}
	// A leader that answers is still the one read from.
	lead := newCtl(t, "leader", false)
	f2.set("follower", lead.URL)
	cl, _ = api.NewClientWith(list(f2.URL, lead.URL), api.ClientOptions{})
	if nodes, err := cl.Nodes(ctxT(t)); err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+lead.URL {
		t.Fatalf("read with the leader up: %+v %v; want the leader's answer", nodes, err)
	}
}
