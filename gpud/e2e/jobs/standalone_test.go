package jobs

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// shimsOf lists the containerd-shim processes of the private containerd
// under stateDir as "<pid>: <command line>".
func shimsOf(stateDir string) []string {
	var out []string
	for _, sh := range e2etest.ShimProcs(stateDir) {
		out = append(out, strconv.Itoa(sh.Pid)+": "+sh.Cmdline)
	}
	return out
}

// A clean stop of gpud standalone --stop-jobs leaves no containerd-shim of
// its containerd behind: jobs that ended have none, and the running one is
// ended with its node (NODE_FAIL, so it requeues at the next start: see
// gpud/node's TestStopJobsOnStop) rather than left running.
func TestStandaloneCleanStopLeavesNoShims(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s", "--stop-jobs")
	work := t.TempDir()
	var ids []string
	for range 3 {
		ids = append(ids, submit(c, work, "--output", "done-%j.out", "--wrap", "echo done"))
	}
	for _, id := range ids {
		c.WaitState(id, 60*time.Second, "COMPLETED")
	}
	long := submit(c, work, "--output", "long-%j.out", "--wrap", "sleep 600")
	c.WaitState(long, 60*time.Second, "RUNNING")
	// Its own shim, not a finished job's on its way out.
	own := func() bool {
		for _, s := range shimsOf(c.Dir) {
			if strings.Contains(s, " -id gpud-"+long+"-") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !own(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no shim for the running job; the check below would prove nothing")
		}
	}
	c.Stop(syscall.SIGTERM)
	if shims := shimsOf(c.Dir); len(shims) != 0 {
		t.Fatalf("after a clean stop with --stop-jobs, %d shims remain:\n%s\n%s", len(shims), strings.Join(shims, "\n"), c.Log.String())
	}
}
