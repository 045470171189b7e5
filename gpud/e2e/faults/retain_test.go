package faults

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestEndedJobsCheckpointsRemoved: a job that sealed checkpoints and
// ended for good (cancelled) leaves its directory, since the node alone
// cannot tell it from a job that will be requeued. After kill -9 of the
// node agent, restarted with checkpoint_retention = "0", its first
// heartbeat lists the directories it holds, the real controller names
// the cancelled job's, and the agent removes it; the running job's
// (re-adopted) stays.
func TestEndedJobsCheckpointsRemoved(t *testing.T) {
	c, nodes := e2etest.StartFaultCluster(t, "node1")
	cl := c.Client()
	work := t.TempDir()
	e2etest.WriteScript(t, work, "counter.sh", e2etest.CounterScript)
	submit := func() (string, spec.JobID) {
		r := c.CLI(work, "gpusubmit", "--parsable", "--time", "5", "--output", "ck-%j.out", "counter.sh")
		if r.Code != 0 {
			t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			t.Fatalf("gpusubmit --parsable printed %q", r.Stdout)
		}
		e2etest.WaitJob(t, cl, spec.JobID(n), 60*time.Second, "a sealed checkpoint of job "+id, func(j spec.Job) bool { return j.Checkpoints >= 1 })
		return id, spec.JobID(n)
	}
	ended, _ := submit()
	if r := c.CLI(work, "gpuq", "cancel", ended); r.Code != 0 {
		t.Fatalf("gpuq cancel %s: exit %d: %s", ended, r.Code, r.Stderr)
	}
	c.WaitState(ended, 30*time.Second, "CANCELLED")
	running, _ := submit()
	root := filepath.Join(c.Dir, "checkpoints")
	for _, id := range []string{ended, running} {
		if _, err := os.Stat(filepath.Join(root, id, "ckpt-00000001")); err != nil {
			t.Fatalf("job %s's sealed checkpoint: %v", id, err)
		}
	}

	conf := filepath.Join(c.Dir, "node.toml")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "kill_grace = \"2s\"\n", "kill_grace = \"2s\"\ncheckpoint_retention = \"0\"\n", 1)
	if s == string(b) {
		t.Fatal("the fault suite's node.toml no longer sets kill_grace = \"2s\"; update this test")
	}
	if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes["node1"].Stop(syscall.SIGKILL)
	n := c.StartNode(t, "node1", conf)
	e2etest.WaitFor(t, 60*time.Second, "the cancelled job's checkpoint directory removed", func() bool {
		_, err := os.Lstat(filepath.Join(root, ended))
		return os.IsNotExist(err)
	})
	// The path goes at the rename into the trash; the log line follows
	// the trash's removal and sync (checkpoint/retain.go).
	e2etest.WaitFor(t, 10*time.Second, "the node's log line of the removal", func() bool {
		return strings.Contains(n.Log.String(), "checkpoints of an ended job removed")
	})
	c.WaitState(running, 10*time.Second, "RUNNING")
	if _, err := os.Stat(filepath.Join(root, running, "ckpt-00000001")); err != nil {
		t.Errorf("the running job's checkpoint: %v; want kept", err)
	}
}
