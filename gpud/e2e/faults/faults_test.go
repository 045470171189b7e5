package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// The fault-injection suite. Node agents run as their own `gpud node`
// processes next to a `gpud standalone --nodes 0` (controller and private
// containerd), so one node can be stopped, killed or made to overheat
// while the controller and the other node carry on. Every node shares the
// standalone's checkpoint root, as nodes share a file system in a cluster.

// submitCounter submits e2etest.CounterScript taking a whole 8-GPU node and
// returns its id.
func submitCounter(t *testing.T, c *e2etest.Cluster, work string, extra ...string) spec.JobID {
	t.Helper()
	e2etest.WriteScript(t, work, "counter.sh", e2etest.CounterScript)
	args := append([]string{"--parsable", "-G", "8", "--time", "10", "--output", "ck-%j.out"}, extra...)
	r := c.CLI(work, "gpusubmit", append(args, "counter.sh")...)
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
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
	e2etest.WaitFor(t, 20*time.Second, "resumed line in "+out, func() bool {
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
	c, _ := e2etest.StartFaultCluster(t, "node1")
	cl := c.Client()
	work := t.TempDir()
	// CRIU mode is refused with the node's reason (criu check fails or
	// criu is absent on the test hosts).
	if r := c.CLI(work, "gpusubmit", "--checkpoint-mode=criu", "--wrap", "true"); r.Code != 2 || !strings.Contains(r.Stderr, "node1: criu") {
		t.Errorf("--checkpoint-mode=criu: exit %d %q, want 2 with node1's reason", r.Code, r.Stderr)
	} else {
		t.Logf("criu refused: %s", strings.TrimSpace(r.Stderr))
	}
	low := submitCounter(t, c, work, "-q", "low")
	e2etest.WaitJob(t, cl, low, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before, _ := cl.Job(context.Background(), low)

	start := time.Now()
	r := c.CLI(work, "gpusubmit", "--parsable", "-q", "high", "-G", "8", "--wrap", "sleep 2")
	if r.Code != 0 {
		t.Fatalf("submit high: exit %d: %s", r.Code, r.Stderr)
	}
	high := strings.TrimSpace(r.Stdout)
	c.WaitState(high, 60*time.Second, "RUNNING", "COMPLETED")
	preempted := time.Since(start)
	j := e2etest.WaitJob(t, cl, low, 60*time.Second, "low job running again", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	if j.Checkpoints <= before.Checkpoints || j.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoints %d → %d (last %+v); want one more, sealed by attempt 1 when preempted", before.Checkpoints, j.Checkpoints, j.LastCheckpoint)
	}
	if j.LostWork.Std() > 2*time.Second {
		t.Errorf("lost work %v, want under one interval (checkpointed when preempted)", j.LostWork.Std())
	}
	if hs := c.ShowJob(high); hs["state"] != "COMPLETED" {
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
	c, nodes := e2etest.StartFaultCluster(t, "node1", "node2")
	cl := c.Client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := e2etest.WaitJob(t, cl, id, 60*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	victim := nodes[j.Nodes[0]]
	start := time.Now()
	if err := syscall.Kill(victim.Cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	j = e2etest.WaitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	recovery := time.Since(start)
	if j.Nodes[0] == victim.Name {
		t.Fatalf("requeued onto the stopped node %s", victim.Name)
	}
	if j.LostWork.Std() <= 0 || j.LostWork.Std() > 2*time.Second+4*time.Second+2*time.Second {
		t.Errorf("lost work %v, want at most one checkpoint interval plus the node timeout", j.LostWork.Std())
	}
	last := checkResumed(t, work, id)

	// The stopped agent comes back: it must not keep running the old
	// attempt.
	if err := syscall.Kill(victim.Cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, 60*time.Second, "stale container fenced", func() bool { return c.ContainersOf(fmt.Sprint(id)) == 1 })
	if !strings.Contains(victim.Log.String(), "fenced") {
		t.Errorf("agent %s did not report fencing the old container", victim.Name)
	}
	if s := c.ShowJob(fmt.Sprint(id)); s["state"] != "RUNNING" {
		t.Errorf("after fencing the job is %v, want still RUNNING on the other node", s["state"])
	}
	t.Logf("FAULT node stopped: requeued and running on %s after %v from %s; lost work %v (node timeout 4s, checkpoint every 2s)",
		j.Nodes[0], recovery.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestHotGPUDrainsAndMigrates: a mock GPU at 90 C (over the 85 C limit for
// the 2s sustain) is taken out of service and its job checkpointed and
// requeued onto the other node, resuming there; gpuq nodes shows why.
func TestHotGPUDrainsAndMigrates(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1", "node2")
	cl := c.Client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := e2etest.WaitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before := j.Checkpoints
	hot := nodes[j.Nodes[0]]
	start := time.Now()
	if err := os.WriteFile(filepath.Join(hot.Dir, "mock-gpu-health.json"), []byte(`{"3": {"temp_c": 90}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	j = e2etest.WaitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	recovery := time.Since(start)
	if j.Nodes[0] == hot.Name {
		t.Fatalf("requeued onto %s, whose GPU 3 is out of service", hot.Name)
	}
	if j.Checkpoints <= before || j.LastCheckpoint.Attempt != 1 {
		t.Errorf("checkpoints %d → %d; want one more sealed before the move", before, j.Checkpoints)
	}
	if j.LostWork.Std() > 2*time.Second {
		t.Errorf("lost work %v, want under one interval (checkpointed before the move)", j.LostWork.Std())
	}
	last := checkResumed(t, work, id)
	r := c.CLI(work, "gpuq", "nodes")
	if r.Code != 0 || !regexp.MustCompile(hot.Name+`.*gpud:temp gpu3 temperature 90C at or above 85C`).MatchString(r.Stdout) {
		t.Errorf("gpuq nodes does not show why %s's GPU 3 is out of service:\n%s%s", hot.Name, r.Stdout, r.Stderr)
	}
	t.Logf("FAULT GPU 90C: moved to %s and running after %v (2s sustain), resumed from %s; lost work %v",
		j.Nodes[0], recovery.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestKill9NodeAgentMidJob: kill -9 of the agent while its job runs; the
// restarted agent re-adopts the container and reports its true exit code.
func TestKill9NodeAgentMidJob(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "--output", "k9-%j.out", "--wrap", "echo begin; sleep 8; echo end; exit 3")
	if r.Code != 0 {
		t.Fatalf("submit: %d %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	// Kill once the job's script is really running (RUNNING is shown as
	// soon as the controller places it).
	e2etest.WaitFor(t, 60*time.Second, "job output begins", func() bool {
		b, _ := os.ReadFile(filepath.Join(work, "k9-"+id+".out"))
		return strings.Contains(string(b), "begin")
	})
	n := nodes["node1"]
	start := time.Now()
	n.Stop(syscall.SIGKILL)
	nodeConf := filepath.Join(c.Dir, "node.toml")
	n = c.StartNode(t, "node1", nodeConf)
	e2etest.WaitFor(t, 60*time.Second, "container re-adopted", func() bool { return strings.Contains(n.Log.String(), "re-adopting running container") })
	back := time.Since(start)
	j := c.WaitState(id, 60*time.Second, "FAILED", "COMPLETED", "NODE_FAIL", "CANCELLED")
	if j["state"] != "FAILED" || j["exit_code"] != float64(3) {
		t.Fatalf("job ended %v exit %v, want FAILED with exit code 3", j["state"], j["exit_code"])
	}
	out, _ := os.ReadFile(filepath.Join(work, "k9-"+id+".out"))
	if strings.Count(string(out), "begin") != 1 || strings.Count(string(out), "end") != 1 {
		t.Errorf("job ran other than once through:\n%s", out)
	}
	t.Logf("FAULT kill -9 agent: container re-adopted %v after the kill, job ran once and ended FAILED exit 3", back.Round(time.Millisecond))
}

// TestAgentBackPastNodeTimeoutResumes: kill -9 of the agent of a node
// running a job, restarted once the controller marked the node DOWN for
// silence (node_timeout 4s) while the job's container runs on. The
// restarted agent re-adopts the container and registers with it: the run
// resumes as it was (the same attempt, its container untouched) instead
// of a new attempt started the moment the registration brought the node
// back, a heartbeat before the agent said it still ran the old one (which
// it then fenced).
func TestAgentBackPastNodeTimeoutResumes(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	cl := c.Client()
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "--output", "back-%j.out", "--wrap",
		"echo begin; for i in $(seq 1 20); do echo tick $i; sleep 1; done; echo end")
	if r.Code != 0 {
		t.Fatalf("submit: %d %s", r.Code, r.Stderr)
	}
	n64, err := strconv.ParseUint(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
	}
	id := spec.JobID(n64)
	out := filepath.Join(work, fmt.Sprintf("back-%d.out", id))
	e2etest.WaitFor(t, 60*time.Second, "job output begins", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Contains(string(b), "begin")
	})
	nodes["node1"].Stop(syscall.SIGKILL)
	e2etest.WaitJob(t, cl, id, 60*time.Second, "the job's run interrupted (node DOWN for silence)", func(j spec.Job) bool {
		return j.State == spec.StatePending && j.Interrupted != nil
	})
	c.StartNode(t, "node1", filepath.Join(c.Dir, "node.toml"))
	j := e2etest.WaitJob(t, cl, id, 2*time.Minute, "the job to end", func(j spec.Job) bool { return j.State.Terminal() })
	b, _ := os.ReadFile(out)
	text := string(b)
	if j.State != spec.StateCompleted || j.Attempt != 1 {
		t.Errorf("job ended %s on attempt %d (%s); want COMPLETED on its first attempt, resumed", j.State, j.Attempt, j.Reason)
	}
	if strings.Count(text, "begin") != 1 || strings.Count(text, "end") != 1 || !strings.Contains(text, "tick 20\n") {
		t.Errorf("the job ran other than once through:\n%s", text)
	}
}

// TestControllerAwayNodesDeliver: the controller is killed (kill -9) and
// kept down while jobs end on the nodes; after it restarts, the nodes
// deliver every exit from their outboxes.
func TestControllerAwayNodesDeliver(t *testing.T) {
	c, _ := e2etest.StartFaultCluster(t, "node1")
	work := t.TempDir()
	var ids []string
	for i, code := range []int{0, 4, 0} {
		r := c.CLI(work, "gpusubmit", "--parsable", "-G", "1", "--wrap", fmt.Sprintf("sleep %d; exit %d", 2+i, code))
		if r.Code != 0 {
			t.Fatalf("submit: %d %s", r.Code, r.Stderr)
		}
		ids = append(ids, strings.TrimSpace(r.Stdout))
	}
	for _, id := range ids {
		c.WaitState(id, 60*time.Second, "RUNNING")
	}
	c.Stop(syscall.SIGKILL) // the controller only: containerd and the node live on
	away := 20 * time.Second
	time.Sleep(away) // every job ends meanwhile
	start := time.Now()
	c.Start(0)
	want := []string{"COMPLETED", "FAILED", "COMPLETED"}
	for i, id := range ids {
		j := c.WaitState(id, 90*time.Second, "COMPLETED", "FAILED", "NODE_FAIL", "CANCELLED")
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
	c, _ := e2etest.StartFaultCluster(t, "node1", "node2")
	cl := c.Client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := e2etest.WaitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	before, from := j.Checkpoints, j.Nodes[0]
	start := time.Now()
	if r := c.CLI(work, "gpuq", "drain", from, "--reason", "swap PSU"); r.Code != 0 {
		t.Fatalf("gpuq drain: exit %d: %s", r.Code, r.Stderr)
	}
	j = e2etest.WaitJob(t, cl, id, 60*time.Second, "job running on the other node", func(j spec.Job) bool {
		return j.Attempt == 2 && j.State == spec.StateRunning
	})
	moved := time.Since(start)
	if j.Nodes[0] == from || j.Checkpoints <= before || j.LostWork.Std() > 2*time.Second {
		t.Errorf("after drain: on %v, checkpoints %d → %d, lost %v; want the other node, one more checkpoint, under one interval lost",
			j.Nodes, before, j.Checkpoints, j.LostWork.Std())
	}
	last := checkResumed(t, work, id)
	if r := c.CLI(work, "gpuq", "nodes"); !regexp.MustCompile(from + `\s+DRAIN\s.*swap PSU`).MatchString(r.Stdout) {
		t.Errorf("gpuq nodes does not show %s drained for 'swap PSU':\n%s", from, r.Stdout)
	}
	if r := c.CLI(work, "gpuq", "resume", from); r.Code != 0 {
		t.Fatalf("gpuq resume: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "gpuq", "nodes"); strings.Contains(r.Stdout, "swap PSU") {
		t.Errorf("reason still shown after resume:\n%s", r.Stdout)
	}
	t.Logf("FAULT drain: moved to %s and running after %v, resumed from %s; lost work %v", j.Nodes[0], moved.Round(time.Millisecond), last, j.LostWork.Std())
}

// TestReadoptedJobKeepsCheckpointing: after kill -9 of its agent, a
// checkpointing job is re-adopted (not restarted) and still checkpoints
// every interval.
func TestReadoptedJobKeepsCheckpointing(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	cl := c.Client()
	work := t.TempDir()
	id := submitCounter(t, c, work)
	j := e2etest.WaitJob(t, cl, id, 60*time.Second, "1 sealed checkpoint", func(j spec.Job) bool { return j.Checkpoints >= 1 })
	nodes["node1"].Stop(syscall.SIGKILL)
	n := c.StartNode(t, "node1", filepath.Join(c.Dir, "node.toml"))
	e2etest.WaitFor(t, 60*time.Second, "container re-adopted", func() bool { return strings.Contains(n.Log.String(), "re-adopting running container") })
	after := e2etest.WaitJob(t, cl, id, 30*time.Second, "two more checkpoints after the restart", func(x spec.Job) bool { return x.Checkpoints >= j.Checkpoints+2 })
	if after.Attempt != 1 || after.State != spec.StateRunning {
		t.Errorf("job attempt %d %s, want attempt 1 still RUNNING (re-adopted)", after.Attempt, after.State)
	}
	if !strings.Contains(n.Log.String(), "re-adopted job takes its checkpoints again") {
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
// the checkpoint done once both ranks' files are there. The trap comes
// first: the step may start just as a checkpoint interval ends, and a
// signal before it would end the rank (the test failed once so, "killed
// by signal SIGUSR1").
const gangWorker = `#!/bin/bash
trap checkpoint USR1
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
while [ "$n" -lt 1000000 ]; do
	n=$((n+1))
	sleep 0.2
done
`

// TestGangRanksCheckpoint: both ranks of a two-node job are signalled, so
// the sealed checkpoint holds each rank's state.
func TestGangRanksCheckpoint(t *testing.T) {
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	cl := c.Client()
	work := t.TempDir()
	e2etest.WriteScript(t, work, "gang.sh", gangScript)
	e2etest.WriteScript(t, work, "gang-worker.sh", gangWorker)
	r := c.CLI(work, "gpusubmit", "--parsable", "-N", "2", "--gpus-per-node", "1", "--time", "5", "gang.sh")
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
	}
	j := e2etest.WaitJob(t, cl, spec.JobID(n), 60*time.Second, "2 sealed checkpoints", func(j spec.Job) bool { return j.Checkpoints >= 2 })
	dir := filepath.Join(c.Dir, "checkpoints", fmt.Sprint(n), fmt.Sprintf("ckpt-%08d", j.LastCheckpoint.Seq))
	for _, rank := range []string{"rank-0", "rank-1"} {
		if _, err := os.Stat(filepath.Join(dir, rank)); err != nil {
			t.Errorf("sealed checkpoint %s lacks %s: %v", dir, rank, err)
		}
	}
}
