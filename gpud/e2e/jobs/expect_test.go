package jobs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/runtime"
)

// TestPreparedForExpectedJobs runs a real gpud standalone of two full
// nodes (8 GPUs each, alice's jobs on both) with node.toml
// prepared_containers = 1, heartbeats and full cycles every second:
//   - bob's queued 8-GPU job, reserved by backfill on node1 (whose job
//     ends first by its time limit), gets a container prepared for it on
//     node1 before alice's job there ends (labelled with his job's ID and
//     user, created, running nothing), though bob never ran a job there;
//     when alice's job ends his job starts in it: his uid, a PID namespace
//     of his own, the prepared container's checkpoint slot and cgroup;
//   - a job of bob's expected on node1 but placed on node2 (node2 freed
//     first) starts cold there, and node1's container for it is destroyed
//     unclaimed, with its job directory and checkpoint slot;
//   - a cancelled expected job's container is destroyed.
//
// It fails with prepared containers made only after a start (bob's job
// never gets one) and without withdrawal (the containers stay).
func TestPreparedForExpectedJobs(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice, bob := e2etest.AddUserTag(t, "a"), e2etest.AddUserTag(t, "b")
	dir := e2etest.ShortTempDir(t)
	nodeConf := e2etest.NodeConfig(t, dir,
		"\nprepared_containers = 0\n", "\nprepared_containers = 1\n",
		"\nprepared_max_age = \"60s\"\n", "\nprepared_max_age = \"30s\"\n")
	ctlConf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(ctlConf, []byte("version = 1\n[controller]\nheartbeat_interval = \"1s\"\nnode_timeout = \"10s\"\n[scheduler]\ninterval = \"1s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 2, "--config", ctlConf, "--node-config", nodeConf, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(u e2etest.LocalUser, name, body string) string {
		t.Helper()
		p := filepath.Join(u.Home, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(u.UID), int(u.GID)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	submit := func(u e2etest.LocalUser, args ...string) string {
		t.Helper()
		r := c.As(u, nil, "gpusubmit", append([]string{"--parsable"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("gpusubmit %v as %s: exit %d: %s", args, u.Name, r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	// Alice's jobs hold a whole node until the test removes their file.
	hold := write(alice, "hold.sh", "#!/bin/sh\nwhile [ -e \"$1\" ]; do sleep 0.1; done\n")
	holdOn := func(node, limit string) (id, file string) {
		t.Helper()
		file = filepath.Join(alice.Home, "hold-"+node+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		id = submit(alice, "-w", node, "-G", "8", "--time", limit, "-o", "/dev/null", hold, file)
		c.WaitState(id, time.Minute, "RUNNING")
		return id, file
	}
	release := func(id, file string) {
		t.Helper()
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		c.WaitState(id, time.Minute, "COMPLETED")
	}
	body := write(bob, "job.sh", "#!/bin/sh\nid -u\necho ckpt=$GPUD_CHECKPOINT_DIR\necho node=$SLURMD_NODENAME\n"+
		"readlink /proc/self/ns/pid\ngrep pids /proc/self/cgroup\n")
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	// bobJob submits bob's 8-GPU job, which waits behind alice's.
	bobJob := func() string {
		t.Helper()
		id := submit(bob, "-G", "8", "--time", "2", "-o", "out-%j.txt", body)
		if st := c.ShowJob(id); st["state"] != "PENDING" {
			t.Fatalf("bob's job %s is %v, want PENDING behind alice's jobs", id, st["state"])
		}
		return id
	}
	// preparedFor lists the prepared containers labelled for job id.
	preparedFor := func(id string) []runtime.TaskInfo {
		t.Helper()
		all := e2etest.ListContainers(t, c.Dir)
		var out []runtime.TaskInfo
		for _, ti := range all {
			if ti.Labels["gpud.prepared"] == id {
				out = append(out, ti)
			}
		}
		return out
	}
	// output waits for bob's job id to complete and returns what it printed.
	output := func(id string) []string {
		t.Helper()
		if st := c.WaitState(id, time.Minute, "COMPLETED", "FAILED", "CANCELLED"); st["state"] != "COMPLETED" {
			t.Fatalf("bob's job %s ended %v (%v)", id, st["state"], st["reason"])
		}
		b, err := os.ReadFile(filepath.Join(bob.Home, "out-"+id+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		out := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(out) != 5 || out[0] != strconv.Itoa(int(bob.UID)) || !strings.HasPrefix(out[3], "pid:[") || out[3] == hostNS {
			t.Fatalf("bob's job %s printed %q; want his uid and a PID namespace of its own", id, out)
		}
		return out
	}
	inPrepared := func(out []string) bool {
		return strings.Contains(out[1], "gpud-prep-") && strings.Contains(out[4], "gpud-prep-")
	}
	leftovers := func() []string {
		left, _ := filepath.Glob(filepath.Join(c.Dir, "nodes", "*", "jobs", "gpud-prep-*"))
		slots, _ := filepath.Glob(filepath.Join(c.Dir, "checkpoints", "gpud-prep-*"))
		return append(left, slots...)
	}

	// 1. Expected on node1, started there: in the container prepared for it.
	a1, f1 := holdOn("node1", "5")
	a2, f2 := holdOn("node2", "10")
	b1 := bobJob()
	e2etest.WaitFor(t, 30*time.Second, "a container prepared on node1 for bob's job "+b1, func() bool { return len(preparedFor(b1)) == 1 })
	for _, ti := range preparedFor(b1) {
		if ti.Status != runtime.StatusCreated || ti.Labels["gpud.node"] != "node1" || ti.Labels["gpud.user"] != bob.Name || ti.Labels["gpud.job"] != "" {
			t.Fatalf("container prepared for bob's job %s: %s, labels %v; want created on node1 for %s, no job's labels", b1, ti.Status, ti.Labels, bob.Name)
		}
	}
	release(a1, f1)
	out := output(b1)
	if out[2] != "node=node1" || !inPrepared(out) {
		t.Errorf("bob's job %s printed %q; want it on node1 in the container prepared for it", b1, out)
	}
	if n := len(preparedFor(b1)); n != 0 {
		t.Errorf("%d containers still prepared for bob's job %s after it ran", n, b1)
	}

	// 2. Expected on node1, placed on node2: never claimed, destroyed.
	a3, f3 := holdOn("node1", "5")
	b2 := bobJob()
	e2etest.WaitFor(t, 30*time.Second, "a container prepared on node1 for bob's job "+b2, func() bool { return len(preparedFor(b2)) == 1 })
	release(a2, f2)
	out = output(b2)
	if out[2] != "node=node2" || inPrepared(out) {
		t.Errorf("bob's job %s printed %q; want it on node2, started cold", b2, out)
	}
	e2etest.WaitFor(t, 30*time.Second, "node1's container for bob's job "+b2+" destroyed", func() bool { return len(preparedFor(b2)) == 0 })

	// 3. Expected, then cancelled: destroyed.
	a4, f4 := holdOn("node2", "10")
	b3 := bobJob()
	e2etest.WaitFor(t, 30*time.Second, "a container prepared for bob's job "+b3, func() bool { return len(preparedFor(b3)) == 1 })
	if r := c.As(bob, nil, "scancel", b3); r.Code != 0 {
		t.Fatalf("scancel %s: exit %d: %s", b3, r.Code, r.Stderr)
	}
	e2etest.WaitFor(t, 30*time.Second, "the container of cancelled job "+b3+" destroyed", func() bool { return len(preparedFor(b3)) == 0 })
	release(a3, f3)
	release(a4, f4)
	// Alice's own prepared containers (after her starts) age out too.
	e2etest.WaitFor(t, time.Minute, "no prepared containers' directories left", func() bool { return len(leftovers()) == 0 })
}
