package steps

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// loginEnv is a login host's environment: no job around (no step socket,
// no SLURM_JOB_ID), the cluster's controller.
func loginEnv(c *e2etest.Cluster, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == api.EnvStepSocket || strings.HasPrefix(k, "SLURM_") {
			continue
		}
		if k == "PATH" {
			kv = "PATH=" + e2etest.BinDir + ":" + os.Getenv("PATH") // srun inside salloc
		}
		env = append(env, kv)
	}
	return append(append(env, api.EnvController+"="+c.Addr), extra...)
}

// login runs bin/<name> as on a login host.
func login(c *e2etest.Cluster, dir string, extra []string, name string, args ...string) e2etest.Result {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir, name), args...)
	cmd.Dir = dir
	cmd.Env = loginEnv(c, extra...)
	return e2etest.RunCommand(c.T, cmd, fmt.Sprintf("%s %v", name, args))
}

// TestSrunOutsideAndSalloc: srun on a login host makes a 2-node
// allocation, runs one step over both nodes and ends it with the step's
// exit status (COMPLETED 0:0, FAILED 3:0, as Slurm's srun); salloc gives a command the allocation's variables and
// srun inside it launches steps; srun with no allocation and no
// resources is a clear error.
func TestSrunOutsideAndSalloc(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	work := t.TempDir()

	r := login(c, work, nil, "srun", "-l", "hostname")
	if r.Code != 1 || !strings.Contains(r.Stderr, "no allocation to run in") {
		t.Errorf("srun with no allocation and no resources: exit %d %q; want 1 and a clear error", r.Code, r.Stderr)
	}

	r = login(c, work, nil, "srun", "-N2", "--gpus-per-node=1", "-l", "printenv", "SLURMD_NODENAME")
	t.Logf("srun -N2 outside a job: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	if r.Code != 0 || !strings.Contains(r.Stdout, "0: node1\n") || !strings.Contains(r.Stdout, "1: node2\n") {
		t.Fatalf("srun -N2 --gpus-per-node=1 outside a job: exit %d %q %q; want a task on each node", r.Code, r.Stdout, r.Stderr)
	}
	m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(r.Stderr)
	if m == nil || !strings.Contains(r.Stderr, "Relinquishing job allocation "+m[1]) {
		t.Fatalf("srun's stderr lacks Slurm's allocation lines: %q", r.Stderr)
	}
	endsAs := func(what, id, state string, code float64) {
		t.Helper()
		j := c.WaitState(id, 30*time.Second, "CANCELLED", "COMPLETED", "FAILED")
		if j["state"] != state || j["exit_code"] != code {
			t.Errorf("%s: job %s ended %v exit %v (%v); want %s exit %v, the work's status, as Slurm's", what, id, j["state"], j["exit_code"], j["reason"], state, code)
		}
	}
	endsAs("srun -N2 outside a job", m[1], "COMPLETED", 0)

	r = login(c, work, nil, "srun", "-N1", "bash", "-c", "echo $SLURM_JOB_ID $SLURM_PROCID; exit 3")
	if r.Code != 3 || !regexp.MustCompile(`^\d+ 0\n$`).MatchString(r.Stdout) {
		t.Errorf("srun -N1 with a task exiting 3: exit %d %q %q; want 3 and the task's job id", r.Code, r.Stdout, r.Stderr)
	} else {
		endsAs("srun -N1 exiting 3", strings.Fields(r.Stdout)[0], "FAILED", 3)
	}

	r = login(c, work, nil, "salloc", "-N2", "--gpus-per-node=1", "bash", "-c",
		"echo id=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST n=$SLURM_NNODES; srun -l printenv SLURMD_NODENAME; srun -n4 -l true; echo rc=$?; exit 5")
	t.Logf("salloc: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	m = regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(r.Stderr)
	if r.Code != 5 || m == nil || !strings.Contains(r.Stdout, "id="+m[1]+" nodes=node[1-2] n=2\n") ||
		!strings.Contains(r.Stdout, "0: node1\n") || !strings.Contains(r.Stdout, "1: node2\n") || !strings.Contains(r.Stdout, "rc=0\n") {
		t.Fatalf("salloc -N2 with srun inside: exit %d %q %q; want the command's exit 5, its variables and steps on both nodes", r.Code, r.Stdout, r.Stderr)
	}
	endsAs("salloc exiting 5", m[1], "FAILED", 5)

	// ^C while the request waits cancels it: every GPU is taken first.
	r = c.CLI(work, "gpusubmit", "--parsable", "-N2", "--gpus-per-node=8", "--wrap", "sleep 300")
	hog := strings.TrimSpace(r.Stdout)
	c.WaitState(hog, 30*time.Second, "RUNNING")
	sa := exec.Command(filepath.Join(e2etest.BinDir, "salloc"), "-N1", "--gpus-per-node=1", "true")
	sa.Dir, sa.Env = work, loginEnv(c)
	var saOut e2etest.SyncBuffer
	sa.Stdout, sa.Stderr = &saOut, &saOut
	if err := sa.Start(); err != nil {
		t.Fatal(err)
	}
	var pending string
	e2etest.WaitFor(t, 30*time.Second, "salloc waiting for resources", func() bool {
		m := regexp.MustCompile(`job (\d+) queued and waiting for resources`).FindStringSubmatch(saOut.String())
		if m != nil {
			pending = m[1]
		}
		return m != nil
	})
	_ = sa.Process.Signal(syscall.SIGINT)
	err := sa.Wait()
	c.WaitState(pending, 30*time.Second, "CANCELLED")
	if err == nil || !strings.Contains(saOut.String(), "revoked") {
		t.Errorf("salloc interrupted while pending: %v\n%s; want a failing exit saying the request was revoked", err, saOut.String())
	}
	c.CLI(work, "gpuq", "cancel", hog)
}

// TestStepTicketOtherUserRefused: srun from outside reaches a job's
// allocation only with its step ticket, which the controller gives its
// owner (or root) alone: another user's srun into it is refused.
func TestStepTicketOtherUserRefused(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, true)
	alice, bob := e2etest.AddUserTag(t, "a"), e2etest.AddUserTag(t, "b")
	// Alice holds an allocation with salloc running sleep.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sa := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir, "salloc"), "-N1", "sleep", "120")
	sa.Dir = alice.Home
	sa.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + alice.Home, api.EnvController + "=" + c.Addr}
	sa.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: alice.UID, Gid: alice.GID}}
	var saOut e2etest.SyncBuffer
	sa.Stdout, sa.Stderr = &saOut, &saOut
	if err := sa.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sa.Process.Signal(syscall.SIGTERM); _ = sa.Wait() }()
	var id string
	e2etest.WaitFor(t, 60*time.Second, "alice's allocation granted", func() bool {
		m := regexp.MustCompile(`Granted job allocation (\d+)`).FindStringSubmatch(saOut.String())
		if m != nil {
			id = m[1]
		}
		return m != nil
	})
	env := []string{"SLURM_JOB_ID=" + id}
	var own e2etest.Result
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if own = c.As(alice, env, "srun", "echo", "alice-step"); own.Code == 0 {
			break
		}
	}
	if own.Code != 0 || own.Stdout != "alice-step\n" {
		t.Fatalf("alice's srun in her salloc allocation: exit %d %q %s", own.Code, own.Stdout, own.Stderr)
	}
	r := c.As(bob, env, "srun", "echo", "bob-step")
	if r.Code == 0 || strings.Contains(r.Stdout, "bob-step") || !strings.Contains(r.Stderr, "only its owner or root may start steps") {
		t.Errorf("bob's srun in alice's allocation: exit %d %q %q; want refused (not the owner)", r.Code, r.Stdout, r.Stderr)
	}
	// Bob's job, asking the controller for alice's ticket from inside
	// his container, is refused the same way.
	r = c.As(bob, nil, "gpusubmit", "--wait", "--parsable", "--output", "bob.out",
		"--wrap", "env -u "+api.EnvStepSocket+" SLURM_JOB_ID="+id+" srun echo bob-step; echo rc=$?")
	out, err := os.ReadFile(filepath.Join(bob.Home, "bob.out"))
	if err != nil {
		t.Fatalf("bob's job (exit %d %s): %v", r.Code, r.Stderr, err)
	}
	if strings.Contains(string(out), "bob-step") || !strings.Contains(string(out), "rc=1") || !strings.Contains(string(out), "only its owner or root") {
		t.Errorf("bob's job started a step in alice's allocation, or was not told why not:\n%s", out)
	}
	t.Logf("bob's job: %s", out)
	// Alice's salloc ends on SIGTERM and releases the allocation: its
	// command, sent the SIGTERM, dies of it, so the job ends FAILED with
	// signal 15 (the command's status, as Slurm's salloc completes it).
	_ = sa.Process.Signal(syscall.SIGTERM)
	_ = sa.Wait()
	if j := c.WaitState(id, 30*time.Second, "CANCELLED", "COMPLETED", "FAILED"); j["state"] != "FAILED" || j["exit_signal"] != float64(15) {
		t.Errorf("alice's allocation after salloc's SIGTERM: %v signal %v (%v); want FAILED by signal 15", j["state"], j["exit_signal"], j["reason"])
	}
	if !strings.Contains(saOut.String(), "Relinquishing job allocation "+id) {
		t.Errorf("salloc did not release its allocation on SIGTERM:\n%s", saOut.String())
	}
	e2etest.WaitFor(t, 30*time.Second, "alice's container removed", func() bool { return c.ContainersOf(id) == 0 })
}

// TestStepsOverNetwork is TestSteps with the nodes starting each other's
// tasks over their step listeners (TLS, node certificates) instead of in
// process: output relayed, stdin to task 0, -K, signals, exit codes.
func TestStepsOverNetwork(t *testing.T) {
	t.Parallel()
	testSteps(t, "--steps-over-network")
}

// TestStepsNeedJoinedNodes: node agents that talk to the controller
// without a node certificate (here root on its unix socket; node tokens
// alike) serve no step listener, so a step across two of them is refused
// with an error that says how to fix it; the script still runs once.
func TestStepsNeedJoinedNodes(t *testing.T) {
	c, _ := e2etest.StartFaultCluster(t, "node1", "node2")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "span.sh", "#!/bin/bash\necho once\nsrun -l hostname\necho rc=$?\nsrun -N1 -l echo local-ok\n")
	r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "-N", "2", "--gpus-per-node", "1", "--output", "span-%j.out", "span.sh")
	id := strings.TrimSpace(r.Stdout)
	out, err := os.ReadFile(filepath.Join(work, "span-"+id+".out"))
	if err != nil {
		t.Fatalf("job %s (exit %d %s): %v", id, r.Code, r.Stderr, err)
	}
	text := string(out)
	t.Logf("job output:\n%s", text)
	if n := strings.Count(text, "once\n"); n != 1 {
		t.Errorf("the script ran %d times, want once", n)
	}
	if !strings.Contains(text, "has no step listener") || !strings.Contains(text, "join_token_file") || !strings.Contains(text, "rc=1\n") {
		t.Errorf("a step across nodes without certificates: want exit 1 and an error saying to join them with the join token")
	}
	if strings.Contains(text, "0: "+e2etest.Hostname(t)+"\n") {
		t.Errorf("a task of the refused step ran")
	}
	if !strings.Contains(text, "0: local-ok\n") {
		t.Errorf("a step on the script's own node should still run")
	}
}
