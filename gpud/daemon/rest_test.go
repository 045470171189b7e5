package daemon

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRestListenerCapped: gpud rest's TCP port takes anyone who reaches
// it, so it goes through gpud/guard like every other listener. One
// address holding 40 connections that send nothing keeps at most 8 of
// them (the rest are closed at once, all of them by the 5 s handshake
// deadline), a real request is still answered meanwhile, and the
// listener's log stays a few lines.
func TestRestListenerCapped(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunRest(ctx, RestOptions{Listen: []string{addr}, Controller: "unix://" + t.TempDir() + "/none.sock",
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunRest: %v", err)
		}
	})
	var conns []net.Conn
	for deadline := time.Now().Add(10 * time.Second); len(conns) < 40; {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("dial gpud rest: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	closed := make(chan time.Duration, len(conns))
	start := time.Now()
	for _, c := range conns {
		go func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, c) // returns when the server closes it
			closed <- time.Since(start)
		}()
	}
	// A client with a request is answered while the idle ones are held:
	// here 502 naming the controller, which does not run.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/slurm/v0.0.40/ping")
	if err != nil {
		t.Fatalf("a real request while 40 idle connections are held: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a real request: %d %s", resp.StatusCode, body)
	}
	early := 0
	for range conns {
		select {
		case d := <-closed:
			if d < 4*time.Second {
				early++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("idle connections still open 20 s after they were made; want all closed by the 5 s handshake deadline")
		}
	}
	if early < 32 {
		t.Errorf("%d of 40 idle connections from one address were closed at once; want at least 32 (8 pending per address)", early)
	}
	if n := strings.Count(logs.String(), "\n"); n > 20 {
		t.Errorf("gpud rest logged %d lines for one address's idle connections; want a few:\n%s", n, logs.String())
	}
}

// lockedBuffer is a bytes.Buffer the server's goroutines may log to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
