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

// TestPreparedContainers runs a real gpud standalone with node.toml
// prepared_containers = 1 and prepared_max_age = "10s":
//   - after a user's GPU job, the node prepares a container of that shape
//     (labelled for the node and the user, its task created, nothing
//     running);
//   - the user's next job of the same shape starts in it: its own
//     checkpoint slot, the job's uid, its own PID namespace and cgroup
//     (named for the prepared container), the same devices as the cold
//     start, its own job id in the environment;
//   - a second user's job never gets it (it starts cold, as that user);
//   - once the user's work directory was removed and made again, the
//     container prepared with the old one (its bind holds that one) is
//     not used: the job starts cold and writes into the new directory;
//   - prepared containers nobody claims are destroyed after the age, with
//     their job directories and checkpoint slots.
func TestPreparedContainers(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice, bob := e2etest.AddUserTag(t, "a"), e2etest.AddUserTag(t, "b")
	dir := e2etest.ShortTempDir(t)
	confPath := e2etest.NodeConfig(t, dir,
		"\nprepared_containers = 0\n", "\nprepared_containers = 1\n",
		"\nprepared_max_age = \"60s\"\n", "\nprepared_max_age = \"10s\"\n")
	c := e2etest.StartCluster(t, 1, "--node-config", confPath, "--kill-grace", "2s", "--log-level", "debug")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const body = "#!/bin/sh\nid -u\necho ckpt=$GPUD_CHECKPOINT_DIR\necho job=$GPUD_JOB_ID\nreadlink /proc/self/ns/pid\n" +
		"grep pids /proc/self/cgroup\nls /dev | sort | tr '\\n' ' '\necho\n"
	run := func(u e2etest.LocalUser) (id string, out []string) {
		t.Helper()
		p := filepath.Join(u.Home, "job.sh")
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(u.UID), int(u.GID)); err != nil {
			t.Fatal(err)
		}
		r := c.As(u, nil, "gpusubmit", "--parsable", "-G", "1", "-o", "out-%j.txt", p)
		if r.Code != 0 {
			t.Fatalf("gpusubmit as %s: exit %d: %s", u.Name, r.Code, r.Stderr)
		}
		id = strings.TrimSpace(r.Stdout)
		if st := c.WaitState(id, time.Minute, "COMPLETED", "FAILED", "CANCELLED"); st["state"] != "COMPLETED" {
			t.Fatalf("job %s of %s ended %v (%v)", id, u.Name, st["state"], st["reason"])
		}
		b, err := os.ReadFile(filepath.Join(u.Home, "out-"+id+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		return id, strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	prepared := func(user string) []runtime.TaskInfo {
		t.Helper()
		all := e2etest.ListContainers(t, c.Dir)
		var out []runtime.TaskInfo
		for _, ti := range all {
			if ti.Labels["gpud.prepared"] == "1" && (user == "" || ti.Labels["gpud.user"] == user) {
				out = append(out, ti)
			}
		}
		return out
	}
	hostNS, _ := os.Readlink("/proc/self/ns/pid")
	check := func(who e2etest.LocalUser, id string, out []string, inPrepared bool) {
		t.Helper()
		if len(out) != 6 || out[0] != strconv.Itoa(int(who.UID)) || out[2] != "job="+id || !strings.HasPrefix(out[3], "pid:[") || out[3] == hostNS {
			t.Fatalf("job %s of %s printed %q; want its uid, its id and a PID namespace of its own", id, who.Name, out)
		}
		if got := strings.Contains(out[1], "gpud-prep-") && strings.Contains(out[4], "gpud-prep-"); got != inPrepared {
			t.Errorf("job %s of %s: checkpoint dir %q, cgroup %q: in a prepared container = %v, want %v", id, who.Name, out[1], out[4], got, inPrepared)
		}
	}

	id1, out1 := run(alice)
	check(alice, id1, out1, false)
	e2etest.WaitFor(t, 30*time.Second, "a container prepared for alice", func() bool {
		return len(prepared(alice.Name)) == 1 && preparedLogged(c, alice.UID) >= 1
	})
	for _, ti := range prepared(alice.Name) {
		if ti.Status != runtime.StatusCreated || ti.Labels["gpud.job"] != "" {
			t.Errorf("prepared container %s: %s, labels %v; want created and no job's", ti.ID, ti.Status, ti.Labels)
		}
	}

	// Bob's job, same script and GPU count: never alice's container.
	idB, outB := run(bob)
	check(bob, idB, outB, false)
	if n := len(prepared(alice.Name)); n != 1 {
		t.Errorf("alice's prepared containers after bob's job: %d, want 1 (untouched)", n)
	}

	id2, out2 := run(alice)
	check(alice, id2, out2, true)
	if out2[5] != out1[5] {
		t.Errorf("devices in the prepared container %q, in the cold one %q; want the same", out2[5], out1[5])
	}

	// The work directory made anew: the container prepared since binds
	// the old one, so the next job must not start in it.
	e2etest.WaitFor(t, 30*time.Second, "a container prepared for alice after her second job", func() bool {
		return len(prepared(alice.Name)) == 1 && preparedLogged(c, alice.UID) >= 2
	})
	if err := os.Rename(alice.Home, alice.Home+".old"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(alice.Home + ".old") })
	if err := os.Mkdir(alice.Home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(alice.Home, int(alice.UID), int(alice.GID)); err != nil {
		t.Fatal(err)
	}
	id3, out3 := run(alice)
	check(alice, id3, out3, false)

	// Nobody claims the ones prepared after that: destroyed after 10s,
	// with their directories.
	// The agent removes a container's directories once its delete has
	// returned, so they may outlive the container by a moment.
	e2etest.WaitFor(t, 30*time.Second, "prepared containers destroyed after prepared_max_age, with their directories", func() bool {
		left, _ := filepath.Glob(filepath.Join(c.Dir, "nodes", "*", "jobs", "gpud-prep-*"))
		slots, _ := filepath.Glob(filepath.Join(c.Dir, "checkpoints", "gpud-prep-*"))
		return len(prepared("")) == 0 && len(left)+len(slots) == 0
	})
}

// preparedLogged counts the prepared containers the cluster's agents put
// in their pools for uid: each logs "prepared container" (at debug: the
// cluster runs with --log-level debug) once a start can take it. Its
// record and task exist a while before (runc create, seconds under load):
// a test that waited for the record alone had its next job start cold, in
// a full run at load ~40 (TestPreparedContainerAfterTagMoved).
func preparedLogged(c *e2etest.Cluster, uid uint32) int {
	n := 0
	for _, l := range strings.Split(c.Log.String(), "\n") {
		if strings.Contains(l, `"msg":"prepared container"`) && strings.Contains(l, `"uid":`+strconv.Itoa(int(uid))+",") {
			n++
		}
	}
	return n
}
