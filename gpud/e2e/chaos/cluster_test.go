package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// The chaos cluster: seven hosts, each a network namespace on one bridge
// (e2etest.Net), as a site would run gpud on separate machines:
//
//	c1 c2 c3   gpud controller, [ha], each with its own state_dir on a
//	           tmpfs of its own (so its disk can fill), TLS on :6817,
//	           Raft on :6819
//	n1 n2 n3   containerd and gpud node (mock DGX H100), joined with the
//	           join token, the three controllers listed in node.toml
//	login      the CLIs, as a user with a token, the three controllers in
//	           GPUD_CONTROLLER
//
// The test itself reaches the controllers through their unix sockets
// (file system paths are shared by every namespace) as root.

const (
	apiPort  = "6817"
	raftPort = "6819"
)

type cluster struct {
	t     *testing.T
	net   *e2etest.Net
	dir   string
	ctl   []*member
	nodes []*node
	login *e2etest.Host
	user  e2etest.LocalUser
	work  string // the user's submit dir
	ca    string
	token string // the user's
	// admin reaches every member over its unix socket (root: admin).
	admin *api.Client
}

// member is one controller host.
type member struct {
	id    string
	host  *e2etest.Host
	dir   string
	conf  string
	mu    sync.Mutex
	cmd   *exec.Cmd
	log   *e2etest.SyncBuffer
	done  chan struct{}
	tmpfs string // its state_dir, a tmpfs mount
}

func (m *member) stateDir() string { return m.tmpfs }
func (m *member) sock() string     { return filepath.Join(m.dir, "gpud.sock") }
func (m *member) url() string      { return "https://" + m.host.Addr + ":" + apiPort }

// node is one GPU host.
type node struct {
	name  string
	host  *e2etest.Host
	dir   string
	conf  string
	ctrd  *exec.Cmd
	mu    sync.Mutex
	agent *exec.Cmd
	log   *e2etest.SyncBuffer
	done  chan struct{}
	// logs keeps the logs of agents stopped or killed before.
	logs []string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	u := e2etest.AddUser(t)
	c := &cluster{t: t, net: e2etest.NewNet(t, "gch"), dir: e2etest.ShortTempDir(t), user: u, work: u.Home}
	for _, d := range []string{c.dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		m := &member{id: fmt.Sprintf("c%d", i+1), host: c.net.AddHost(fmt.Sprintf("c%d", i+1), i+1)}
		m.dir = filepath.Join(c.dir, m.id)
		m.tmpfs = filepath.Join(m.dir, "state")
		if err := os.MkdirAll(m.tmpfs, 0o700); err != nil {
			t.Fatal(err)
		}
		// Its own small disk, which the disk-full fault fills.
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m,mode=0700", "tmpfs", m.tmpfs).CombinedOutput(); err != nil {
			t.Fatalf("mount a tmpfs for %s: %v: %s", m.id, err, out)
		}
		c.ctl = append(c.ctl, m)
	}
	c.login = c.net.AddHost("login", 9)
	for i := range 3 {
		n := &node{name: fmt.Sprintf("n%d", i+1), host: c.net.AddHost(fmt.Sprintf("n%d", i+1), 11+i)}
		n.dir = filepath.Join(c.dir, n.name)
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(func() {
		c.keepLogs(os.Getenv("GPUD_CHAOS_REPORT"))
		c.cancelAll()
		for _, n := range c.nodes {
			n.stopAgent(syscall.SIGTERM)
			n.stopContainerd()
			e2etest.KillStrayShims(t, n.dir)
			if t.Failed() {
				t.Logf("gpud node %s log:\n%s", n.name, n.allLogs())
			}
		}
		for _, m := range c.ctl {
			m.stop(syscall.SIGTERM)
			if t.Failed() && m.log != nil { // nil: never started
				t.Logf("gpud controller %s log:\n%s", m.id, m.log.String())
			}
			_ = exec.Command("umount", "-l", m.tmpfs).Run()
		}
	})
	var peers []string
	for _, m := range c.ctl {
		peers = append(peers, fmt.Sprintf("{id = %q, raft = %q, api = %q}", m.id, m.host.Addr+":"+raftPort, m.url()))
	}
	for _, m := range c.ctl {
		m.conf = c.controllerConfig(m, strings.Join(peers, ", "))
	}
	first := c.ctl[0]
	c.startMember(first)
	e2etest.WaitFor(t, 60*time.Second, "the first member's CA and keys", func() bool {
		for _, p := range credentials {
			if _, err := os.Stat(filepath.Join(first.stateDir(), p)); err != nil {
				return false
			}
		}
		return true
	})
	for _, m := range c.ctl[1:] {
		c.copyCredentials(first, m)
		c.startMember(m)
	}
	c.ca = filepath.Join(c.dir, "ca.pem")
	b, err := os.ReadFile(filepath.Join(first.stateDir(), "tls", "ca.pem"))
	if err != nil || os.WriteFile(c.ca, b, 0o644) != nil {
		t.Fatalf("copy the CA out: %v", err)
	}
	var socks []string
	for _, m := range c.ctl {
		socks = append(socks, "unix://"+m.sock())
	}
	if c.admin, err = api.NewClient(strings.Join(socks, ",")); err != nil {
		t.Fatal(err)
	}
	c.waitLeader(60 * time.Second)
	c.token = c.gpud(first, "token", "issue", "--config", first.conf, "--user", u.Name, "--ttl", "24h")
	join := c.gpud(first, "token", "join", "--config", first.conf)
	for _, n := range c.nodes {
		if err := os.WriteFile(filepath.Join(n.dir, "join.token"), []byte(join+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		n.conf = c.nodeConfig(n)
		n.startContainerd(t)
		n.startAgent(t)
	}
	for _, n := range c.nodes {
		c.waitNode(n.name, 2*time.Minute, func(s spec.NodeState) bool {
			return s == spec.NodeIdle || s == spec.NodeMixed || s == spec.NodeAllocated
		})
	}
	return c
}

// credentials are the files every member must share (docs/ha.md,
// "Setting up a group").
var credentials = []string{"tls/ca.pem", "tls/ca-key.pem", "auth/token.key", "auth/join.token", "auth/step-ticket.key"}

func (c *cluster) copyCredentials(from, to *member) {
	c.t.Helper()
	for _, p := range credentials {
		dst := filepath.Join(to.stateDir(), p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			c.t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-p", filepath.Join(from.stateDir(), p), dst).CombinedOutput(); err != nil {
			c.t.Fatalf("copy %s to %s: %v: %s", p, to.id, err, out)
		}
	}
}

// controllerConfig is etc/gpud.toml for member m, with the defaults a
// site keeps (5 s heartbeats, 30 s node_timeout, 2 m failover grace) but
// a 1 s scheduling interval.
func (c *cluster) controllerConfig(m *member, peers string) string {
	t := c.t
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(base)
	for _, r := range [][2]string{
		{`listen_socket = "/run/gpud/gpud.sock"`, fmt.Sprintf("listen_socket = %q", m.sock())},
		{`listen_tcp = ""`, fmt.Sprintf("listen_tcp = %q", m.host.Addr+":"+apiPort)},
		{`state_dir = "/var/lib/gpud"`, fmt.Sprintf("state_dir = %q", m.stateDir())},
		{`interval = "5s"`, `interval = "1s"`},
		// One user submits steadily over https: no rate limit.
		{`submit_rate = 20.0`, `submit_rate = 0.0`},
		{"\nid = \"\"\n", fmt.Sprintf("\nid = %q\n", m.id)},
		{`raft_listen = ""`, fmt.Sprintf("raft_listen = %q", m.host.Addr+":"+raftPort)},
		{"\nsnapshot_interval = \"\"\n", "\nsnapshot_interval = \"\"\npeers = [" + peers + "]\n"},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the chaos test", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	// GPUD_CHAOS_RAFT="HEARTBEAT,ELECTION,LEASE" measures other Raft
	// timeouts than the shipped defaults (how soon a cut leader is
	// replaced), e.g. "500ms,500ms,400ms".
	if v := os.Getenv("GPUD_CHAOS_RAFT"); v != "" {
		d := strings.Split(v, ",")
		if len(d) != 3 {
			t.Fatalf("GPUD_CHAOS_RAFT=%q: want HEARTBEAT,ELECTION,LEASE", v)
		}
		for i, k := range []string{"heartbeat_timeout", "election_timeout", "leader_lease_timeout"} {
			s = strings.Replace(s, k+` = ""`, fmt.Sprintf("%s = %q", k, strings.TrimSpace(d[i])), 1)
		}
	}
	p := filepath.Join(m.dir, "gpud.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// controllers is the https address list, in the given order of members.
func controllers(ms ...*member) string {
	var urls []string
	for _, m := range ms {
		urls = append(urls, m.url())
	}
	return strings.Join(urls, ",")
}

func (c *cluster) nodeConfig(n *node) string {
	body := fmt.Sprintf(`version = 1
[node]
name = %q
controller = %q
address = %q
ca_file = %q
join_token_file = %q
state_dir = %q
gpus = "mock:dgx-h100"
cpus = 8
cdi_dir = %q
containerd_address = %q
checkpoint_root = %q
kill_grace = "2s"
usage_interval = "0s"
`, n.name, controllers(c.ctl...), n.host.Addr, c.ca, filepath.Join(n.dir, "join.token"), filepath.Join(n.dir, "state"),
		filepath.Join(n.dir, "cdi"), n.socket(), filepath.Join(c.dir, "checkpoints"))
	p := filepath.Join(n.dir, "node.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// gpud runs a short gpud command on m's host and returns its stdout.
func (c *cluster) gpud(m *member, args ...string) string {
	c.t.Helper()
	cmd := m.host.Command(filepath.Join(e2etest.BinDir, "gpud"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("gpud %s on %s: %v\n%s", strings.Join(args, " "), m.id, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func (c *cluster) startMember(m *member) {
	t := c.t
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.log == nil {
		m.log = &e2etest.SyncBuffer{}
	}
	fmt.Fprintf(m.log, "--- start %s\n", time.Now().Format(time.RFC3339Nano))
	m.cmd = m.host.Command(filepath.Join(e2etest.BinDir, "gpud"), "controller", "--config", m.conf)
	m.cmd.Env = clockEnv(t, m.clock())
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start gpud controller %s: %v", m.id, err)
	}
	done := make(chan struct{})
	m.done = done
	cmd := m.cmd
	go func() { _ = cmd.Wait(); close(done) }()
}

// stop signals m's process group and waits for it (SIGKILL after 30 s).
func (m *member) stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func (m *member) running() bool {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// leader is the member that leads now (asked over every member's unix
// socket), or nil.
func (c *cluster) leader() *member {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, a := range c.admin.ControllersOfEach(ctx, 2*time.Second) {
		if a.Err == nil && a.Resp.Self != "" && a.Resp.Self == a.Resp.Leader {
			for _, m := range c.ctl {
				if m.id == a.Resp.Self {
					return m
				}
			}
		}
	}
	return nil
}

func (c *cluster) waitLeader(within time.Duration) *member {
	c.t.Helper()
	var l *member
	e2etest.WaitFor(c.t, within, "a leader", func() bool {
		l = c.leader()
		return l != nil
	})
	return l
}

// others are the members other than m.
func (c *cluster) others(m *member) []*member {
	var out []*member
	for _, x := range c.ctl {
		if x != m {
			out = append(out, x)
		}
	}
	return out
}

func (n *node) socket() string { return filepath.Join(n.dir, "containerd", "c.sock") }

// startContainerd starts the host's own containerd in its namespace, so
// its job containers (which share their shim's network namespace) are on
// the host's network.
func (n *node) startContainerd(t *testing.T) {
	t.Helper()
	dir := filepath.Join(n.dir, "containerd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	q := strconv.Quote
	cfg := fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %s
[ttrpc]
  address = %s
[plugins."io.containerd.internal.v1.opt"]
  path = %s
`, q(filepath.Join(dir, "root")), q(filepath.Join(dir, "state")), q(n.socket()), q(n.socket()+".ttrpc"), q(filepath.Join(dir, "opt")))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	n.ctrd = n.host.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	n.ctrd.Stdout, n.ctrd.Stderr = logf, logf
	n.ctrd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.ctrd.Start(); err != nil {
		t.Fatalf("start containerd on %s: %v", n.name, err)
	}
	go func() { _ = n.ctrd.Wait() }()
	e2etest.WaitFor(t, 30*time.Second, "containerd of "+n.name, func() bool {
		_, err := os.Stat(n.socket())
		return err == nil
	})
}

func (n *node) stopContainerd() {
	if n.ctrd != nil && n.ctrd.Process != nil {
		_ = syscall.Kill(-n.ctrd.Process.Pid, syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(-n.ctrd.Process.Pid, syscall.SIGKILL)
	}
}

// startAgent starts gpud node with nsenter --net (not ip netns exec,
// whose fresh /sys hides the cgroup mounts from runc).
func (n *node) startAgent(t *testing.T) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.log != nil {
		n.logs = append(n.logs, n.log.String())
	}
	n.log = &e2etest.SyncBuffer{}
	n.agent = n.host.Command(filepath.Join(e2etest.BinDir, "gpud"), "node", "--config", n.conf)
	n.agent.Env = clockEnv(t, n.clock())
	n.agent.Stdout, n.agent.Stderr = n.log, n.log
	n.agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.agent.Start(); err != nil {
		t.Fatalf("start gpud node on %s: %v", n.name, err)
	}
	done := make(chan struct{})
	n.done = done
	cmd := n.agent
	go func() { _ = cmd.Wait(); close(done) }()
}

func (n *node) stopAgent(sig syscall.Signal) {
	n.mu.Lock()
	cmd, done := n.agent, n.done
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	e2etest.StopProcess(cmd.Process, done, sig)
}

func (n *node) allLogs() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := strings.Join(n.logs, "--- agent restarted\n")
	if n.log != nil {
		out += n.log.String()
	}
	return out
}

// nodeState is the group's view of node name.
func (c *cluster) nodeState(name string) spec.NodeState {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := c.admin.Nodes(ctx)
	if err != nil {
		return ""
	}
	for _, nd := range nodes {
		if nd.Name == name {
			return nd.State
		}
	}
	return ""
}

func (c *cluster) waitNode(name string, within time.Duration, ok func(spec.NodeState) bool) {
	c.t.Helper()
	e2etest.WaitFor(c.t, within, "node "+name+" state", func() bool { return ok(c.nodeState(name)) })
}

// cancelAll cancels every job still live (cleanup).
func (c *cluster) cancelAll() {
	if c.admin == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.admin.CancelJobs(ctx, api.CancelJobsRequest{})
}

// loginCmd is a CLI on the login host, in the user's submit dir, with the
// user's token and the controllers in the order given.
func (c *cluster) loginCmd(ctx context.Context, addrs, name string, args ...string) *exec.Cmd {
	h := c.login.Command(filepath.Join(e2etest.BinDir, name), args...)
	cmd := exec.CommandContext(ctx, h.Path, h.Args[1:]...)
	cmd.Dir = c.work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.dir, api.EnvController + "=" + addrs, api.EnvCA + "=" + c.ca, api.EnvToken + "=" + c.token}
	return cmd
}

// keepLogs writes every daemon's log into dir ("": nowhere).
func (c *cluster) keepLogs(dir string) {
	if dir == "" || os.MkdirAll(dir, 0o755) != nil {
		return
	}
	for _, m := range c.ctl {
		if m.log != nil {
			_ = os.WriteFile(filepath.Join(dir, m.id+".log"), []byte(m.log.String()), 0o644)
		}
	}
	for _, n := range c.nodes {
		_ = os.WriteFile(filepath.Join(dir, n.name+".log"), []byte(n.allLogs()), 0o644)
	}
}
