package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/containerd"
)

// The fault-injection suite. Node agents run as their own `gpud node`
// processes next to a `gpud standalone --nodes 0` (controller and private
// containerd), so one node can be stopped, killed or made to overheat
// while the controller and the other node carry on. Every node shares the
// standalone's checkpoint root, as nodes share a file system in a cluster.

// extNode is one `gpud node` process of a cluster.
type extNode struct {
	name, dir string
	cmd       *exec.Cmd
	log       *syncBuffer
	done      chan struct{}
}

// syncBuffer is a log the test reads while the process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// faultNodeConfig is node.toml for the suite's nodes: shared checkpoint
// root, short kill grace, and GPU health sampled every second with a 2s
// sustain, so a fault shows within seconds.
func faultNodeConfig(t *testing.T, c *cluster) string {
	t.Helper()
	p := filepath.Join(c.dir, "node.toml")
	body := fmt.Sprintf(`version = 1
[node]
checkpoint_root = %q
kill_grace = "2s"
[health]
gpu_temp_max_c = 85
gpu_temp_sustain = "2s"
interval = "1s"
`, filepath.Join(c.dir, "checkpoints"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// faultControllerConfig is etc/gpud.toml with a 1s heartbeat and a 4s node
// timeout, and QOS high preempting low in checkpoint mode.
func faultControllerConfig(t *testing.T, dir string) string {
	t.Helper()
	base, err := os.ReadFile("../../etc/gpud.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(base)
	for _, r := range [][2]string{
		{`node_timeout = "30s"`, `node_timeout = "4s"`},
		{`heartbeat_interval = "5s"`, `heartbeat_interval = "1s"`},
		{"preempt = [\"low\"]\npreempt_mode = \"requeue\"", "preempt = [\"low\"]\npreempt_mode = \"checkpoint\""},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("etc/gpud.toml no longer has %q; update the fault suite", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	p := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startFaultCluster starts a controller (no nodes of its own) and the
// named node agents as separate processes.
func startFaultCluster(t *testing.T, names ...string) (*cluster, map[string]*extNode) {
	t.Helper()
	requirePrereq(t)
	conf := faultControllerConfig(t, shortTempDir(t))
	c := startCluster(t, 0, "--config", conf, "--kill-grace", "2s")
	nodeConf := faultNodeConfig(t, c)
	nodes := map[string]*extNode{}
	for _, n := range names {
		nodes[n] = c.startNode(t, n, nodeConf)
	}
	return c, nodes
}

// startNode starts `gpud node` name against the cluster and waits until
// it is registered and up.
func (c *cluster) startNode(t *testing.T, name, conf string) *extNode {
	t.Helper()
	n := &extNode{name: name, dir: filepath.Join(c.dir, "nodes", name), log: &syncBuffer{}}
	n.cmd = exec.Command(filepath.Join(binDir, "gpud"), "node", "--config", conf, "--name", name,
		"--controller", c.addr, "--containerd", containerd.SocketPath(filepath.Join(c.dir, "containerd")),
		"--gpus", "mock:dgx-h100", "--state-dir", n.dir, "--cdi-dir", filepath.Join(c.dir, "cdi"))
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start gpud node %s: %v", name, err)
	}
	n.done = make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		// Jobs first, while an agent can still stop their containers.
		_ = syscall.Kill(n.cmd.Process.Pid, syscall.SIGCONT)
		c.cancelAll()
		n.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gpud node %s log:\n%s", name, n.log.String())
		}
	})
	waitFor(t, 60*time.Second, "node "+name+" up", func() bool {
		select {
		case <-n.done:
			t.Fatalf("gpud node %s exited early:\n%s", name, n.log.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		nodes, err := c.client().Nodes(ctx)
		if err != nil {
			return false
		}
		for _, nd := range nodes {
			if nd.Name == name && nd.State != spec.NodeDown {
				return true
			}
		}
		return false
	})
	return n
}

// stop signals the agent and waits for it to exit (kill -9 after 30s).
func (n *extNode) stop(sig syscall.Signal) {
	stopProcess(n.cmd.Process, n.done, sig)
}

// stopProcess sends sig to the process p, unless done (closed when p has
// been waited for) says it has already exited, and waits for done; a
// process still running after 30s is killed with SIGKILL so that a test
// never hangs on an agent that ignores sig. The in-cluster and the
// multi-host agents stop alike through it.
func stopProcess(p *os.Process, done <-chan struct{}, sig syscall.Signal) {
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(p.Pid, sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
		<-done
	}
}

// submitCounter submits counterScript taking a whole 8-GPU node and
// returns its id.
func submitCounter(t *testing.T, c *cluster, work string, extra ...string) spec.JobID {
	t.Helper()
	writeScript(t, work, "counter.sh", counterScript)
	args := append([]string{"--parsable", "-G", "8", "--time", "10", "--output", "ck-%j.out"}, extra...)
	r := c.cli(work, "gpusubmit", append(args, "counter.sh")...)
	if r.code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.code, r.stderr)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.stdout)
	}
	return spec.JobID(n)
}

// checkResumed reads the job's output and checks that the next attempt
// resumed from the counter of the last checkpoint the first one wrote
// (not from 0), returning that counter.
func checkResumed(t *testing.T, work string, id spec.JobID) string {
	t.Helper()
	out := filepath.Join(work, fmt.Sprintf("ck-%d.out", id))
	var text string
	waitFor(t, 20*time.Second, "resumed line in "+out, func() bool {
		b, _ := os.ReadFile(out)
		text = string(b)
		return strings.Contains(text, "resumed from")
	})
	resumed := regexp.MustCompile(`resumed from (\d+)`).FindStringSubmatch(text)
	head := text[:strings.Index(text, "resumed from")]
	ckpts := regexp.MustCompile(`checkpoint (\d+)`).FindAllStringSubmatch(head, -1)
	if !strings.HasPrefix(text, "fresh start\n") || len(ckpts) == 0 {
		t.Fatalf("want a fresh start and checkpoints before the resume; output:\n%s", text)
	}
	last := ckpts[len(ckpts)-1][1]
	if resumed[1] != last || last == "0" {
		t.Fatalf("resumed from %s, want the last checkpointed counter %s (not 0); output:\n%s", resumed[1], last, text)
	}
	return last
}

// TestCheckpointPreemptionResumes: a high-QOS job preempts a checkpointing
// low-QOS job in checkpoint mode: the low job is signalled, seals one more
// checkpoint, stops, waits, and resumes from that checkpoint.
func TestCheckpointPreemptionResumes(t *testing.T) {
	c, _ := startFaultCluster(t, "node1")
	cl := c.client()
	work := t.TempDir()
	// CRIU mode is refused with the node's reason (criu check fails or
	// criu is absent on the test hosts).
	if r := c.cli(work, "gpusubmit", "--checkpoint-mode=criu", "--wrap", "true"); r.code != 2 || !strings.Contains(r.stderr, "node1: criu") {
		t.Errorf("--checkpoint-mode=criu: exit %d %q, want 2 with node1's reason", r.code, r.stderr)
	} else {
		t.Logf("criu refused: %s", strings.TrimSpace(r.stderr))
	}
	low := submitCounter(t, c, work, "-q", "low")
	waitJob(t, cl, low, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before, _ := cl.Job(context.Background(), low)

	start := time.Now()
	r := c.cli(work, "gpusubmit", "--parsable", "-q", "high", "-G", "8", "--wrap", "sleep 2")
	if r.code != 0 {
		t.Fatalf("submit high: exit %d: %s", r.code, r.stderr)
	}
	high := strings.TrimSpace(r.stdout)
	c.waitState(high, 60*time.Second, "RUNNING", "COMPLETED")
	preempted := time.Since(start)
	j := waitJob(t, cl, low, 60*time.Second, "low job running again", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	if j.Checkpoints <= before.Checkpoints || j.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoints %d → %d (last %+v); want one more, sealed by attempt 1 when preempted", before.Checkpoints, j.Checkpoints, j.LastCheckpoint)
	}
	if j.LostWork.Std() > 2*time.Second {
		t.Errorf("lost work %v, want under one interval (checkpointed when preempted)", j.LostWork.Std())
	}
	if hs := c.showJob(high); hs["state"] != "COMPLETED" {
		t.Errorf("high job %s, want COMPLETED", hs["state"])
	}
	last := checkResumed(t, work, low)
	t.Logf("FAULT preemption(checkpoint): high job running %v after submit; low resumed from %s; lost work %v",
		preempted.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestStoppedNodeJobMovesFromCheckpoint: the agent running a checkpointing
// job is stopped (SIGSTOP: heartbeats cease, the container runs on). After
// node_timeout the node is DOWN and the job requeued onto the other node,
// restarting from its newest checkpoint. When the agent continues, it
// fences the stale container.
func TestStoppedNodeJobMovesFromCheckpoint(t *testing.T) {
	c, nodes := startFaultCluster(t, "node1", "node2")
	cl := c.client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := waitJob(t, cl, id, 60*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	victim := nodes[j.Nodes[0]]
	start := time.Now()
	if err := syscall.Kill(victim.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	recovery := time.Since(start)
	if j.Nodes[0] == victim.name {
		t.Fatalf("requeued onto the stopped node %s", victim.name)
	}
	if j.LostWork.Std() <= 0 || j.LostWork.Std() > 2*time.Second+4*time.Second+2*time.Second {
		t.Errorf("lost work %v, want at most one checkpoint interval plus the node timeout", j.LostWork.Std())
	}
	last := checkResumed(t, work, id)

	// The stopped agent comes back: it must not keep running the old
	// attempt.
	if err := syscall.Kill(victim.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "stale container fenced", func() bool { return c.containersOf(fmt.Sprint(id)) == 1 })
	if !strings.Contains(victim.log.String(), "fenced") {
		t.Errorf("agent %s did not report fencing the old container", victim.name)
	}
	if s := c.showJob(fmt.Sprint(id)); s["state"] != "RUNNING" {
		t.Errorf("after fencing the job is %v, want still RUNNING on the other node", s["state"])
	}
	t.Logf("FAULT node stopped: requeued and running on %s after %v from %s; lost work %v (node timeout 4s, checkpoint every 2s)",
		j.Nodes[0], recovery.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestHotGPUDrainsAndMigrates: a mock GPU at 90 C (over the 85 C limit for
// the 2s sustain) is taken out of service and its job checkpointed and
// requeued onto the other node, resuming there; gpuq nodes shows why.
func TestHotGPUDrainsAndMigrates(t *testing.T) {
	c, nodes := startFaultCluster(t, "node1", "node2")
	cl := c.client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := waitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before := j.Checkpoints
	hot := nodes[j.Nodes[0]]
	start := time.Now()
	if err := os.WriteFile(filepath.Join(hot.dir, "mock-gpu-health.json"), []byte(`{"3": {"temp_c": 90}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	recovery := time.Since(start)
	if j.Nodes[0] == hot.name {
		t.Fatalf("requeued onto %s, whose GPU 3 is out of service", hot.name)
	}
	if j.Checkpoints <= before || j.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoints %d → %d; want one more sealed before the move", before, j.Checkpoints)
	}
	if j.LostWork.Std() > 2*time.Second {
		t.Errorf("lost work %v, want under one interval (checkpointed before the move)", j.LostWork.Std())
	}
	last := checkResumed(t, work, id)
	r := c.cli(work, "gpuq", "nodes")
	if r.code != 0 || !regexp.MustCompile(hot.name+`.*GPU 3 temperature 90C at or above 85C`).MatchString(r.stdout) {
		t.Errorf("gpuq nodes does not show why %s's GPU 3 is out of service:\n%s%s", hot.name, r.stdout, r.stderr)
	}
	t.Logf("FAULT GPU 90C: moved to %s and running after %v (2s sustain), resumed from %s; lost work %v",
		j.Nodes[0], recovery.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestKill9NodeAgentMidJob: kill -9 of the agent while its job runs; the
// restarted agent re-adopts the container and reports its true exit code.
func TestKill9NodeAgentMidJob(t *testing.T) {
	c, nodes := startFaultCluster(t, "node1")
	work := t.TempDir()
	r := c.cli(work, "gpusubmit", "--parsable", "--output", "k9-%j.out", "--wrap", "echo begin; sleep 8; echo end; exit 3")
	if r.code != 0 {
		t.Fatalf("submit: %d %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	// Kill once the job's script is really running (RUNNING is shown as
	// soon as the controller places it).
	waitFor(t, 60*time.Second, "job output begins", func() bool {
		b, _ := os.ReadFile(filepath.Join(work, "k9-"+id+".out"))
		return strings.Contains(string(b), "begin")
	})
	n := nodes["node1"]
	start := time.Now()
	n.stop(syscall.SIGKILL)
	nodeConf := filepath.Join(c.dir, "node.toml")
	n = c.startNode(t, "node1", nodeConf)
	waitFor(t, 60*time.Second, "container re-adopted", func() bool { return strings.Contains(n.log.String(), "re-adopting running container") })
	back := time.Since(start)
	j := c.waitState(id, 60*time.Second, "FAILED", "COMPLETED", "NODE_FAIL", "CANCELLED")
	if j["state"] != "FAILED" || j["exit_code"] != float64(3) {
		t.Fatalf("job ended %v exit %v, want FAILED with exit code 3", j["state"], j["exit_code"])
	}
	out, _ := os.ReadFile(filepath.Join(work, "k9-"+id+".out"))
	if strings.Count(string(out), "begin") != 1 || strings.Count(string(out), "end") != 1 {
		t.Errorf("job ran other than once through:\n%s", out)
	}
	t.Logf("FAULT kill -9 agent: container re-adopted %v after the kill, job ran once and ended FAILED exit 3", back.Round(time.Millisecond))
}

// TestControllerAwayNodesDeliver: the controller is killed (kill -9) and
// kept down while jobs end on the nodes; after it restarts, the nodes
// deliver every exit from their outboxes.
func TestControllerAwayNodesDeliver(t *testing.T) {
	c, _ := startFaultCluster(t, "node1")
	work := t.TempDir()
	var ids []string
	for i, code := range []int{0, 4, 0} {
		r := c.cli(work, "gpusubmit", "--parsable", "-G", "1", "--wrap", fmt.Sprintf("sleep %d; exit %d", 2+i, code))
		if r.code != 0 {
			t.Fatalf("submit: %d %s", r.code, r.stderr)
		}
		ids = append(ids, strings.TrimSpace(r.stdout))
	}
	for _, id := range ids {
		c.waitState(id, 60*time.Second, "RUNNING")
	}
	c.stop(syscall.SIGKILL) // the controller only: containerd and the node live on
	away := 20 * time.Second
	time.Sleep(away) // every job ends meanwhile
	start := time.Now()
	c.start(0)
	want := []string{"COMPLETED", "FAILED", "COMPLETED"}
	for i, id := range ids {
		j := c.waitState(id, 90*time.Second, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")
		if j["state"] != want[i] {
			t.Errorf("job %s ended %v, want %s", id, j["state"], want[i])
		}
	}
	t.Logf("FAULT controller away %v: all %d exits delivered %v after it came back", away, len(ids), time.Since(start).Round(time.Millisecond))
}

// TestDrainMovesCheckpointingJob: gpuq drain checkpoints a checkpointing
// job and requeues it onto the other node, where it resumes; gpuq nodes
// shows the reason until gpuq resume.
func TestDrainMovesCheckpointingJob(t *testing.T) {
	c, _ := startFaultCluster(t, "node1", "node2")
	cl := c.client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := waitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before, from := j.Checkpoints, j.Nodes[0]
	start := time.Now()
	if r := c.cli(work, "gpuq", "drain", from, "--reason", "swap PSU"); r.code != 0 {
		t.Fatalf("gpuq drain: exit %d: %s", r.code, r.stderr)
	}
	j = waitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	moved := time.Since(start)
	if j.Nodes[0] == from || j.Checkpoints <= before || j.LostWork.Std() > 2*time.Second {
		t.Errorf("after drain: on %v, checkpoints %d → %d, lost %v; want the other node, one more checkpoint, under one interval lost",
			j.Nodes, before, j.Checkpoints, j.LostWork.Std())
	}
	last := checkResumed(t, work, id)
	if r := c.cli(work, "gpuq", "nodes"); !regexp.MustCompile(from + `\s+DRAIN\s.*swap PSU`).MatchString(r.stdout) {
		t.Errorf("gpuq nodes does not show %s drained for 'swap PSU':\n%s", from, r.stdout)
	}
	if r := c.cli(work, "gpuq", "resume", from); r.code != 0 {
		t.Fatalf("gpuq resume: exit %d: %s", r.code, r.stderr)
	}
	if r := c.cli(work, "gpuq", "nodes"); strings.Contains(r.stdout, "swap PSU") {
		t.Errorf("reason still shown after resume:\n%s", r.stdout)
	}
	t.Logf("FAULT drain: moved to %s and running after %v, resumed from %s; lost work %v", j.Nodes[0], moved.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestReadoptedJobKeepsCheckpointing: after kill -9 of its agent, a
// checkpointing job is re-adopted (not restarted) and still checkpoints
// every interval.
func TestReadoptedJobKeepsCheckpointing(t *testing.T) {
	c, nodes := startFaultCluster(t, "node1")
	cl := c.client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := waitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	nodes["node1"].stop(syscall.SIGKILL)
	n := c.startNode(t, "node1", filepath.Join(c.dir, "node.toml"))
	waitFor(t, 60*time.Second, "container re-adopted", func() bool { return strings.Contains(n.log.String(), "re-adopting running container") })
	after := waitJob(t, cl, id, 30*time.Second, "two more checkpoints after the restart", func(x spec.Job) bool { return x.Checkpoints >= j.Checkpoints+2 })
	if after.Attempt != 1 || after.State != spec.StateRunning {
		t.Errorf("job attempt %d %s, want attempt 1 still RUNNING (re-adopted)", after.Attempt, after.State)
	}
	if !strings.Contains(n.log.String(), "re-adopted job takes its checkpoints again") {
		t.Errorf("restarted agent did not log resuming checkpoints")
	}
	t.Logf("FAULT kill -9 agent of a checkpointing job: re-adopted; checkpoints %d → %d, attempt %d", j.Checkpoints, after.Checkpoints, after.Attempt)
}

// gangScript runs gangWorker as one task per node (a step); the batch
// shell ignores the checkpoint signal, which reaches the step's tasks.
const gangScript = `#!/bin/bash
#GPU --checkpoint=2s
trap '' USR1
srun --ntasks-per-node=1 bash gang-worker.sh
`

// gangWorker: on SIGUSR1 every rank saves its own counter; rank 0 marks
// the checkpoint done once both ranks' files are there.
const gangWorker = `#!/bin/bash
n=0
checkpoint() {
	echo "$n" > "$GPUD_CHECKPOINT_DIR/rank-$NODE_RANK"
	if [ "$NODE_RANK" = 0 ]; then
		for i in $(seq 50); do
			[ -f "$GPUD_CHECKPOINT_DIR/rank-1" ] && break
			sleep 0.1
		done
		touch "$GPUD_CHECKPOINT_DIR/.done"
	fi
}
trap checkpoint USR1
while [ "$n" -lt 1000000 ]; do
	n=$((n+1))
	sleep 0.2
done
`

// TestGangRanksCheckpoint: both ranks of a two-node job are signalled, so
// the sealed checkpoint holds each rank's state.
func TestGangRanksCheckpoint(t *testing.T) {
	c := startCluster(t, 2, "--kill-grace", "2s")
	cl := c.client()
	work := t.TempDir()
	writeScript(t, work, "gang.sh", gangScript)
	writeScript(t, work, "gang-worker.sh", gangWorker)
	r := c.cli(work, "gpusubmit", "--parsable", "-N", "2", "--gpus-per-node", "1", "--time", "5", "gang.sh")
	if r.code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.code, r.stderr)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.stdout)
	}
	j := waitJob(t, cl, spec.JobID(n), 60*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	dir := filepath.Join(c.dir, "checkpoints", fmt.Sprint(n), fmt.Sprintf("ckpt-%08d", j.LastCheckpoint.Seq))
	for _, rank := range []string{"rank-0", "rank-1"} {
		if _, err := os.Stat(filepath.Join(dir, rank)); err != nil {
			t.Errorf("sealed checkpoint %s lacks %s: %v", dir, rank, err)
		}
	}
}
