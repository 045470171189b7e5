package server_test

import (
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
)

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAPIPlainConnectionFlood (issue 24 hole 5, the controller's TLS
// port): one address holding 1,000 plain TCP connections, that never
// start TLS, and then churning failed handshakes, keeps only its share
// of the connections in their handshake; another address's requests are
// answered meanwhile, and the controller logs a few lines about it, not
// one per connection.
func TestAPIPlainConnectionFlood(t *testing.T) {
	var logs lockedBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := secureServer(t, server.WithLogger(log))
	addr := strings.TrimPrefix(s.https, "https://")
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	for range 1000 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			continue
		}
		flood = append(flood, c)
	}
	// Garbage where a ClientHello should be: a failed handshake each.
	for range 300 {
		if c, err := d.Dial("tcp", addr); err == nil {
			_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			c.Close()
		}
	}
	tok := s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	for range 5 {
		start := time.Now()
		if _, err := s.client(t, tok).Jobs(ctxT(t), api.JobFilter{}); err != nil {
			t.Fatalf("a request from another address during the flood: %v", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("a request from another address took %v during the flood", took)
		}
	}
	time.Sleep(500 * time.Millisecond)
	out := logs.String()
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("1,300 bad connections logged %d lines; want a few:\n%.3000s", n, out)
	}
	if !strings.Contains(out, "suppressed") && !strings.Contains(out, "share of pending connections") {
		t.Errorf("the flood left no trace in the log:\n%s", out)
	}
}
