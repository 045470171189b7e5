package security

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// craftEnv makes the test binary, run as another user, send hand-made
// API requests to the socket it names instead of running tests.
const craftEnv = "GPUD_E2E_CRAFT_SOCKET"

// craftRequests posts submissions that claim to be root's: one with the
// identity inside the job, one beside it, one plain. It prints one line
// per request: "<status> <body>".
func craftRequests(sock string) int {
	dir, _ := os.Getwd()
	job := `"name":"crafted","script":"#!/bin/sh\nid -u\n","work_dir":"` + dir + `"`
	return postJobBodies(sock, []string{
		`{"job":{` + job + `,"user":"root","uid":0}}`,
		`{"job":{` + job + `},"user":"root","uid":0}`,
		`{"job":{` + job + `}}`,
	})
}

// postJobBodies posts each raw body to POST /v1/jobs over the unix socket
// sock and prints one line per request, "<status> <body>"; it stops with
// "000 <error>" and returns 1 when a request cannot be sent. The test
// binary runs it as another user (craftRequests, postHostile), so the
// parent test reads exactly what the API told that user.
func postJobBodies(sock string, bodies []string) int {
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	for _, body := range bodies {
		resp, err := hc.Post("http://gpud/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Println("000", err)
			return 1
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return 0
}

func writePrivate(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// forT is c with its helpers (cli, showJob, waitState...) failing t, a
// subtest, instead of the test that started the cluster: a subtest must
// not call FailNow on its parent.
func forT(c *e2etest.Cluster, t testing.TB) *e2etest.Cluster {
	cc := *c
	cc.T = t
	return &cc
}

// TestMultiUserSecurity drives a real `gpud standalone` (with HTTPS on a
// loopback port) as root and as a second local user made with useradd,
// and attacks it, one subtest per attack, so a failure names the attack
// that succeeded: another user's job, crafted identities, TCP without TLS
// or a valid token, a wrong join token, a node reporting another node's
// job, account limits; then it checks the audit log shows each attack
// that ran. The subtests are steps of one scenario on one cluster: later
// ones use what earlier ones made (the joined node, the lab jobs) and say
// so when run alone with -run.
func TestMultiUserSecurity(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	u := e2etest.AddUser(t)
	dir := e2etest.ShortTempDir(t)
	port := e2etest.FreePort(t)
	https := fmt.Sprintf("https://127.0.0.1:%d", port)
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	for old, new := range map[string]string{
		`listen_tcp = ""`:   fmt.Sprintf("listen_tcp = \"127.0.0.1:%d\"", port),
		`clock_skew = "2m"`: `clock_skew = "1s"`,
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("etc/gpud.toml lacks %s", old)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	conf += "\n[[account]]\nname = \"lab\"\nshares = 1\nmax_gpus = 1\n" +
		"\n[[account]]\nname = \"tiny\"\nshares = 1\nmax_gpu_hours = 1\n" +
		"\n[[account]]\nname = \"private\"\nshares = 1\nusers = [\"root\"]\n"
	confPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// A short kill grace: cancelled jobs (sleeping under a PID-1 shell,
	// which ignores SIGTERM) are gone before the cluster stops, so no
	// process of the test user outlives the test.
	c := e2etest.StartCluster(t, 1, "--config", confPath, "--kill-grace", "2s")
	// Other users reach the socket through the state dir and run the
	// binaries from binDir (both 0700 as made).
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// root's running job, the target of several attacks.
	// It ignores SIGUSR1/2 and SIGHUP: a process elsewhere on a shared test
	// host has been seen signalling it (exit "killed by signal SIGUSR1"),
	// which this test must not mistake for a forged node report.
	r := c.CLI(work, "gpusubmit", "--parsable", "--wrap", "trap '' USR1 USR2 HUP; echo SECRET-OF-ROOT; sleep 600")
	if r.Code != 0 {
		t.Fatalf("root submit: %d %s", r.Code, r.Stderr)
	}
	rootJob := strings.TrimSpace(r.Stdout)
	c.WaitState(rootJob, 60*time.Second, "RUNNING")

	// Users get a copy of the CA certificate (the controller's is root's
	// only) for TCP.
	ca := filepath.Join(u.Home, "ca.pem")
	if b, err := os.ReadFile(filepath.Join(c.Dir, "tls", "ca.pem")); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(ca, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tcpEnv := []string{api.EnvController + "=" + https, api.EnvCA + "=" + ca}

	// ran records the subtests that ran, so the audit subtest looks only
	// for their entries; step runs one.
	ran := map[string]bool{}
	step := func(name string, f func(t *testing.T, c *e2etest.Cluster)) bool {
		return t.Run(name, func(t *testing.T) {
			ran[name] = true
			f(t, forT(c, t))
		})
	}
	const (
		stepOtherUser   = "another user cancels, holds or reads root's job"
		stepOwnJob      = "a user's job runs with the user's uid"
		stepCrafted     = "crafted requests claim to be root"
		stepPlainHTTP   = "plain HTTP to the TLS port"
		stepNoToken     = "TCP without a token"
		stepValidToken  = "TCP with a valid token"
		stepExpired     = "TCP with an expired token"
		stepWrongJoin   = "node joins with a wrong join token"
		stepRightJoin   = "node joins with the right join token and runs a job over TCP"
		stepForged      = "joined node reports another node's job"
		stepCtdState    = "root job on a node reads containerd's state"
		stepGPULimit    = "second job over the account's GPU limit"
		stepBudget      = "submission over the account's GPU-hour budget"
		stepOtherAcct   = "charging an account that does not list the user"
		stepAuditLogged = "audit log shows each attack with its actor"
	)

	step(stepOtherUser, func(t *testing.T, c *e2etest.Cluster) {
		for _, action := range []string{"cancel", "hold"} {
			if r := c.As(u, nil, "gpuq", action, rootJob); r.Code != 3 || !strings.Contains(r.Stderr, "belongs to root") {
				t.Errorf("%s %s of root's job: exit %d %q; want 3 saying it belongs to root", u.Name, action, r.Code, r.Stderr)
			}
		}
		r := c.As(u, nil, "gpuq", "show", rootJob, "--json")
		if r.Code != 0 || strings.Contains(r.Stdout, "SECRET-OF-ROOT") || !strings.Contains(r.Stdout, `"script": ""`) {
			t.Errorf("%s sees root's job: exit %d; want it without the script:\n%s%s", u.Name, r.Code, r.Stdout, r.Stderr)
		}
		if j := c.ShowJob(rootJob); j["state"] != "RUNNING" {
			t.Errorf("root's job after the other user's attempts: %v, want RUNNING", j["state"])
		}
	})

	step(stepOwnJob, func(t *testing.T, c *e2etest.Cluster) {
		r := c.As(u, nil, "gpusubmit", "--parsable", "--wait", "--wrap", "id -u")
		if r.Code != 0 {
			t.Fatalf("%s submits: exit %d %s", u.Name, r.Code, r.Stderr)
		}
		own := strings.TrimSpace(r.Stdout)
		if out, err := os.ReadFile(filepath.Join(u.Home, "gpud-"+own+".out")); err != nil || strings.TrimSpace(string(out)) != fmt.Sprint(u.UID) {
			t.Errorf("the user's job printed %q (%v); want its uid %d", out, err, u.UID)
		}
	})

	step(stepCrafted, func(t *testing.T, c *e2etest.Cluster) {
		craft := filepath.Join(e2etest.BinDir, "e2e.test")
		if self, err := os.Executable(); err != nil {
			t.Fatal(err)
		} else if b, err := os.ReadFile(self); err != nil {
			t.Fatal(err)
		} else if err := os.WriteFile(craft, b, 0o755); err != nil {
			t.Fatal(err)
		}
		r := c.As(u, []string{craftEnv + "=" + filepath.Join(c.Dir, "gpud.sock")}, craft)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Code != 0 || len(lines) != 3 {
			t.Fatalf("crafted requests: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
		}
		for i, l := range lines[:2] {
			if !strings.HasPrefix(l, "400 ") || !strings.Contains(l, `unknown field \"user\"`) {
				t.Errorf("crafted body %d claiming user root: %s; want 400 unknown field user", i, l)
			}
		}
		var sub api.SubmitResponse
		if !strings.HasPrefix(lines[2], "200 ") || json.Unmarshal([]byte(strings.TrimPrefix(lines[2], "200 ")), &sub) != nil {
			t.Fatalf("plain crafted submission: %s", lines[2])
		}
		if j := c.ShowJob(fmt.Sprint(sub.ID)); j["user"] != u.Name || j["uid"] != float64(u.UID) {
			t.Errorf("crafted job runs as %v (uid %v); want %s (%d)", j["user"], j["uid"], u.Name, u.UID)
		}
	})

	// TCP: TLS only, and a valid, unexpired token.
	step(stepPlainHTTP, func(t *testing.T, c *e2etest.Cluster) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/jobs", port))
		if err != nil {
			return // the connection was refused outright: nothing served
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "HTTPS") {
			t.Errorf("plain HTTP to the TLS port: %d %s; want 400 from TLS", resp.StatusCode, b)
		}
	})
	step(stepNoToken, func(t *testing.T, c *e2etest.Cluster) {
		if r := c.As(u, tcpEnv, "gpuq"); r.Code != 3 || !strings.Contains(r.Stderr, "bearer token is required") {
			t.Errorf("gpuq over TCP without a token: exit %d %q; want 3", r.Code, r.Stderr)
		}
	})
	issue := func(t *testing.T, ttl string) string {
		t.Helper()
		r := forT(c, t).CLI(work, "gpud", "token", "issue", "--config", confPath, "--state-dir", c.Dir, "--user", u.Name, "--ttl", ttl)
		if r.Code != 0 {
			t.Fatalf("gpud token issue: %d %s", r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	step(stepValidToken, func(t *testing.T, c *e2etest.Cluster) {
		if r := c.As(u, append(tcpEnv, api.EnvToken+"="+issue(t, "1h")), "gpuq"); r.Code != 0 {
			t.Errorf("gpuq over TCP with a valid token: exit %d %s", r.Code, r.Stderr)
		}
	})
	step(stepExpired, func(t *testing.T, c *e2etest.Cluster) {
		short := issue(t, "1s")
		time.Sleep(3 * time.Second) // past the 1s lifetime and the 1s skew
		if r := c.As(u, append(tcpEnv, api.EnvToken+"="+short), "gpuq"); r.Code != 3 || !strings.Contains(r.Stderr, "expired") {
			t.Errorf("gpuq over TCP with an expired token: exit %d %q; want 3 saying expired", r.Code, r.Stderr)
		}
	})

	// A node joins over TCP: a wrong join token gets nothing, the right
	// one a certificate; the node then runs a job over TCP.
	r = c.CLI(work, "gpud", "token", "join", "--config", confPath, "--state-dir", c.Dir)
	if r.Code != 0 {
		t.Fatalf("gpud token join: %d %s", r.Code, r.Stderr)
	}
	joinToken := strings.TrimSpace(r.Stdout)
	// tcpnode's own containerd, as a production node has, with its root
	// and state outside /tmp and /run (every job gets its own of those),
	// so that only the node's hiding keeps them from jobs.
	tcpCtd := containerdtest.StartIn(t, "/var/tmp")
	joinFile := filepath.Join(dir, "join.token")
	nodeDir := filepath.Join(dir, "tcpnode")
	nodeConf := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(nodeConf, fmt.Appendf(nil, `version = 1
[node]
name = "tcpnode"
controller = %q
ca_file = %q
join_token_file = %q
state_dir = %q
gpus = "none"
cpus = 2
mem = "1G"
cdi_dir = %q
checkpoint_root = %q
containerd_address = %q
step_listen = "127.0.0.1:0"
`, https, ca, joinFile, nodeDir, filepath.Join(nodeDir, "cdi"), filepath.Join(nodeDir, "ckpt"), tcpCtd), 0o644); err != nil {
		t.Fatal(err)
	}
	// The node's address comes from its config, not GPUD_CONTROLLER.
	var nodeEnv []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, api.EnvController+"=") && !strings.HasPrefix(e, api.EnvToken+"=") {
			nodeEnv = append(nodeEnv, e)
		}
	}
	step(stepWrongJoin, func(t *testing.T, c *e2etest.Cluster) {
		writePrivate(t, joinFile, "wrong-"+joinToken)
		wrong := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir, "gpud"), "node", "--config", nodeConf)
		wrong.Env = nodeEnv
		out, err := wrong.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "wrong join token") {
			t.Errorf("node with a wrong join token: %v %s; want a failure saying so", err, out)
		}
		if _, err := os.Stat(filepath.Join(nodeDir, "tls", "node.pem")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a node certificate exists after a refused join: %v", err)
		}
	})
	parent := t
	joined := step(stepRightJoin, func(t *testing.T, c *e2etest.Cluster) {
		writePrivate(t, joinFile, joinToken)
		node := exec.Command(filepath.Join(e2etest.BinDir, "gpud"), "node", "--config", nodeConf)
		node.Env = nodeEnv
		var nodeLog bytes.Buffer
		node.Stdout, node.Stderr = &nodeLog, &nodeLog
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
		nodeDone := make(chan struct{})
		go func() { _ = node.Wait(); close(nodeDone) }()
		// The node serves the later subtests: it stops with the test.
		parent.Cleanup(func() {
			_ = node.Process.Signal(syscall.SIGTERM)
			<-nodeDone
			if parent.Failed() {
				parent.Logf("tcpnode log:\n%s", nodeLog.String())
			}
		})
		c.WaitNodes(2)
		r := c.As(u, nil, "gpusubmit", "--parsable", "--wait", "-w", "tcpnode", "--wrap", "echo over-tcp")
		if r.Code != 0 {
			t.Fatalf("job on the node joined over TCP: exit %d %s", r.Code, r.Stderr)
		}
		if out, _ := os.ReadFile(filepath.Join(u.Home, "gpud-"+strings.TrimSpace(r.Stdout)+".out")); strings.TrimSpace(string(out)) != "over-tcp" {
			t.Errorf("job on tcpnode printed %q; want over-tcp", out)
		}
	}) && ran[stepRightJoin]

	step(stepForged, func(t *testing.T, c *e2etest.Cluster) {
		if !joined {
			delete(ran, stepForged) // no attack, so no audit entry
			t.Skipf("needs tcpnode, joined by %q, which failed or did not run", stepRightJoin)
		}
		tcpnode, err := api.NewClientWith(https, api.ClientOptions{CAFile: ca,
			CertFile: filepath.Join(nodeDir, "tls", "node.pem"), KeyFile: filepath.Join(nodeDir, "tls", "node-key.pem")})
		if err != nil {
			t.Fatal(err)
		}
		rj, err := c.Client().Job(ctx, spec.JobID(atoi(t, rootJob)))
		if err != nil || rj.Alloc == nil {
			t.Fatalf("root's job: %+v %v", rj, err)
		}
		ev := api.AllocEvent{Seq: 1, AllocID: rj.Alloc.ID, JobID: rj.ID, Kind: api.EventExited, State: spec.StateFailed, ExitCode: 1}
		var ae *api.Error
		if _, err := tcpnode.Events(ctx, "node1", []api.AllocEvent{ev}); !errors.As(err, &ae) || ae.Status != 403 {
			t.Errorf("tcpnode reports for node1: %v; want 403", err)
		}
		if _, err := tcpnode.Events(ctx, "tcpnode", []api.AllocEvent{ev}); err != nil {
			t.Errorf("tcpnode reports node1's job as its own event: %v; want it acknowledged and ignored", err)
		}
		if j := c.ShowJob(rootJob); j["state"] != "RUNNING" {
			t.Errorf("root's job after tcpnode's forged events: %v (%v), want RUNNING", j["state"], j["reason"])
		}
	})

	// containerd's root (meta.db: every container's spec, environment
	// included) and state (the bundles) are hidden from jobs on the host's
	// root, even from root's.
	step(stepCtdState, func(t *testing.T, c *e2etest.Cluster) {
		if !joined {
			t.Skipf("needs tcpnode, joined by %q, which failed or did not run", stepRightJoin)
		}
		ctd := filepath.Dir(tcpCtd) // containerdtest keeps root/ and state/ beside the socket
		metaDB := filepath.Join(ctd, "root", "io.containerd.metadata.v1.bolt", "meta.db")
		bundles := filepath.Join(ctd, "state", "io.containerd.runtime.v2.task", "gpud")
		for _, p := range []string{metaDB, bundles} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("containerd's %s is not there to hide: %v", p, err)
			}
		}
		r := c.CLI(work, "gpusubmit", "--parsable", "--wait", "-w", "tcpnode", "--wrap",
			fmt.Sprintf(`head -c 1 %q >/dev/null 2>&1 && echo "READABLE %[1]s"; [ -n "$(ls -A %q 2>/dev/null)" ] && echo "LISTED %[2]s"; echo END`, metaDB, bundles))
		if r.Code != 0 {
			t.Fatalf("root's job on tcpnode: exit %d %s", r.Code, r.Stderr)
		}
		out, err := os.ReadFile(filepath.Join(work, "gpud-"+strings.TrimSpace(r.Stdout)+".out"))
		if err != nil || strings.Contains(string(out), "READABLE") || strings.Contains(string(out), "LISTED") || !strings.Contains(string(out), "END") {
			t.Errorf("root's job on tcpnode sees containerd's state (%v):\n%s", err, out)
		}
	})

	// Account limits: lab may hold 1 GPU; tiny's budget is 1 GPU-hour.
	var lab []string // the user cancels them; the audit subtest counts the cancels
	step(stepGPULimit, func(t *testing.T, c *e2etest.Cluster) {
		defer func() {
			for _, id := range lab {
				if r := c.As(u, nil, "gpuq", "cancel", id); r.Code != 0 {
					t.Errorf("%s cancels own job %s: exit %d %s", u.Name, id, r.Code, r.Stderr)
				}
			}
		}()
		for range 2 {
			r := c.As(u, nil, "gpusubmit", "--parsable", "-A", "lab", "-G", "1", "-w", "node1", "--wrap", "sleep 600")
			if r.Code != 0 {
				t.Fatalf("lab job: exit %d %s", r.Code, r.Stderr)
			}
			lab = append(lab, strings.TrimSpace(r.Stdout))
		}
		c.WaitState(lab[0], 60*time.Second, "RUNNING")
		deadline := time.Now().Add(30 * time.Second)
		for c.ShowJob(lab[1])["reason"] != spec.ReasonAccountLimit && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if j := c.ShowJob(lab[1]); j["state"] != "PENDING" || j["reason"] != spec.ReasonAccountLimit {
			t.Errorf("second lab job: %v/%v; want PENDING/%s", j["state"], j["reason"], spec.ReasonAccountLimit)
		}
	})
	step(stepBudget, func(t *testing.T, c *e2etest.Cluster) {
		r := c.As(u, nil, "gpusubmit", "-A", "tiny", "-G", "2", "-t", "1:00:00", "--wrap", "true")
		if r.Code != 3 || !strings.Contains(r.Stderr, "max_gpu_hours") {
			t.Errorf("over-budget submission: exit %d %q; want 3 naming max_gpu_hours", r.Code, r.Stderr)
		}
	})
	step(stepOtherAcct, func(t *testing.T, c *e2etest.Cluster) {
		r := c.As(u, nil, "gpusubmit", "-A", "private", "--wrap", "true")
		if r.Code != 3 || !strings.Contains(r.Stderr, "may not charge account private") {
			t.Errorf("charging an account that does not list the user: exit %d %q; want 3", r.Code, r.Stderr)
		}
	})

	// The audit log shows each of the above with its actor. It is written
	// in batches every 200 ms: read until the last call is in.
	step(stepAuditLogged, func(t *testing.T, c *e2etest.Cluster) {
		var entries []api.AuditEntry
		var r e2etest.Result
		for deadline := time.Now().Add(10 * time.Second); ; {
			r = c.CLI(work, "gpuq", "audit", "--json")
			if r.Code != 0 {
				t.Fatalf("gpuq audit: %d %s", r.Code, r.Stderr)
			}
			entries = nil
			if err := json.Unmarshal([]byte(r.Stdout), &entries); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range entries {
				if e.ActorName == u.Name && e.Action == "POST /v1/jobs/{id}/cancel" && strings.HasPrefix(e.Result, "200") {
					n++
				}
			}
			if n == len(lab) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		type entry struct{ actor, action, result string }
		wants := []struct {
			step string
			entry
		}{
			{stepOtherUser, entry{u.Name, "POST /v1/jobs/{id}/cancel", "403"}},
			{stepOtherUser, entry{u.Name, "POST /v1/jobs/{id}/hold", "403"}},
			{stepCrafted, entry{u.Name, "POST /v1/jobs", "400"}},                 // crafted identity
			{stepBudget, entry{u.Name, "POST /v1/jobs", "422"}},                  // over budget
			{stepOtherAcct, entry{u.Name, "POST /v1/jobs", "403"}},               // an account that does not list the user
			{stepNoToken, entry{"unidentified", "GET /v1/jobs", "401"}},          // no token
			{stepExpired, entry{"unidentified", "GET /v1/jobs", "401"}},          // expired token
			{stepWrongJoin, entry{"unidentified", "POST /v1/nodes/join", "401"}}, // wrong join token
			{stepRightJoin, entry{"unidentified", "POST /v1/nodes/join", "200"}}, // the right one
			{stepForged, entry{"node:tcpnode", "POST /v1/nodes/{name}/events", "403"}},
		}
		// Two attacks may leave alike entries (no token, expired token):
		// the log holds at least as many as the attacks that ran.
		need := map[entry]int{}
		for _, w := range wants {
			if ran[w.step] {
				need[w.entry]++
			}
		}
		for _, want := range wants {
			if !ran[want.step] {
				continue
			}
			found := 0
			for _, e := range entries {
				if e.ActorName == want.actor && e.Action == want.action && strings.HasPrefix(e.Result, want.result) {
					found++
				}
			}
			if found < need[want.entry] {
				t.Errorf("audit log has %d of %d entries %s %s → %s (one from %q):\n%s", found, need[want.entry], want.actor, want.action, want.result, want.step, r.Stdout)
			}
		}
	})
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
