package ha_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/ha"
)

// syncBuf is a log buffer several goroutines write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRaftPortRevocationAndFlood: the Raft port consults the daemon's
// revocation state. A member whose certificate the others revoke loses
// its connections to them at once and is refused on new ones (it
// receives nothing more), and is let back in when the revocation is
// lifted. A flood of plain TCP connections to a member's Raft port does
// not stop replication, and what it logs is bounded.
func TestRaftPortRevocationAndFlood(t *testing.T) {
	var mu sync.Mutex
	revs := map[string]*auth.Revocations{}
	serials := map[string]string{}
	clients := map[string]*tls.Config{}
	logs := map[string]*syncBuf{}
	g := startGroup(t, 3, func(c *ha.Config) {
		mu.Lock()
		defer mu.Unlock()
		if revs[c.ID] == nil {
			revs[c.ID] = auth.NewRevocations(nil)
			logs[c.ID] = &syncBuf{}
		}
		c.Revocations = revs[c.ID]
		c.Log = slog.New(slog.NewTextHandler(logs[c.ID], &slog.HandlerOptions{Level: slog.LevelInfo})).With("member", c.ID)
		leaf, err := x509.ParseCertificate(c.ServerTLS.Certificates[0].Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		serials[c.ID] = auth.Serial(leaf)
		clients[c.ID] = c.ClientTLS
	})
	l := g.leader(10 * time.Second)
	f := g.follower(l)
	submit(t, l, 5)
	waitFor(t, 5*time.Second, "follower has 5 jobs", func() bool { return len(replicaJobs(t, f)) == 5 })

	// The flood: 300 plain connections from another address to the
	// leader's Raft port, held open, while the group commits.
	raftAddr := ""
	for _, p := range f.peers {
		if p.ID == l.id {
			raftAddr = p.Raft
		}
	}
	var flood []net.Conn
	for range 300 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
		if c, err := d.Dial("tcp", raftAddr); err == nil {
			flood = append(flood, c)
		}
	}
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	submit(t, l, 5)
	for _, m := range g.members {
		waitFor(t, 10*time.Second, "member "+m.id+" has 10 jobs during the flood", func() bool { return len(replicaJobs(t, m)) == 10 })
	}

	// Revoke the follower's member certificate on the other two.
	for _, m := range g.members {
		if m != f {
			lst, err := auth.NewRevocationList([]string{serials[f.id]}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := revs[m.id].Set(lst, time.Time{}); n == 0 && m == l {
				t.Errorf("revoking %s's certificate closed none of the leader's connections with it", f.id)
			}
		}
	}
	submit(t, l, 5)
	for _, m := range g.members {
		if m != f {
			waitFor(t, 10*time.Second, "member "+m.id+" has 15 jobs", func() bool { return len(replicaJobs(t, m)) == 15 })
		}
	}
	time.Sleep(2 * time.Second)
	if n := len(replicaJobs(t, f)); n != 10 {
		t.Errorf("the revoked member %s holds %d jobs; want the 10 it had before its certificate was revoked", f.id, n)
	}
	// Its certificate on a new connection: refused after the handshake.
	c, err := tls.Dial("tcp", raftAddr, clients[f.id])
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("a revoked member certificate's new connection to the leader: %v; want it closed", err)
	}
	if !strings.Contains(logs[l.id].String(), "raft connection refused") || !strings.Contains(logs[l.id].String(), "revoked") {
		t.Errorf("the leader did not log the refused connection:\n%s", logs[l.id].String())
	}

	// Lifted: it catches up.
	for _, m := range g.members {
		empty, _ := auth.NewRevocationList(nil, nil)
		revs[m.id].Set(empty, time.Time{})
	}
	waitFor(t, 15*time.Second, "the member let back in catches up", func() bool { return len(replicaJobs(t, f)) == 15 })

	// The flood's failed handshakes are logged a few times, not 300.
	if n := strings.Count(logs[l.id].String(), "msg=\"raft connection refused\""); n > 15 {
		t.Errorf("the leader logged %d refused raft connections; want at most a few per 10 s", n)
	}
}
