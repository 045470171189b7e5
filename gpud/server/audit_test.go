package server_test

import (
	"context"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestAuditEntryMatches keeps api.AuditEntry the wire form of
// accounting.AuditEntry.
func TestAuditEntryMatches(t *testing.T) {
	t.Parallel()
	e := accounting.AuditEntry{}
	fill(reflect.ValueOf(&e).Elem())
	sameWire[api.AuditEntry](t, e)
}

// waitAudit polls the audit log until it holds n entries (the writer
// flushes every 200 ms).
func waitAudit(t *testing.T, c *api.Client, n int) []api.AuditEntry {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := c.Audit(ctxT(t), api.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAudit(t *testing.T) {
	db := openAcct(t)
	s := secureServer(t, server.WithAudit(db, nil))
	ctx := ctxT(t)
	root := client(t, s.unix)
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))
	olga := s.client(t, s.token(t, auth.Claims{User: "olga", UID: 1003, Role: auth.RoleOperator}, time.Hour))
	n1 := s.client(t, s.token(t, auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, time.Hour))

	// The node protocol and reads are not recorded.
	if _, err := root.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	if err := n1.Heartbeat(ctx, "n1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Events(ctx, "n1", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Assignments(ctx, "n1", 0, 0); err != nil {
		t.Fatal(err)
	}

	js := jobSpec("audited")
	sub, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Job(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Jobs(ctx, api.JobFilter{}); err != nil {
		t.Fatal(err)
	}
	_, err = bob.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{})
	wantStatus(t, "bob cancels alice's job", err, 403, spec.ErrPermissionDenied, "belongs to alice")
	if _, err := alice.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.NodeAction(ctx, "n1", "drain", api.NodeActionRequest{Reason: "maint"}); err != nil {
		t.Fatal(err)
	}

	got := waitAudit(t, root, 4)
	for i := range got {
		if got[i].Time.IsZero() {
			t.Errorf("entry %d has no time", i)
		}
		got[i].Time = time.Time{}
		if strings.HasPrefix(got[i].Origin, "127.0.0.1:") {
			got[i].Origin = "127.0.0.1:PORT"
		}
		if strings.HasPrefix(got[i].Result, "403 ") && strings.Contains(got[i].Result, "belongs to alice") {
			got[i].Result = "403 …belongs to alice…"
		}
	}
	id := "job " + strconv.FormatUint(uint64(sub.ID), 10)
	want := []api.AuditEntry{
		{ActorUID: 1001, ActorName: "alice", Role: "user", Origin: "127.0.0.1:PORT", Action: "POST /v1/jobs", Target: id, Result: "200 ok"},
		{ActorUID: 1002, ActorName: "bob", Role: "user", Origin: "127.0.0.1:PORT", Action: "POST /v1/jobs/{id}/cancel", Target: id, Result: "403 …belongs to alice…"},
		{ActorUID: 1001, ActorName: "alice", Role: "user", Origin: "127.0.0.1:PORT", Action: "POST /v1/jobs/{id}/cancel", Target: id, Result: "200 ok"},
		{ActorUID: 0, ActorName: "root", Role: "admin", Origin: "unix", Action: "POST /v1/nodes/{name}/drain", Target: "node n1", Result: "200 ok"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit log (-want +got):\n%s", diff)
	}

	// Filters, and who may read.
	if got, err := olga.Audit(ctx, api.AuditFilter{Actor: "bob"}); err != nil || len(got) != 1 || got[0].ActorName != "bob" {
		t.Errorf("operator lists bob's entries: %+v, %v", got, err)
	}
	if got, err := olga.Audit(ctx, api.AuditFilter{Action: "cancel", Limit: 1}); err != nil || len(got) != 1 || got[0].ActorName != "alice" {
		t.Errorf("operator lists the last cancel: %+v, %v", got, err)
	}
	_, err = alice.Audit(ctx, api.AuditFilter{})
	wantStatus(t, "user reads the audit log", err, 403, spec.ErrPermissionDenied, "operator role")
	_, err = n1.Audit(ctx, api.AuditFilter{})
	wantStatus(t, "node reads the audit log", err, 403, spec.ErrPermissionDenied, "operator role")
	_, err = olga.Audit(ctx, api.AuditFilter{Start: time.Unix(100, 0), End: time.Unix(50, 0)})
	wantStatus(t, "end before start", err, 400, spec.ErrInvalid, "before start")
}

func TestAuditUnavailable(t *testing.T) {
	s := secureServer(t)
	_, err := client(t, s.unix).Audit(ctxT(t), api.AuditFilter{})
	wantStatus(t, "audit without a log", err, 503, spec.ErrUnavailable, "no audit log")
}

// BenchmarkSubmitParallel8Audited is BenchmarkSubmitParallel8 with the
// audit log on: each submission waits for its entry and its outcome to be
// written (group commit).
func BenchmarkSubmitParallel8Audited(b *testing.B) {
	db, err := accounting.Open(filepath.Join(b.TempDir(), "accounting.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	var dropped atomic.Int64
	addr, _, _ := servertest.Start(b, nil, servertest.Options{ServerOptions: []server.Option{
		server.WithAudit(db, func(n int) { dropped.Add(int64(n)) })}})
	submitParallel8(b, addr, false)
	b.ReportMetric(float64(dropped.Load()), "dropped")
}

// TestAuditRefusalsAndAppendOnly: requests refused before they have an
// identity (no, a forged, an expired, a revoked token) are audited as
// "unidentified" with their origin: the first of each kind from an
// address on its own, the rest of the minute in one summary row; the log
// cannot be changed through the API.
func TestAuditRefusalsAndAppendOnly(t *testing.T) {
	db := openAcct(t)
	alice := auth.Claims{User: "alice", UID: 1001, GID: 1001}
	s := secureServer(t, server.WithAudit(db, nil), server.WithRevoked([]string{"not-a-real-id"}))
	ctx := ctxT(t)
	root := client(t, s.unix)

	tok := s.token(t, alice, time.Hour)
	vc, err := s.keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	revoked := vc.ID
	other, _ := auth.NewKeys([]byte(strings.Repeat("x", 32)), "test")
	forged, _ := other.Issue(alice, time.Hour)
	for _, tc := range []struct{ what, tok, msg string }{
		{"no token", "", "a bearer token is required"},
		{"forged token", forged, "token refused"},
		{"expired token", s.expired(t, alice), "expired"},
		{"forged again", forged, "token refused"},
		{"forged a third time", forged, "token refused"},
	} {
		_, err := s.client(t, tc.tok).Submit(ctx, api.SubmitRequest{Job: jobSpec("x")})
		wantStatus(t, tc.what, err, 401, spec.ErrPermissionDenied, tc.msg)
	}
	got := waitAudit(t, root, 4)
	if len(got) != 4 {
		t.Fatalf("audit has %d entries, want 4 (3 kinds, one summary): %+v", len(got), got)
	}
	for i, want := range []string{"a bearer token is required", "token refused", "expired", "2 more refused like this"} {
		e := got[i]
		if e.ActorName != "unidentified" || e.ActorUID != math.MaxUint32 || !strings.HasPrefix(e.Origin, "127.0.0.1") ||
			!strings.HasPrefix(e.Result, "401 ") || !strings.Contains(e.Result, want) {
			t.Errorf("entry %d = %+v; want an unidentified 401 from 127.0.0.1 saying %q", i, e, want)
		}
	}
	if e := got[3]; e.Summarised != 2 || e.Action != "refused before authentication (bad_token)" || !strings.Contains(e.Result, "token refused") {
		t.Errorf("summary = %+v; want 2 forged-token refusals summarised, with the first's message", e)
	}
	if got[0].Action != "POST /v1/jobs" {
		t.Errorf("first refusal's action = %q; want the method and path sent", got[0].Action)
	}

	// Revoked: a valid token whose ID is listed is refused, and audited.
	if _, err := s.client(t, tok).Jobs(ctx, api.JobFilter{}); err != nil {
		t.Fatalf("before revocation: %v", err)
	}
	s.srv.SetRevoked([]string{revoked})
	_, err = s.client(t, tok).Jobs(ctx, api.JobFilter{})
	wantStatus(t, "revoked token", err, 401, spec.ErrPermissionDenied, "revoked")
	if got := waitAudit(t, root, 5); len(got) != 5 || !strings.Contains(got[4].Result, "was revoked") || got[4].Action != "GET /v1/jobs" {
		t.Errorf("revoked token audit = %+v", got)
	}

	// Append-only: no method but GET reaches the log, even for root.
	for _, m := range []string{http.MethodDelete, http.MethodPost, http.MethodPut, http.MethodPatch} {
		req, _ := http.NewRequestWithContext(ctx, m, "http://gpud/v1/audit", nil)
		resp, err := unixHTTP(s.unix).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s /v1/audit as root: status %d, want 404 or 405 (no such route)", m, resp.StatusCode)
		}
	}
	if got := waitAudit(t, root, 5); len(got) != 5 {
		t.Errorf("audit changed to %d entries after write attempts: %+v", len(got), got)
	}
}

// unixHTTP is an HTTP client that dials the unix socket of addr
// ("unix:///path").
func unixHTTP(addr string) *http.Client {
	path := strings.TrimPrefix(addr, "unix://")
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}
