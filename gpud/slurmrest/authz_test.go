package slurmrest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/auth"
)

// v1 sends a /v1 request as the token's user (none: anonymous) and
// returns its status.
func (c *cluster) v1(t testing.TB, token, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.https+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// TestAuthorizationTable: for each route of Slurm's API with a /v1
// counterpart, anonymous, another user, the job's owner, an operator and
// an admin get the same answer (status) from both APIs, every route
// validated against Slurm's document; another user sees the job without
// its paths, as on /v1 (privacy).
func TestAuthorizationTable(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	callers := []struct {
		name string
		tok  string
	}{
		{"anonymous", ""},
		{"other user", c.token(t, bob)},
		{"owner", c.token(t, alice)},
		{"operator", c.token(t, olga)},
		{"admin", c.token(t, ada)},
	}
	owner := c.token(t, alice)
	// A pending job of alice's for each call, so that no call sees
	// another's effect.
	newJob := func(t *testing.T) string {
		a := c.call(t, owner, "POST", "/slurm/v0.0.45/job/submit", submitBody("authz", map[string]any{"begin_time": map[string]any{"set": true, "number": time.Now().Add(time.Hour).Unix()}}))
		if a.status != 200 {
			t.Fatalf("submit: %d %s", a.status, a.raw)
		}
		return fmt.Sprint(a.body["job_id"])
	}
	routes := []struct {
		name         string
		method, path string
		body         any
		v1Method, v1 string
		v1Body       any
	}{
		{"list jobs", "GET", "/slurm/v0.0.45/jobs/", nil, "GET", "/v1/jobs", nil},
		{"show job", "GET", "/slurm/v0.0.45/job/{id}", nil, "GET", "/v1/jobs/{id}", nil},
		{"job state", "GET", "/slurm/v0.0.45/jobs/state/?job_id={id}", nil, "GET", "/v1/jobs?id={id}", nil},
		{"lower time limit", "POST", "/slurm/v0.0.45/job/{id}", map[string]any{"time_limit": map[string]any{"set": true, "number": 10}}, "PATCH", "/v1/jobs/{id}", map[string]any{"time_limit": 600}},
		{"raise time limit", "POST", "/slurm/v0.0.45/job/{id}", map[string]any{"time_limit": map[string]any{"set": true, "number": 600}}, "PATCH", "/v1/jobs/{id}", map[string]any{"time_limit": 36000}},
		{"hold", "POST", "/slurm/v0.0.42/job/{id}", map[string]any{"hold": true}, "POST", "/v1/jobs/{id}/hold", map[string]any{}},
		{"cancel", "DELETE", "/slurm/v0.0.45/job/{id}", nil, "POST", "/v1/jobs/{id}/cancel", map[string]any{}},
		{"signal", "DELETE", "/slurm/v0.0.43/job/{id}?signal=USR1", nil, "POST", "/v1/jobs/{id}/cancel", map[string]any{"signal": "USR1"}},
		{"requeue", "GET", "/slurm/v0.0.45/job/{id}/requeue", nil, "POST", "/v1/jobs/{id}/requeue", map[string]any{}},
		{"submit", "POST", "/slurm/v0.0.44/job/submit", submitBody("s", nil), "POST", "/v1/jobs", map[string]any{"job": map[string]any{"name": "s", "script": "#!/bin/sh\n", "work_dir": "/tmp", "resources": map[string]any{"nodes": 1}}}},
		{"nodes", "GET", "/slurm/v0.0.45/nodes/", nil, "GET", "/v1/nodes", nil},
		{"drain node", "POST", "/slurm/v0.0.45/node/gpu02", map[string]any{"state": []string{"DRAIN"}, "reason": "t"}, "POST", "/v1/nodes/gpu02/drain", map[string]any{"reason": "t"}},
		{"resume node", "POST", "/slurm/v0.0.42/node/gpu02", map[string]any{"state": []string{"RESUME"}}, "POST", "/v1/nodes/gpu02/resume", map[string]any{}},
		{"partitions", "GET", "/slurm/v0.0.45/partitions/", nil, "GET", "/v1/partitions", nil},
		{"reconfigure", "GET", "/slurm/v0.0.45/reconfigure/", nil, "POST", "/v1/reconfigure", map[string]any{}},
		{"shares", "GET", "/slurm/v0.0.45/shares", nil, "GET", "/v1/fairshare", nil},
		{"accounting record", "GET", "/slurmdb/v0.0.45/job/{id}", nil, "GET", "/v1/accounting/jobs?id={id}", nil},
		{"accounting jobs", "GET", "/slurmdb/v0.0.44/jobs/?users=alice", nil, "GET", "/v1/accounting/jobs?user=alice", nil},
		{"accounts", "GET", "/slurmdb/v0.0.45/accounts/", nil, "GET", "/v1/associations", nil},
		{"diag", "GET", "/slurm/v0.0.45/diag/", nil, "GET", "/v1/jobs?view=brief", nil},
	}
	for _, rt := range routes {
		for _, who := range callers {
			t.Run(rt.name+"/"+who.name, func(t *testing.T) {
				sub := func(p string) string { return strings.ReplaceAll(p, "{id}", newJob(t)) }
				a := c.call(t, who.tok, rt.method, sub(rt.path), rt.body)
				v1Status, v1Body := c.v1(t, who.tok, rt.v1Method, sub(rt.v1), rt.v1Body)
				// A job that no longer exists on one side is the same answer
				// as long as the refusal is: compare statuses.
				got, want := a.status, v1Status
				if got != want {
					t.Errorf("%s %s as %s: %d %s; /v1 %s %s: %d %s", rt.method, rt.path, who.name, got, clipBody(a.raw), rt.v1Method, rt.v1, want, clipBody(v1Body))
				}
			})
		}
	}

	// Privacy: another user sees alice's job without its paths, the owner
	// with them, on both APIs.
	id := newJob(t)
	for _, who := range []auth.Claims{bob, alice, olga} {
		a := c.call(t, c.token(t, who), "GET", "/slurm/v0.0.45/job/"+id, nil)
		jobs, _ := a.body["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("%s: %s", who.User, a.raw)
		}
		cwd := jobs[0].(map[string]any)["current_working_directory"]
		want := "/tmp"
		if who.User == "bob" {
			want = ""
		}
		if cwd != want {
			t.Errorf("%s sees alice's job with current_working_directory %q; want %q", who.User, cwd, want)
		}
	}
}

// TestScontrolToken: POST /v1/token (scontrol token) issues the socket's
// user a token that Slurm's API takes; over TCP, where the caller is a
// token, it issues none, so no token mints tokens. On the socket a token
// of another user acts as that user only for root (a proxy).
func TestScontrolToken(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	ctx := context.Background()
	tok, err := c.root.UserToken(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(tok.Expires) > 11*time.Minute || time.Until(tok.Expires) < 9*time.Minute {
		t.Errorf("token expires %s; want in 10 minutes", tok.Expires)
	}
	a := c.call(t, tok.Token, "GET", "/slurm/v0.0.45/diag/", nil)
	if a.status != 200 || a.body["meta"].(map[string]any)["client"].(map[string]any)["user"] != "root" {
		t.Errorf("diag with the token: %d %s; want 200 for root", a.status, clipBody(a.raw))
	}
	st, body := c.v1(t, c.token(t, alice), "POST", "/v1/token", map[string]any{"lifespan": 60})
	if st != http.StatusForbidden || !strings.Contains(string(body), "unix socket") {
		t.Errorf("token over TCP: %d %s; want 403 naming the unix socket", st, body)
	}
	if _, err := c.root.UserToken(ctx, 48*time.Hour*400); err == nil {
		t.Error("a token of 400 days was issued")
	}
	// X-SLURM-USER-NAME must be the token's user.
	req, _ := http.NewRequest("GET", c.https+"/slurm/v0.0.45/ping/", nil)
	req.Header.Set("X-SLURM-USER-TOKEN", c.token(t, alice))
	req.Header.Set("X-SLURM-USER-NAME", "bob")
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("alice's token with X-SLURM-USER-NAME bob: %d; want 401", resp.StatusCode)
	}
}

// TestProbes: /livez, /readyz and /healthz answer ok without a token, as
// slurmrestd's do for Kubernetes probes; Slurm's API itself needs one.
func TestProbes(t *testing.T) {
	c := startCluster(t)
	for _, p := range []string{"/livez", "/readyz", "/healthz"} {
		st, body := c.v1(t, "", "GET", p, nil)
		if st != 200 || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("GET %s without a token: %d %q; want 200 ok", p, st, body)
		}
	}
	if st, _ := c.v1(t, "", "GET", "/slurm/v0.0.45/ping/", nil); st != http.StatusUnauthorized {
		t.Errorf("ping without a token: %d; want 401", st)
	}
}
