package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestSignalBeforeTimeLimit: sbatch --signal as Slurm's. Without B: the
// signal reaches the step's tasks (a trap in the step) and the untrapped
// batch shell survives it; with B: it reaches the batch shell's trap.
// Both jobs have a one-minute limit and ask for the signal 55 s before.
func TestSignalBeforeTimeLimit(t *testing.T) {
	c := e2etest.StartCluster(t, 1)
	work := t.TempDir()
	e2etest.WriteScript(t, work, "steps.sh", `#!/bin/bash
srun -n1 bash -c 'trap "echo step-got-USR1; exit 0" USR1; for i in $(seq 300); do sleep 0.1; done; echo step-no-USR1'
echo "batch-survived rc=$?"
`)
	e2etest.WriteScript(t, work, "batch.sh", `#!/bin/bash
got=0
trap 'echo batch-got-USR1; got=1' USR1
for i in $(seq 300); do [ $got = 1 ] && break; sleep 0.1; done
echo "batch-done got=$got"
`)
	ids := map[string]string{}
	for name, sig := range map[string]string{"steps.sh": "USR1@55", "batch.sh": "B:USR1@55"} {
		r := c.CLI(work, "sbatch", "--parsable", "--time=1", "--signal="+sig, "-o", name+".out", name)
		if r.Code != 0 {
			t.Fatalf("sbatch %s: exit %d: %s", name, r.Code, r.Stderr)
		}
		ids[name] = strings.TrimSpace(r.Stdout)
	}
	for name, id := range ids {
		c.WaitState(id, 60*time.Second, "COMPLETED")
		out, _ := os.ReadFile(filepath.Join(work, name+".out"))
		t.Logf("%s:\n%s", name, out)
		want := map[string]string{"steps.sh": "step-got-USR1\nbatch-survived rc=0\n", "batch.sh": "batch-got-USR1\nbatch-done got=1\n"}[name]
		if string(out) != want {
			t.Errorf("%s (--signal %s): output %q, want %q", name, map[string]string{"steps.sh": "USR1@55", "batch.sh": "B:USR1@55"}[name], out, want)
		}
	}
}
