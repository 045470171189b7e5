package steps

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// stepResScript exercises the step ledger: a default step holds its
// nodes whole, so a second one waits (with Slurm's message) until it
// ends; --exact steps with a GPU each run side by side on distinct GPUs;
// -w picks a node; %n names a task's node in the step; -G beyond the
// allocation is refused naming what it has; --gpu-bind=single:1 gives
// each task one GPU, on the other node too (its share of the step
// carries the step's GPUs and their binding: over the network in
// TestStepResourcesOverNetwork).
const stepResScript = `#!/bin/bash
echo cpus=$SLURM_CPUS_ON_NODE
srun -N2 bash -c 'sleep 3; echo A-done' &
sleep 1
start=$SECONDS
srun -N2 bash -c 'echo B-ran' 2> /tmp/b.err
echo "B-waited=$((SECONDS - start))"
cat /tmp/b.err
wait
srun -n1 --exact --gpus-per-node=1 bash -c 'for i in $(seq 100); do [ -f /tmp/y ] && break; sleep 0.1; done; echo X=$CUDA_VISIBLE_DEVICES; [ -f /tmp/y ] && echo X-saw-Y' &
srun -n1 --exact --gpus-per-node=1 bash -c 'touch /tmp/y; echo Y=$CUDA_VISIBLE_DEVICES' &
wait
srun -n1 -w node2 printenv SLURMD_NODENAME
srun -N2 -o /tmp/o-%n.txt printenv SLURMD_NODENAME
echo "o0=$(cat /tmp/o-0.txt) o1=$(cat /tmp/o-1.txt)"
srun -G 5 true
echo "bigG=$?"
srun -N1 -n2 -l --gpu-bind=single:1 printenv CUDA_VISIBLE_DEVICES
srun -N2 --gpus-per-node=1 bash -c 'echo G$SLURM_NODEID=$CUDA_VISIBLE_DEVICES'
srun -w node2 -n2 --gpu-bind=single:1 bash -c 'echo W$SLURM_PROCID=$CUDA_VISIBLE_DEVICES'
`

// TestStepResources: steps take their resources out of the allocation
// (Slurm ≥ 21.08), on a real two-node gpud standalone.
func TestStepResources(t *testing.T) {
	t.Parallel()
	testStepResources(t)
}

// testStepResources is TestStepResources on a standalone with the extra
// flags.
func testStepResources(t *testing.T, extra ...string) {
	c := e2etest.StartCluster(t, 2, extra...)
	work := t.TempDir()
	e2etest.WriteScript(t, work, "res.sh", stepResScript)
	r := c.CLI(work, "gpusubmit", "--wait", "--parsable", "-N", "2", "--ntasks-per-node", "2", "--gpus-per-node", "2", "--output", "res.out", "res.sh")
	out, err := os.ReadFile(filepath.Join(work, "res.out"))
	if err != nil {
		t.Fatalf("job (exit %d %s): %v", r.Code, r.Stderr, err)
	}
	text := string(out)
	t.Logf("job output:\n%s", text)
	if r.Code != 0 {
		t.Fatalf("job exit %d: %s", r.Code, r.Stderr)
	}
	if i, j := strings.Index(text, "A-done"), strings.Index(text, "B-ran"); i < 0 || j < i {
		t.Errorf("the second default step ran before the first ended (A-done at %d, B-ran at %d)", i, j)
	}
	if m := regexp.MustCompile(`B-waited=(\d+)`).FindStringSubmatch(text); m == nil || m[1] == "0" {
		t.Errorf("the second step did not wait: %v", m)
	}
	for _, want := range []string{"srun: Job step creation temporarily disabled, retrying (Requested nodes are busy)\n",
		"srun: Step created for StepId=", "X-saw-Y\n", "\nnode2\n", "o0=node1 o1=node2\n", "bigG=1\n", "0: 0\n", "1: 1\n",
		"G0=0\n", "G1=0\n", "W0=0\n", "W1=1\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	x := regexp.MustCompile(`X=(\d)`).FindStringSubmatch(text)
	y := regexp.MustCompile(`Y=(\d)`).FindStringSubmatch(text)
	if x == nil || y == nil || x[1] == y[1] {
		t.Errorf("--exact steps' GPUs X=%v Y=%v, want one each, distinct", x, y)
	}
	if !strings.Contains(text, "step asks for 5 GPUs") || !strings.Contains(text, "the allocation has 2 node(s): node1 (") {
		t.Errorf("srun -G 5 in a 4-GPU allocation: want an error naming what the allocation has")
	}
}

// TestStepResourcesOverNetwork is TestStepResources with the nodes
// starting each other's tasks over their step listeners: a node's share
// of a step gets only the step's GPUs and their binding (before the
// merge of steps over the network with step resources, the wire carried
// --gpus-per-task alone and node2's tasks saw all its GPUs).
func TestStepResourcesOverNetwork(t *testing.T) {
	t.Parallel()
	testStepResources(t, "--steps-over-network")
}
