package guard

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"math/big"
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

// selfSigned is a throwaway TLS certificate for 127.0.0.1.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestListenerFloodAndTLSClient: another address churning idle
// connections (each closed one dialled again at once) and the client's
// own address holding idle ones: a TLS client finishes its handshake
// every time. A newcomer takes the place of an idle connection of its
// own address; another address's churn never takes the client's.
func TestListenerFloodAndTLSClient(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := raw.Addr().String()
	ln := NewListener(raw, "test listener", Limits{Handshake: 5 * time.Second, MaxPending: 16, MaxPendingPerAddr: 4}, NewRateLog(slog.New(slog.NewTextHandler(io.Discard, nil))))
	cert := selfSigned(t)
	tl := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				Established(c)
				_, _ = c.Write([]byte("ok"))
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	defer tl.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				// Held until the listener closes it, then dialled again.
				_, _ = c.Read(make([]byte, 1))
				c.Close()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	for i := range 10 {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatalf("TLS client %d: %v", i, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ok" {
			t.Fatalf("TLS client %d: %q, %v", i, b, err)
		}
		c.Close()
	}
	if st := ln.Stats(); st.Evicted < 10 {
		t.Errorf("stats %+v; want the churn to have evicted idle connections", st)
	}
}
