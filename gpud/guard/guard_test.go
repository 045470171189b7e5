package guard

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRateLog(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := NewRateLogEvery(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second, 3, func() time.Time { return now })
	for i := range 1000 {
		l.Warn("refused", "i", i)
	}
	l.Warn("another message")
	if n := strings.Count(buf.String(), "msg=refused"); n != 3 {
		t.Errorf("1,000 lines of one message in an interval logged %d; want 3", n)
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Error("a second message was suppressed with the first's")
	}
	if l.Suppressed("refused") != 997 {
		t.Errorf("suppressed %d; want 997", l.Suppressed("refused"))
	}
	now = now.Add(10 * time.Second)
	buf.Reset()
	l.Warn("refused", "i", 1000)
	if !strings.Contains(buf.String(), "suppressed=997") {
		t.Errorf("the next interval's first line does not say what was left out: %q", buf.String())
	}
	// A library's error log through Writer: one line per write, limited.
	buf.Reset()
	w := l.Writer(slog.LevelWarn, "http server error")
	for range 100 {
		io.WriteString(w, "http: TLS handshake error from 10.0.0.1:5: EOF\n")
	}
	if n := strings.Count(buf.String(), "http server error"); n != 3 {
		t.Errorf("100 library lines logged %d; want 3", n)
	}
}

// dialFrom opens a TCP connection to addr from the loopback address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedSoon says whether the peer closed c within d.
func closedSoon(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF || err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

type acceptor struct {
	ln    *Listener
	mu    sync.Mutex
	conns []net.Conn
	got   chan net.Conn
}

func serve(t *testing.T, lim Limits) (*acceptor, string) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ln := NewListener(raw, "test listener", lim, NewRateLog(slog.New(slog.NewTextHandler(&logs, nil))))
	a := &acceptor{ln: ln, got: make(chan net.Conn, 4096)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.got <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-a.got:
				c.Close()
			default:
				return
			}
		}
	})
	return a, raw.Addr().String()
}

func (a *acceptor) next(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-a.got:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

func TestListenerShares(t *testing.T) {
	a, addr := serve(t, Limits{Handshake: time.Minute, MaxPending: 6, MaxPendingPerAddr: 3})
	// One address holding idle connections keeps only its share: its
	// newest three.
	var flood []net.Conn
	for range 5 {
		flood = append(flood, dialFrom(t, "127.0.0.2", addr))
		a.next(t)
	}
	for i, c := range flood {
		if closed := closedSoon(c, 200*time.Millisecond); closed != (i < 2) {
			t.Errorf("flood connection %d closed %v; want only the two oldest closed", i, closed)
		}
	}
	// A second address fills the rest; a third, past MaxPending, takes
	// a slot from the address holding the most (tie: the oldest first
	// found), not the newcomer's refusal.
	for range 3 {
		dialFrom(t, "127.0.0.3", addr)
		a.next(t)
	}
	legit := dialFrom(t, "127.0.0.4", addr)
	lc := a.next(t)
	if closedSoon(legit, 200*time.Millisecond) {
		t.Fatal("a newcomer from a third address was refused while two addresses held all pending slots")
	}
	if st := a.ln.Stats(); st.Evicted != 3 || st.Pending != 6 {
		t.Errorf("stats %+v; want 3 evicted, 6 pending", st)
	}
	if !Established(lc) {
		t.Fatal("Established on a live pending connection said closed")
	}
	if st := a.ln.Stats(); st.Pending != 5 || st.Open != 6 {
		t.Errorf("after one established: %+v; want 5 pending, 6 open", st)
	}
	// An established connection is never evicted, and has no deadline.
	// (Past the fair share these newcomers are refused: every address
	// holds two pending.)
	for range 8 {
		dialFrom(t, "127.0.0.4", addr)
	}
	if closedSoon(legit, 200*time.Millisecond) {
		t.Error("an established connection was evicted by its own address's newer ones")
	}
}

func TestListenerDeadlineAndOpenCap(t *testing.T) {
	a, addr := serve(t, Limits{Handshake: 300 * time.Millisecond, MaxOpenPerAddr: 2})
	c1 := dialFrom(t, "127.0.0.2", addr)
	s1 := a.next(t)
	c2 := dialFrom(t, "127.0.0.2", addr)
	s2 := a.next(t)
	if !Established(s2) {
		t.Fatal("Established failed")
	}
	// Over the open cap: closed at accept, never handed to the server.
	c3 := dialFrom(t, "127.0.0.2", addr)
	if !closedSoon(c3, time.Second) {
		t.Error("a third connection from an address capped at 2 was kept")
	}
	select {
	case <-a.got:
		t.Error("a refused connection reached the server")
	default:
	}
	// The pending one expires; the established one stays.
	if !closedSoon(c1, 2*time.Second) {
		t.Error("a connection that never finished its handshake outlived the deadline")
	}
	if Established(s1) {
		t.Error("Established after the deadline said live")
	}
	if closedSoon(c2, 500*time.Millisecond) {
		t.Error("an established connection was closed by the handshake deadline")
	}
	s1.Close()
	if st := a.ln.Stats(); st.Open != 1 || st.Expired != 1 || st.Refused != 1 {
		t.Errorf("stats %+v; want 1 open, 1 expired, 1 refused", st)
	}
}
