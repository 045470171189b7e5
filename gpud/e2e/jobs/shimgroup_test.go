package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestShimGroups runs a real gpud standalone with node.toml
// shim_group_size = 4: two running jobs of one user share one runc shim,
// another user's job has a shim of its own; when the shared shim is
// SIGKILLed, both of its jobs end FAILED (their containers disappeared),
// none hangs RUNNING, the other user's job runs on, and the user's next
// job runs to COMPLETED.
func TestShimGroups(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice, bob := e2etest.AddUserTag(t, "sa"), e2etest.AddUserTag(t, "sb")
	dir := e2etest.ShortTempDir(t)
	confPath := e2etest.NodeConfig(t, dir, "\nshim_group_size = 0\n", "\nshim_group_size = 4\n")
	c := e2etest.StartCluster(t, 1, "--cpus", "8", "--node-config", confPath, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	submit := func(u e2etest.LocalUser, cmd string) string {
		t.Helper()
		r := c.As(u, nil, "gpusubmit", "--parsable", "-o", "/dev/null", "--wrap", cmd)
		if r.Code != 0 {
			t.Fatalf("gpusubmit as %s: exit %d: %s", u.Name, r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	a1, a2, b1 := submit(alice, "sleep 300"), submit(alice, "sleep 300"), submit(bob, "sleep 300")
	for _, id := range []string{a1, a2, b1} {
		c.WaitState(id, time.Minute, "RUNNING")
	}
	// The shims of each user's jobs: the parents of the jobs' container
	// init processes (the shim reaps them).
	shims := func(uid uint32) map[int]bool {
		out := map[int]bool{}
		shimPids := map[int]bool{}
		for _, sh := range e2etest.ShimProcs(c.Dir) {
			shimPids[sh.Pid] = true
		}
		procs, _ := filepath.Glob("/proc/[0-9]*")
		for _, p := range procs {
			var st syscall.Stat_t
			if syscall.Stat(p, &st) != nil || st.Uid != uid {
				continue
			}
			raw, err := os.ReadFile(filepath.Join(p, "stat"))
			if err != nil {
				continue
			}
			s := string(raw)
			ppid, _ := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+2:])[1])
			if shimPids[ppid] {
				out[ppid] = true
			}
		}
		return out
	}
	var as, bs map[int]bool
	e2etest.WaitFor(t, 30*time.Second, "the jobs' processes under their shims", func() bool {
		as, bs = shims(alice.UID), shims(bob.UID)
		return len(as) > 0 && len(bs) > 0
	})
	if len(as) != 1 || len(bs) != 1 {
		t.Fatalf("alice's two jobs run under shims %v, bob's under %v; want one shared shim for alice's, another for bob's", as, bs)
	}
	for pid := range bs {
		if as[pid] {
			t.Fatalf("alice's and bob's jobs share shim %d", pid)
		}
	}
	for pid := range as {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{a1, a2} {
		if st := c.WaitState(id, time.Minute, "FAILED", "NODE_FAIL", "COMPLETED", "CANCELLED", "REQUEUED", "PENDING"); st["state"] != "FAILED" && st["state"] != "NODE_FAIL" {
			t.Errorf("job %s of the killed shim: %v (%v); want FAILED or NODE_FAIL", id, st["state"], st["reason"])
		}
	}
	if st := c.WaitState(b1, 5*time.Second, "RUNNING"); st["state"] != "RUNNING" {
		t.Errorf("bob's job in another shim: %v; want RUNNING", st["state"])
	}
	a3 := submit(alice, "true")
	if st := c.WaitState(a3, time.Minute, "COMPLETED", "FAILED"); st["state"] != "COMPLETED" {
		t.Errorf("alice's job after her shim died: %v (%v); want COMPLETED", st["state"], st["reason"])
	}
	if r := c.As(bob, nil, "scancel", b1); r.Code != 0 {
		t.Errorf("scancel %s: exit %d: %s", b1, r.Code, r.Stderr)
	}
}
