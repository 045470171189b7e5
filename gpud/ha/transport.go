package ha

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/guard"
)

// tlsStream is raft's StreamLayer over mutual TLS: every connection, in
// and out, presents a member certificate of the cluster CA and demands
// one (auth.CA.MemberTLS), that the daemon's revocation state does not
// revoke. The port is on the network: connections are capped per address
// and must finish their handshake within raftLimits.Handshake
// (gpud/guard), and what a peer's failed handshake logs is rate-limited.
type tlsStream struct {
	ln        *guard.Listener
	server    *tls.Config
	client    *tls.Config
	rev       *auth.Revocations
	log       *guard.RateLog
	advertise net.Addr
	// local is where dials leave from: raft_listen's address when it
	// names one (a host with several addresses talks Raft from one).
	local net.Addr
}

// raftLimits: a group has 3 or 5 members, each holding a few connections
// to each other (raft's pool, pipelining, snapshots).
var raftLimits = guard.Limits{Handshake: 5 * time.Second, MaxPending: 64, MaxPendingPerAddr: 8, MaxOpenPerAddr: 64, MaxOpen: 512}

func newTLSStream(listen, advertise string, server, client *tls.Config, rev *auth.Revocations, log *slog.Logger) (*tlsStream, error) {
	ln, err := net.Listen("tcp", listen)
	if errors.Is(err, syscall.EADDRINUSE) {
		// gpud node's default step_listen is :6818, the port older docs
		// gave raft_listen: a host running both would stop here.
		return nil, fmt.Errorf("listen for raft traffic on %s: %w; another process has that port (a gpud node on this host takes :6818 for steps by default, [node] step_listen): give [ha] raft_listen another port, e.g. 6819, and the peers' raft addresses with it", listen, err)
	}
	if err != nil {
		return nil, fmt.Errorf("listen for raft traffic on %s: %w; check [ha] raft_listen", listen, err)
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("resolve raft address %s: %w", advertise, err)
	}
	rl := guard.NewRateLog(log)
	t := &tlsStream{ln: guard.NewListener(ln, "raft", raftLimits, rl), server: server, client: client, rev: rev, log: rl, advertise: adv}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		t.local = &net.TCPAddr{IP: a.IP}
	}
	return t, nil
}

// Accept returns the next connection; its handshake runs on its first
// read or write (raft's goroutine for it), not here.
func (t *tlsStream) Accept() (net.Conn, error) {
	c, err := t.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &memberConn{Conn: tls.Server(c, t.server), t: t}, nil
}

// Close stops accepting.
func (t *tlsStream) Close() error { return t.ln.Close() }

// Addr is the address the other members reach this one at.
func (t *tlsStream) Addr() net.Addr { return t.advertise }

func (t *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, LocalAddr: t.local}, Config: t.client}
	c, err := d.Dial("tcp", string(addr))
	if err != nil {
		return nil, fmt.Errorf("dial HA member at %s: %w", addr, err)
	}
	tc := c.(*tls.Conn)
	mc := &memberConn{Conn: tc, t: t}
	mc.once.Do(func() {}) // handshake done by Dial
	if err := t.rev.Track(mc, auth.CertCredential(tc.ConnectionState().PeerCertificates[0])); err != nil {
		c.Close()
		return nil, fmt.Errorf("HA member at %s: %w", addr, err)
	}
	return mc, nil
}

// memberConn is a Raft connection. An accepted one does its TLS
// handshake on first use, within the listener's deadline; a failed one,
// or one whose member certificate is revoked, reads as EOF to raft
// (which would log every such connection) and is logged here, bounded.
// Every connection is tracked by the revocation state until closed.
type memberConn struct {
	*tls.Conn
	t    *tlsStream
	once sync.Once
	err  error
}

func (c *memberConn) handshake() error {
	c.once.Do(func() {
		err := c.Conn.Handshake()
		if err == nil {
			err = c.t.rev.Track(c, auth.CertCredential(c.ConnectionState().PeerCertificates[0]))
		}
		if err == nil && !guard.Established(c.Conn) {
			err = net.ErrClosed
		}
		if err != nil {
			c.t.log.Warn("raft connection refused", "remote", c.RemoteAddr().String(), "err", err)
			c.Conn.Close()
			c.err = io.EOF
		}
	})
	return c.err
}

func (c *memberConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *memberConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *memberConn) Close() error {
	c.t.rev.Untrack(c)
	return c.Conn.Close()
}
