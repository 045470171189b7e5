package multihost

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd"
)

// TestMultiHost is a cluster of separate hosts, each a network namespace
// on a private bridge: a controller host running `gpud controller` with
// TLS on TCP, three GPU hosts each running `gpud node` (mock DGX H100)
// with its own containerd (so its jobs live in its network namespace), and
// a login host where a user submits with a token. The nodes join with the
// cluster's join token and talk mTLS from then on.
//
// The test observes the controller through its unix socket as root (file
// system paths are shared by all namespaces); every user command goes from
// the login host over HTTPS.
func TestMultiHost(t *testing.T) {
	e2etest.RequireNetns(t)
	start := time.Now()
	mh := startMultiHost(t)
	t.Logf("multi-host cluster up in %v", time.Since(start).Round(time.Millisecond))

	t.Run("GangRendezvous", mh.testGangRendezvous)
	t.Run("SrunFromLogin", mh.testSrunFromLogin)
	t.Run("LinkCut", mh.testLinkCut)
	t.Run("ControllerRestart", mh.testControllerRestart)
	t.Run("Refused", mh.testRefused)
	t.Run("RestartOnCertificate", mh.testRestartOnCertificate)
	t.Logf("multi-host e2e took %v", time.Since(start).Round(time.Millisecond))
}

const mhControllerPort = "7443"

// multiHost is the running cluster.
type multiHost struct {
	t       *testing.T
	net     *e2etest.Net
	dir     string
	c       *e2etest.Cluster // the controller, through its unix socket
	ctrl    *e2etest.Host
	login   *e2etest.Host
	conf    string // controller gpud.toml
	ca      string // the controller's CA certificate, copied out
	url     string
	ctrlCmd *exec.Cmd
	ctrlLog *e2etest.SyncBuffer
	ctrlEnd chan struct{}
	nodes   map[string]*mhNode
	user    e2etest.LocalUser
	token   string
	work    string // the user's submit dir
	opts    mhOptions
}

// mhNode is one GPU host: its containerd and its agent.
type mhNode struct {
	host  *e2etest.Host
	dir   string
	conf  string
	ctrd  *exec.Cmd
	agent *exec.Cmd
	log   *e2etest.SyncBuffer
	done  chan struct{}
}

// mhOptions shape a multi-host cluster: its GPU hosts and the
// controller's node_timeout.
type mhOptions struct {
	gpuHosts    []string
	nodeTimeout string
}

func startMultiHost(t *testing.T) *multiHost {
	return startMultiHostWith(t, mhOptions{gpuHosts: []string{"gpu1", "gpu2", "gpu3"}, nodeTimeout: "4s"})
}

func startMultiHostWith(t *testing.T, o mhOptions) *multiHost {
	t.Helper()
	// The user first: its userdel then runs after every job has ended.
	u := e2etest.AddUser(t)
	mh := &multiHost{t: t, net: e2etest.NewNet(t, "gmh"), dir: e2etest.ShortTempDir(t), nodes: map[string]*mhNode{}, user: u, work: u.Home, opts: o}
	// The user's jobs run srun from the binaries' directory (the node
	// binds it into every job).
	for _, d := range []string{mh.dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mh.ctrl = mh.net.AddHost("ctl", 1)
	mh.login = mh.net.AddHost("login", 2)
	for i, name := range o.gpuHosts {
		mh.nodes[name] = &mhNode{host: mh.net.AddHost(name, 11+i)}
	}
	mh.url = "https://" + mh.ctrl.Addr + ":" + mhControllerPort
	mh.conf = mh.controllerConfig()
	mh.c = &e2etest.Cluster{T: t, Dir: mh.dir, Addr: "unix://" + filepath.Join(mh.dir, "gpud.sock"), Log: &e2etest.SyncBuffer{}}
	mh.ca = filepath.Join(mh.dir, "ca.pem")
	t.Cleanup(func() {
		mh.c.CancelAll()
		for _, n := range mh.nodes {
			n.stopAgent(syscall.SIGTERM)
			n.stopContainerd()
			e2etest.KillStrayShims(t, n.dir)
			if t.Failed() {
				t.Logf("gpud node %s log:\n%s", n.host.Name, n.log.String())
			}
		}
		mh.stopController(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gpud controller log:\n%s", mh.ctrlLog.String())
		}
	})
	mh.startController()

	// The CA and the join token are copied to the other hosts, as an
	// admin would: each node gets its own copy, mode 600.
	join := mh.gpudOn(mh.ctrl, "token", "join", "--config", mh.conf)
	for name, n := range mh.nodes {
		n.dir = filepath.Join(mh.dir, name)
		if err := os.MkdirAll(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.dir, "join.token"), []byte(join+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		n.conf = mh.nodeConfig(n)
		n.startContainerd(t)
		n.startAgent(t, mh)
	}
	for name := range mh.nodes {
		mh.waitNode(name, 60*time.Second, func(s spec.NodeState) bool { return s != "" && s != spec.NodeDown && s != spec.NodeUnknown })
	}
	for name, n := range mh.nodes {
		if !strings.Contains(n.log.String(), "joined the cluster") {
			t.Fatalf("node %s is up but did not join with the join token:\n%s", name, n.log.String())
		}
		if _, err := os.Stat(filepath.Join(n.dir, "state", "tls", "node.pem")); err != nil {
			t.Fatalf("node %s joined but keeps no node certificate for mTLS: %v", name, err)
		}
	}

	mh.token = mh.gpudOn(mh.ctrl, "token", "issue", "--config", mh.conf, "--user", mh.user.Name, "--ttl", "1h")
	return mh
}

// controllerConfig is etc/gpud.toml for the controller host: TLS on its
// bridge address, a unix socket for the test, 1s heartbeats and the
// cluster's node timeout (TestMultiHost's: 4s), a 1s scheduling interval.
func (mh *multiHost) controllerConfig() string {
	t := mh.t
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(base)
	for _, r := range [][2]string{
		{`listen_socket = "/run/gpud/gpud.sock"`, fmt.Sprintf("listen_socket = %q", filepath.Join(mh.dir, "gpud.sock"))},
		{`listen_tcp = ""`, fmt.Sprintf("listen_tcp = %q", mh.ctrl.Addr+":"+mhControllerPort)},
		{`state_dir = "/var/lib/gpud"`, fmt.Sprintf("state_dir = %q", filepath.Join(mh.dir, "state"))},
		{`node_timeout = "30s"`, fmt.Sprintf("node_timeout = %q", mh.opts.nodeTimeout)},
		{`heartbeat_interval = "5s"`, `heartbeat_interval = "1s"`},
		{`interval = "5s"`, `interval = "1s"`},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the multi-host test", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	p := filepath.Join(mh.dir, "gpud.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeConfig is node.toml of one GPU host: the controller over https, the
// CA and join token, its own address for MASTER_ADDR, a checkpoint root
// shared by every node (as a cluster file system would be).
func (mh *multiHost) nodeConfig(n *mhNode) string {
	body := fmt.Sprintf(`version = 1
[node]
name = %q
controller = %q
address = %q
ca_file = %q
join_token_file = %q
state_dir = %q
gpus = "mock:dgx-h100"
cdi_dir = %q
containerd_address = %q
checkpoint_root = %q
kill_grace = "2s"
usage_interval = "0s"
`, n.host.Name, mh.url, n.host.Addr, mh.ca, filepath.Join(n.dir, "join.token"), filepath.Join(n.dir, "state"),
		filepath.Join(n.dir, "cdi"), n.socket(), filepath.Join(mh.dir, "checkpoints"))
	p := filepath.Join(n.dir, "node.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		mh.t.Fatal(err)
	}
	return p
}

// gpudOn runs a short gpud command on host and returns its trimmed stdout.
func (mh *multiHost) gpudOn(h *e2etest.Host, args ...string) string {
	mh.t.Helper()
	cmd := h.Command(filepath.Join(e2etest.BinDir, "gpud"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		mh.t.Fatalf("gpud %s on %s: %v\n%s", strings.Join(args, " "), h.Name, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

func (mh *multiHost) startController() {
	t := mh.t
	t.Helper()
	mh.ctrlLog = &e2etest.SyncBuffer{}
	mh.ctrlCmd = mh.ctrl.Command(filepath.Join(e2etest.BinDir, "gpud"), "controller", "--config", mh.conf)
	mh.ctrlCmd.Stdout, mh.ctrlCmd.Stderr = mh.ctrlLog, mh.ctrlLog
	mh.ctrlCmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := mh.ctrlCmd.Start(); err != nil {
		t.Fatalf("start gpud controller: %v", err)
	}
	end := make(chan struct{})
	mh.ctrlEnd = end
	cmd := mh.ctrlCmd
	go func() { _ = cmd.Wait(); close(end) }()
	mh.c.Done = end
	e2etest.WaitFor(t, 30*time.Second, "controller serving on "+mh.url, func() bool {
		select {
		case <-end:
			t.Fatalf("gpud controller exited early:\n%s", mh.ctrlLog.String())
		default:
		}
		// The CA the controller made on first start, copied out as an
		// admin would.
		if _, err := os.Stat(mh.ca); err != nil {
			b, err := os.ReadFile(filepath.Join(mh.dir, "state", "tls", "ca.pem"))
			if err != nil || os.WriteFile(mh.ca, b, 0o644) != nil {
				return false
			}
		}
		// The TCP listener, from the login host, with no token.
		r := mh.loginRun(mh.ca, "", "gpuq", "nodes")
		if r.Code != 0 && !strings.Contains(r.Stderr, "token") {
			t.Logf("login host: gpuq nodes: exit %d: %s", r.Code, strings.TrimSpace(r.Stderr))
		}
		return r.Code == 0 || strings.Contains(r.Stderr, "token")
	})
}

func (mh *multiHost) stopController(sig syscall.Signal) {
	if mh.ctrlCmd == nil || mh.ctrlCmd.Process == nil {
		return
	}
	_ = syscall.Kill(-mh.ctrlCmd.Process.Pid, sig)
	select {
	case <-mh.ctrlEnd:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-mh.ctrlCmd.Process.Pid, syscall.SIGKILL)
		<-mh.ctrlEnd
	}
}

func (n *mhNode) socket() string { return filepath.Join(n.dir, "containerd", "c.sock") }

// startContainerd starts the host's own containerd inside its namespace,
// so the host's job containers (which share their shim's network
// namespace) are on the host's network.
func (n *mhNode) startContainerd(t *testing.T) {
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
		t.Fatalf("start containerd on %s: %v", n.host.Name, err)
	}
	go func() { _ = n.ctrd.Wait() }()
	e2etest.WaitFor(t, 30*time.Second, "containerd of "+n.host.Name, func() bool {
		_, err := os.Stat(n.socket())
		return err == nil
	})
}

func (n *mhNode) stopContainerd() {
	if n.ctrd != nil && n.ctrd.Process != nil {
		_ = syscall.Kill(-n.ctrd.Process.Pid, syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(-n.ctrd.Process.Pid, syscall.SIGKILL)
	}
}

func (n *mhNode) startAgent(t *testing.T, mh *multiHost) {
	t.Helper()
	n.log = &e2etest.SyncBuffer{}
	n.agent = n.host.Command(filepath.Join(e2etest.BinDir, "gpud"), "node", "--config", n.conf)
	n.agent.Stdout, n.agent.Stderr = n.log, n.log
	n.agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.agent.Start(); err != nil {
		t.Fatalf("start gpud node on %s: %v", n.host.Name, err)
	}
	done := make(chan struct{})
	n.done = done
	cmd := n.agent
	go func() { _ = cmd.Wait(); close(done) }()
}

func (n *mhNode) stopAgent(sig syscall.Signal) {
	if n.agent == nil || n.agent.Process == nil {
		return
	}
	e2etest.StopProcess(n.agent.Process, n.done, sig)
}

// nodeState is the controller's view of node name.
func (mh *multiHost) nodeState(name string) spec.NodeState {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nodes, err := mh.c.Client().Nodes(ctx)
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

func (mh *multiHost) waitNode(name string, timeout time.Duration, ok func(spec.NodeState) bool) spec.NodeState {
	mh.t.Helper()
	var s spec.NodeState
	e2etest.WaitFor(mh.t, timeout, "node "+name+" state", func() bool {
		s = mh.nodeState(name)
		return ok(s)
	})
	return s
}

// loginRun runs a client CLI on the login host in the user's submit dir,
// against the controller's https address, with ca and token ("" for none).
func (mh *multiHost) loginRun(ca, token, name string, args ...string) e2etest.Result {
	mh.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := mh.login.Command(filepath.Join(e2etest.BinDir, name), args...)
	cmd := exec.CommandContext(ctx, c.Path, c.Args[1:]...)
	cmd.Dir = mh.work
	if cmd.Dir == "" {
		cmd.Dir = mh.dir
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + mh.dir, api.EnvController + "=" + mh.url}
	if ca != "" {
		env = append(env, api.EnvCA+"="+ca)
	}
	if token != "" {
		env = append(env, api.EnvToken+"="+token)
	}
	cmd.Env = env
	return e2etest.RunCommand(mh.t, cmd, fmt.Sprintf("%s %v on the login host", name, args))
}

// submit runs gpusubmit --parsable on the login host as the user.
func (mh *multiHost) submit(args ...string) spec.JobID {
	mh.t.Helper()
	r := mh.loginRun(mh.ca, mh.token, "gpusubmit", append([]string{"--parsable"}, args...)...)
	if r.Code != 0 {
		mh.t.Fatalf("gpusubmit %v on the login host: exit %d: %s", args, r.Code, r.Stderr)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		mh.t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
	}
	return spec.JobID(id)
}

func (mh *multiHost) writeScript(name, body string) {
	mh.t.Helper()
	p := filepath.Join(mh.work, name)
	if err := os.WriteFile(p, []byte(strings.TrimLeft(body, "\n")), 0o755); err != nil {
		mh.t.Fatal(err)
	}
	if err := os.Chown(p, int(mh.user.UID), int(mh.user.GID)); err != nil {
		mh.t.Fatal(err)
	}
}

// rendezvousScript: rank 0 listens on MASTER_ADDR:MASTER_PORT (its own
// bridge address), rank 1 connects over the bridge, says hello and reads
// the answer. bash's /dev/tcp connects; perl (essential on Debian) listens.
const rendezvousScript = `#!/bin/bash
echo "rank $NODE_RANK of $WORLD_SIZE on $SLURM_NODEID master $MASTER_ADDR:$MASTER_PORT"
if [ "$NODE_RANK" = 0 ]; then
	exec perl -MIO::Socket::INET -e '
		my $s = IO::Socket::INET->new(LocalAddr => $ENV{MASTER_ADDR}, LocalPort => $ENV{MASTER_PORT}, Listen => 1, ReuseAddr => 1) or die "listen: $!";
		alarm 60;
		my $c = $s->accept or die "accept: $!";
		my $l = <$c>;
		print "rank0 got: $l";
		print $c "welcome from rank0\n";
		close $c;'
fi
for i in $(seq 1 300); do
	if exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT"; then
		echo "hello from rank $NODE_RANK" >&3
		read -r reply <&3
		echo "rank$NODE_RANK got: $reply"
		exit 0
	fi 2>/dev/null
	sleep 0.2
done
echo "rank $NODE_RANK: no rendezvous with $MASTER_ADDR:$MASTER_PORT" >&2
exit 1
`

// rdvBatch is the gang job's batch script: it runs once, on the first
// host, and srun starts the rendezvous as a step with one task per host
// (the second host's task through its agent's step listener, over the
// bridge with the nodes' certificates).
const rdvBatch = `#!/bin/bash
echo "once on $(hostname -I 2>/dev/null | cut -d' ' -f1) nodes=$SLURM_JOB_NODELIST"
srun -l bash rdv.sh
echo "srun rc=$?"
`

// testGangRendezvous: a 2-node gang job whose script runs once and whose
// step's two tasks, on two hosts, meet over the bridge at rank 0's
// address (MASTER_ADDR:MASTER_PORT), as torchrun's do.
func (mh *multiHost) testGangRendezvous(t *testing.T) {
	mh.sub(t)
	mh.writeScript("rdv.sh", rendezvousScript)
	mh.writeScript("rdv-batch.sh", rdvBatch)
	id := mh.submit("-N", "2", "-G", "8", "--time", "2", "--output", "rdv-%j.out", "rdv-batch.sh")
	cl := mh.c.Client()
	j := e2etest.WaitJob(t, cl, id, 90*time.Second, "gang job ended", func(j spec.Job) bool { return j.State.Terminal() })
	b, _ := os.ReadFile(filepath.Join(mh.work, fmt.Sprintf("rdv-%d.out", id)))
	out := string(b)
	if j.State != spec.StateCompleted || len(j.Nodes) != 2 || j.Nodes[0] == j.Nodes[1] {
		t.Fatalf("gang job %s on %v exit %d, want COMPLETED on two hosts\n%s", j.State, j.Nodes, j.ExitCode, out)
	}
	if n := strings.Count(out, "once on "); n != 1 {
		t.Errorf("the batch script ran %d times, want once (on the first host):\n%s", n, out)
	}
	master := mh.nodes[j.Nodes[0]].host.Addr
	if !strings.Contains(out, "0: rank0 got: hello from rank 1") || !strings.Contains(out, "master "+master+":") ||
		!strings.Contains(out, "1: rank1 got: welcome from rank0") || !strings.Contains(out, "srun rc=0") {
		t.Fatalf("no rendezvous at %s over the bridge between srun's tasks:\n%s", master, out)
	}
	t.Logf("gang job %d on %v: one batch script, a 2-host step met at %s:\n%s", id, j.Nodes, master, out)
}

// testSrunFromLogin: srun on the login host (HTTPS with the user's
// token) makes a 2-host allocation, runs a step on both hosts through the
// first host's step listener with the allocation's ticket (the listener
// checked against the CA the controller hands out) and releases it.
func (mh *multiHost) testSrunFromLogin(t *testing.T) {
	mh.sub(t)
	r := mh.loginRun(mh.ca, mh.token, "srun", "-N2", "--gpus-per-node=1", "--time=2", "-l", "printenv", "SLURMD_NODENAME")
	lines := strings.Fields(r.Stdout)
	if r.Code != 0 || len(lines) != 4 || lines[1] == lines[3] || !strings.Contains(r.Stderr, "Relinquishing job allocation") {
		t.Fatalf("srun -N2 from the login host: exit %d %q %q; want one task on each of two hosts, then the allocation released", r.Code, r.Stdout, r.Stderr)
	}
	t.Logf("srun from the login host:\n%s%s", r.Stdout, r.Stderr)
	m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(r.Stderr)
	id, _ := strconv.ParseUint(m[1], 10, 64)
	e2etest.WaitJob(t, mh.c.Client(), spec.JobID(id), 60*time.Second, "allocation released", func(j spec.Job) bool { return j.State.Terminal() })
}

// testLinkCut: the link of the host running a checkpointing job goes
// down: the node is marked DOWN, the job requeued onto another host from
// its last checkpoint; when the link returns the node rejoins.
func (mh *multiHost) testLinkCut(t *testing.T) {
	mh.sub(t)
	mh.writeScript("counter.sh", e2etest.CounterScript)
	id := mh.submit("-G", "8", "--time", "10", "--output", "ck-%j.out", "counter.sh")
	cl := mh.c.Client()
	j := e2etest.WaitJob(t, cl, id, 60*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	victim := mh.nodes[j.Nodes[0]]
	out := filepath.Join(mh.work, fmt.Sprintf("ck-%d.out", id))
	b, _ := os.ReadFile(out)
	before := mhCheckpointCounters(string(b))
	start := time.Now()
	mh.net.SetLink(victim.host, false)
	linkUp := false
	defer func() {
		if !linkUp {
			mh.net.SetLink(victim.host, true)
		}
	}()
	mh.waitNode(victim.host.Name, 30*time.Second, func(s spec.NodeState) bool { return s == spec.NodeDown })
	down := time.Since(start)
	j = e2etest.WaitJob(t, cl, id, 60*time.Second, "job running on another host", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	if j.Nodes[0] == victim.host.Name {
		t.Fatalf("requeued onto the cut-off node %s", victim.host.Name)
	}
	// The cut-off host cannot hear the controller, so its agent runs the
	// first attempt on, but has fenced itself: it seals no checkpoint
	// (checked below). The second attempt must resume from a checkpoint
	// the first attempt wrote, no older than the last one written before
	// the cut.
	var text string
	e2etest.WaitFor(t, 20*time.Second, "resumed line in "+out, func() bool {
		b, _ := os.ReadFile(out)
		text = string(b)
		return strings.Contains(text, "resumed from")
	})
	m := regexp.MustCompile(`resumed from (\d+)`).FindStringSubmatch(text)
	last, _ := strconv.Atoi(m[1])
	written := mhCheckpointCounters(text[:strings.Index(text, "resumed from")])
	if len(before) == 0 || last < before[len(before)-1] || !slices.Contains(written, last) {
		t.Fatalf("resumed from %d; want a checkpoint the first attempt wrote (%v), at least the last one before the cut (%v); output:\n%s", last, written, before, text)
	}
	moved := time.Since(start)
	// The partition lasts 3 s more (over one 2 s checkpoint interval of
	// the job), so a cut-off agent that went on sealing would show below.
	time.Sleep(3 * time.Second)

	mh.net.SetLink(victim.host, true)
	linkUp = true
	back := time.Now()
	mh.waitNode(victim.host.Name, 60*time.Second, func(s spec.NodeState) bool { return s != spec.NodeDown && s != "" })
	// The stale first attempt on the cut-off host must not run on.
	e2etest.WaitFor(t, 30*time.Second, "stale container on "+victim.host.Name+" fenced", func() bool {
		return countContainersAt(t, victim.socket(), fmt.Sprint(id)) == 0
	})
	if s := mh.c.ShowJob(fmt.Sprint(id)); s["state"] != "RUNNING" {
		t.Errorf("after the link returned the job is %v, want still RUNNING on %s", s["state"], j.Nodes[0])
	}
	// Self-fencing: the cut-off agent stopped sealing 90 % of
	// node_timeout (4 s) after the last heartbeat it had answered, sent
	// before the cut, so before the controller could time it out and
	// requeue the job; it logs no seal later than that (200 ms allowed
	// between the rename and its log line).
	vlog := victim.log.String()
	fenceBy := start.Add(3600*time.Millisecond + 200*time.Millisecond)
	var late []string
	for line := range strings.Lines(vlog) {
		var e struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
			Seq  int       `json:"seq"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == "checkpoint sealed" && e.Time.After(fenceBy) {
			late = append(late, fmt.Sprintf("seq %d at cut+%v", e.Seq, e.Time.Sub(start).Round(time.Millisecond)))
		}
	}
	if len(late) > 0 || !strings.Contains(vlog, "checkpoints fenced") {
		t.Errorf("the cut-off node %s sealed checkpoints after it should have fenced itself (cut+3.6s): %v (fenced logged: %v); want none: two writers of one lineage",
			victim.host.Name, late, strings.Contains(vlog, "checkpoints fenced"))
	}
	if _, err := cl.JobAction(context.Background(), id, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitJob(t, cl, id, 30*time.Second, "cancelled", func(j spec.Job) bool { return j.State.Terminal() })
	t.Logf("link cut: %s DOWN after %v; job on %s from checkpoint %d after %v; rejoined %v after the link returned",
		victim.host.Name, down.Round(time.Millisecond), j.Nodes[0], last, moved.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
}

// testControllerRestart: kill -9 of the controller while jobs run; the
// nodes keep running them. One job ends while the controller is down (its
// exit waits in the node's outbox), the other after the restart: the
// restarted controller records both ends with their true exit codes.
func (mh *multiHost) testControllerRestart(t *testing.T) {
	mh.sub(t)
	long := mh.submit("-G", "8", "--time", "2", "--output", "cr-%j.out", "--wrap", "echo begin; sleep 8; echo end; exit 0")
	short := mh.submit("-G", "8", "--time", "2", "--output", "cr-%j.out", "--wrap", "echo begin; sleep 2; echo end; exit 3")
	cl := mh.c.Client()
	j := e2etest.WaitJob(t, cl, long, 60*time.Second, "running", func(j spec.Job) bool { return j.State == spec.StateRunning })
	e2etest.WaitJob(t, cl, short, 60*time.Second, "running", func(j spec.Job) bool { return j.State == spec.StateRunning })
	if err := syscall.Kill(-mh.ctrlCmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-mh.ctrlEnd
	down := time.Now()
	time.Sleep(3 * time.Second) // the nodes carry on alone; the short job ends
	if n := countContainersAt(t, mh.nodes[j.Nodes[0]].socket(), fmt.Sprint(long)); n != 1 {
		t.Fatalf("with the controller down, %s runs %d containers of job %d, want 1", j.Nodes[0], n, long)
	}
	mh.startController()
	t.Logf("controller down for %v", time.Since(down).Round(time.Millisecond))
	for _, c := range []struct {
		id    spec.JobID
		state spec.JobState
		exit  int
	}{{short, spec.StateFailed, 3}, {long, spec.StateCompleted, 0}} {
		j := e2etest.WaitJob(t, mh.c.Client(), c.id, 60*time.Second, "job ended", func(j spec.Job) bool { return j.State.Terminal() })
		out, _ := os.ReadFile(filepath.Join(mh.work, fmt.Sprintf("cr-%d.out", c.id)))
		if j.State != c.state || j.ExitCode != c.exit || j.Attempt != 1 || string(out) != "begin\nend\n" {
			t.Errorf("after the controller restart job %d is %s exit %d attempt %d, output %q; want %s %d in its first attempt with begin and end",
				c.id, j.State, j.ExitCode, j.Attempt, out, c.state, c.exit)
		}
	}
	for name := range mh.nodes {
		if s := mh.nodeState(name); s == spec.NodeDown {
			t.Errorf("node %s is DOWN after the controller restart", name)
		}
	}
}

// testRefused: a client trusting another CA, a forged user token and a
// node with a wrong join token are all refused.
func (mh *multiHost) testRefused(t *testing.T) {
	mh.sub(t)
	other := filepath.Join(mh.dir, "other-ca.pem")
	mhForeignCA(t, other)
	if r := mh.loginRun(other, mh.token, "gpuq", "nodes"); r.Code == 0 || !strings.Contains(r.Stderr, "certificate") {
		t.Errorf("gpuq trusting another CA: exit %d %q, want a certificate error", r.Code, r.Stderr)
	}
	forged := mh.token[:strings.LastIndex(mh.token, ".")+1] + "AAAA" + mh.token[strings.LastIndex(mh.token, ".")+5:]
	if r := mh.loginRun(mh.ca, forged, "gpuq", "nodes"); r.Code == 0 {
		t.Errorf("gpuq with a forged token: exit 0, want refused:\n%s", r.Stdout)
	} else {
		t.Logf("forged token refused: %s", strings.TrimSpace(r.Stderr))
	}
	if r := mh.loginRun(mh.ca, mh.token, "gpuq", "nodes"); r.Code != 0 {
		t.Errorf("gpuq with the good CA and token: exit %d %s", r.Code, r.Stderr)
	}

	// A node with a wrong join token gets no certificate.
	n := &mhNode{host: mh.login, dir: filepath.Join(mh.dir, "intruder")}
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.dir, "join.token"), []byte("not-the-join-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.conf = mh.nodeConfig(n)
	// It borrows gpu1's containerd: it never gets as far as running jobs.
	body, _ := os.ReadFile(n.conf)
	fixed := strings.Replace(string(body), strconv.Quote(n.socket()), strconv.Quote(mh.nodes["gpu1"].socket()), 1)
	if err := os.WriteFile(n.conf, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t, mh)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.stopAgent(syscall.SIGKILL)
		t.Fatalf("a node with a wrong join token kept running:\n%s", n.log.String())
	}
	if _, err := os.Stat(filepath.Join(n.dir, "state", "tls", "node.pem")); err == nil {
		t.Errorf("a node with a wrong join token got a certificate")
	}
	if s := mh.nodeState("login"); s != "" {
		t.Errorf("a node with a wrong join token is registered (%s)", s)
	}
	t.Logf("wrong join token refused: %s", mhLastLine(n.log.String()))
}

func mhLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// mhForeignCA writes a CA certificate unrelated to the cluster's.
func mhForeignCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the gpud CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sub points the cluster's helpers at subtest t (t.Fatal must come from
// the goroutine of the test that calls it).
func (mh *multiHost) sub(t *testing.T) {
	mh.t = t
	mh.c.T = t
}

// countContainersAt counts job id's containers in the containerd at socket.
func countContainersAt(t *testing.T, socket, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt, err := containerd.New(ctx, containerd.Options{Address: socket})
	if err != nil {
		t.Fatalf("connect to containerd at %s: %v", socket, err)
	}
	defer rt.Close()
	tasks, err := rt.List(ctx)
	if err != nil {
		t.Fatalf("list containers: %v", err)
	}
	n := 0
	for _, task := range tasks {
		if task.Labels["gpud.job"] == id {
			n++
		}
	}
	return n
}

// testRestartOnCertificate: a node that joined needs the join token no
// more: its agent, restarted with a wrong token in join_token_file, comes
// back on its node certificate (mTLS) alone.
func (mh *multiHost) testRestartOnCertificate(t *testing.T) {
	mh.sub(t)
	n := mh.nodes["gpu3"]
	n.stopAgent(syscall.SIGTERM)
	if err := os.WriteFile(filepath.Join(n.dir, "join.token"), []byte("not-the-join-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.startAgent(t, mh)
	e2etest.WaitFor(t, 30*time.Second, "gpu3's agent started again", func() bool {
		select {
		case <-n.done:
			t.Fatalf("gpu3's agent exited after a restart on its certificate:\n%s", n.log.String())
		default:
		}
		return strings.Contains(n.log.String(), "node agent started")
	})
	// Longer than node_timeout (4s): heartbeats go through.
	time.Sleep(5 * time.Second)
	if s := mh.nodeState("gpu3"); s == "" || s == spec.NodeDown || s == spec.NodeUnknown {
		t.Fatalf("gpu3 is %q after restarting on its certificate:\n%s", s, n.log.String())
	}
	if strings.Contains(n.log.String(), "joined the cluster") {
		t.Errorf("gpu3 joined again instead of using its certificate")
	}
	id := mh.submit("-w", "gpu3", "-G", "8", "--time", "1", "--output", "cert-%j.out", "--wrap", "echo on gpu3")
	j := e2etest.WaitJob(t, mh.c.Client(), id, 30*time.Second, "job on gpu3 ended", func(j spec.Job) bool { return j.State.Terminal() })
	if j.State != spec.StateCompleted || len(j.Nodes) != 1 || j.Nodes[0] != "gpu3" {
		t.Fatalf("job %d is %s on %v, want COMPLETED on gpu3", id, j.State, j.Nodes)
	}
}

// mhCheckpointCounters returns the counters of counterScript's
// "checkpoint N" lines in text, in order.
func mhCheckpointCounters(text string) []int {
	var ns []int
	for _, m := range regexp.MustCompile(`(?m)^checkpoint (\d+)$`).FindAllStringSubmatch(text, -1) {
		n, _ := strconv.Atoi(m[1])
		ns = append(ns, n)
	}
	return ns
}
