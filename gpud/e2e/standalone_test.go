package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// shimsOf lists the containerd-shim processes of the private containerd
// under stateDir as "<pid>: <command line>".
func shimsOf(stateDir string) []string {
	var out []string
	for _, sh := range shimProcs(stateDir) {
		out = append(out, strconv.Itoa(sh.pid)+": "+sh.cmdline)
	}
	return out
}

// shimProc is a containerd-shim process: its pid and its command line
// with the arguments joined by spaces.
type shimProc struct {
	pid     int
	cmdline string
}

// shimProcs finds the containerd-shim processes of the private containerd
// under stateDir (their command line names its socket) in /proc. Both the
// check that a stop leaves none (shimsOf) and the clean-up of stray ones
// (killStrayShims) look for them alike through it.
func shimProcs(stateDir string) []shimProc {
	var out []shimProc
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.HasPrefix(filepath.Base(strings.Split(string(cmdline), "\x00")[0]), "containerd-shim") ||
			!strings.Contains(string(cmdline), stateDir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
			out = append(out, shimProc{pid, strings.ReplaceAll(string(cmdline), "\x00", " ")})
		}
	}
	return out
}

// A clean stop of gpud standalone --stop-jobs leaves no containerd-shim of
// its containerd behind: jobs that ended have none, and the running one is
// ended with its node (NODE_FAIL, so it requeues at the next start: see
// gpud/node's TestStopJobsOnStop) rather than left running.
func TestStandaloneCleanStopLeavesNoShims(t *testing.T) {
	c := startCluster(t, 1, "--kill-grace", "2s", "--stop-jobs")
	work := t.TempDir()
	var ids []string
	for range 3 {
		ids = append(ids, c.submit(work, "--output", "done-%j.out", "--wrap", "echo done"))
	}
	for _, id := range ids {
		c.waitState(id, 60*time.Second, "COMPLETED")
	}
	long := c.submit(work, "--output", "long-%j.out", "--wrap", "sleep 600")
	c.waitState(long, 60*time.Second, "RUNNING")
	// Its own shim, not a finished job's on its way out.
	own := func() bool {
		for _, s := range shimsOf(c.dir) {
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
	c.stop(syscall.SIGTERM)
	if shims := shimsOf(c.dir); len(shims) != 0 {
		t.Fatalf("after a clean stop with --stop-jobs, %d shims remain:\n%s\n%s", len(shims), strings.Join(shims, "\n"), c.log.String())
	}
}
