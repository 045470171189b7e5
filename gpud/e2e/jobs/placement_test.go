package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestPendingNodeCounts: on a real standalone of three nodes, a job no
// node can run now, each for its own reason (one node outside its
// partition, one drained, one with too few GPUs free), waits for
// Resources, and the scheduler's per-reason node counts show in gpuq
// show, in squeue's %r and in scontrol show job. (issue 17)
func TestPendingNodeCounts(t *testing.T) {
	t.Parallel()
	dir := e2etest.ShortTempDir(t)
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
	c := e2etest.StartCluster(t, 3, "--config", conf, "--kill-grace", "2s", "--cpus", "16")
	work := t.TempDir()
	busy := submit(c, work, "-w", "node1", "--gpus-per-node=6", "--time=10", "--wrap", "sleep 600")
	c.WaitState(busy, 30*time.Second, "RUNNING")
	if r := c.CLI(work, "gpuq", "drain", "node2", "--reason", "maintenance"); r.Code != 0 {
		t.Fatalf("gpuq drain node2: exit %d: %s", r.Code, r.Stderr)
	}
	id := submit(c, work, "--gpus-per-node=h100:4", "--time=10", "--wrap", "true")
	waitReason(c, id, "Resources", 30*time.Second)
	const want = "3 nodes: 1 drain, 1 insufficient free h100 GPUs, 1 not in partition batch"
	// The counts come from the scheduling cycle; give it one after the
	// drain.
	deadline := time.Now().Add(30 * time.Second)
	var show e2etest.Result
	for time.Now().Before(deadline) {
		if show = c.CLI(work, "gpuq", "show", id); strings.Contains(show.Stdout, "NodeReasons="+want+"\n") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(show.Stdout, "Reason=Resources ") || !strings.Contains(show.Stdout, "\n   NodeReasons="+want+"\n") {
		t.Errorf("gpuq show %s lacks Reason=Resources and NodeReasons=%s:\n%s%s", id, want, show.Stdout, show.Stderr)
	}
	if r := c.CLI(work, "squeue", "-h", "-j", id, "-o", "%i|%r|%R"); strings.TrimSpace(r.Stdout) != id+"|Resources ("+want+")|(Resources)" {
		t.Errorf("squeue -o %%i|%%r|%%R = %q (exit %d, %s); want %q", r.Stdout, r.Code, r.Stderr, id+"|Resources ("+want+")|(Resources)")
	}
	if r := c.CLI(work, "scontrol", "show", "job"); !strings.Contains(r.Stdout, "JobId="+id+" ") ||
		!strings.Contains(r.Stdout, "NodeReasons="+want+"\n") {
		t.Errorf("scontrol show job lacks NodeReasons=%s:\n%s%s", want, r.Stdout, r.Stderr)
	}
}
