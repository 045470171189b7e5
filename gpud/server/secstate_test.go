package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// testTLS makes, in a fresh temporary directory, what a secure test
// server needs: the cluster CA and a server certificate for 127.0.0.1
// (files, and the server's TLS config from them) and the token signing
// keys. secureServerWith and joinServer set up alike through it.
func testTLS(t testing.TB) (auth.Files, *tls.Config, *auth.Keys) {
	t.Helper()
	dir := t.TempDir()
	files, err := auth.EnsureTLS(filepath.Join(dir, "tls"), "test", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := auth.ServerTLS(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeys(filepath.Join(dir, "token.key"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return files, tlsCfg, keys
}

// secureServerWith is secureServer with a controller config change
// (cfgFn nil: the defaults); secureServer calls it with nil.
func secureServerWith(t testing.TB, cfgFn func(*controller.Config), opts ...server.Option) secure {
	t.Helper()
	files, tlsCfg, keys := testTLS(t)
	s := secure{ca: files.CA, keys: keys}
	o := servertest.Options{
		ServerOptions: append([]server.Option{server.WithTokens(keys), server.WithRoles([]string{"olga"}, nil)}, opts...),
		TLS:           tlsCfg, TLSAddr: &s.https, Server: &s.srv,
	}
	s.unix, _, _ = servertest.Start(t, cfgFn, o)
	return s
}

// TestSecretsNeverStored (hole 7): a submission over TCP whose
// environment carries the submitter's GPUD_TOKEN and a variable the site
// lists in secret_env is stored without them; nobody, not the owner nor
// an operator, gets them back. A variable the site lists only later (a
// reload) is masked in an operator's view of a job stored before, and
// shown to its owner. Before the fix the stored job held the token and
// GET /v1/jobs/N showed it to operators.
func TestSecretsNeverStored(t *testing.T) {
	s := secureServerWith(t, func(c *controller.Config) { c.SecretEnv = []string{"AWS_SECRET_ACCESS_KEY"} },
		server.WithSecretEnv([]string{"AWS_SECRET_ACCESS_KEY"}))
	ctx := ctxT(t)
	aliceTok := s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	alice := s.client(t, aliceTok)
	olga := s.client(t, s.token(t, auth.Claims{User: "olga", UID: 1003, Role: auth.RoleOperator}, time.Hour))
	root := client(t, s.unix)

	js := jobSpec("env")
	js.Env = []string{"PATH=/bin", "GPUD_TOKEN=" + aliceTok, "GPUD_JOIN_TOKEN=j", "AWS_SECRET_ACCESS_KEY=abc", "VAULT_NAMESPACE=ns",
		"SECRET_PASSWORD=hunter2", "GPUD_CONTROLLER=https://x"}
	sub, err := alice.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	// Stored for the job (its owner sees it): all but the credentials
	// and the site's secret_env. Shown to others: a name that looks like
	// a secret's masked (issue 24: operators saw SECRET_PASSWORD).
	stored := []string{"PATH=/bin", "VAULT_NAMESPACE=ns", "SECRET_PASSWORD=hunter2", "GPUD_CONTROLLER=https://x"}
	shown := []string{"PATH=/bin", "VAULT_NAMESPACE=ns", "SECRET_PASSWORD=" + spec.MaskedValue, "GPUD_CONTROLLER=https://x"}
	for name, tc := range map[string]struct {
		c    *api.Client
		want []string
	}{"root": {root, shown}, "alice (owner)": {alice, stored}, "olga (operator)": {olga, shown}} {
		j, err := tc.c.Job(ctx, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(j.Env, tc.want) {
			t.Errorf("%s's view of the job's env = %q; want %q (no GPUD_TOKEN, GPUD_JOIN_TOKEN, AWS_SECRET_ACCESS_KEY)", name, j.Env, tc.want)
		}
	}
	// The site adds VAULT_* to secret_env and reloads: the stored value
	// is masked for the operator, not for its owner.
	s.srv.SetSecretEnv([]string{"AWS_SECRET_ACCESS_KEY", "VAULT_*"})
	if j, err := olga.Job(ctx, sub.ID); err != nil || !slices.Contains(j.Env, "VAULT_NAMESPACE="+spec.MaskedValue) || slices.Contains(j.Env, "VAULT_NAMESPACE=ns") {
		t.Errorf("operator's view after the reload: %q, %v; want VAULT_NAMESPACE masked", j.Env, err)
	}
	if j, err := alice.Job(ctx, sub.ID); err != nil || !slices.Contains(j.Env, "VAULT_NAMESPACE=ns") {
		t.Errorf("owner's view after the reload: %q, %v; want her own value", j.Env, err)
	}
}

// TestUsageOnlyFromOwnNode (hole 9): with n1's identity, usage samples
// for a job running on n2 and for a job that does not exist are
// acknowledged (so n1 stops re-sending) but never reach accounting; n2's
// own sample does, and after a requeue n2 may still report its earlier
// attempt (checked against accounting's attempts) while n1 may not.
// Before the fix n1's sample made the job on n2 use 1,000,000 kWh.
func TestUsageOnlyFromOwnNode(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	rec := func(id spec.JobID, node string) spec.Job {
		return spec.Job{ID: id, JobSpec: spec.JobSpec{Name: "j", Account: "ml", Partition: "h100"}, User: "root", UID: 0,
			State: spec.StateRunning, SubmitTime: spec.NewTime(t0), StartTime: spec.NewTime(t0), Attempt: 1,
			Alloc: &spec.Alloc{ID: fmt.Sprintf("%d.1", id), JobID: id, Attempt: 1, StartTime: spec.NewTime(t0), Nodes: []spec.NodeAlloc{{Node: node, CPUs: 1}}}}
	}
	// Accounting knows job 1 (on n2) and a job 999 the controller never
	// had: a sample for either shows in its energy.
	db := openAcct(t, rec(1, "n2"), rec(999, "n1"))
	s := secureServerWith(t, nil, server.WithAccounting(db), server.WithUsageRecorder(db))
	ctx := ctxT(t)
	root := client(t, s.unix)
	for _, n := range []string{"n1", "n2"} {
		if _, err := root.Register(ctx, inventory(n, 1)); err != nil {
			t.Fatal(err)
		}
	}
	n1 := s.client(t, s.token(t, auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, time.Hour))
	n2 := s.client(t, s.token(t, auth.Claims{User: "n2", Role: auth.RoleNode, Node: "n2"}, time.Hour))
	js := jobSpec("on-n2")
	js.Resources.NodeList = []string{"n2"}
	sub, err := root.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil || sub.ID != 1 {
		t.Fatalf("submit = %+v, %v; want job 1", sub, err)
	}
	waitAssignment(t, root, "n2", func(a api.Assignment) bool { return a.Alloc.ID == "1.1" })

	seq := uint64(0)
	sample := func(node string, job spec.JobID, attempt int, kwh float64) api.AllocEvent {
		seq++
		end := t0.Add(time.Duration(seq) * time.Minute)
		return api.AllocEvent{Seq: seq, Node: node, AllocID: fmt.Sprintf("%d.%d", job, attempt), JobID: job, Kind: api.EventUsage, Time: spec.NewTime(end),
			Usage: &api.UsageSample{ID: fmt.Sprintf("%s/%d/%d", node, job, seq), Attempt: attempt, Start: spec.NewTime(end.Add(-time.Minute)),
				End: spec.NewTime(end), GPUs: 1, GPUUtilAvg: 50, GPUUtilMax: 50, PowerW: 100, EnergyJ: kwh * 3.6e6}}
	}
	energy := func() map[spec.JobID]float64 {
		t.Helper()
		got, err := root.AcctJobs(ctx, api.AcctFilter{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[spec.JobID]float64{}
		for _, j := range got {
			out[j.ID] = j.EnergyKWh
		}
		return out
	}
	ack, err := n1.Events(ctx, "n1", []api.AllocEvent{sample("n1", 1, 1, 1e6), sample("n1", 12345, 1, 1e6), sample("n1", 999, 1, 1e6)})
	if err != nil || ack.AckedSeq != seq {
		t.Fatalf("n1's forged samples: ack %+v, %v; want acknowledged (and dropped)", ack, err)
	}
	if e := energy(); e[1] != 0 || e[999] != 0 {
		t.Errorf("energy after n1's forged samples = %v; want none recorded", e)
	}
	if _, err := n2.Events(ctx, "n2", []api.AllocEvent{sample("n2", 1, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	if e := energy(); math.Abs(e[1]-2) > 1e-9 {
		t.Errorf("job 1's energy after n2's own sample = %v kWh; want 2", e[1])
	}
	// Requeue: attempt 2 starts on n2; a late sample of attempt 1 from n2
	// still counts, one from n1 does not, nor one for an attempt to come.
	if _, err := root.JobAction(ctx, 1, "requeue", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	stop := waitAssignment(t, root, "n2", func(a api.Assignment) bool { return a.Alloc.ID == "1.1" && a.Stop })
	seq++
	exit := api.AllocEvent{Seq: seq, Node: "n2", AllocID: "1.1", JobID: 1, Kind: api.EventExited, State: stop.StopState, ExitCode: 143, Reason: stop.StopReason}
	if _, err := n2.Events(ctx, "n2", []api.AllocEvent{exit}); err != nil {
		t.Fatal(err)
	}
	waitAssignment(t, root, "n2", func(a api.Assignment) bool { return a.Alloc.ID == "1.2" })
	if _, err := n1.Events(ctx, "n1", []api.AllocEvent{sample("n1", 1, 1, 1e6), sample("n1", 1, 2, 1e6)}); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.Events(ctx, "n2", []api.AllocEvent{sample("n2", 1, 1, 3), sample("n2", 1, 3, 1e6)}); err != nil {
		t.Fatal(err)
	}
	if e := energy(); math.Abs(e[1]-5) > 1e-9 {
		t.Errorf("job 1's energy after the requeue = %v kWh; want 5 (n2's two samples of attempt 1)", e[1])
	}
}

// TestRevokedNodeCert: a node certificate whose serial an admin lists in
// [auth] revoked_node_certs is refused from the next request (the list
// is applied on reload like revoked tokens); other nodes are not
// affected, and taking it off the list lets the node back.
func TestRevokedNodeCert(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	s := joinServer(t, joinToken)
	ctx := ctxT(t)
	n1, cert1 := joinWithCert(t, s, "n1", joinToken)
	n2, _ := joinWithCert(t, s, "n2", joinToken)
	for name, c := range map[string]*api.Client{"n1": n1, "n2": n2} {
		if _, err := c.Register(ctx, inventory(name, 1)); err != nil {
			t.Fatal(err)
		}
	}
	// As openssl prints it: upper case, colons between bytes.
	hexSerial := strings.ToUpper(fmt.Sprintf("%x", cert1.SerialNumber.Bytes()))
	var colons []string
	for i := 0; i < len(hexSerial); i += 2 {
		colons = append(colons, hexSerial[i:min(i+2, len(hexSerial))])
	}
	s.srv.SetRevokedNodeCerts([]string{strings.Join(colons, ":")})
	err := onNewConn(t, func() error { return n1.Heartbeat(ctx, "n1", nil) })
	wantStatus(t, "revoked node heartbeats", err, 401, spec.ErrPermissionDenied, "revoked")
	if err := n2.Heartbeat(ctx, "n2", nil); err != nil {
		t.Errorf("n2 (not revoked): %v", err)
	}
	s.srv.SetRevokedNodeCerts(nil)
	if err := n1.Heartbeat(ctx, "n1", nil); err != nil {
		t.Errorf("n1 after its serial left the list: %v", err)
	}
}

// TestExpiredNodeCert: TLS checks a node certificate at the handshake
// only; a node whose connection outlives the certificate's NotAfter is
// refused from its next request on that same connection, with what to do.
func TestExpiredNodeCert(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	var now atomic.Pointer[time.Time]
	t0 := time.Now()
	now.Store(&t0)
	s := joinServer(t, joinToken, server.WithClock(func() time.Time { return *now.Load() }))
	ctx := ctxT(t)
	n1, cert1 := joinWithCert(t, s, "n1", joinToken)
	if _, err := n1.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	if err := n1.Heartbeat(ctx, "n1", nil); err != nil {
		t.Fatalf("n1 before its certificate's NotAfter: %v", err)
	}
	later := cert1.NotAfter.Add(time.Second)
	now.Store(&later)
	err := n1.Heartbeat(ctx, "n1", nil) // the connection made while it was valid
	wantStatus(t, "expired node certificate's heartbeat", err, 401, spec.ErrPermissionDenied, "expired")
	if err == nil || !strings.Contains(err.Error(), "join") {
		t.Errorf("refusal %v: want it to say how to join again", err)
	}
}

// joinWithCert is secure.join returning the node certificate too.
func joinWithCert(t *testing.T, s secure, node, joinToken string) (*api.Client, *x509.Certificate) {
	t.Helper()
	keyPEM, csrPEM, err := auth.NodeKey(node)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.client(t, "").Join(ctxT(t), api.JoinRequest{Node: node, JoinToken: joinToken, CSR: string(csrPEM)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyPath, certPath := filepath.Join(dir, "node-key.pem"), filepath.Join(dir, "node.pem")
	if err := auth.WriteNodeCert(keyPath, certPath, keyPEM, []byte(res.Cert)); err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode([]byte(res.Cert))
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, CertFile: certPath, KeyFile: keyPath})
	if err != nil {
		t.Fatal(err)
	}
	return c, cert
}

// TestMetricsPerUserSeriesForOperators: /metrics without an operator's
// identity gets the view without per-user series; root on the socket
// and an operator's token over TLS get the full one; a user's token
// gets the public view; a bad token is refused rather than downgraded.
func TestMetricsPerUserSeriesForOperators(t *testing.T) {
	text := func(s string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, s) })
	}
	s := secureServerWith(t, nil, server.WithMetrics(text("public"), func(string, int, time.Duration) {}),
		server.WithOperatorMetrics(text("full")))
	get := func(c *http.Client, url, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tlsc := untrustedHTTPS()
	unix := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", strings.TrimPrefix(s.unix, "unix://"))
	}}}
	olga := s.token(t, auth.Claims{User: "olga", UID: 1003, Role: auth.RoleOperator}, time.Hour)
	alice := s.token(t, auth.Claims{User: "alice", UID: 1001}, time.Hour)
	for _, tc := range []struct {
		name     string
		c        *http.Client
		url, tok string
		code     int
		body     string
	}{
		{"root on the socket", unix, "http://gpud/metrics", "", 200, "full"},
		{"TLS without a token", tlsc, s.https + "/metrics", "", 200, "public"},
		{"TLS with a user's token", tlsc, s.https + "/metrics", alice, 200, "public"},
		{"TLS with an operator's token", tlsc, s.https + "/metrics", olga, 200, "full"},
	} {
		if code, body := get(tc.c, tc.url, tc.tok); code != tc.code || body != tc.body {
			t.Errorf("%s: %d %q; want %d %q", tc.name, code, body, tc.code, tc.body)
		}
	}
	if code, body := get(tlsc, s.https+"/metrics", "garbage"); code != 401 || strings.Contains(body, "public") || strings.Contains(body, "full") {
		t.Errorf("TLS with a bad token: %d %q; want 401", code, body)
	}
}

// TestTokenAttacksOverTLS keeps the token attacks as regression cases
// against the real TLS listener: every one is a 401 and does nothing.
// (No token, a foreign key's token, an expired one and plain HTTP are in
// TestTCPNeedsTLSAndToken; cross-user actions in TestRoles.)
func TestTokenAttacksOverTLS(t *testing.T) {
	s := secureServer(t)
	ctx := ctxT(t)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(s.ca), "..", "token.key"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	good := s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	seg := func(v string) string { return base64.RawURLEncoding.EncodeToString([]byte(v)) }
	now := time.Now()
	claims := func(extra jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "root", "uid": 0, "gid": 0, "role": "admin", "iss": "test", "jti": "x1",
			"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		for k, v := range extra {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		return c
	}
	sign := func(m jwt.SigningMethod, k any, c jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(m, c).SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	caPEM, err := os.ReadFile(s.ca)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cases := map[string]string{
		"alg none":            seg(`{"alg":"none","typ":"JWT"}`) + "." + seg(string(payload)) + ".",
		"alg none, root":      seg(`{"alg":"none","typ":"JWT"}`) + "." + seg(`{"sub":"root","uid":0,"role":"admin","iss":"test","jti":"x","exp":`+fmt.Sprint(now.Add(time.Hour).Unix())+`}`) + ".",
		"key confusion (CA)":  sign(jwt.SigningMethodHS256, caPEM, claims(nil)),
		"ES256, own key":      sign(jwt.SigningMethodES256, ecKey, claims(nil)),
		"altered uid":         parts[0] + "." + seg(strings.Replace(string(payload), `"uid":1001`, `"uid":0`, 1)) + "." + parts[2],
		"altered signature":   parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2])),
		"foreign issuer":      sign(jwt.SigningMethodHS256, key, claims(jwt.MapClaims{"iss": "other-cluster"})),
		"no jti":              sign(jwt.SigningMethodHS256, key, claims(jwt.MapClaims{"jti": nil})),
		"100 years":           sign(jwt.SigningMethodHS256, key, claims(jwt.MapClaims{"exp": now.AddDate(100, 0, 0).Unix()})),
		"expired (right key)": sign(jwt.SigningMethodHS256, key, claims(jwt.MapClaims{"iat": now.Add(-3 * time.Hour).Unix(), "nbf": now.Add(-3 * time.Hour).Unix(), "exp": now.Add(-time.Hour).Unix()})),
	}
	for name, tok := range cases {
		_, err := s.client(t, tok).Submit(ctx, api.SubmitRequest{Job: jobSpec("attack")})
		wantStatus(t, name, err, 401, spec.ErrPermissionDenied, "")
	}
	// Control: the same hand-made claims with the right key, issuer, jti
	// and lifetime are accepted (root's token, as root may hold).
	if _, err := s.client(t, sign(jwt.SigningMethodHS256, key, claims(nil))).Jobs(ctx, api.JobFilter{}); err != nil {
		t.Errorf("well-formed hand-made token refused: %v", err)
	}
	// A revoked jti: refused once the list names it.
	s.srv.SetRevoked([]string{"x1"})
	_, err = s.client(t, sign(jwt.SigningMethodHS256, key, claims(nil))).Jobs(ctx, api.JobFilter{})
	wantStatus(t, "revoked jti", err, 401, spec.ErrPermissionDenied, "revoked")
	if list, err := client(t, s.unix).Jobs(ctx, api.JobFilter{}); err != nil || len(list) != 0 {
		t.Errorf("jobs after the attacks = %d, %v; want none submitted", len(list), err)
	}
}
