package steps

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// stepsScript is the two-node script: the batch part runs once,
// srun fans out over both nodes (labelled), and four tasks each get
// their own GPU. Then a step whose task exits 3, a -K step, two
// concurrent steps that can only finish if they run at the same time, a
// step larger than the allocation, and SIGTERM to srun reaching its tasks.
const stepsScript = `#!/bin/bash
echo once nodelist=$SLURM_JOB_NODELIST
srun -l hostname
srun -l printenv SLURMD_NODENAME
srun --ntasks-per-node=2 --gpus-per-task=1 bash -c 'echo task $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_NTASKS $SLURM_STEP_ID $CUDA_VISIBLE_DEVICES $SLURMD_NODENAME'
srun -n2 bash -c 'exit $((SLURM_PROCID * 3))'
echo "rc=$?"
start=$SECONDS
srun -K -n2 bash -c 'if [ $SLURM_PROCID = 1 ]; then exit 4; fi; sleep 60'
echo "krc=$? took=$((SECONDS - start))"
srun -n1 --overlap bash -c 'for i in $(seq 200); do [ -f /tmp/b ] && break; sleep 0.1; done; [ -f /tmp/b ] && echo concurrent-A' &
srun -n1 --overlap bash -c 'touch /tmp/b; echo concurrent-B' &
wait
echo piped-in | srun -n2 -l cat
srun -N3 true 2>&1
echo "big=$?"
srun bash -c 'trap "echo got-TERM-$SLURM_PROCID; exit 0" TERM; echo ready-$SLURM_PROCID; sleep 30 & wait' > /tmp/sig.out &
pid=$!
for i in $(seq 200); do [ "$(grep -c ready /tmp/sig.out)" = 2 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid
echo "sigrc=$?"
cat /tmp/sig.out
`

// TestSteps runs the "Must show" two-node script on a real gpud
// standalone with two nodes: the script once, steps over both nodes.
func TestSteps(t *testing.T) {
	t.Parallel()
	testSteps(t)
}

// testSteps is TestSteps on a standalone with the extra flags.
func testSteps(t *testing.T, extra ...string) {
	c := e2etest.StartCluster(t, 2, extra...)
	work := t.TempDir()
	e2etest.WriteScript(t, work, "steps.sh", stepsScript)
	r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "-N", "2", "--gpus-per-node", "2", "--output", "steps-%j.out", "steps.sh")
	id := strings.TrimSpace(r.Stdout)
	out, err := os.ReadFile(filepath.Join(work, "steps-"+id+".out"))
	if err != nil {
		t.Fatalf("job %s (exit %d, %s): %v", id, r.Code, r.Stderr, err)
	}
	text := string(out)
	t.Logf("job output:\n%s", text)
	if r.Code != 0 {
		t.Fatalf("job exit %d: %s", r.Code, r.Stderr)
	}
	if n := strings.Count(text, "once nodelist=node[1-2]\n"); n != 1 {
		t.Errorf("'once' printed %d times, want 1 (the batch script runs on the first node only)", n)
	}
	// srun -l hostname: one labelled line per task, one task per node
	// (standalone's nodes share the host's name, so the nodes are told
	// apart by SLURMD_NODENAME).
	host, _ := os.Hostname()
	for _, want := range []string{"0: " + host + "\n", "1: " + host + "\n", "0: node1\n", "1: node2\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks the labelled line %q", want)
		}
	}
	// Four tasks, PROCIDs 0-3, LOCALIDs 0,1 per node, each its own GPU.
	// Each task's CUDA_VISIBLE_DEVICES is its own index into its node's
	// devices (Slurm's form), so a GPU is a node and an index.
	tasks := regexp.MustCompile(`(?m)^task (\d) (\d) (\d) 4 2 (\S+) (\S+)$`).FindAllStringSubmatch(text, -1)
	procs, gpus := map[string]bool{}, map[string]bool{}
	for _, m := range tasks {
		procs[m[1]] = true
		gpus[m[5]+"/"+m[4]] = true
		if want := map[string]string{"0": "0 0", "1": "1 0", "2": "0 1", "3": "1 1"}[m[1]]; m[2]+" "+m[3] != want {
			t.Errorf("task %s: LOCALID NODEID = %s %s, want %s", m[1], m[2], m[3], want)
		}
		if m[4] != m[2] {
			t.Errorf("task %s: CUDA_VISIBLE_DEVICES=%s, want its own index %s (its LOCALID under --gpus-per-task=1)", m[1], m[4], m[2])
		}
	}
	if len(procs) != 4 || len(gpus) != 4 {
		t.Errorf("want PROCIDs 0-3 each with its own GPU; saw %d tasks, %d GPUs: %q", len(procs), len(gpus), tasks)
	}
	if !strings.Contains(text, "rc=3\n") {
		t.Errorf("srun with a task exiting 3 did not exit 3")
	}
	if m := regexp.MustCompile(`krc=(\d+) took=(\d+)`).FindStringSubmatch(text); m == nil || m[1] == "0" || len(m[2]) > 1 && m[2] >= "30" {
		t.Errorf("srun -K: %v; want a failing exit well before the other task's 60 s sleep", m)
	}
	if !strings.Contains(text, "concurrent-A") || !strings.Contains(text, "concurrent-B") {
		t.Errorf("two steps started with & did not run at the same time")
	}
	if n := strings.Count(text, "piped-in"); n != 1 || !strings.Contains(text, "0: piped-in\n") {
		t.Errorf("srun's stdin reached %d tasks; want task 0 only", n)
	}
	if !strings.Contains(text, "step asks for 3 nodes but the allocation has 2 node(s): node1") || !strings.Contains(text, "big=1\n") {
		t.Errorf("srun -N3 in a 2-node allocation: want exit 1 and an error naming what the allocation has")
	}
	if !strings.Contains(text, "got-TERM-0") || !strings.Contains(text, "got-TERM-1") || !strings.Contains(text, "sigrc=0\n") {
		t.Errorf("SIGTERM to srun did not reach both tasks (or srun did not exit 0 with them)")
	}
}

// TestStepInOtherJobRefused: a job's step socket admits only its own
// job. Another user's job cannot even see it (the node's state is hidden
// from jobs), and from the host the socket refuses other users.
func TestStepInOtherJobRefused(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, true)
	alice, bob := e2etest.AddUserTag(t, "a"), e2etest.AddUserTag(t, "b")
	r := c.As(alice, nil, "gpusubmit", "--parsable", "--wrap", "sleep 300")
	if r.Code != 0 {
		t.Fatalf("alice's job: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "RUNNING")
	sock := filepath.Join(c.Dir, "nodes", "node1", "jobs", "gpud-"+id+"-1-node1", "step.sock")
	env := []string{api.EnvStepSocket + "=" + sock}
	// Alice's own steps work, from her job's socket.
	var own e2etest.Result
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if own = c.As(alice, env, "srun", "echo", "alice-step"); own.Code == 0 {
			break
		}
	}
	if own.Code != 0 || own.Stdout != "alice-step\n" {
		t.Fatalf("alice's step in her own job: exit %d %q %s", own.Code, own.Stdout, own.Stderr)
	}
	// Bob, on the host, is refused by the socket's owner and mode.
	if r := c.As(bob, env, "srun", "echo", "bob-step"); r.Code == 0 || strings.Contains(r.Stdout, "bob-step") ||
		!strings.Contains(r.Stderr, "permission denied") {
		t.Errorf("bob's srun on alice's job socket: exit %d %q %q; want refused (permission denied)", r.Code, r.Stdout, r.Stderr)
	}
	// Bob's job does not see alice's socket at all.
	r = c.As(bob, nil, "gpusubmit", "--wait", "--parsable", "--output", "bob.out",
		"--wrap", api.EnvStepSocket+"="+sock+" srun echo bob-step; echo rc=$?")
	out, err := os.ReadFile(filepath.Join(bob.Home, "bob.out"))
	if err != nil {
		t.Fatalf("bob's job (exit %d %s): %v", r.Code, r.Stderr, err)
	}
	if strings.Contains(string(out), "bob-step") || !strings.Contains(string(out), "rc=1") {
		t.Errorf("bob's job reached alice's step socket:\n%s", out)
	}
	t.Logf("bob's job: %s", out)
	// End alice's job before her user is removed.
	c.CancelAll()
	c.WaitState(id, 60*time.Second, "CANCELLED")
	e2etest.WaitFor(t, 30*time.Second, "alice's container removed", func() bool { return c.ContainersOf(id) == 0 })
}

// TestStepsAfterAgentRestart: after kill -9 of the whole gpud tree and a
// restart, the agents re-adopt a running two-node job and srun starts
// steps in it again, on both nodes.
func TestStepsAfterAgentRestart(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2)
	sock := stepJob(t, c, 2)
	c.Stop(syscall.SIGKILL)
	c.Start(2)
	waitStep(t, sock, 2)
	out, err := srunCmd(sock, "-l", "printenv", "SLURMD_NODENAME").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0: node1\n") || !strings.Contains(string(out), "1: node2\n") {
		t.Errorf("srun after the restart: %v: %q; want a task on each node", err, out)
	}
}
