package security

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// revokeCluster is gpud standalone with nodes over the network (their
// step listeners, TLS with node certificates) and an HTTPS port, for the
// revocation tests: its configuration file is rewritten and reloaded
// with gpuq reconfigure as an admin would.
type revokeCluster struct {
	*e2etest.Cluster
	conf, confText string
	https          string
	ca             *auth.CA
	pool           *x509.CertPool
}

func startRevokeCluster(t testing.TB, nodes int) *revokeCluster {
	t.Helper()
	e2etest.RequirePrereq(t)
	// Outside /tmp: the jobs' /tmp is their own, and the users' work
	// directories must be the same path inside.
	dir, err := os.MkdirTemp("/var/tmp", "ge2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	port := freePortTB(t)
	rc := &revokeCluster{https: fmt.Sprintf("https://127.0.0.1:%d", port)}
	rc.confText = strings.Replace(string(base), `listen_tcp = ""`, fmt.Sprintf("listen_tcp = \"127.0.0.1:%d\"", port), 1)
	confDir := e2etest.ShortTempDir(t)
	rc.conf = filepath.Join(confDir, "gpud.toml")
	if err := os.WriteFile(rc.conf, []byte(rc.confText), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &e2etest.Cluster{T: t, Dir: dir, Extra: []string{"--config", rc.conf, "--kill-grace", "2s", "--steps-over-network"}}
	c.Start(nodes)
	t.Cleanup(func() {
		c.CancelAll()
		c.Stop(syscall.SIGTERM)
		e2etest.KillStrayShims(t, c.Dir)
		if t.Failed() {
			t.Logf("gpud standalone log:\n%s", c.Log.String())
		}
	})
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rc.Cluster = c
	// The test holds the CA's key, as whoever stole a node's key holds
	// a certificate it signed: it mints node certificates with it.
	files := auth.Files{CA: filepath.Join(dir, "tls", auth.CAFile), CAKey: filepath.Join(dir, "tls", auth.CAKeyFile)}
	if rc.ca, err = auth.LoadCA(files, time.Now); err != nil {
		t.Fatal(err)
	}
	rc.pool = rc.ca.Pool()
	return rc
}

func freePortTB(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// revoke writes the revocation lists into the configuration and reloads
// it with gpuq reconfigure (as root).
func (rc *revokeCluster) revoke(certs, tokens []string) {
	rc.T.Helper()
	rc.writeRevoked(certs, tokens)
	rc.reconfigure()
}

// writeRevoked writes the revocation lists into the configuration file.
func (rc *revokeCluster) writeRevoked(certs, tokens []string) {
	rc.T.Helper()
	q := func(l []string) string {
		var out []string
		for _, s := range l {
			out = append(out, strconv.Quote(s))
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	text := strings.Replace(rc.confText, "revoked_tokens = []", "revoked_tokens = "+q(tokens), 1)
	text = strings.Replace(text, "revoked_node_certs = []", "revoked_node_certs = "+q(certs), 1)
	if err := os.WriteFile(rc.conf, []byte(text), 0o644); err != nil {
		rc.T.Fatal(err)
	}
}

// reconfigure runs gpuq reconfigure as root.
func (rc *revokeCluster) reconfigure() {
	rc.T.Helper()
	if r := rc.CLI(rc.Dir, "gpuq", "reconfigure"); r.Code != 0 {
		rc.T.Fatalf("gpuq reconfigure: exit %d %s", r.Code, r.Stderr)
	}
}

// mint makes a certificate for node name from the cluster CA.
func (rc *revokeCluster) mint(name string) (tls.Certificate, string) {
	rc.T.Helper()
	keyPEM, csrPEM, err := auth.NodeKey(name)
	if err != nil {
		rc.T.Fatal(err)
	}
	certPEM, err := rc.ca.SignNode(csrPEM, name)
	if err != nil {
		rc.T.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		rc.T.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		rc.T.Fatal(err)
	}
	return cert, auth.Serial(leaf)
}

// stepAddrs are the nodes' step listeners by node name.
func (rc *revokeCluster) stepAddrs() map[string]string {
	rc.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := rc.Client().Nodes(ctx)
	if err != nil {
		rc.T.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes {
		if n.StepPort == 0 {
			rc.T.Fatalf("node %s serves no step listener", n.Name)
		}
		out[n.Name] = net.JoinHostPort("127.0.0.1", strconv.Itoa(n.StepPort))
	}
	return out
}

// stepConn opens a connection to node's step listener at addr (with
// cert, a node's, or none) and sends hello.
func stepConn(addr, node string, pool *x509.CertPool, cert *tls.Certificate, hello api.StepHello) (*tls.Conn, *bufio.Reader, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, auth.StepClientTLS(pool, node, cert))
	if err != nil {
		return nil, nil, err
	}
	if err := json.NewEncoder(c).Encode(hello); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, bufio.NewReader(c), nil
}

// stepOutput runs hello on node's step listener and returns what its
// tasks wrote, or the refusal.
func stepOutput(addr, node string, pool *x509.CertPool, cert *tls.Certificate, hello api.StepHello) (out string, refused string, err error) {
	c, br, err := stepConn(addr, node, pool, cert, hello)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	var b strings.Builder
	for {
		m, err := api.ReadStepFrame(br)
		if err != nil {
			return b.String(), "", err
		}
		switch m.Kind {
		case api.StepError:
			return b.String(), m.Error, nil
		case api.StepStdout, api.StepStderr:
			b.Write(m.Data)
		case api.StepDone:
			return b.String(), "", nil
		}
	}
}

// runningAlloc waits for job id to run and returns its allocation.
func runningAlloc(c *e2etest.Cluster, id string) spec.Alloc {
	c.T.Helper()
	c.WaitState(id, 90*time.Second, "RUNNING")
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		c.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := c.Client().Job(ctx, spec.JobID(n))
	if err != nil || j.Alloc == nil {
		c.T.Fatalf("job %s: %+v, %v", id, j, err)
	}
	return *j.Alloc
}

// TestRevocationAtStepListeners (issue 24, hole 1): with node1's
// certificate listed in [auth] revoked_node_certs and gpuq reconfigure
// done, the certificate presented to node2's step listener, asking for a
// task in bob's allocation, is refused (it ran `id` as bob before), and
// the connection it held open is closed; a step ticket obtained with a
// token that is then revoked is refused. Both reach the nodes within
// seconds of the reconfigure; bob's own srun over both nodes goes on
// working.
func TestRevocationAtStepListeners(t *testing.T) {
	bob := e2etest.AddUserTag(t, "b")
	rc := startRevokeCluster(t, 2)
	r := rc.As(bob, nil, "gpusubmit", "--parsable", "-N2", "--gpus-per-node=1", "--wrap", "sleep 600")
	if r.Code != 0 {
		t.Fatalf("bob's sbatch -N2: exit %d %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	al := runningAlloc(rc.Cluster, id)
	addrs := rc.stepAddrs()
	uid := strconv.FormatUint(uint64(bob.UID), 10)

	// A certificate for node1 (a copy of its key, an old certificate)
	// admits node1's parts on node2: it runs `id -u` as bob.
	stolen, serial := rc.mint("node1")
	// Each part a step number of its own (a task's exec ID is its step's
	// and its number).
	steps := 90
	part := func(args ...string) api.StepHello {
		steps++
		return api.StepHello{Alloc: al.ID, Part: &api.StepPart{Step: steps, NodeIndex: 1, Tasks: []int{1}, Args: args,
			Env: []string{"PATH=/usr/bin:/bin"}}}
	}
	// (Retried while the job's containers start.)
	var out, refused string
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, refused, err = stepOutput(addrs["node2"], "node2", rc.pool, &stolen, part("id", "-u")); err == nil && refused == "" {
			break
		}
	}
	if err != nil || refused != "" || strings.TrimSpace(out) != uid {
		t.Fatalf("node1's certificate before it was revoked: %q, refused %q, %v; want bob's uid %s (the test's premise)", out, refused, err, uid)
	}
	// A connection it holds open, running a task as bob.
	held, heldR, err := stepConn(addrs["node2"], "node2", rc.pool, &stolen, part("sleep", "300"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if m, err := api.ReadStepFrame(heldR); err != nil || m.Kind != api.StepStarted {
		t.Fatalf("the held part: %+v, %v; want it started", m, err)
	}

	// Bob's token, and a step ticket obtained with it over HTTPS.
	r = rc.CLI(rc.Dir, "gpud", "token", "issue", "--config", rc.conf, "--state-dir", rc.Dir, "--user", bob.Name, "--ttl", "1h")
	if r.Code != 0 {
		t.Fatalf("gpud token issue: exit %d %s", r.Code, r.Stderr)
	}
	token := strings.TrimSpace(r.Stdout)
	jti := regexp.MustCompile(`token id (\S+)`).FindStringSubmatch(r.Stderr)
	if jti == nil {
		t.Fatalf("gpud token issue named no token id: %q", r.Stderr)
	}
	caPath := filepath.Join(bob.Home, "ca.pem")
	caPEM, err := os.ReadFile(filepath.Join(rc.Dir, "tls", auth.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caPath, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	bobTCP, err := api.NewClientWith(rc.https, api.ClientOptions{CAFile: caPath, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobID, _ := strconv.ParseUint(id, 10, 64)
	tk, err := bobTCP.StepTicket(ctx, spec.JobID(jobID))
	if err != nil {
		t.Fatal(err)
	}
	srunHello := api.StepHello{Alloc: al.ID, Ticket: tk.Ticket, Step: &api.StepRequest{Args: []string{"id", "-u"}, Env: []string{"PATH=/usr/bin:/bin"}, Cwd: bob.Home}}
	// A node that has not yet started (or re-learned) its part answers
	// "retry in a moment", as srun is told: retry as srun does.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, refused, err = stepOutput(addrs["node1"], "node1", rc.pool, nil, srunHello)
		if !strings.Contains(refused, "retry in a moment") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || refused != "" || !strings.Contains(out, uid) {
		t.Fatalf("the ticket before its token was revoked: %q, refused %q, %v; want bob's uid (the test's premise)", out, refused, err)
	}

	start := time.Now()
	rc.revoke([]string{serial}, []string{jti[1]})
	// The lists reach both nodes within seconds: poll for the refusals.
	var certRefused, ticketRefused string
	var certAfter, ticketAfter time.Duration
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && (certRefused == "" || ticketRefused == ""); time.Sleep(50 * time.Millisecond) {
		if certRefused == "" {
			if out, refused, err := stepOutput(addrs["node2"], "node2", rc.pool, &stolen, part("id", "-u")); err == nil && strings.Contains(refused, "revoked") {
				certRefused, certAfter = refused, time.Since(start)
			} else if strings.TrimSpace(out) == uid {
				t.Logf("node2 still ran node1's part as bob %v after the reconfigure", time.Since(start))
			}
		}
		if ticketRefused == "" {
			if _, refused, err := stepOutput(addrs["node1"], "node1", rc.pool, nil, srunHello); err == nil && strings.Contains(refused, "revoked") {
				ticketRefused, ticketAfter = refused, time.Since(start)
			}
		}
	}
	t.Logf("refused %v (certificate, node2) and %v (ticket, node1) after gpuq reconfigure began", certAfter, ticketAfter)
	if !strings.Contains(certRefused, "certificate "+serial+" was revoked") {
		t.Errorf("node1's revoked certificate at node2's step listener: refused %q; want refused as revoked", certRefused)
	}
	if !strings.Contains(ticketRefused, "token "+jti[1]+" was revoked") {
		t.Errorf("a step ticket obtained with a revoked token: refused %q; want refused as revoked", ticketRefused)
	}
	// The connection the revoked certificate held is closed: its task
	// is killed.
	_ = held.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		f, err := api.ReadStepFrame(heldR)
		if err != nil {
			if strings.Contains(err.Error(), "timeout") {
				t.Errorf("the connection node1's revoked certificate held is still open")
			}
			break
		}
		if f.Kind == api.StepDone || f.Kind == api.StepError {
			t.Errorf("the held part ended with %+v, not with its connection closed", f)
			break
		}
	}
	// Bob's own steps over both nodes (the nodes' real certificates, a
	// ticket obtained on the socket) go on.
	r = rc.As(bob, []string{"SLURM_JOB_ID=" + id}, "srun", "-N2", "-l", "printenv", "SLURMD_NODENAME")
	if r.Code != 0 || !strings.Contains(r.Stdout, "0: node1") || !strings.Contains(r.Stdout, "1: node2") {
		t.Errorf("bob's srun -N2 after the revocations: exit %d %q %q; want a task on each node", r.Code, r.Stdout, r.Stderr)
	}
	rc.CLI(rc.Dir, "gpuq", "cancel", id)
}
