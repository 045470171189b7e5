package guard

import (
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits are a Listener's caps and deadline. Zero fields take
// DefaultLimits'.
type Limits struct {
	// Handshake is how long an accepted connection has to become
	// established (its TLS handshake and first message, as the server
	// decides: Established); then it is closed, whatever I/O deadlines
	// the server set.
	Handshake time.Duration
	// MaxPending bounds the connections not yet established, all
	// addresses together; MaxPendingPerAddr is one address's share of
	// them.
	MaxPending        int
	MaxPendingPerAddr int
	// MaxOpenPerAddr bounds one address's open connections, established
	// or not (negative: no cap); MaxOpen all open connections (negative:
	// no cap).
	MaxOpenPerAddr int
	MaxOpen        int
	// Exempt lists networks whose connections are never capped (they
	// still get the deadline); IsExempt, when set, decides instead (a
	// server whose exempt networks change on reload).
	Exempt   []netip.Prefix
	IsExempt func(netip.Addr) bool
}

// DefaultLimits: a handshake is milliseconds on a cluster network; 5 s
// leaves room for a loaded host. An address's share of the pending
// connections is small: a peer or srun opens one at a time.
var DefaultLimits = Limits{Handshake: 5 * time.Second, MaxPending: 128, MaxPendingPerAddr: 8, MaxOpenPerAddr: -1, MaxOpen: -1}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.Handshake <= 0 {
		l.Handshake = d.Handshake
	}
	if l.MaxPending <= 0 {
		l.MaxPending = d.MaxPending
	}
	if l.MaxPendingPerAddr <= 0 {
		l.MaxPendingPerAddr = d.MaxPendingPerAddr
	}
	if l.MaxOpenPerAddr == 0 {
		l.MaxOpenPerAddr = d.MaxOpenPerAddr
	}
	if l.MaxOpen == 0 {
		l.MaxOpen = d.MaxOpen
	}
	return l
}

// Listener accepts connections under Limits. A new connection past its
// address's share of pending connections takes the place of one of that
// address's that is idle (has sent nothing: a legitimate client sends its
// TLS ClientHello at once) or has taken over a second with its handshake;
// past MaxPending it takes such a place from the address holding the
// most, when that address holds more than the newcomer's. Otherwise the
// newcomer is closed, as it is past the open caps. So a peer holding or
// churning idle connections loses them to its own new ones, and a client
// on the same address whose handshake is under way keeps its place.
// Closing costs one accept and close: no handshake, no goroutine. What
// it closes is logged through a RateLog and counted (Stats).
type Listener struct {
	net.Listener
	name   string
	limits Limits
	log    *RateLog

	mu       sync.Mutex
	pending  map[netip.Addr][]*Conn // oldest first
	npending int
	open     map[netip.Addr]int
	nopen    int

	evicted, refused, expired atomic.Int64
}

// NewListener wraps ln (name says which listener, for the logs).
func NewListener(ln net.Listener, name string, l Limits, log *RateLog) *Listener {
	return &Listener{Listener: ln, name: name, limits: l.withDefaults(), log: log,
		pending: map[netip.Addr][]*Conn{}, open: map[netip.Addr]int{}}
}

// Stats are a Listener's counts of connections it closed.
type Stats struct {
	// Evicted: pending connections closed for a newer one; Refused: new
	// connections closed at once (over a cap); Expired: connections that
	// did not become established within Handshake.
	Evicted, Refused, Expired int64
	// Pending and Open are the connections now.
	Pending, Open int
}

// Stats returns the counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Evicted: l.evicted.Load(), Refused: l.refused.Load(), Expired: l.expired.Load(), Pending: l.npending, Open: l.nopen}
}

func addrOf(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{} // unix sockets and the like share one key
}

// Accept returns the next connection within the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		raw, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.admit(raw); c != nil {
			return c, nil
		}
	}
}

func (l *Listener) exempt(a netip.Addr) bool {
	if l.limits.IsExempt != nil {
		return l.limits.IsExempt(a)
	}
	for _, p := range l.limits.Exempt {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// admit counts raw in, evicting or refusing as the caps say; nil: raw
// was closed.
func (l *Listener) admit(raw net.Conn) *Conn {
	addr := addrOf(raw)
	c := &Conn{Conn: raw, l: l, addr: addr, exempt: l.exempt(addr), accepted: time.Now()}
	lim := l.limits
	// A timer, not an I/O deadline: the server sets its own deadlines
	// (net/http's header and body timeouts), and a timer also ends a
	// connection the server has not begun to read. Made before c is
	// listed: another accept may evict (close) it at once.
	c.timer.Store(time.AfterFunc(lim.Handshake, c.expire))
	var evict *Conn
	l.mu.Lock()
	if !c.exempt {
		switch {
		case lim.MaxOpenPerAddr > 0 && l.open[addr] >= lim.MaxOpenPerAddr, lim.MaxOpen > 0 && l.nopen >= lim.MaxOpen:
			n := l.open[addr]
			l.mu.Unlock()
			l.refused.Add(1)
			c.timer.Load().Stop()
			raw.Close()
			l.log.Warn("connection refused: over the open connection cap", "listener", l.name, "remote", addr.String(), "open_from_address", n, "max_per_address", lim.MaxOpenPerAddr, "max", lim.MaxOpen)
			return nil
		case len(l.pending[addr]) >= lim.MaxPendingPerAddr:
			if evict = victim(l.pending[addr]); evict == nil {
				l.mu.Unlock()
				l.refused.Add(1)
				c.timer.Load().Stop()
				raw.Close()
				l.log.Warn("connection refused: its address has as many connections in their handshake as it may", "listener", l.name, "remote", addr.String(), "max_per_address", lim.MaxPendingPerAddr)
				return nil
			}
		case l.npending >= lim.MaxPending:
			var most netip.Addr
			for a, cs := range l.pending {
				if len(cs) > len(l.pending[most]) {
					most = a
				}
			}
			if len(l.pending[most]) > len(l.pending[addr]) {
				evict = victim(l.pending[most])
			}
			if evict == nil {
				l.mu.Unlock()
				l.refused.Add(1)
				c.timer.Load().Stop()
				raw.Close()
				l.log.Warn("connection refused: too many connections in their handshake", "listener", l.name, "remote", addr.String(), "pending", lim.MaxPending)
				return nil
			}
		}
		if evict != nil {
			l.unpendLocked(evict)
		}
		l.open[addr]++
		l.nopen++
		c.counted = true
		c.pending = true
		l.pending[addr] = append(l.pending[addr], c)
		l.npending++
	}
	l.mu.Unlock()
	if evict != nil {
		l.evicted.Add(1)
		evict.Close()
		l.log.Warn("connection closed before its handshake ended: its address's share of pending connections went to a newer one", "listener", l.name,
			"remote", evict.addr.String(), "age", time.Since(evict.accepted).Round(time.Millisecond))
	}
	return c
}

// slowHandshake is how long a handshake under way keeps its place
// against newer connections of its address.
const slowHandshake = time.Second

// victim is the pending connection (of one address, oldest first) a
// newcomer may take the place of: the oldest idle one, else the oldest
// whose handshake has taken over slowHandshake; nil when every one is a
// handshake under way.
func victim(cs []*Conn) *Conn {
	for _, c := range cs {
		if c.idle() {
			return c
		}
	}
	if c := cs[0]; time.Since(c.accepted) > slowHandshake {
		return c
	}
	return nil
}

// unpendLocked takes c off the pending lists (l.mu held).
func (l *Listener) unpendLocked(c *Conn) bool {
	if !c.pending {
		return false
	}
	c.pending = false
	cs := l.pending[c.addr]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(l.pending, c.addr)
	} else {
		l.pending[c.addr] = cs
	}
	l.npending--
	return true
}

// Conn is a connection a Listener accepted.
type Conn struct {
	net.Conn
	l        *Listener
	addr     netip.Addr
	exempt   bool
	accepted time.Time
	timer    atomic.Pointer[time.Timer]
	// pending and counted are guarded by l.mu.
	pending, counted    bool
	established, closed atomic.Bool
	// started: the peer has sent something (read by the server).
	started atomic.Bool
}

// Read notes that the peer has sent something.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.started.Load() {
		c.started.Store(true)
	}
	return n, err
}

// idle says whether the peer has sent nothing: no byte read by the
// server, none waiting in the socket's receive queue.
func (c *Conn) idle() bool {
	if c.started.Load() {
		return false
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	waiting := 0
	_ = rc.Control(func(fd uintptr) { waiting, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return waiting == 0
}

// Addr is the remote address the connection is counted under.
func (c *Conn) Addr() netip.Addr { return c.addr }

func (c *Conn) expire() {
	c.l.mu.Lock()
	was := c.l.unpendLocked(c) || c.exempt && !c.established.Load()
	c.l.mu.Unlock()
	if was {
		c.l.expired.Add(1)
		c.Close()
		c.l.log.Info("connection closed: no handshake within the deadline", "listener", c.l.name, "remote", c.addr.String(), "deadline", c.l.limits.Handshake)
	}
}

// Established ends c's handshake period: it leaves the pending count and
// the deadline no longer applies. False when c was closed first (evicted
// or expired): the caller drops it.
func (c *Conn) Established() bool {
	if c.established.Load() {
		return !c.closed.Load()
	}
	c.l.mu.Lock()
	was := c.l.unpendLocked(c) || c.exempt
	if was {
		c.established.Store(true)
	}
	c.l.mu.Unlock()
	if !was {
		return false
	}
	c.timer.Load().Stop()
	return !c.closed.Load()
}

// Close closes c and uncounts it.
func (c *Conn) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return c.Conn.Close()
	}
	c.timer.Load().Stop()
	c.l.mu.Lock()
	c.l.unpendLocked(c)
	if c.counted {
		c.counted = false
		if c.l.open[c.addr]--; c.l.open[c.addr] <= 0 {
			delete(c.l.open, c.addr)
		}
		c.l.nopen--
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// Established marks the guarded connection under c established (c may be
// the *Conn, a *tls.Conn over one, or a wrapper with NetConn); it reports
// false when c was closed first, and true for a connection no Listener
// guards.
func Established(c net.Conn) bool {
	for range 4 {
		switch x := c.(type) {
		case *Conn:
			return x.Established()
		case *tls.Conn:
			c = x.NetConn()
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return true
		}
	}
	return true
}
