package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// secureServer serves over the unix socket and over TLS with tokens;
// olga is an operator. It returns both addresses, the CA file and the
// token keys.
type secure struct {
	unix, https, ca string
	keys            *auth.Keys
	srv             *server.Server
}

func secureServer(t *testing.T, opts ...server.Option) secure {
	t.Helper()
	return secureServerWith(t, nil, opts...)
}

func (s secure) token(t *testing.T, c auth.Claims, ttl time.Duration) string {
	t.Helper()
	tok, err := s.keys.Issue(c, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (s secure) client(t *testing.T, tok string) *api.Client {
	t.Helper()
	t.Setenv("HOME", t.TempDir()) // no stray ~/.config/gpud
	t.Setenv(api.EnvToken, "")
	c, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantStatus(t *testing.T, what string, err error, status int, kind error, text string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != status || (kind != nil && !errors.Is(err, kind)) || !strings.Contains(ae.Message, text) {
		t.Errorf("%s: err = %v (%#v); want status %d, kind %v, message with %q", what, err, ae, status, kind, text)
	}
}

func TestTCPNeedsTLSAndToken(t *testing.T) {
	s := secureServer(t)
	ctx := ctxT(t)
	alice := auth.Claims{User: "alice", UID: 1001, GID: 1001}

	// No token, expired token, forged token: 401 saying how to get one.
	_, err := s.client(t, "").Jobs(ctx, api.JobFilter{})
	wantStatus(t, "no token", err, 401, spec.ErrPermissionDenied, "gpud token issue")
	other, _ := auth.NewKeys([]byte(strings.Repeat("x", 32)), "test")
	forged, _ := other.Issue(alice, time.Hour)
	_, err = s.client(t, forged).Jobs(ctx, api.JobFilter{})
	wantStatus(t, "forged token", err, 401, spec.ErrPermissionDenied, "token refused")
	exp := s.expired(t, alice)
	_, err = s.client(t, exp).Jobs(ctx, api.JobFilter{})
	wantStatus(t, "expired token", err, 401, spec.ErrPermissionDenied, "expired")

	// Plain HTTP to the TLS port: refused by the TLS layer.
	plain, err := api.NewClient(strings.Replace(s.https, "https://", "http://", 1))
	if err != nil {
		t.Fatal(err)
	}
	_, err = plain.Jobs(ctx, api.JobFilter{})
	wantStatus(t, "plain http", err, 400, nil, "HTTPS")

	// A client that does not trust the CA: TLS verification fails.
	untrusting, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: writeSelfCA(t), Token: s.token(t, alice, time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := untrusting.Jobs(ctx, api.JobFilter{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted CA: err = %v; want a certificate error", err)
	}

	// TLS 1.1: refused in the handshake.
	host := strings.TrimPrefix(s.https, "https://")
	if c, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // the point of the test
		c.Close()
		t.Error("TLS 1.1 handshake succeeded")
	}

	// A valid token: the caller is the token's user and uid.
	c := s.client(t, s.token(t, alice, time.Hour))
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("remote")})
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Job(ctx, sub.ID)
	if err != nil || j.User != "alice" || j.UID != 1001 || j.GID != 1001 {
		t.Errorf("remote job = %s uid %d gid %d, %v; want alice 1001 1001", j.User, j.UID, j.GID, err)
	}
	// healthz needs no token.
	resp, err := untrustedHTTPS().Get(s.https + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz over TLS without token: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// expired issues a token whose expiry lies beyond the skew in the past.
func (s secure) expired(t *testing.T, c auth.Claims) string {
	t.Helper()
	past := time.Now().Add(-2 * time.Hour)
	k, err := auth.LoadKeys(filepath.Join(filepath.Dir(s.ca), "..", "token.key"), "test", auth.WithClock(func() time.Time { return past }))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := k.Issue(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func untrustedHTTPS() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // healthz only
}

func writeSelfCA(t *testing.T) string {
	t.Helper()
	f, err := auth.EnsureTLS(filepath.Join(t.TempDir(), "other"), "other", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return f.CA
}

func TestRoles(t *testing.T) {
	s := secureServer(t)
	ctx := ctxT(t)
	root := client(t, s.unix)
	if _, err := root.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Register(ctx, inventory("n2", 2)); err != nil {
		t.Fatal(err)
	}
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, GID: 1002}, time.Hour))
	// bob's token claims admin, but the config grants him nothing.
	bobAdmin := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002, Role: auth.RoleAdmin}, time.Hour))
	olga := s.client(t, s.token(t, auth.Claims{User: "olga", UID: 1003, Role: auth.RoleOperator}, time.Hour))
	// olga's user-role token is a ceiling below her grant.
	olgaUser := s.client(t, s.token(t, auth.Claims{User: "olga", UID: 1003}, time.Hour))
	n1 := s.client(t, s.token(t, auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, time.Hour))

	js := jobSpec("secret")
	js.Env = []string{"API_KEY=hunter2"}
	js.Output = "/home/alice/out-%j"
	js.Resources.GPUsPerNode = 2
	js.Resources.NodeList = []string{"n2"}
	sub, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}

	// bob: cannot see alice's script/env/paths, nor cancel or hold her job.
	j, err := bob.Job(ctx, sub.ID)
	if err != nil || j.Script != "" || j.Env != nil || j.StdoutPath != "" || j.Output != "" || j.WorkDir != "" || j.Name != "secret" {
		t.Errorf("bob's view of alice's job: %+v, %v; want name only, no script/env/paths", j.JobSpec, err)
	}
	list, err := bob.Jobs(ctx, api.JobFilter{})
	if err != nil || len(list) != 1 || list[0].StdoutPath != "" || list[0].WorkDir != "" || list[0].User != "alice" {
		t.Errorf("bob's list: %+v, %v; want alice's job without paths", list, err)
	}
	for _, action := range []string{"cancel", "hold"} {
		_, err = bob.JobAction(ctx, sub.ID, action, api.JobActionRequest{})
		wantStatus(t, "bob "+action+"s alice's job", err, 403, spec.ErrPermissionDenied, "belongs to alice")
		_, err = bobAdmin.JobAction(ctx, sub.ID, action, api.JobActionRequest{})
		wantStatus(t, "bob (admin claim) "+action+"s", err, 403, spec.ErrPermissionDenied, "belongs to alice")
	}
	// alice sees her own job in full.
	if j, err := alice.Job(ctx, sub.ID); err != nil || j.Script == "" || j.Env == nil || j.StdoutPath == "" {
		t.Errorf("alice's own job redacted: %+v, %v", j.JobSpec, err)
	}
	if list, err := alice.Jobs(ctx, api.JobFilter{}); err != nil || len(list) != 1 || list[0].StdoutPath == "" {
		t.Errorf("alice's own list entry: %+v, %v; want full", list, err)
	}

	// Node actions and reconfigure: operator or more.
	_, err = bob.NodeAction(ctx, "n1", "drain", api.NodeActionRequest{Reason: "x"})
	wantStatus(t, "user drains", err, 403, spec.ErrPermissionDenied, "needs the operator role")
	_, err = bobAdmin.Reconfigure(ctx)
	wantStatus(t, "user (admin claim) reconfigures", err, 403, spec.ErrPermissionDenied, "needs the operator role")
	_, err = olgaUser.NodeAction(ctx, "n1", "drain", api.NodeActionRequest{Reason: "x"})
	wantStatus(t, "operator with a user token drains", err, 403, spec.ErrPermissionDenied, "operator role")
	if n, err := olga.NodeAction(ctx, "n1", "drain", api.NodeActionRequest{Reason: "maint"}); err != nil || n.State != spec.NodeDrain {
		t.Errorf("operator drain = %v, %v", n.State, err)
	}
	if _, err := olga.NodeAction(ctx, "n1", "resume", api.NodeActionRequest{}); err != nil {
		t.Errorf("operator resume: %v", err)
	}
	if j, err := olga.Job(ctx, sub.ID); err != nil || j.Script == "" {
		t.Errorf("operator's view redacted: %v", err)
	}

	// Users may not speak the node protocol; nodes only for themselves.
	err = alice.Heartbeat(ctx, "n1", nil)
	wantStatus(t, "user heartbeats", err, 403, spec.ErrPermissionDenied, "node token")
	if err := n1.Heartbeat(ctx, "n1", nil); err != nil {
		t.Errorf("n1 heartbeat: %v", err)
	}
	err = n1.Heartbeat(ctx, "n2", nil)
	wantStatus(t, "n1 heartbeats as n2", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	_, err = n1.Register(ctx, inventory("n2", 8))
	wantStatus(t, "n1 registers as n2", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	_, err = n1.Assignments(ctx, "n2", 0, 0)
	wantStatus(t, "n1 polls n2", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	_, err = n1.Submit(ctx, api.SubmitRequest{Job: jobSpec("x")})
	wantStatus(t, "node submits", err, 403, spec.ErrPermissionDenied, "node protocol")
	_, err = n1.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{})
	wantStatus(t, "node cancels", err, 403, spec.ErrPermissionDenied, "node protocol")

	// alice's job runs on n2; n1 reports it failed, through its own
	// endpoint and through n2's.
	a := waitAssignment(t, root, "n2", func(a api.Assignment) bool { return a.Job.ID == sub.ID })
	ev := api.AllocEvent{Seq: 1, AllocID: a.Alloc.ID, JobID: sub.ID, Kind: api.EventExited, State: spec.StateFailed, ExitCode: 1}
	if _, err := n1.Events(ctx, "n1", []api.AllocEvent{ev}); err != nil {
		t.Errorf("n1 events (stale for n1, acknowledged and ignored): %v", err)
	}
	_, err = n1.Events(ctx, "n2", []api.AllocEvent{ev})
	wantStatus(t, "n1 posts n2's events", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	ev.Node = "n2"
	_, err = n1.Events(ctx, "n1", []api.AllocEvent{ev})
	wantStatus(t, "n1 posts an event naming n2", err, 400, spec.ErrInvalid, "names node")
	if j, err := root.Job(ctx, sub.ID); err != nil || j.State != spec.StateRunning {
		t.Errorf("alice's job after n1's forged events: %s, %v; want RUNNING", j.State, err)
	}
	// An operator may cancel anyone's job.
	if j, err := olga.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{}); err != nil || !strings.Contains(j.StopReason+j.Reason, "olga") {
		t.Errorf("operator cancel = %q %q, %v; want a reason naming olga", j.Reason, j.StopReason, err)
	}
}

func TestSubmitRateLimit(t *testing.T) {
	now := time.Unix(1e9, 0)
	s := secureServer(t, server.WithSubmitRate(1, 2), server.WithClock(func() time.Time { return now }))
	ctx := ctxT(t)
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001}, time.Hour))
	bob := s.client(t, s.token(t, auth.Claims{User: "bob", UID: 1002}, time.Hour))
	var first spec.JobID
	for i := range 2 {
		sub, err := alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")})
		if err != nil {
			t.Fatalf("submission %d within the burst: %v", i, err)
		}
		first = sub.ID
	}
	_, err := alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")})
	wantStatus(t, "over the rate", err, 429, spec.ErrRefused, "rate limit")
	// Updates share the bucket (issue 24, hole 6: updating each task of
	// an array was free).
	comment := "c"
	_, err = alice.UpdateJob(ctx, spec.JobRef{ID: first}, api.JobUpdateRequest{Comment: &comment})
	wantStatus(t, "update over the rate", err, 429, spec.ErrRefused, "rate limit of submissions and updates")
	if _, err := bob.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")}); err != nil {
		t.Errorf("bob limited by alice's bucket: %v", err)
	}
	// root on the socket is never limited.
	root := client(t, s.unix)
	for range 5 {
		if _, err := root.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")}); err != nil {
			t.Fatalf("root limited: %v", err)
		}
	}
	// Retry-After is there, raw.
	req, _ := http.NewRequest(http.MethodPost, s.https+"/v1/jobs", strings.NewReader(`{"job":{}}`))
	req.Header.Set("Authorization", "Bearer "+s.token(t, auth.Claims{User: "alice", UID: 1001}, time.Hour))
	resp, err := untrustedHTTPS().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("raw over-rate submit: %d Retry-After %q; want 429 and 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	now = now.Add(time.Second)
	if _, err := alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")}); err != nil {
		t.Errorf("after a second: %v", err)
	}
}

// TestHostileInput posts bad bodies through the unix socket as root.
func TestHostileInput(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	sock := strings.TrimPrefix(addr, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	job := func(fields string) string {
		return `{"job":{"script":"echo hi\n","work_dir":"/tmp"` + fields + `}}`
	}
	deep := strings.Repeat(`{"job":`, 1) + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}"
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown field", "/v1/jobs", job(`,"uid":0`), 400, "unknown field"},
		{"10 MB name", "/v1/jobs", job(`,"name":"` + strings.Repeat("a", 10<<20) + `"`), 413, "over 4 MiB"},
		{"1 KB name", "/v1/jobs", job(`,"name":"` + strings.Repeat("a", 1024) + `"`), 400, "at most 256"},
		{"NUL in name", "/v1/jobs", job(`,"name":"a\u0000b"`), 400, "NUL byte"},
		{"NUL in script", "/v1/jobs", `{"job":{"script":"echo\u0000hi","work_dir":"/tmp"}}`, 400, "NUL byte"},
		{"escape in name", "/v1/jobs", job(`,"name":"\u001b]0;pwned\u0007"`), 400, "control character"},
		{"invalid UTF-8 in script", "/v1/jobs", "{\"job\":{\"script\":\"echo \xff\xfe\",\"work_dir\":\"/tmp\"}}", 400, "not valid UTF-8"},
		{"traversal in output", "/v1/jobs", job(`,"output":"../../etc/x"`), 400, "'..' component"},
		{"absolute traversal", "/v1/jobs", job(`,"output":"/home/bob/../alice/x"`), 400, "'..' component"},
		{"10^9 nodes", "/v1/jobs", job(`,"resources":{"nodes":1000000000}`), 400, "exceeds the limit"},
		{"negative GPUs", "/v1/jobs", job(`,"resources":{"gpus_per_node":-1}`), 400, "must not be negative"},
		{"2^62 CPUs", "/v1/jobs", job(`,"resources":{"cpus_per_node":4611686018427387904}`), 400, "absurd"},
		{"int overflow", "/v1/jobs", job(`,"resources":{"nodes":99999999999999999999}`), 400, "bad JSON"},
		{"env without =", "/v1/jobs", job(`,"env":["PATH"]`), 400, "not KEY=VALUE"},
		{"deep nesting", "/v1/jobs", deep, 400, "bad JSON"},
		{"two objects", "/v1/jobs", job(``) + job(``), 400, "data after"},
		{"node name with NUL", "/v1/nodes/register", `{"inventory":{"name":"n\u0000","cpus":1}}`, 400, "NUL byte"},
		{"10^6 events", "/v1/nodes/n1/events", `{"events":[` + strings.Repeat(`{},`, 1001) + `{}]}`, 400, "at most 1000"},
		// No such job: refused before the body is read.
		{"reason escape, no job", "/v1/jobs/1/cancel", `{"reason":"\u001b[2J"}`, 404, "not found"},
		// Hole 6: the comment carried ESC and BEL into gpuq show.
		{"escape in comment", "/v1/jobs", job(`,"comment":"\u001b]0;pwned\u0007"`), 400, "--comment"},
		{"C1 CSI in comment", "/v1/jobs", job(`,"comment":"a\u009b2J"`), 400, "control character"},
		{"newline in comment", "/v1/jobs", job(`,"comment":"a\nb"`), 400, "control character"},
		{"escape in argument", "/v1/jobs", job(`,"args":["ok","\u001b[2J"]`), 400, "args[1]"},
		{"escape in constraint", "/v1/jobs", job(`,"resources":{"constraint":"a\u001b"}`), 400, "control character"},
		{"escape in GPU model of a node", "/v1/nodes/register", `{"inventory":{"name":"n1","cpus":1,"gpus":[{"uuid":"GPU-1","model":"h\u001b[2J"}]}}`, 400, "control character"},
		{"drain reason escape", "/v1/nodes/n1/drain", `{"reason":"\u0007"}`, 400, "control character"},
		// Hole 10: a time limit of 2^63-1 seconds wrapped to -1s.
		{"time limit 2^63-1 s", "/v1/jobs", job(`,"time_limit":9223372036854775807`), 400, "out of range"},
		{"time limit 1.8e10 s", "/v1/jobs", job(`,"time_limit":18000000000`), 400, "out of range"},
		{"time limit 200 years", "/v1/jobs", job(`,"time_limit":6311520000`), 400, "--time=6311520000s is out of range"},
		{"negative time limit", "/v1/jobs", job(`,"time_limit":-60`), 400, "--time=-60s is out of range"},
		{"checkpoint interval 2^40 s", "/v1/jobs", job(`,"checkpoint_interval":1099511627776`), 400, "checkpoint_interval of type spec.Duration"},
		{"checkpoint interval 10^10 s", "/v1/jobs", job(`,"checkpoint_interval":9000000000`), 400, "--checkpoint-interval=9000000000s is out of range"},
		{"begin in year 9999", "/v1/jobs", job(`,"begin_time":"9999-01-01T00:00:00Z"`), 400, "--begin"},
		{"begin before 1970", "/v1/jobs", job(`,"begin_time":"0001-01-01T00:00:01Z"`), 400, "--begin"},
		{"nice 2^40", "/v1/jobs", job(`,"nice":1099511627776`), 400, "--nice"},
		{"mem 2^50 MiB", "/v1/jobs", job(`,"resources":{"mem_mib_per_node":1125899906842624}`), 400, "--mem"},
		{"rdma 2^40", "/v1/jobs", job(`,"resources":{"rdma":1099511627776}`), 400, "--rdma"},
		{"array index 2^63-1", "/v1/jobs", job(`,"array":"9223372036854775807"`), 400, "largest task index"},
		{"node mem 2^50 MiB", "/v1/nodes/register", `{"inventory":{"name":"n1","cpus":1,"mem_mib":1125899906842624}}`, 400, "mem_mib"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := hc.Post("http://gpud"+tc.path, "application/json", bytes.NewReader([]byte(tc.body)))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.want) {
				t.Errorf("%d %.300s; want %d with %q", resp.StatusCode, b, tc.status, tc.want)
			}
		})
	}
}

func TestClientRefusesPlainRemoteHTTP(t *testing.T) {
	for _, addr := range []string{"http://10.0.0.1:6817", "http://ctl.example:80", "ftp://x"} {
		if _, err := api.NewClient(addr); err == nil {
			t.Errorf("NewClient(%q) accepted", addr)
		}
	}
	for _, addr := range []string{"http://127.0.0.1:1", "http://[::1]:1", "http://localhost:1"} {
		if _, err := api.NewClient(addr); err != nil {
			t.Errorf("NewClient(%q): %v", addr, err)
		}
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("# from gpud token issue\n\nabc.def.ghi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := api.ReadTokenFile(path); err != nil || tok != "abc.def.ghi" {
		t.Errorf("ReadTokenFile = %q, %v", tok, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ReadTokenFile(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable token file: %v", err)
	}
}
