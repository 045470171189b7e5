package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// freezerRoot is where the freezer's cgroups are: cgroup v1's freezer
// hierarchy, else the v2 tree.
func freezerRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/freezer"); err == nil {
		return "/sys/fs/cgroup/freezer"
	}
	return "/sys/fs/cgroup"
}

// containerCgroup finds the freezer cgroup directory of container id
// from the /proc/PID/cgroup of a process working in dir (runc names the
// cgroup after the container; other tests' containers may have the same
// id, their jobs not the same directory): the freezer line of cgroup v1,
// else v2's.
func containerCgroup(t *testing.T, id, dir string) string {
	t.Helper()
	root := freezerRoot()
	var found string
	e2etest.WaitFor(t, 30*time.Second, "the cgroup of container "+id, func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
		for _, p := range procs {
			if cwd, err := os.Readlink(filepath.Join(filepath.Dir(p), "cwd")); err != nil || cwd != dir {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				f := strings.SplitN(l, ":", 3)
				if len(f) != 3 || !strings.Contains(f[2], id) {
					continue
				}
				v1 := root != "/sys/fs/cgroup"
				if v1 && f[1] == "freezer" || !v1 && f[0] == "0" {
					found = filepath.Join(root, f[2])
					return true
				}
			}
		}
		return false
	})
	return found
}

// frozen reads the cgroup's freezer state: v1's freezer.state FROZEN,
// v2's cgroup.events "frozen 1".
func frozen(t *testing.T, cg string) bool {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(cg, "freezer.state")); err == nil {
		return strings.TrimSpace(string(b)) == "FROZEN"
	}
	b, err := os.ReadFile(filepath.Join(cg, "cgroup.events"))
	if err != nil {
		t.Fatalf("read the job's cgroup.events: %v", err)
	}
	return strings.Contains(string(b), "frozen 1")
}

func readCount(t *testing.T, path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// TestScontrolSuspendResume is issue 33's suspend must-show: scontrol
// suspend freezes a running job's processes (its cgroup says frozen and
// its counter stops), resume thaws them (the counter goes on), and the
// job's time limit grows by the time it spent suspended, as in Slurm.
func TestScontrolSuspendResume(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--cpus", "16")
	work := t.TempDir()
	count := filepath.Join(work, "count")
	id := submit(c, work, "--time=5", "--wrap", "i=0; while :; do i=$((i+1)); echo $i > "+count+"; sleep 0.2; done")
	j := c.WaitState(id, 60*time.Second, "RUNNING")
	limit0 := j["time_limit"].(float64)
	e2etest.WaitFor(t, 30*time.Second, "the job's counter", func() bool { return readCount(t, count) > 0 })
	cg := containerCgroup(t, "gpud-"+id+"-1-", work)

	if r := c.CLI(work, "scontrol", "suspend", id); r.Code != 0 {
		t.Fatalf("scontrol suspend: exit %d: %s", r.Code, r.Stderr)
	}
	suspendedAt := time.Now()
	c.WaitState(id, 30*time.Second, "SUSPENDED")
	e2etest.WaitFor(t, 30*time.Second, "the job's cgroup "+cg+" frozen", func() bool { return frozen(t, cg) })
	if r := c.CLI(work, "squeue", "-h", "-j", id, "-o", "%t"); strings.TrimSpace(r.Stdout) != "S" {
		t.Errorf("squeue %%t of the suspended job = %q, want S", r.Stdout)
	}
	if r := c.CLI(work, "scontrol", "suspend", id); r.Code == 0 || !strings.Contains(r.Stderr, "Job already suspended") {
		t.Errorf("second suspend: exit %d: %s", r.Code, r.Stderr)
	}
	// Frozen: the counter does not move (the only wait here is for
	// something not to happen).
	n := readCount(t, count)
	time.Sleep(1500 * time.Millisecond)
	if m := readCount(t, count); m != n {
		t.Errorf("the counter went from %d to %d while the job was suspended", n, m)
	}

	if r := c.CLI(work, "scontrol", "resume", id); r.Code != 0 {
		t.Fatalf("scontrol resume: exit %d: %s", r.Code, r.Stderr)
	}
	away := time.Since(suspendedAt)
	j = c.WaitState(id, 30*time.Second, "RUNNING")
	e2etest.WaitFor(t, 30*time.Second, "the job's cgroup thawed", func() bool { return !frozen(t, cg) })
	e2etest.WaitFor(t, 30*time.Second, "the counter to move on", func() bool { return readCount(t, count) > n })
	grew := time.Duration(j["time_limit"].(float64)-limit0) * time.Second
	susp := time.Duration(j["suspended"].(float64)) * time.Second
	if grew != susp || susp < 2*time.Second || susp > away+2*time.Second {
		t.Errorf("time limit grew by %v, suspended %v; want both the time suspended (about %v)", grew, susp, away)
	}
	if r := c.CLI(work, "scontrol", "resume", id); r.Code == 0 || !strings.Contains(r.Stderr, "Job is not suspended") {
		t.Errorf("resume of a running job: exit %d: %s", r.Code, r.Stderr)
	}
	// A suspended job can still be cancelled: it is thawed to get its signal.
	if r := c.CLI(work, "scontrol", "suspend", id); r.Code != 0 {
		t.Fatalf("scontrol suspend: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 30*time.Second, "SUSPENDED")
	if r := c.CLI(work, "scancel", id); r.Code != 0 {
		t.Fatalf("scancel of the suspended job: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 60*time.Second, "CANCELLED")
}
