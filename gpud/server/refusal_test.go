package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// refusalCounts collects WithRefusalCounter's classes.
type refusalCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *refusalCounts) count(class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[class]++
}

func (c *refusalCounts) get(class string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[class]
}

// rawHTTPS is an HTTPS client of s that trusts its CA; dials counts its
// connections. h2 picks HTTP/2 (else HTTP/1.1 only).
func rawHTTPS(t *testing.T, s secure, h2 bool, dials *atomic.Int32) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(s.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var d net.Dialer
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2, MaxConnsPerHost: 1,
		DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, n, a)
		}}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func getWith(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Proto
}

// TestRefusalFloodIsSummarised (issue 24, hole 4): a flood of bad-token
// requests from one address, and of refused calls from one user, adds
// two audit rows per kind of refusal (its first, and a summary counting
// the rest), not one row each; every refusal is counted. Before, each
// refused request added a row, until the state filesystem was full.
func TestRefusalFloodIsSummarised(t *testing.T) {
	db := openAcct(t)
	var counts refusalCounts
	s := secureServer(t, server.WithAudit(db, nil), server.WithRefusalCounter(counts.count), server.WithRefusalRate(0, 0))
	ctx := ctxT(t)
	root := client(t, s.unix)
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	sub, err := bob.Submit(ctx, api.SubmitRequest{Job: jobSpec("bobs")})
	if err != nil {
		t.Fatal(err)
	}

	const n = 600
	var dials atomic.Int32
	hc := rawHTTPS(t, s, true, &dials)
	var wg sync.WaitGroup
	var wrong atomic.Int32
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if code, _ := getWith(t, hc, s.https+"/v1/jobs", "not-a-token"); code != http.StatusUnauthorized {
					wrong.Add(1)
				}
			}
		}()
	}
	for range n / 10 {
		_, err := alice.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{})
		wantStatus(t, "alice cancels bob's job", err, 403, spec.ErrPermissionDenied, "belongs to bob")
	}
	wg.Wait()
	if wrong.Load() > 0 {
		t.Errorf("%d bad-token requests were not answered 401", wrong.Load())
	}
	if got := counts.get(server.RefusedBadToken); got != n {
		t.Errorf("gpud_api_refusals_total{class=bad_token} = %d; want %d", got, n)
	}
	if got := counts.get(server.RefusedDenied); got != n/10 {
		t.Errorf("gpud_api_refusals_total{class=denied} = %d; want %d", got, n/10)
	}
	got := waitAudit(t, root, 5)
	summarised := map[string]int{}
	for _, e := range got {
		summarised[e.ActorName] += max(e.Summarised, 1)
	}
	if len(got) != 5 || summarised["unidentified"] != n || summarised["alice"] != n/10 {
		t.Errorf("audit after %d bad tokens and %d refused cancels: %d rows standing for %v; want 5 (bob's submission, each flood's first and its summary) standing for all of them:\n%+v",
			n, n/10, len(got), summarised, got)
	}
	if j, err := bob.Job(ctx, sub.ID); err != nil || j.State != spec.StatePending {
		t.Errorf("bob's job after alice's refused cancels: %v %v", j.State, err)
	}
}

// TestRefusalBudget: an address over its refusal budget gets each further
// refusal late and as 429, while a valid token from the same address is
// served at once; a user over budget has further state-changing calls
// refused before anything is written, while others are served.
func TestRefusalBudget(t *testing.T) {
	db := openAcct(t)
	s := secureServer(t, server.WithAudit(db, nil), server.WithRefusalRate(0.01, 3))
	ctx := ctxT(t)
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))
	var dials atomic.Int32
	hc := rawHTTPS(t, s, false, &dials)
	for i := range 3 {
		if code, _ := getWith(t, hc, s.https+"/v1/jobs", "bad"); code != http.StatusUnauthorized {
			t.Fatalf("bad token %d: %d; want 401 within the budget", i, code)
		}
	}
	slow := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		code, _ := getWith(t, rawHTTPS(t, s, false, &dials), s.https+"/v1/jobs", "bad")
		if code != http.StatusTooManyRequests {
			t.Errorf("bad token over the budget: %d; want 429", code)
		}
		slow <- time.Since(start)
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if _, err := alice.Jobs(ctx, api.JobFilter{}); err != nil {
		t.Errorf("alice's valid token from the flooding address: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("alice's valid request took %v while her address was over its refusal budget; want no delay", d)
	}
	if d := <-slow; d < 2*time.Second {
		t.Errorf("a bad token over the budget was answered after %v; want the 2 s tarpit", d)
	}

	// A user over budget.
	sub, err := bob.Submit(ctx, api.SubmitRequest{Job: jobSpec("bobs")})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := alice.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{})
		wantStatus(t, "alice cancels bob's job", err, 403, spec.ErrPermissionDenied, "belongs to bob")
	}
	_, err = alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("alices")})
	wantStatus(t, "alice over her refusal budget submits", err, 429, spec.ErrRefused, "too many calls refused")
	if _, err := alice.Jobs(ctx, api.JobFilter{}); err != nil {
		t.Errorf("alice's squeue while over budget: %v; reads are not refused", err)
	}
	if _, err := bob.Submit(ctx, api.SubmitRequest{Job: jobSpec("bobs2")}); err != nil {
		t.Errorf("bob's submission while alice is over budget: %v", err)
	}
}

// TestRefusedConnectionsClose: a 401 closes its connection, over HTTP/2
// as over HTTP/1.1, so every bad token costs a new TLS handshake; and a
// connection whose calls keep being refused is closed.
func TestRefusedConnectionsClose(t *testing.T) {
	s := secureServer(t, server.WithRefusalRate(0, 0))
	for _, h2 := range []bool{true, false} {
		var dials atomic.Int32
		hc := rawHTTPS(t, s, h2, &dials)
		var proto string
		for range 5 {
			_, proto = getWith(t, hc, s.https+"/v1/jobs", "bad")
		}
		if wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]; proto != wantProto {
			t.Fatalf("spoke %s; want %s", proto, wantProto)
		}
		if n := dials.Load(); n != 5 {
			t.Errorf("%s: 5 bad tokens took %d connections; want 5 (each closed after its 401)", proto, n)
		}
	}
	// Refusals after authentication: the connection is closed after
	// the 8th (and the client dials again).
	tok := s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	var dials atomic.Int32
	hc := rawHTTPS(t, s, true, &dials)
	for range 20 {
		if code, _ := getWith(t, hc, s.https+"/v1/audit", tok); code != http.StatusForbidden {
			t.Fatalf("alice reads the audit log: %d; want 403", code)
		}
	}
	if n := dials.Load(); n < 2 || n > 4 {
		t.Errorf("20 refused reads took %d connections; want 3 (closed after each 8th refusal)", n)
	}
	if !strings.HasPrefix(s.https, "https://") {
		t.Fatal(s.https)
	}
}

// shortDisk is an audit log on a disk that reports free bytes.
type shortDisk struct {
	*accounting.DB
	free atomic.Int64
}

func (d *shortDisk) FreeBytes() (int64, error) { return d.free.Load(), nil }

// TestAuditStopsGrowingOnAShortDisk: with less free space than
// audit_min_free, the audit log keeps the size it had, its oldest rows
// making room for new ones; job submissions keep being accepted and
// audited.
func TestAuditStopsGrowingOnAShortDisk(t *testing.T) {
	db := openAcct(t)
	ctx := ctxT(t)
	old := time.Now().Add(-time.Hour)
	var ws []accounting.AuditWrite
	for i := range 14000 {
		ws = append(ws, accounting.AuditWrite{Entry: accounting.AuditEntry{Time: old, ActorName: "history", Origin: "unix",
			Action: "POST /v1/jobs", Target: "job " + strconv.Itoa(i), Result: "200 ok"}})
	}
	if err := db.WriteAudits(ctx, ws); err != nil {
		t.Fatal(err)
	}
	before, err := db.AuditBytes(ctx)
	if err != nil || before < 1<<20 {
		t.Fatalf("history takes %d bytes (%v); want over the 1 MiB floor", before, err)
	}
	disk := &shortDisk{DB: db}
	disk.free.Store(10 << 20)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAudit(disk, nil),
		server.WithAuditRetention(server.AuditRetention{MinFree: 64 << 20})}})
	c := client(t, addr)
	for i := range 200 {
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("j" + strconv.Itoa(i))}); err != nil {
			t.Fatalf("submission %d on a short disk: %v", i, err)
		}
	}
	got := waitAudit(t, c, 14000)
	after, _ := db.AuditBytes(ctx)
	if after > before+4<<10 {
		t.Errorf("the audit log grew from %d to %d bytes with the disk short; want it kept at its size", before, after)
	}
	if last := got[len(got)-1]; last.ActorName != "root" || !strings.HasPrefix(last.Result, "200") {
		t.Errorf("newest audit entry %+v; want root's last submission", last)
	}
	if got[0].Target == "job 0" {
		t.Errorf("the oldest entry is still there: the newest must replace the oldest")
	}
}
