package ha

import (
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd"
)

// The HA suite (issue 16): three `gpud controller` processes on loopback,
// each with its own state dir, its own loopback address (127.77.X.N, so
// iptables can cut one off; X from the test process, so a cut never
// touches another run's group on the same host) and its own ports,
// forming a Raft group.
// Node agents are separate `gpud node` processes sharing one private
// containerd. Agents and clients reach the group as users and nodes do:
// over HTTPS with the three members' addresses as a list (node.toml's
// controller / --controller, GPUD_CONTROLLER), trusting the cluster CA the
// members share, agents joining with the join token and authenticating
// with their node certificates, clients with a `gpud token issue` token;
// they follow the leader themselves (gpud/api/failover.go). The test also
// reads each member directly through its own unix socket.

// haMember is one controller of the group.
type haMember struct {
	id, ip    string
	raft, api string // host:port
	dir       string // gpud.toml, gpud.sock, state/
	sock      string
	conf      string
	cmd       *exec.Cmd
	log       *e2etest.SyncBuffer
	done      chan struct{}
}

func (m *haMember) stateDir() string { return filepath.Join(m.dir, "state") }

// alive reports whether the process is running.
func (m *haMember) alive() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (m *haMember) client(t testing.TB) *api.Client {
	t.Helper()
	cl, err := api.NewClient("unix://" + m.sock)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// http is a plain HTTP client on the member's socket (for headers).
func (m *haMember) http() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", m.sock)
	}}}
}

// serves says whether the member answers as leader right now: a read
// without Gpud-Stale (a follower marks every read it serves).
func (m *haMember) serves() bool {
	if !m.alive() {
		return false
	}
	resp, err := m.http().Get("http://gpud/v1/partitions")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // a probe
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get(api.HeaderStale) == ""
}

// refusesNodes says whether the member refuses the node protocol
// (not_leader), probing with a long poll for a node that does not exist:
// the leader answers 404 at once, a follower 421.
func (m *haMember) refusesNodes() bool {
	resp, err := m.http().Get("http://gpud/v1/nodes/ha-probe/assignments?wait=0")
	if err != nil {
		return true
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // a probe
	resp.Body.Close()
	return resp.StatusCode == http.StatusMisdirectedRequest
}

func (m *haMember) controllers(t testing.TB) api.ControllersResponse {
	t.Helper()
	resp, err := m.http().Get("http://gpud/v1/controllers")
	if err != nil {
		t.Fatalf("GET /v1/controllers on %s: %v", m.id, err)
	}
	defer resp.Body.Close()
	var out api.ControllersResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("GET /v1/controllers on %s: %v", m.id, err)
	}
	return out
}

// haGroup is the running group.
type haGroup struct {
	t       *testing.T
	dir     string
	members []*haMember
	url     string           // the members' https addresses, comma-separated
	ca      string           // the cluster CA (every member's tls/ca.pem)
	token   string           // an admin token for root (`gpud token issue`)
	join    string           // a file holding the join token, mode 600
	c       *e2etest.Cluster // addr is url: the group as its clients see it
	ctrd    *containerd.Daemon
}

// client is a client over the members' list, as GPUD_CONTROLLER gives one.
func (h *haGroup) client() *api.Client {
	h.t.Helper()
	cl, err := api.NewClientWith(h.url, api.ClientOptions{CAFile: h.ca, Token: h.token})
	if err != nil {
		h.t.Fatal(err)
	}
	return cl
}

// startHAGroup starts three members (tune: extra gpud.toml replacements),
// issues a token and waits for a leader. The first member makes
// the CA, token key and join token; the others get copies, as an operator
// would copy <state_dir>/tls and <state_dir>/auth.
func startHAGroup(t *testing.T, tune [][2]string) *haGroup {
	t.Helper()
	e2etest.RequirePrereq(t)
	h := &haGroup{t: t, dir: e2etest.ShortTempDir(t)}
	for i := range 3 {
		m := &haMember{id: fmt.Sprintf("c%d", i+1), ip: fmt.Sprintf("127.77.%d.%d", os.Getpid()%250, i+1)}
		m.raft = fmt.Sprintf("%s:%d", m.ip, e2etest.FreePort(t))
		m.api = fmt.Sprintf("%s:%d", m.ip, e2etest.FreePort(t))
		m.dir = filepath.Join(h.dir, m.id)
		m.sock = filepath.Join(m.dir, "gpud.sock")
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		h.members = append(h.members, m)
	}
	for _, m := range h.members {
		m.conf = h.config(m, tune)
	}
	t.Cleanup(func() {
		h.c.CancelAll()
		for _, m := range h.members {
			h.stop(m, syscall.SIGTERM)
			if t.Failed() {
				t.Logf("gpud controller %s log:\n%s", m.id, m.log.String())
			}
		}
		if h.ctrd != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = h.ctrd.Stop(ctx)
			cancel()
		}
		e2etest.KillStrayShims(t, h.dir)
	})
	first := h.members[0]
	h.start(first)
	e2etest.WaitFor(t, 30*time.Second, "the first member's CA and keys", func() bool {
		for _, p := range []string{"tls/ca-key.pem", "tls/ca.pem", "auth/token.key", "auth/join.token", "auth/step-ticket.key"} {
			if _, err := os.Stat(filepath.Join(first.stateDir(), p)); err != nil {
				return false
			}
		}
		return true
	})
	for _, m := range h.members[1:] {
		h.copyCredentials(first, m)
		h.start(m)
	}
	var urls []string
	for _, m := range h.members {
		urls = append(urls, "https://"+m.api)
	}
	h.url = strings.Join(urls, ",")
	h.ca = filepath.Join(first.stateDir(), "tls", "ca.pem")
	h.token = h.gpud("token", "issue", "--config", first.conf, "--user", "root", "--role", "admin", "--ttl", "1h")
	h.join = filepath.Join(h.dir, "join.token")
	if err := os.WriteFile(h.join, []byte(h.gpud("token", "join", "--config", first.conf)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.c = &e2etest.Cluster{T: t, Dir: h.dir, Addr: h.url, Log: &e2etest.SyncBuffer{}, Copts: api.ClientOptions{CAFile: h.ca, Token: h.token}}
	h.leader(30 * time.Second)
	return h
}

// gpud runs a short gpud command and returns its trimmed stdout.
func (h *haGroup) gpud(args ...string) string {
	h.t.Helper()
	out, err := exec.Command(filepath.Join(e2etest.BinDir, "gpud"), args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			h.t.Fatalf("gpud %v: %v: %s", args, err, ee.Stderr)
		}
		h.t.Fatalf("gpud %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

// nodeConfig is node.toml of the agents: the group's CA and join token
// (the controller list comes from --controller), a 2s kill grace, and
// step listeners on free loopback ports (joined agents serve one, and
// several agents share this host).
func (h *haGroup) nodeConfig() string {
	h.t.Helper()
	p := filepath.Join(h.dir, "node.toml")
	body := fmt.Sprintf(`version = 1
[node]
ca_file = %q
join_token_file = %q
checkpoint_root = %q
kill_grace = "2s"
step_listen = "127.0.0.1:0"
`, h.ca, h.join, filepath.Join(h.dir, "checkpoints"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// cli runs a client binary (gpusubmit, gpuq) in dir with GPUD_CONTROLLER
// set to the members' list, the CA and the token.
func (h *haGroup) cli(dir, name string, args ...string) e2etest.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir, name), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.dir, api.EnvController + "=" + h.url, api.EnvCA + "=" + h.ca, api.EnvToken + "=" + h.token}
	return e2etest.RunCommand(h.t, cmd, fmt.Sprintf("%s %v", name, args))
}

// copyCredentials copies the CA, token key and join token from one
// member's state dir to another's.
func (h *haGroup) copyCredentials(from, to *haMember) {
	h.t.Helper()
	if err := os.MkdirAll(to.stateDir(), 0o700); err != nil {
		h.t.Fatal(err)
	}
	for _, d := range []string{"tls", "auth"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(from.stateDir(), d), to.stateDir()+"/").CombinedOutput(); err != nil {
			h.t.Fatalf("copy %s to %s: %v: %s", d, to.id, err, out)
		}
	}
}

// config is etc/gpud.toml for m: its socket, address and state dir, 1s
// node heartbeats with a 10s timeout, 1s scheduling, and [ha].
func (h *haGroup) config(m *haMember, tune [][2]string) string {
	t := h.t
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, p := range h.members {
		peers = append(peers, fmt.Sprintf("{id = %q, raft = %q, api = %q}", p.id, p.raft, "https://"+p.api))
	}
	s := string(base)
	for _, r := range append([][2]string{
		{`listen_socket = "/run/gpud/gpud.sock"`, fmt.Sprintf("listen_socket = %q", m.sock)},
		{`listen_tcp = ""`, fmt.Sprintf("listen_tcp = %q", m.api)},
		{`state_dir = "/var/lib/gpud"`, fmt.Sprintf("state_dir = %q", m.stateDir())},
		{`node_timeout = "30s"`, `node_timeout = "10s"`},
		{`heartbeat_interval = "5s"`, `heartbeat_interval = "1s"`},
		{`interval = "5s"`, `interval = "1s"`},
		// The burst is one user's 8 clients over https: no rate limit.
		{`submit_rate = 20.0`, `submit_rate = 0.0`},
		{"\nid = \"\"\n", fmt.Sprintf("\nid = %q\n", m.id)},
		{`raft_listen = ""`, fmt.Sprintf("raft_listen = %q", m.raft)},
		{"\nsnapshot_interval = \"\"\n", "\nsnapshot_interval = \"\"\npeers = [" + strings.Join(peers, ", ") + "]\n"},
	}, tune...) {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the HA test", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	p := filepath.Join(m.dir, "gpud.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// start starts m's controller process and waits until its socket answers.
func (h *haGroup) start(m *haMember) {
	t := h.t
	t.Helper()
	m.log = &e2etest.SyncBuffer{}
	m.cmd = exec.Command(filepath.Join(e2etest.BinDir, "gpud"), "controller", "--config", m.conf, "--log-format", "text")
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start gpud controller %s: %v", m.id, err)
	}
	done := make(chan struct{})
	m.done = done
	cmd := m.cmd
	go func() { _ = cmd.Wait(); close(done) }()
	e2etest.WaitFor(t, 30*time.Second, "controller "+m.id+" answering", func() bool {
		select {
		case <-done:
			t.Fatalf("gpud controller %s exited early:\n%s", m.id, m.log.String())
		default:
		}
		resp, err := m.http().Get("http://gpud/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// stop signals m's process group and waits for it.
func (h *haGroup) stop(m *haMember, sig syscall.Signal) {
	if !m.alive() {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, sig)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-m.done
	}
}

// leader waits for exactly one member to serve as leader.
func (h *haGroup) leader(within time.Duration) *haMember {
	h.t.Helper()
	var l *haMember
	e2etest.WaitFor(h.t, within, "one leader", func() bool {
		var found []*haMember
		for _, m := range h.members {
			if m.serves() {
				found = append(found, m)
			}
		}
		if len(found) == 1 {
			l = found[0]
			return true
		}
		return false
	})
	return l
}

// startContainerd starts the private containerd the node agents share.
func (h *haGroup) startContainerd() {
	h.t.Helper()
	logf, err := os.Create(filepath.Join(h.dir, "containerd.log"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := containerd.StartDaemon(ctx, containerd.DaemonOptions{Dir: filepath.Join(h.dir, "containerd"), Log: logf})
	if err != nil {
		h.t.Fatalf("start containerd: %v", err)
	}
	h.ctrd = d
}

// jobsOn lists every job m holds (a follower from its replica).
func jobsOn(t testing.TB, m *haMember) map[spec.JobID]spec.JobState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := m.client(t).Jobs(ctx, api.JobFilter{All: true, View: api.ViewBrief})
	if err != nil {
		t.Fatalf("list jobs on %s: %v", m.id, err)
	}
	out := map[spec.JobID]spec.JobState{}
	for _, j := range jobs {
		if _, dup := out[j.ID]; dup {
			t.Errorf("%s lists job %d twice", m.id, j.ID)
		}
		out[j.ID] = j.State
	}
	return out
}

// jobsByName lists the jobs m holds whose name starts with prefix, by name.
func jobsByName(t testing.TB, m *haMember, prefix string) map[string][]spec.JobID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := m.client(t).Jobs(ctx, api.JobFilter{All: true, View: api.ViewBrief})
	if err != nil {
		t.Fatalf("list jobs on %s: %v", m.id, err)
	}
	out := map[string][]spec.JobID{}
	for _, j := range jobs {
		if strings.HasPrefix(j.Name, prefix) {
			out[j.Name] = append(out[j.Name], j.ID)
		}
	}
	return out
}

// longJob is a job holding gpus GPUs that sleeps for ten minutes.
func longJob(work string, gpus int) spec.JobSpec {
	return spec.JobSpec{Name: "long", Script: "#!/bin/sh\nsleep 600\n", WorkDir: work, SubmitDir: work,
		Output: filepath.Join(work, "long-%j.out"), Resources: spec.Resources{Nodes: 1, GPUsPerNode: gpus}}
}

func submitJob(t testing.TB, cl *api.Client, js spec.JobSpec) spec.JobID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatalf("submit %s: %v", js.Name, err)
	}
	return r.ID
}

// TestHAKillLeaderDuringBurst kills the leader with SIGKILL in the middle
// of a burst of submissions from 8 clients, with jobs running on two
// nodes; clients and node agents are given the three members' addresses
// and follow the leader themselves. A new leader serves within 5s (the
// first acknowledgement of a submission sent after the kill, as a client
// sees it), every submission is there exactly once (each carries an
// Idempotency-Key and a name of its own; a client resends it with the same
// key until it is acknowledged, and the transport resends it after a lost
// connection or a 503), on the new leader and on the surviving follower's
// replica, the running jobs keep running (same attempt, no restart), jobs
// that were pending start under the new leader, and jobs that ended just
// before the kill are in every member's accounting exactly once.
func TestHAKillLeaderDuringBurst(t *testing.T) {
	h := startHAGroup(t, nil)
	h.startContainerd()
	nodeConf := h.nodeConfig()
	for _, n := range []string{"n1", "n2"} {
		h.c.StartNode(t, n, nodeConf)
	}
	work := t.TempDir()
	cl := h.client()
	var running []spec.JobID
	for range 2 {
		running = append(running, submitJob(t, cl, longJob(work, 8)))
	}
	before := map[spec.JobID]spec.Job{}
	for _, id := range running {
		before[id] = e2etest.WaitJob(t, cl, id, time.Minute, "running", func(j spec.Job) bool { return j.State == spec.StateRunning })
	}
	old := h.leader(10 * time.Second)

	// The burst: 8-GPU jobs that stay pending behind the two long ones,
	// each named after its client and sequence number.
	const total = 2000
	burst := func(name string) spec.JobSpec {
		return spec.JobSpec{Name: name, Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work,
			Output: filepath.Join(work, "b-%j.out"), Resources: spec.Resources{Nodes: 1, GPUsPerNode: 8}}
	}
	var mu sync.Mutex
	var acked []spec.JobID
	ackedAt := map[spec.JobID]time.Time{}
	ackedName := map[string]spec.JobID{}
	resends := 0 // submissions the test had to send again (same key)
	why := map[string]int{}
	// killed is when SIGKILL was sent, dead when the process was reaped:
	// the first acknowledgement of a request sent after dead came from
	// the new leader (one sent before may still be the old leader's).
	var killed, dead time.Time
	var firstAfter time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := range 8 {
		c := h.client() // a client process of its own
		wg.Go(func() {
			for ctx.Err() == nil {
				n := seq.Add(1)
				if n > total {
					return
				}
				name := fmt.Sprintf("burst-%d-%d", w, n)
				key := api.NewIdempotencyKey()
				for ctx.Err() == nil {
					sent := time.Now()
					rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
					resp, err := c.Submit(rctx, api.SubmitRequest{Job: burst(name), IdempotencyKey: key})
					rcancel()
					if err != nil {
						// Not acknowledged: send the same submission
						// again; its key keeps it one job.
						mu.Lock()
						resends++
						why[err.Error()]++
						mu.Unlock()
						time.Sleep(20 * time.Millisecond)
						continue
					}
					now := time.Now()
					mu.Lock()
					acked = append(acked, resp.ID)
					ackedAt[resp.ID] = now
					ackedName[name] = resp.ID
					if !dead.IsZero() && firstAfter.IsZero() && sent.After(dead) {
						firstAfter = now
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	e2etest.WaitFor(t, 2*time.Minute, "600 submissions acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 600
	})
	// Jobs that end just before the kill: their accounting records may
	// still be in the old leader's recorder queue.
	mu.Lock()
	endedEarly := slices.Clone(acked[:50])
	mu.Unlock()
	for _, id := range endedEarly {
		if _, err := cl.JobAction(ctx, id, "cancel", api.JobActionRequest{}); err != nil {
			t.Fatalf("cancel %d: %v", id, err)
		}
	}
	// A client watching the group: when does a member other than the
	// killed one answer as leader?
	var elected time.Time
	watch := h.client()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var ww sync.WaitGroup
	mu.Lock()
	killed = time.Now()
	mu.Unlock()
	h.stop(old, syscall.SIGKILL)
	mu.Lock()
	dead = time.Now()
	mu.Unlock()
	ww.Go(func() {
		for wctx.Err() == nil {
			rctx, rcancel := context.WithTimeout(wctx, time.Second)
			cs, err := watch.Controllers(rctx)
			rcancel()
			if err == nil && cs.Leader != "" && cs.Leader != old.id {
				mu.Lock()
				elected = time.Now()
				mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Wait()
	ww.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the burst did not finish: %v", ctx.Err())
	}
	if firstAfter.IsZero() {
		t.Fatal("no submission sent after the kill was acknowledged")
	}
	gap := firstAfter.Sub(killed)
	nl := h.leader(10 * time.Second)
	if nl == old {
		t.Fatalf("no new leader after the kill")
	}
	t.Logf("leader %s killed; a client saw %s lead %v later; first submission acknowledged %v after the kill; %d submissions sent again by the test",
		old.id, nl.id, elected.Sub(killed).Round(time.Millisecond), gap.Round(time.Millisecond), resends)
	for msg, n := range why {
		t.Logf("%d times: %s", n, msg)
	}
	if gap > 5*time.Second {
		t.Errorf("the first submission after the kill was acknowledged %v later; want a leader serving within 5s", gap)
	}
	if len(ackedName) != total {
		t.Errorf("%d submissions acknowledged; want %d", len(ackedName), total)
	}

	// Every acknowledged job exactly once, on the new leader and on the
	// surviving follower's replica (which refreshes within seconds).
	var follower *haMember
	for _, m := range h.members {
		if m != old && m != nl {
			follower = m
		}
	}
	for _, m := range []*haMember{nl, follower} {
		e2etest.WaitFor(t, 30*time.Second, "every acknowledged job on "+m.id, func() bool {
			have := jobsOn(t, m)
			for _, id := range acked {
				if _, ok := have[id]; !ok {
					return false
				}
			}
			return true
		})
	}
	if len(acked) != len(slices.Compact(slices.Sorted(slices.Values(acked)))) {
		t.Errorf("an id was acknowledged twice")
	}
	// Exactly once: each submission (its name) is one job, the one
	// acknowledged, however often it was sent.
	for _, m := range []*haMember{nl, follower} {
		byName := jobsByName(t, m, "burst-")
		if len(byName) != total {
			t.Errorf("%s holds %d burst submissions; want %d", m.id, len(byName), total)
		}
		for name, ids := range byName {
			if len(ids) != 1 || ids[0] != ackedName[name] {
				t.Errorf("%s: submission %s is jobs %v; want exactly the acknowledged job %d", m.id, name, ids, ackedName[name])
			}
		}
	}

	// The running jobs kept running: same attempt, same allocation.
	for _, id := range running {
		j, err := cl.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		b := before[id]
		if j.State != spec.StateRunning || j.Attempt != b.Attempt || j.Alloc == nil || j.Alloc.ID != b.Alloc.ID {
			t.Errorf("job %d across the failover: %s attempt %d; before: %s attempt %d alloc %s", id, j.State, j.Attempt, b.State, b.Attempt, b.Alloc.ID)
		}
	}

	// Pending jobs start under the new leader: make room for two of those
	// acknowledged before the kill.
	var keep []spec.JobID
	var drop []spec.JobID
	for _, id := range acked {
		switch {
		case slices.Contains(endedEarly, id):
		case len(keep) < 2 && ackedAt[id].Before(killed):
			keep = append(keep, id)
		default:
			drop = append(drop, id)
		}
	}
	if _, err := cl.CancelJobs(ctx, api.CancelJobsRequest{Filter: api.JobFilter{IDs: append(drop, running...)}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range keep {
		j := e2etest.WaitJob(t, cl, id, 2*time.Minute, "completed under the new leader", func(j spec.Job) bool { return j.State.Terminal() })
		if j.State != spec.StateCompleted || !j.StartTime.After(killed) {
			t.Errorf("job %d (pending at the kill): %s, started %v; want COMPLETED, started after the kill at %v", id, j.State, j.StartTime, killed)
		}
	}

	// Jobs that ended just before the kill: in accounting once, on both.
	for _, m := range []*haMember{nl, follower} {
		e2etest.WaitFor(t, 30*time.Second, "accounting of the jobs cancelled before the kill on "+m.id, func() bool {
			recs, err := m.client(t).AcctJobs(ctx, api.AcctFilter{IDs: endedEarly})
			if err != nil {
				t.Fatalf("accounting on %s: %v", m.id, err)
			}
			seen := map[spec.JobID]int{}
			for _, r := range recs {
				seen[r.ID]++
				if seen[r.ID] > 1 {
					t.Fatalf("%s accounts job %d twice", m.id, r.ID)
				}
			}
			return len(seen) == len(endedEarly)
		})
	}
}

// TestHAMinorityPartition cuts the leader off from the other two members
// with iptables while it keeps running: it stops answering the node
// protocol (and takes no submission) before the majority has a new leader,
// the majority elects one within 5s that carries on (the running job keeps
// running, a new job starts), and after the heal the old leader rejoins as
// a follower holding the same jobs as the others.
func TestHAMinorityPartition(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("SKIP (loud): iptables not found (apt-get install iptables; scripts/deps.sh installs it)")
	}
	h := startHAGroup(t, nil)
	h.startContainerd()
	h.c.StartNode(t, "n1", h.nodeConfig())
	work := t.TempDir()
	cl := h.client()
	a := submitJob(t, cl, longJob(work, 4))
	aBefore := e2etest.WaitJob(t, cl, a, time.Minute, "running", func(j spec.Job) bool { return j.State == spec.StateRunning })
	old := h.leader(10 * time.Second)

	// Probe every member every 20ms: when did the old leader first refuse
	// the node protocol, when did another first answer it?
	var mu sync.Mutex
	var oldDown, newUp time.Time
	var newLeader *haMember
	stopProbe := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Go(func() {
		for {
			select {
			case <-stopProbe:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, m := range h.members {
				refuses := m.refusesNodes()
				now := time.Now()
				mu.Lock()
				switch {
				case m == old && refuses && oldDown.IsZero():
					oldDown = now
				case m != old && !refuses && newUp.IsZero():
					newUp, newLeader = now, m
				}
				mu.Unlock()
			}
		}
	})
	defer func() { close(stopProbe); pwg.Wait() }()

	start := time.Now()
	var heals []func()
	for _, m := range h.members {
		if m != old {
			heals = append(heals, e2etest.Cut(t, old.ip, m.ip))
		}
	}
	e2etest.WaitFor(t, 10*time.Second, "a new leader among the majority", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return !newUp.IsZero() && !oldDown.IsZero()
	})
	mu.Lock()
	t.Logf("cut at 0; old leader %s refused nodes at %v; %s answered them at %v",
		old.id, oldDown.Sub(start).Round(time.Millisecond), newLeader.id, newUp.Sub(start).Round(time.Millisecond))
	if !oldDown.Before(newUp) {
		t.Errorf("the old leader still answered nodes at %v, after the new one started at %v: both could dispatch", oldDown.Sub(start), newUp.Sub(start))
	}
	if newUp.Sub(start) > 5*time.Second {
		t.Errorf("the majority took %v to elect a serving leader; want within 5s", newUp.Sub(start))
	}
	nl := newLeader
	mu.Unlock()

	// The cut-off member takes no submission.
	if _, err := old.client(t).Submit(context.Background(), api.SubmitRequest{Job: longJob(work, 1)}); !errors.Is(err, spec.ErrNotLeader) {
		t.Errorf("a submission to the cut-off old leader: %v; want not_leader", err)
	}
	// The majority carries on: the running job runs, a new one, sent
	// by gpusubmit over the members' list (the cut-off member first, if
	// the client last talked to it), starts.
	r := h.cli(work, "gpusubmit", "--parsable", "-G", "4", "--job-name", "after-cut", "--wrap", "sleep 600")
	if r.Code != 0 {
		t.Fatalf("gpusubmit over %s after the cut: exit %d: %s", h.url, r.Code, r.Stderr)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
	}
	b := spec.JobID(n)
	e2etest.WaitJob(t, cl, b, time.Minute, "running under the new leader", func(j spec.Job) bool { return j.State == spec.StateRunning })
	if j, err := cl.Job(context.Background(), a); err != nil || j.State != spec.StateRunning || j.Attempt != aBefore.Attempt {
		t.Errorf("job %d after the partition: %v %s attempt %d; want still RUNNING, attempt %d", a, err, j.State, j.Attempt, aBefore.Attempt)
	}

	for _, heal := range heals {
		heal()
	}
	e2etest.WaitFor(t, 30*time.Second, "the old leader rejoins as a follower", func() bool {
		cs := old.controllers(t)
		for _, m := range cs.Members {
			if m.ID == old.id {
				return cs.Leader == nl.id && m.State == "follower"
			}
		}
		return false
	})
	if l := h.leader(10 * time.Second); l != nl {
		t.Errorf("after the heal %s leads; want %s", l.id, nl.id)
	}
	want := jobsOn(t, nl)
	e2etest.WaitFor(t, 30*time.Second, "every member holds the same jobs", func() bool {
		for _, m := range h.members {
			if !mapsEqual(jobsOn(t, m), want) {
				return false
			}
		}
		return true
	})
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestHAReplaceMember replaces a member by one started from an empty
// state dir (only the copied CA and keys): the log it would need is
// compacted away, so it catches up from a snapshot, and then holds what
// the leader holds.
func TestHAReplaceMember(t *testing.T) {
	h := startHAGroup(t, [][2]string{
		{"snapshot_threshold = 0", "snapshot_threshold = 32"},
		{"trailing_logs = 0", "trailing_logs = 8"},
		{`snapshot_interval = ""`, `snapshot_interval = "500ms"`},
	})
	work := t.TempDir()
	cl := h.client()
	js := spec.JobSpec{Name: "q", Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work, Resources: spec.Resources{Nodes: 1, GPUsPerNode: 8}}
	for range 100 {
		submitJob(t, cl, js)
	}
	l := h.leader(10 * time.Second)
	var f *haMember
	for _, m := range h.members {
		if m != l {
			f = m
		}
	}
	h.stop(f, syscall.SIGKILL)
	if err := os.RemoveAll(f.stateDir()); err != nil {
		t.Fatal(err)
	}
	h.copyCredentials(l, f)
	for range 200 {
		submitJob(t, cl, js)
	}
	e2etest.WaitFor(t, 30*time.Second, "a snapshot on the leader", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(l.stateDir(), "raft", "snapshots", "*", "state.bin"))
		return len(snaps) > 0
	})
	h.start(f)
	want := jobsOn(t, l)
	e2etest.WaitFor(t, 60*time.Second, "the new member holds the leader's 300 jobs", func() bool {
		return len(want) == 300 && mapsEqual(jobsOn(t, f), want)
	})
	if !strings.Contains(f.log.String(), "HA snapshot restored") {
		t.Errorf("the new member caught up without installing a snapshot; its log:\n%s", f.log.String())
	}
	cs := f.controllers(t)
	if cs.Leader != l.id || len(cs.Members) != 3 {
		t.Errorf("GET /v1/controllers on the new member: %+v; want 3 members led by %s", cs, l.id)
	}

	// gpuq controllers over the members' list asks each for its own
	// term and indices: every row has them, the leader's the highest
	// commit index.
	r := h.cli(work, "gpuq", "controllers", "--json")
	var got api.ControllersResponse
	if err := json.Unmarshal([]byte(r.Stdout), &got); r.Code != 0 || err != nil {
		t.Fatalf("gpuq controllers --json: exit %d, %v: %s %s", r.Code, err, r.Stdout, r.Stderr)
	}
	if got.Leader != l.id || len(got.Members) != 3 {
		t.Fatalf("gpuq controllers: %+v; want 3 members led by %s", got, l.id)
	}
	for _, m := range got.Members {
		if m.Term == 0 || m.CommitIndex == 0 || m.AppliedIndex == 0 {
			t.Errorf("gpuq controllers row %+v: want the member's own term, commit and applied index", m)
		}
	}
}

// TestHAConfigFollowsLeader: the configuration is the group's. A
// partition added to the leader's gpud.toml and reloaded there (SIGHUP)
// is listed by every member; a follower's own reload is refused, naming
// the leader; after the leader is killed, the new leader, whose own file
// never had the partition, takes jobs for it.
func TestHAConfigFollowsLeader(t *testing.T) {
	h := startHAGroup(t, nil)
	l := h.leader(30 * time.Second)
	b, err := os.ReadFile(l.conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.conf, append(b, "\n[[partition]]\nname = \"late\"\nnodes = [\"ALL\"]\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	lists := func(m *haMember) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ps, err := m.client(t).Partitions(ctx)
		return err == nil && slices.ContainsFunc(ps, func(p api.Partition) bool { return p.Name == "late" })
	}
	for _, m := range h.members {
		e2etest.WaitFor(t, 20*time.Second, "member "+m.id+" lists partition late", func() bool { return lists(m) })
	}
	var f *haMember
	for _, m := range h.members {
		if m != l {
			f = m
		}
	}
	if err := f.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, 10*time.Second, "the follower refusing its own reload", func() bool {
		return strings.Contains(f.log.String(), "reload there")
	})
	if !lists(f) {
		t.Errorf("the follower's refused reload dropped the group's partition")
	}

	h.stop(l, syscall.SIGKILL)
	nl := h.leader(30 * time.Second)
	if own, _ := os.ReadFile(nl.conf); strings.Contains(string(own), `"late"`) {
		t.Fatal("the new leader's own gpud.toml has the partition; the test shows nothing")
	}
	work := t.TempDir()
	r := h.cli(work, "gpusubmit", "--parsable", "--hold", "-p", "late", "--wrap", "true")
	if r.Code != 0 {
		t.Errorf("a job for partition late on the new leader %s: exit %d %s; want accepted (the group's configuration)", nl.id, r.Code, r.Stderr)
	}
}
