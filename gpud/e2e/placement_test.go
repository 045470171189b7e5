package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPendingNodeCounts: on a real standalone of three nodes, a job no
// node can run now, each for its own reason (one node outside its
// partition, one drained, one with too few GPUs free), waits for
// Resources, and the scheduler's per-reason node counts show in gpuq
// show, in squeue's %r and in scontrol show job. (issue 17)
func TestPendingNodeCounts(t *testing.T) {
	dir := shortTempDir(t)
	conf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(conf, []byte(`version = 1
default_qos = "normal"

[[partition]]
name = "batch"
nodes = ["node1", "node2"]
default = true

[[partition]]
name = "other"
nodes = ["node3"]

[[qos]]
name = "normal"
priority = 100
preempt_mode = "off"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, 3, "--config", conf, "--kill-grace", "2s", "--cpus", "16")
	work := t.TempDir()
	busy := c.submit(work, "-w", "node1", "--gpus-per-node=6", "--time=10", "--wrap", "sleep 600")
	c.waitState(busy, 30*time.Second, "RUNNING")
	if r := c.cli(work, "gpuq", "drain", "node2", "--reason", "maintenance"); r.code != 0 {
		t.Fatalf("gpuq drain node2: exit %d: %s", r.code, r.stderr)
	}
	id := c.submit(work, "--gpus-per-node=h100:4", "--time=10", "--wrap", "true")
	c.waitReason(id, "Resources", 30*time.Second)
	const want = "3 nodes: 1 drain, 1 insufficient free h100 GPUs, 1 not in partition batch"
	// The counts come from the scheduling cycle; give it one after the
	// drain.
	deadline := time.Now().Add(30 * time.Second)
	var show result
	for time.Now().Before(deadline) {
		if show = c.cli(work, "gpuq", "show", id); strings.Contains(show.stdout, "NodeReasons="+want+"\n") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(show.stdout, "Reason=Resources ") || !strings.Contains(show.stdout, "\n   NodeReasons="+want+"\n") {
		t.Errorf("gpuq show %s lacks Reason=Resources and NodeReasons=%s:\n%s%s", id, want, show.stdout, show.stderr)
	}
	if r := c.cli(work, "squeue", "-h", "-j", id, "-o", "%i|%r|%R"); strings.TrimSpace(r.stdout) != id+"|Resources ("+want+")|(Resources)" {
		t.Errorf("squeue -o %%i|%%r|%%R = %q (exit %d, %s); want %q", r.stdout, r.code, r.stderr, id+"|Resources ("+want+")|(Resources)")
	}
	if r := c.cli(work, "scontrol", "show", "job"); !strings.Contains(r.stdout, "JobId="+id+" ") ||
		!strings.Contains(r.stdout, "NodeReasons="+want+"\n") {
		t.Errorf("scontrol show job lacks NodeReasons=%s:\n%s%s", want, r.stdout, r.stderr)
	}
}
