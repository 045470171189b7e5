package ha

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStream is raft's StreamLayer over mutual TLS: every connection, in
// and out, presents a member certificate of the cluster CA and demands
// one (auth.CA.MemberTLS).
type tlsStream struct {
	net.Listener
	client    *tls.Config
	advertise net.Addr
	// local is where dials leave from: raft_listen's address when it
	// names one (a host with several addresses talks Raft from one).
	local net.Addr
}

func newTLSStream(listen, advertise string, server, client *tls.Config) (*tlsStream, error) {
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
	t := &tlsStream{Listener: tls.NewListener(ln, server), client: client, advertise: adv}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		t.local = &net.TCPAddr{IP: a.IP}
	}
	return t, nil
}

// Addr is the address the other members reach this one at.
func (t *tlsStream) Addr() net.Addr { return t.advertise }

func (t *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout, LocalAddr: t.local}, Config: t.client}
	c, err := d.Dial("tcp", string(addr))
	if err != nil {
		return nil, fmt.Errorf("dial HA member at %s: %w", addr, err)
	}
	return c, nil
}
