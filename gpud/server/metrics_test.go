package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
)

type observed struct {
	mu   sync.Mutex
	seen map[string]int // "route code" → count
}

func (o *observed) observe(route string, code int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[route+" "+http.StatusText(code)]++
}

func (o *observed) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[key]
}

var fakeMetrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "gpud_up 1\n")
})

func TestMetricsEndpoint(t *testing.T) {
	obs := &observed{seen: map[string]int{}}
	s := secureServer(t, server.WithMetrics(fakeMetrics, obs.observe))

	// TLS without a token, like /healthz.
	resp, err := untrustedHTTPS().Get(s.https + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "gpud_up 1\n" {
		t.Errorf("GET /metrics over TLS without token = %d %q", resp.StatusCode, body)
	}
	// The unix socket: any local caller.
	sock := strings.TrimPrefix(s.unix, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err = hc.Get("http://gpud/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /metrics on the socket = %d", resp.StatusCode)
	}
	// Requests are observed by route pattern and code.
	c := client(t, s.unix)
	if _, err := c.Jobs(ctxT(t), api.JobFilter{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Job(ctxT(t), 999); err == nil {
		t.Fatal("job 999 exists")
	}
	for key, want := range map[string]int{
		"GET /metrics OK":             2,
		"GET /v1/jobs OK":             1,
		"GET /v1/jobs/{id} Not Found": 1,
	} {
		if got := obs.count(key); got != want {
			t.Errorf("observed %q %d times, want %d (all: %v)", key, got, want, obs.seen)
		}
	}
}

func TestNoMetricsWithoutOption(t *testing.T) {
	s := secureServer(t)
	resp, err := untrustedHTTPS().Get(s.https + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without WithMetrics over TLS = %d, want 401 like any other path", resp.StatusCode)
	}
}
