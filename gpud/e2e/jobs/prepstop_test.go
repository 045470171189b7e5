package jobs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestPreparedStopRightAfterClaim stops a real gpud standalone (SIGTERM)
// right after a job started in a prepared container, while the pool's
// refill (a new container of the job's shape: runc's init already runs as
// the job's user) is being made. The stop must leave nothing of the user
// behind: no process of the user's uid and no shim of the cluster's
// containerd (every prepared container destroyed, the one being made
// too).
func TestPreparedStopRightAfterClaim(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice := e2etest.AddUserTag(t, "s")
	dir := e2etest.ShortTempDir(t)
	// Two per shape: the claim's refill makes one while another waits.
	confPath := e2etest.NodeConfig(t, dir, "\nprepared_containers = 0\n", "\nprepared_containers = 2\n")
	c := e2etest.StartCluster(t, 1, "--node-config", confPath, "--kill-grace", "2s", "--stop-jobs")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(alice.Home, "job.sh")
	if err := os.WriteFile(p, []byte(fmt.Sprintf("#!/bin/sh\necho ckpt=$GPUD_CHECKPOINT_DIR\nsleep 0.%03d\n", rand.IntN(150))), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, int(alice.UID), int(alice.GID)); err != nil {
		t.Fatal(err)
	}
	run := func() string {
		t.Helper()
		r := c.As(alice, nil, "gpusubmit", "--parsable", "-G", "1", "-o", "out-%j.txt", p)
		if r.Code != 0 {
			t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		if st := c.WaitState(id, time.Minute, "COMPLETED", "FAILED", "CANCELLED"); st["state"] != "COMPLETED" {
			t.Fatalf("job %s ended %v (%v)", id, st["state"], st["reason"])
		}
		return id
	}
	run() // cold: the pool learns the shape
	e2etest.WaitFor(t, 30*time.Second, "containers prepared for alice", func() bool {
		m, _ := filepath.Glob(filepath.Join(c.Dir, "nodes", "*", "jobs", "gpud-prep-*"))
		return len(m) == 2
	})
	// Let both finish being made (their tasks created).
	e2etest.WaitFor(t, 30*time.Second, "alice's prepared inits", func() bool { return len(uidProcs(alice.UID)) >= 2 })
	// The second job claims one; stopped as soon as it has started (its
	// output written), while the refill after the claim is under way and
	// about when the job ends (it sleeps 0 to 150 ms, drawn per run: the
	// stop lands at a different point of the runner's delete of its
	// container each time; before Delete ran to its end regardless, about
	// one run in 25 left that container's shim).
	r := c.As(alice, nil, "gpusubmit", "--parsable", "-G", "1", "-o", "out-%j.txt", p)
	if r.Code != 0 {
		t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	var b []byte
	e2etest.WaitFor(t, time.Minute, "job "+id+"'s output", func() bool {
		var err error
		b, err = os.ReadFile(filepath.Join(alice.Home, "out-"+id+".txt"))
		return err == nil && len(b) > 0
	})
	c.Stop(syscall.SIGTERM)
	if !strings.Contains(string(b), "gpud-prep-") {
		t.Fatalf("job %s did not start in a prepared container: %q", id, b)
	}
	// At once: the standalone has exited, so whatever it deleted is gone
	// (a user's process still there fails the userdel that follows).
	if ps := uidProcs(alice.UID); len(ps) > 0 {
		t.Errorf("processes of %s (uid %d) outlive the stopped standalone: %v", alice.Name, alice.UID, ps)
	}
	// A shim told to shut down exits a moment later; a leaked one stays.
	deadline := time.Now().Add(2 * time.Second)
	for len(e2etest.ShimProcs(c.Dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if sh := e2etest.ShimProcs(c.Dir); len(sh) > 0 {
		t.Errorf("shims outlive the stopped standalone: %v", sh)
	}
}

// uidProcs lists the processes whose real or effective uid is uid, as
// "pid cmdline".
func uidProcs(uid uint32) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		st, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "Uid:" && (f[1] == strconv.Itoa(int(uid)) || f[2] == strconv.Itoa(int(uid))) {
				cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
				out = append(out, filepath.Base(p)+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
			}
		}
	}
	return out
}
