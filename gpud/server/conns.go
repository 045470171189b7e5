package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/guard"
)

// Limits are the API server's defences against connection exhaustion;
// see WithLimits. Zero values take the defaults of DefaultLimits.
type Limits struct {
	// ReadTimeout bounds reading one request, headers and body; a long
	// poll (job wait, node assignments) is not cut by it: its body is
	// empty, and the deadline is lifted once the body is read.
	ReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one response (long polls get their wait
	// on top).
	WriteTimeout time.Duration
	// PerUser caps one uid's open connections on the unix socket; root's
	// are never capped.
	PerUser int
	// PerIP caps one remote address's open TCP connections until they
	// show a node certificate (node agents behind one NAT address are
	// then not counted); Exempt lists networks never capped (node
	// networks).
	PerIP  int
	Exempt []netip.Prefix
	// Total caps every capped connection together (both listeners), so
	// floods from many users or addresses leave file descriptors for
	// root and the nodes. 0: three quarters of RLIMIT_NOFILE.
	Total int
}

// DefaultLimits are the limits a Server starts with ([api] in gpud.toml
// documents them).
var DefaultLimits = Limits{ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, WriteTimeout: 10 * time.Minute,
	PerUser: 128, PerIP: 256}

// WithLimits sets the connection limits and timeouts (fields left zero
// keep their defaults).
func WithLimits(l Limits) Option { return func(s *Server) { s.SetLimits(l) } }

// SetLimits replaces the connection caps (a configuration reload); new
// connections are judged by them, open ones are kept. Timeouts apply to
// servers started after the call.
func (s *Server) SetLimits(l Limits) {
	d := DefaultLimits
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.PerUser <= 0 {
		l.PerUser = d.PerUser
	}
	if l.PerIP <= 0 {
		l.PerIP = d.PerIP
	}
	if l.Total <= 0 {
		l.Total = defaultTotal()
	}
	s.limits.Store(&l)
}

// defaultTotal is three quarters of the open-file limit (Go raises the
// soft limit to the hard one at start), leaving the rest for databases,
// root's and the nodes' connections.
func defaultTotal() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return 1 << 20
	}
	return max(int(rl.Cur/4*3), 64)
}

// connCounter counts open connections by key ("uid 1001", "ip
// 10.0.0.7") and in total.
type connCounter struct {
	mu      sync.Mutex
	open    map[string]int
	total   int
	refused map[string]int // since the last log line
	logged  time.Time
}

// acquire counts a connection for key, or says why it may not open.
func (c *connCounter) acquire(key string, perKey, total int) (ok bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.open[key] >= perKey:
		why = fmt.Sprintf("%s has %d connections open to the controller, the most one may hold", key, c.open[key])
	case c.total >= total:
		why = fmt.Sprintf("the controller holds %d connections, the most it takes", c.total)
	default:
		if c.open == nil {
			c.open = map[string]int{}
		}
		c.open[key]++
		c.total++
		return true, ""
	}
	if c.refused == nil {
		c.refused = map[string]int{}
	}
	c.refused[key]++
	return false, why
}

func (c *connCounter) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key]--; c.open[key] <= 0 {
		delete(c.open, key)
	}
	c.total--
}

// drainRefused returns the refusals since the last call if a log line is
// due (at most one every 10 s).
func (c *connCounter) drainRefused(now time.Time) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.refused) == 0 || now.Sub(c.logged) < 10*time.Second {
		return nil
	}
	r := c.refused
	c.refused, c.logged = nil, now
	return r
}

// limitListener caps connections at accept, before any byte is read,
// so a flood costs the controller one file descriptor per connection
// for the moment it takes to close it.
type limitListener struct {
	net.Listener
	s    *Server
	unix bool
}

func (s *Server) limitListener(ln net.Listener) net.Listener {
	switch ln.(type) {
	case *net.UnixListener:
		return &limitListener{Listener: ln, s: s, unix: true}
	case *net.TCPListener, *guard.Listener:
		return &limitListener{Listener: ln, s: s}
	}
	// Anything else (a TLS listener a caller made): wrapping its
	// connections would hide *tls.Conn from net/http; use ServeTLS.
	return ln
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, s: ln.s}
		key, exempt := ln.classify(lc)
		if exempt {
			return lc, nil
		}
		l := ln.s.limits.Load()
		perKey := l.PerIP
		if ln.unix {
			perKey = l.PerUser
		}
		if ok, why := ln.s.conns.acquire(key, perKey, l.Total); !ok {
			select {
			case ln.s.refusing <- struct{}{}:
				ln.s.refusals.Add(1) // serve waits for them
				go func() {
					defer ln.s.refusals.Done()
					ln.refuse(c, why)
					<-ln.s.refusing
				}()
			default: // already answering many: just close
				c.Close()
			}
			ln.s.logRefused()
			continue
		}
		lc.key = key
		return lc, nil
	}
}

// classify names the connection's owner: its uid on the unix socket
// (read once here, kept for connContext), its address on TCP. Root and
// exempt networks are not counted.
func (ln *limitListener) classify(lc *limitedConn) (key string, exempt bool) {
	if uc, ok := lc.Conn.(*net.UnixConn); ok {
		cred, err := peerCred(uc)
		if err != nil {
			ln.s.log.Warn("cannot read peer credentials", "err", err)
			return "an unidentified local user", false
		}
		lc.cred = cred
		if cred.Uid == 0 {
			return "", true
		}
		return "uid " + strconv.FormatUint(uint64(cred.Uid), 10) + " (user " + ln.s.userName(cred.Uid) + ")", false
	}
	ap, err := netip.ParseAddrPort(lc.Conn.RemoteAddr().String())
	if err != nil {
		return lc.Conn.RemoteAddr().String(), false
	}
	addr := ap.Addr().Unmap()
	if ln.s.exempt(addr) {
		return "", true
	}
	return "address " + addr.String(), false
}

// maxRefusing bounds the refused connections being answered at once, so
// a flood costs at most this many descriptors over the caps.
const maxRefusing = 32

// refuse answers a refused connection and closes it. On the unix socket
// the client reads a 503 saying why; over TCP (TLS not yet spoken) it is
// only closed.
func (ln *limitListener) refuse(c net.Conn, why string) {
	defer c.Close()
	if !ln.unix {
		return
	}
	msg := why + "; close some (or wait for them to end) and retry"
	body := `{"error":{"code":"` + api.CodeUnavailable + `","message":` + strconv.Quote(msg) + "}}\n"
	// Take what the client has sent (its request head, usually there
	// already): a client still writing when the socket closes sees only
	// a broken pipe, not the answer.
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Read(make([]byte, 4096))
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func (s *Server) logRefused() {
	if r := s.conns.drainRefused(time.Now()); r != nil {
		s.log.Warn("connections refused at the per-user/per-address cap", "refused", r)
	}
}

// limitedConn is an accepted connection, counted under key (empty: not
// counted) until it closes or shows a node certificate.
type limitedConn struct {
	net.Conn
	s    *Server
	cred *syscall.Ucred // unix socket peer, nil elsewhere
	once sync.Once
	key  string
}

// NetConn is the connection under c (guard.Established finds its own).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// release uncounts the connection (once).
func (c *limitedConn) release() {
	c.once.Do(func() {
		if c.key != "" {
			c.s.conns.release(c.key)
		}
	})
}

func peerCred(uc *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// connState releases a TLS connection from its address's count once it
// has shown a node certificate: node agents behind one address are
// authenticated, and capped by their number, not the per-address cap.
func (s *Server) connState(c net.Conn, st http.ConnState) {
	if st == http.StateClosed || st == http.StateHijacked {
		s.rev.Untrack(c)
		return
	}
	if st != http.StateActive {
		return
	}
	guard.Established(c) // its first request came: no handshake deadline
	tc, ok := c.(*tls.Conn)
	if !ok {
		return
	}
	lc, ok := tc.NetConn().(*limitedConn)
	if !ok || lc.key == "" {
		return
	}
	if _, node := auth.NodeOf(tc.ConnectionState().VerifiedChains); node {
		lc.release()
	}
}

// freshConns are a server's connections that have not yet sent their
// first request. http.Server.Shutdown counts such a connection as busy
// until it is 5 seconds old, so one a client dialed but never used (an
// HTTP/1.1 transport dials a spare connection for concurrent calls and
// keeps it when another connection served the call) held every
// shutdown for the whole 5-s deadline, which it then missed
// (TestAuditBackpressure, once in a full run). With no request on them
// they carry nothing to finish: close runs when Shutdown has closed
// the listeners (RegisterOnShutdown) and closes them.
type freshConns struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

func (f *freshConns) note(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == http.StateNew {
		f.m[c] = struct{}{}
	} else {
		delete(f.m, c)
	}
}

func (f *freshConns) close() {
	f.mu.Lock()
	cs := make([]net.Conn, 0, len(f.m))
	for c := range f.m {
		cs = append(cs, c)
		delete(f.m, c)
	}
	f.mu.Unlock()
	// Closed outside the lock: a TLS connection's close may wait (up to
	// its 5-s write deadline) to send its close alert, and other
	// connections' state changes must not wait on that.
	for _, c := range cs {
		c.Close()
	}
}
