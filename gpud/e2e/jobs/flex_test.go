package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestNodeRangeStartsOnWhatIsFree is issue 33's -N MIN-MAX must-show:
// with 3 of 4 nodes free, sbatch -N 2-4 starts at once on the 3 rather
// than waiting for 4, and SLURM_NNODES / SLURM_JOB_NUM_NODES say 3.
func TestNodeRangeStartsOnWhatIsFree(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 4, "--cpus", "16")
	work := t.TempDir()
	busy := submit(c, work, "--nodelist=node4", "--gpus-per-node=8", "--time=10", "--wrap", "sleep 600")
	c.WaitState(busy, 30*time.Second, "RUNNING")
	flex := submit(c, work, "-N", "2-4", "--gpus-per-node=8", "--time=5", "-o", filepath.Join(work, "flex-%j.out"),
		"--wrap", `echo "NN=$SLURM_NNODES JN=$SLURM_JOB_NUM_NODES"`)
	j := c.WaitState(flex, 60*time.Second, "COMPLETED")
	if nodes, _ := j["nodes"].([]any); len(nodes) != 3 {
		t.Errorf("-N 2-4 ran on %v, want the 3 free nodes", j["nodes"])
	}
	out, err := os.ReadFile(filepath.Join(work, "flex-"+flex+".out"))
	if err != nil || strings.TrimSpace(string(out)) != "NN=3 JN=3" {
		t.Errorf("the job's environment says %q (%v), want NN=3 JN=3", out, err)
	}
	// A bad range is refused with what to do.
	if r := c.CLI(work, "sbatch", "-N", "4-2", "--wrap", "true"); r.Code == 0 || !strings.Contains(r.Stderr, "MIN <= MAX") {
		t.Errorf("sbatch -N 4-2: exit %d: %s", r.Code, r.Stderr)
	}
}

// TestTimeMinFillsBackfillHole is issue 33's --time-min must-show: a
// job that may run as short as 5 minutes starts in the hole before a
// higher job's reservation (its limit becomes the hole's whole minutes),
// while the same job without --time-min waits.
func TestTimeMinFillsBackfillHole(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--cpus", "16")
	work := t.TempDir()
	a := submit(c, work, "--gpus-per-node=4", "--time=10", "--wrap", "sleep 600")
	c.WaitState(a, 30*time.Second, "RUNNING")
	big := submit(c, work, "--gpus-per-node=8", "--time=10", "--wrap", "sleep 1")
	waitReason(c, big, "Resources", 30*time.Second)
	fixed := submit(c, work, "--gpus-per-node=4", "--time=60", "--wrap", "sleep 600")
	short := submit(c, work, "--gpus-per-node=4", "--time=60", "--time-min=5", "--wrap", "sleep 600")
	j := c.WaitState(short, 30*time.Second, "RUNNING")
	limit := time.Duration(j["time_limit"].(float64)) * time.Second
	if limit < 5*time.Minute || limit > 10*time.Minute {
		t.Errorf("the --time-min job runs with limit %v; want the hole before the reservation (5 to 10 minutes)", limit)
	}
	if s := c.ShowJob(fixed); s["state"] != "PENDING" {
		t.Errorf("the job without --time-min is %v, want PENDING", s["state"])
	}
	if r := c.CLI(work, "scontrol", "show", "job", short); !strings.Contains(r.Stdout, "TimeMin=00:05:00") {
		t.Errorf("scontrol show job lacks TimeMin=00:05:00:\n%s", r.Stdout)
	}
}
