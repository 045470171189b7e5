package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestIdleGPUPolicy: with every mock GPU made idle through the mock health
// file, a job of the partition's flag policy gets IdleGPU (gpuq show and
// %G), its hook runs with the job's id, and a job of a QOS whose policy
// cancels ends CANCELLED with the idle reason. Usage is sampled every
// second, and the policies wait 3 s.
func TestIdleGPUPolicy(t *testing.T) {
	t.Parallel()
	dir := e2etest.ShortTempDir(t)
	hookOut := filepath.Join(dir, "hook.out")
	hook := e2etest.WriteScript(t, dir, "hook.sh", "#!/bin/sh\necho \"$GPUD_JOB_ID $GPUD_JOB_USER $GPUD_IDLE_REASON\" >> "+hookOut+"\n")
	conf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(conf, []byte(`version = 1
default_qos = "normal"

[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true
idle_gpu_util = 5.0
idle_after = "3s"
idle_action = "hook"
idle_hook = "`+hook+`"

[[qos]]
name = "normal"
priority = 100
preempt_mode = "off"

[[qos]]
name = "short"
priority = 100
preempt_mode = "off"
idle_gpu_util = 5.0
idle_after = "3s"
idle_action = "cancel"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", conf, "--kill-grace", "2s", "--usage-interval", "1s")
	health := filepath.Join(c.Dir, "nodes", "node1", "mock-gpu-health.json")
	if err := os.WriteFile(health, []byte(`{"0":{"util":1},"1":{"util":1},"2":{"util":1},"3":{"util":1},"4":{"util":1},"5":{"util":1},"6":{"util":1},"7":{"util":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	flagged := submit(c, work, "--gpus-per-node=1", "--wrap", "sleep 600")
	cancelled := submit(c, work, "-q", "short", "--gpus-per-node=1", "--wrap", "sleep 600")

	j := c.WaitState(cancelled, 60*time.Second, "CANCELLED")
	if r, _ := j["reason"].(string); !strings.Contains(r, "idle GPUs: below 5% for 3s") {
		t.Errorf("cancelled idle job's reason %q; want the idle policy's", r)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		j = c.ShowJob(flagged)
		if j["idle_gpu"] != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if j["state"] != "RUNNING" || j["idle_gpu"] != "below 5% for 3s" {
		t.Fatalf("flag job: state %v idle_gpu %v; want RUNNING, \"below 5%% for 3s\"", j["state"], j["idle_gpu"])
	}
	if r := c.CLI(work, "gpuq", "show", flagged); !strings.Contains(r.Stdout, "IdleGPU=below 5% for 3s") {
		t.Errorf("gpuq show lacks IdleGPU:\n%s", r.Stdout)
	}
	if r := c.CLI(work, "gpuq", "-j", flagged, "--noheader", "--format", "%i %G"); strings.TrimSpace(r.Stdout) != flagged+" IdleGPU" {
		t.Errorf("gpuq --format '%%i %%G' = %q; want %q", r.Stdout, flagged+" IdleGPU")
	}
	e2etest.WaitFor(t, 30*time.Second, "idle hook output", func() bool {
		b, _ := os.ReadFile(hookOut)
		return strings.Contains(string(b), flagged+" root idle GPUs: below 5% for 3s")
	})

	// Busy again: the flag goes away.
	if err := os.Remove(health); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(health, []byte(`{"0":{"util":90},"1":{"util":90},"2":{"util":90},"3":{"util":90},"4":{"util":90},"5":{"util":90},"6":{"util":90},"7":{"util":90}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, 30*time.Second, "IdleGPU cleared", func() bool { return c.ShowJob(flagged)["idle_gpu"] == nil })
	if b, _ := os.ReadFile(hookOut); strings.Count(string(b), "\n") != 1 {
		t.Errorf("hook ran more than once:\n%s", b)
	}
}
