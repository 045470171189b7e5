package server_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// joinServer serves TLS asking for client certificates signed by its CA,
// and lets nodes with joinToken join; it returns the secure addresses.
func joinServer(t *testing.T, joinToken string, opts ...server.Option) secure {
	t.Helper()
	files, tlsCfg, keys := testTLS(t)
	ca, err := auth.LoadCA(files, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.ClientAuth, tlsCfg.ClientCAs = tls.VerifyClientCertIfGiven, ca.Pool()
	s := secure{ca: files.CA, keys: keys}
	o := servertest.Options{
		ServerOptions: append([]server.Option{server.WithTokens(keys), server.WithNodeJoin(ca, joinToken)}, opts...),
		TLS:           tlsCfg, TLSAddr: &s.https, Server: &s.srv,
	}
	s.unix, _, _ = servertest.Start(t, nil, o)
	return s
}

// join runs a node's side of joining and returns a client that presents
// the node certificate.
func (s secure) join(t *testing.T, node, joinToken string) (*api.Client, error) {
	t.Helper()
	keyPEM, csrPEM, err := auth.NodeKey(node)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.client(t, "").Join(ctxT(t), api.JoinRequest{Node: node, JoinToken: joinToken, CSR: string(csrPEM)})
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	keyPath, certPath := filepath.Join(dir, "node-key.pem"), filepath.Join(dir, "node.pem")
	if err := auth.WriteNodeCert(keyPath, certPath, keyPEM, []byte(res.Cert)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.CA, "BEGIN CERTIFICATE") {
		t.Errorf("join response CA = %q", res.CA)
	}
	c, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, CertFile: certPath, KeyFile: keyPath})
	if err != nil {
		t.Fatal(err)
	}
	return c, nil
}

// TestNodeJoinMTLS: a node with the join token gets a certificate bound to
// its name and speaks the node protocol with it, for itself only; a wrong
// join token, a request for another name, or a certificate from another
// CA get nothing; every join attempt is audited.
func TestNodeJoinMTLS(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	db := openAcct(t)
	s := joinServer(t, joinToken, server.WithAudit(db, nil))
	ctx := ctxT(t)
	root := client(t, s.unix)

	// Wrong join token: refused, nothing issued.
	_, err := s.join(t, "n1", "guess")
	wantStatus(t, "wrong join token", err, 401, spec.ErrPermissionDenied, "wrong join token")
	// A request whose CSR names another node than asked.
	_, csrOther, _ := auth.NodeKey("n2")
	_, err = s.client(t, "").Join(ctx, api.JoinRequest{Node: "n1", JoinToken: joinToken, CSR: string(csrOther)})
	wantStatus(t, "CSR for another name", err, 400, spec.ErrInvalid, `is for "n2", not for node "n1"`)
	_, err = s.client(t, "").Join(ctx, api.JoinRequest{Node: "n1", JoinToken: joinToken, CSR: "not pem"})
	wantStatus(t, "garbage CSR", err, 400, spec.ErrInvalid, "not a PEM CERTIFICATE REQUEST")

	n1, err := s.join(t, "n1", joinToken)
	if err != nil {
		t.Fatalf("join with the right token: %v", err)
	}
	n2, err := s.join(t, "n2", joinToken)
	if err != nil {
		t.Fatal(err)
	}
	// The certificate is the node's identity over TCP: no bearer token.
	if _, err := n1.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatalf("n1 registers with its certificate: %v", err)
	}
	if _, err := n2.Register(ctx, inventory("n2", 2)); err != nil {
		t.Fatal(err)
	}
	if err := n1.Heartbeat(ctx, "n1", nil); err != nil {
		t.Errorf("n1 heartbeat: %v", err)
	}
	err = n1.Heartbeat(ctx, "n2", nil)
	wantStatus(t, "n1 heartbeats as n2", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	_, err = n1.Register(ctx, inventory("n2", 8))
	wantStatus(t, "n1 registers as n2", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	_, err = n1.Submit(ctx, api.SubmitRequest{Job: jobSpec("x")})
	wantStatus(t, "node submits", err, 403, spec.ErrPermissionDenied, "node protocol")
	_, err = n1.Audit(ctx, api.AuditFilter{})
	wantStatus(t, "node reads the audit log", err, 403, spec.ErrPermissionDenied, "operator role")

	// A job placed on n2: n1 cannot report it, neither as n2 nor as itself.
	js := jobSpec("on-n2")
	js.Resources.NodeList = []string{"n2"}
	sub, err := root.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	a := waitAssignment(t, n2, "n2", func(a api.Assignment) bool { return a.Job.ID == sub.ID })
	ev := api.AllocEvent{Seq: 1, AllocID: a.Alloc.ID, JobID: sub.ID, Kind: api.EventExited, State: spec.StateFailed, ExitCode: 1}
	_, err = n1.Events(ctx, "n2", []api.AllocEvent{ev})
	wantStatus(t, "n1 posts n2's events", err, 403, spec.ErrPermissionDenied, "may not speak for node n2")
	if _, err := n1.Events(ctx, "n1", []api.AllocEvent{ev}); err != nil {
		t.Errorf("n1 posts the event as itself (acknowledged, ignored): %v", err)
	}
	if j, err := root.Job(ctx, sub.ID); err != nil || j.State != spec.StateRunning {
		t.Errorf("job on n2 after n1's forged events: %s, %v; want RUNNING", j.State, err)
	}

	// A certificate from another CA fails the TLS handshake.
	other := t.TempDir()
	of, err := auth.EnsureTLS(other, "other", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	oca, err := auth.LoadCA(of, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, csrPEM, _ := auth.NodeKey("n1")
	certPEM, err := oca.SignNode(csrPEM, "n1")
	if err != nil {
		t.Fatal(err)
	}
	kp, cp := filepath.Join(other, "k.pem"), filepath.Join(other, "c.pem")
	if err := os.WriteFile(kp, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cp, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	forged, err := api.NewClientWith(s.https, api.ClientOptions{CAFile: s.ca, CertFile: cp, KeyFile: kp})
	if err != nil {
		t.Fatal(err)
	}
	if err := forged.Heartbeat(ctx, "n1", nil); err == nil {
		t.Error("a node certificate from another CA was accepted")
	}

	// The audit log shows the join attempts with the remote origin.
	// 5 joins; n1's heartbeat, register, events for n2 and its submission
	// (all 403); root's submission.
	got := waitAudit(t, root, 10)
	var joins []string
	refusedNode := 0
	for _, e := range got {
		if e.ActorName == "node:n1" && e.Role == auth.RoleNode && strings.HasPrefix(e.Result, "403 ") && e.Target == "node n2" {
			refusedNode++ // heartbeat, register? (no name in path), events as n2
		}
		if e.Action == "POST /v1/nodes/join" {
			if e.ActorName != "unidentified" || !strings.HasPrefix(e.Origin, "127.0.0.1") {
				t.Errorf("join audit entry %+v: want actor unidentified from 127.0.0.1", e)
			}
			joins = append(joins, e.Target+" "+e.Result[:3]+strings.Repeat("+", e.Summarised))
		}
	}
	if refusedNode < 2 {
		t.Errorf("n1's refused node calls for n2 are not all audited: %+v", got)
	}
	// The wrong token is refused from its header, before the body (and
	// the node it names) is read: no target. The second bad request from
	// the same address in the minute is summarised (refusal.go): its row
	// comes when the log is read, and says how many it stands for.
	// Compared as a set: rows written in the same instant come back in
	// either order (the test failed once under load on the order alone).
	want := " 400+, 401,node n1 200,node n1 400,node n2 200"
	slices.Sort(joins)
	if strings.Join(joins, ",") != want {
		t.Errorf("audited joins = %v; want %s", joins, want)
	}
}
