package jobs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

var gpuUUID = regexp.MustCompile(`GPU-[0-9a-fA-F-]{36}`)

// TestGPUJobLifecycle walks the foundation issue's must-show list on one
// two-node simulated DGX H100 cluster.
func TestGPUJobLifecycle(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	work := t.TempDir()

	t.Run("gpu job completes with its two GPUs", func(t *testing.T) {
		e2etest.WriteScript(t, work, "gpus.sh", `
#!/bin/bash
#SBATCH --gpus-per-node=2
#GPU --time=1
#GPU --output=gpus-%j.out
echo "visible=$CUDA_VISIBLE_DEVICES uuids=$GPUD_GPUS"
echo "job=$SLURM_JOB_ID gpud=$GPUD_JOB_ID nodes=$SLURM_JOB_NODELIST"
ls /dev | grep '^nvidia[0-9]' | tr '\n' ' '; echo
`)
		r := c.CLI(work, "gpusubmit", "--wait", "gpus.sh")
		if r.Code != 0 {
			t.Fatalf("gpusubmit --wait: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
		id := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.Stdout)
		if id == nil {
			t.Fatalf("gpusubmit printed %q; want 'Submitted batch job <id>'", r.Stdout)
		}
		out, err := os.ReadFile(filepath.Join(work, "gpus-"+id[1]+".out"))
		if err != nil {
			t.Fatalf("output file: %v", err)
		}
		// CUDA_VISIBLE_DEVICES as Slurm's: indices into the container's
		// two devices; the UUIDs are in GPUD_GPUS.
		visible := regexp.MustCompile(`visible=(\S*) uuids=(\S*)`).FindStringSubmatch(string(out))
		if visible == nil || visible[1] != "0,1" || len(gpuUUID.FindAllString(visible[2], -1)) != 2 {
			t.Fatalf("want CUDA_VISIBLE_DEVICES=0,1 and two GPU UUIDs in GPUD_GPUS; output:\n%s", out)
		}
		if !strings.Contains(string(out), "job="+id[1]+" gpud="+id[1]) {
			t.Errorf("job id env missing from output:\n%s", out)
		}
		// Exactly the two injected device nodes are visible.
		devs := strings.Fields(strings.Split(string(out), "\n")[2])
		if len(devs) != 2 {
			t.Errorf("container should see 2 /dev/nvidiaN nodes, saw %v", devs)
		}
		j := c.ShowJob(id[1])
		if j["state"] != "COMPLETED" || j["exit_code"] != float64(0) {
			t.Fatalf("state=%v exit_code=%v, want COMPLETED 0", j["state"], j["exit_code"])
		}
		gpus, _ := j["gpus"].([]any)
		if len(gpus) != 2 {
			t.Fatalf("gpuq show --json gpus = %v, want 2 UUIDs", j["gpus"])
		}
		for _, g := range gpus {
			if !strings.Contains(visible[2], g.(string)) {
				t.Errorf("allocated GPU %v not in GPUD_GPUS %s", g, visible[2])
			}
		}
		for _, key := range []string{"id", "name", "user", "account", "partition", "qos", "state", "reason", "exit_code", "submit_time", "start_time", "end_time", "time_limit", "priority", "nodes", "gpus"} {
			if _, ok := j[key]; !ok {
				t.Errorf("gpuq show --json lacks %q", key)
			}
		}
	})

	t.Run("exit 3 is FAILED with exit code 3", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "--wrap", "exit 3")
		if r.Code != 3 {
			t.Fatalf("gpusubmit --wait exit %d, want 3 (stderr %s)", r.Code, r.Stderr)
		}
		j := c.ShowJob(strings.TrimSpace(r.Stdout))
		if j["state"] != "FAILED" || j["exit_code"] != float64(3) {
			t.Fatalf("state=%v exit_code=%v, want FAILED 3", j["state"], j["exit_code"])
		}
	})

	t.Run("cancel a sleeping job", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--parsable", "-G", "1", "--wrap", "sleep 600")
		if r.Code != 0 {
			t.Fatalf("submit: %d %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		c.WaitState(id, 60*time.Second, "RUNNING")
		if r := c.CLI(work, "gpuq", "cancel", id); r.Code != 0 {
			t.Fatalf("gpuq cancel: exit %d: %s", r.Code, r.Stderr)
		}
		c.WaitState(id, 60*time.Second, "CANCELLED")
		// The agent reports the exit before it deletes the container
		// (durability rule 3), so the deletion may trail the state.
		e2etest.WaitFor(t, 20*time.Second, "containers of cancelled job "+id+" removed", func() bool { return c.ContainersOf(id) == 0 })
	})

	t.Run("time limit gives TIMEOUT", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--parsable", "--time", "0:03", "--wrap", "sleep 600")
		if r.Code != 0 {
			t.Fatalf("submit: %d %s", r.Code, r.Stderr)
		}
		c.WaitState(strings.TrimSpace(r.Stdout), 90*time.Second, "TIMEOUT")
	})

	t.Run("two-node gang runs the script once and srun's tasks on each node with its rank", func(t *testing.T) {
		r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "-N", "2", "--gpus-per-node", "1", "--output", "gang-%j.out",
			"--wrap", "echo batch-once; srun sh -c 'echo rank=$NODE_RANK/$SLURM_NODEID world=$WORLD_SIZE nodes=$SLURM_JOB_NODELIST master=$MASTER_ADDR gpus=$GPUD_GPUS'")
		if r.Code != 0 {
			t.Fatalf("gang job: exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		out, err := os.ReadFile(filepath.Join(work, "gang-"+id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		for _, rank := range []string{"rank=0/0 world=2", "rank=1/1 world=2"} {
			if !strings.Contains(string(out), rank) {
				t.Errorf("output lacks %q:\n%s", rank, out)
			}
		}
		if n := strings.Count(string(out), "batch-once"); n != 1 {
			t.Errorf("batch script ran %d times, want once (on the first node):\n%s", n, out)
		}
		if n := len(gpuUUID.FindAllString(string(out), -1)); n != 2 {
			t.Errorf("want one GPU per rank, saw %d:\n%s", n, out)
		}
		if j := c.ShowJob(id); len(j["nodes"].([]any)) != 2 {
			t.Errorf("job nodes = %v, want 2", j["nodes"])
		}
	})

	t.Run("bad directive exits 2 naming it", func(t *testing.T) {
		e2etest.WriteScript(t, work, "bad.sh", `
#!/bin/sh
#SBATCH --gpus-per-node=2
#SBATCH --frobnicate=yes
echo never
`)
		r := c.CLI(work, "gpusubmit", "bad.sh")
		if r.Code != 2 || !strings.Contains(r.Stderr, "frobnicate") {
			t.Fatalf("exit %d stderr %q; want 2 naming --frobnicate", r.Code, r.Stderr)
		}
	})
}

// TestKill9Resumes kills the whole standalone process tree while jobs are
// pending and running, restarts it on the same state dir, and checks that
// every acknowledged job is still there, running jobs were re-adopted or
// ended with a true state, and no job runs twice.
func TestKill9Resumes(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	work := t.TempDir()
	var ids []string
	// Eight GPUs on the node: two 4-GPU jobs run, the rest wait.
	for i := 0; i < 5; i++ {
		r := c.CLI(work, "gpusubmit", "--parsable", "-G", "4", "--output", "k9-%j.out", "--wrap", "echo start $SLURM_JOB_ID; sleep 8; echo end $SLURM_JOB_ID")
		if r.Code != 0 {
			t.Fatalf("submit: %d %s", r.Code, r.Stderr)
		}
		ids = append(ids, strings.TrimSpace(r.Stdout))
	}
	c.WaitState(ids[0], 60*time.Second, "RUNNING")
	c.WaitState(ids[1], 60*time.Second, "RUNNING")

	c.Stop(9)
	killStrayDaemons(t, c.Dir)
	c.Start(1)

	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, id := range ids {
		j := c.ShowJob(id) // every acknowledged job is still there
		if j["state"] == nil {
			t.Fatalf("job %s lost", id)
		}
	}
	// Watch for double-running while everything drains.
	for {
		jobs, err := cl.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StateRunning}})
		if err != nil {
			t.Fatal(err)
		}
		used := 0
		for _, j := range jobs {
			used += len(j.GPUs)
		}
		if used > 8 {
			t.Fatalf("%d GPUs in use on an 8-GPU node: a job runs twice", used)
		}
		all := true
		for _, id := range ids {
			if s := c.ShowJob(id)["state"]; s != "COMPLETED" {
				all = false
				if s == "FAILED" || s == "CANCELLED" || s == "NODE_FAIL" {
					t.Fatalf("job %s ended %v after restart; want COMPLETED", id, s)
				}
			}
		}
		if all {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("jobs did not all complete after restart")
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, id := range ids {
		out, err := os.ReadFile(filepath.Join(work, "k9-"+id+".out"))
		if err != nil {
			t.Fatalf("job %s output: %v", id, err)
		}
		// Each attempt runs the script at most once. A job whose container
		// containerd killed while creating it when it died is requeued
		// (NODE_FAIL, then a new attempt; the killed one may not have got
		// as far as its first line), never run twice at once.
		attempts := int(c.ShowJob(id)["attempt"].(float64))
		if n := strings.Count(string(out), "start "+id); n < 1 || n > attempts {
			t.Errorf("job %s started %d times in %d attempts:\n%s", id, n, attempts, out)
		}
		if n := strings.Count(string(out), "end "+id); n != 1 {
			t.Errorf("job %s ended %d times:\n%s", id, n, out)
		}
	}
	// Accounting lost and doubled nothing across the kill: every job once,
	// COMPLETED, with all its attempts (recorded asynchronously, so wait).
	var recs []api.AcctJob
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		r := c.CLI(work, "gpuq", "acct", "-S", "2020-01-01", "--json", "-s", "COMPLETED")
		recs = nil
		if err := json.Unmarshal([]byte(r.Stdout), &recs); r.Code != 0 || err != nil {
			t.Fatalf("gpuq acct: exit %d, %v: %s", r.Code, err, r.Stderr)
		}
		if len(recs) >= len(ids) || time.Now().After(deadline) {
			break
		}
	}
	seen := map[string]int{}
	for _, j := range recs {
		id := strconv.FormatUint(uint64(j.ID), 10)
		seen[id]++
		if want := int(c.ShowJob(id)["attempt"].(float64)); j.Attempts != want || j.GPUHours*3600 < 4*float64(j.Elapsed) {
			t.Errorf("accounting of job %s: %d attempts, %v GPU-s over %ds; want %d attempts and at least 4 GPUs × elapsed", id, j.Attempts, j.GPUHours*3600, j.Elapsed, want)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("job %s is in accounting %d times, want once", id, seen[id])
		}
	}
}

// TestOOMAndReconfigure: a job over its --mem ends OUT_OF_MEMORY; gpuq
// reconfigure rejects a bad config file (the old one stays) and applies a
// good one without a restart.
func TestOOMAndReconfigure(t *testing.T) {
	t.Parallel()
	dir := e2etest.ShortTempDir(t)
	conf := filepath.Join(dir, "gpud.toml")
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, base, 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", conf, "--kill-grace", "2s")
	work := t.TempDir()

	r := c.CLI(work, "gpusubmit", "--parsable", "--mem", "32M", "--wrap", "head -c 300m /dev/zero | tail")
	if r.Code != 0 {
		t.Fatalf("submit: %d %s", r.Code, r.Stderr)
	}
	c.WaitState(strings.TrimSpace(r.Stdout), 60*time.Second, "OUT_OF_MEMORY")

	// A partition the running config does not know is refused...
	if r := c.CLI(work, "gpusubmit", "-p", "debug", "--wrap", "true"); r.Code != 2 || !strings.Contains(r.Stderr, "debug") {
		t.Fatalf("unknown partition: exit %d %q, want 2 naming it", r.Code, r.Stderr)
	}
	// ...a broken file is rejected with its reason and changes nothing...
	if err := os.WriteFile(conf, append(append([]byte{}, base...), "\n[scheduler]\nbogus_key = 1\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.CLI(work, "gpuq", "reconfigure"); r.Code == 0 || !strings.Contains(r.Stderr, "bogus_key") && !strings.Contains(r.Stderr, "scheduler") {
		t.Fatalf("bad config: gpuq reconfigure exit %d %q, want a failure naming the key", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "gpusubmit", "--parsable", "--wait", "--wrap", "true"); r.Code != 0 {
		t.Fatalf("after a rejected reload the old config should still run jobs: exit %d %s", r.Code, r.Stderr)
	}
	// ...and a good one applies without a restart.
	debug := "\n[[partition]]\nname = \"debug\"\nnodes = [\"ALL\"]\ndefault_time = \"10m\"\nmax_time = \"1h\"\n"
	if err := os.WriteFile(conf, append(append([]byte{}, base...), debug...), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.CLI(work, "gpuq", "reconfigure"); r.Code != 0 {
		t.Fatalf("gpuq reconfigure: exit %d %s", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "gpusubmit", "--wait", "-p", "debug", "--wrap", "true"); r.Code != 0 {
		t.Fatalf("job in the new partition: exit %d %s", r.Code, r.Stderr)
	}
}
