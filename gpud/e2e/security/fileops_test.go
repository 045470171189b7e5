package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// Issue 12, holes 1 and 2 and "jobs cannot see daemon state": a user
// attacks the root agent through the paths it writes (the job directory,
// the checkpoint staging directory) and reads from a job what the daemons
// keep. Each runs against a real `gpud standalone` as a useradd user.

// plantEnv makes the test binary, run as the attacking user, plant
// symlinks into predictable job directories instead of running tests; its
// value is "jobsDir|target|elsewhere|firstID|lastID|node|seconds".
const plantEnv = "GPUD_E2E_PLANT"

// plantSymlinks loops until its time is up, trying for every job ID in
// the range to put script -> target and tmp -> elsewhere into the job's
// directory before the agent writes them. It prints how many it planted.
func plantSymlinks(arg string) int {
	f := strings.Split(arg, "|")
	if len(f) != 7 {
		fmt.Fprintln(os.Stderr, "plant: want jobsDir|target|elsewhere|first|last|node|seconds")
		return 2
	}
	first, _ := strconv.Atoi(f[3])
	last, _ := strconv.Atoi(f[4])
	secs, _ := strconv.Atoi(f[6])
	var dirs []string
	for id := first; id <= last; id++ {
		dirs = append(dirs, filepath.Join(f[0], fmt.Sprintf("gpud-%d-1-%s", id, f[5])))
	}
	planted, rounds := 0, 0
	for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); rounds++ {
		for _, d := range dirs {
			if os.Symlink(f[1], filepath.Join(d, "script")) == nil {
				planted++
			}
			if os.Symlink(f[2], filepath.Join(d, "tmp")) == nil {
				planted++
			}
		}
	}
	fmt.Printf("planted %d symlinks in %d rounds\n", planted, rounds)
	return 0
}

// asUserBinary copies the test binary where another user can run it.
func asUserBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e2etest.BinDir, "e2e-fileops.test")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// rootFile makes a root-owned 0644 file holding text in a fresh root-owned
// directory other users can traverse, and returns its path.
func rootFile(t *testing.T, name, text string) string {
	t.Helper()
	d := e2etest.ShortTempDir(t)
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUntouched fails if path's content, owner or mode changed.
func checkUntouched(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 0 || st.Gid != 0 || fi.Mode() != mode {
		t.Errorf("%s is now %v owned by %d:%d; want %v root:root", path, fi.Mode(), st.Uid, st.Gid, mode)
	}
	if fi.Mode().IsRegular() {
		if b, err := os.ReadFile(path); err != nil || string(b) != text {
			t.Errorf("%s now holds %q (%v); want %q", path, b, err, text)
		}
	}
}

// TestJobDirSymlinkRace: while jobs start, their user (the only one who
// could ever write into their job directories) loops for 12s planting
// script -> a root-owned file and tmp -> a root-owned directory into the
// predictable job directories. Root must never write or chown either, the
// user must not manage to add any entry, and the jobs still run.
func TestJobDirSymlinkRace(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, false)
	u := e2etest.AddUser(t)
	target := rootFile(t, "passwd", "root:x:0:0::/root:/bin/sh\n")
	elsewhere := filepath.Dir(target)
	jobsDir := filepath.Join(c.Dir, "nodes", "node1", "jobs")

	submit := func() int {
		r := c.As(u, nil, "gpusubmit", "--parsable", "--wrap", "echo ran")
		if r.Code != 0 {
			t.Fatalf("%s submits: exit %d %s", u.Name, r.Code, r.Stderr)
		}
		return int(atoi(t, strings.TrimSpace(r.Stdout)))
	}
	first := submit()
	const seconds = 12
	plant := asUserBinary(t)
	done := make(chan e2etest.Result, 1)
	go func() {
		done <- c.As(u, []string{fmt.Sprintf("%s=%s|%s|%s|%d|%d|node1|%d", plantEnv, jobsDir, target, elsewhere, first, first+200, seconds)}, plant)
	}()
	ids := []int{first}
	for end := time.Now().Add(seconds * time.Second); time.Now().Before(end); {
		ids = append(ids, submit())
		time.Sleep(200 * time.Millisecond)
	}
	r := <-done
	if r.Code != 0 {
		t.Fatalf("planter: exit %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, id := range ids {
		j := c.WaitState(strconv.Itoa(id), 2*time.Minute, "COMPLETED", "FAILED", "CANCELLED")
		if j["state"] != "COMPLETED" {
			t.Errorf("job %d: %v (%v); want COMPLETED: planting must not break a job", id, j["state"], j["reason"])
		}
	}
	// The job directory stays root's: the user cannot add entries at all.
	if !strings.HasPrefix(r.Stdout, "planted 0 ") {
		t.Errorf("the user planted entries in its job directories: %s", strings.TrimSpace(r.Stdout))
	}
	checkUntouched(t, target, "root:x:0:0::/root:/bin/sh\n", 0o644)
	checkUntouched(t, elsewhere, "", os.ModeDir|0o755)
	t.Logf("%d jobs started while the user ran for %ds: %s", len(ids), seconds, strings.TrimSpace(r.Stdout))
}

// TestCheckpointDoneAttacks: a job exits with the checkpoint code (85)
// after making .done in its staging directory a symlink to a root-only
// path, a FIFO, or a symlink to a device (a job cannot mknod). The agent
// must create nothing, not hang, and fail the job saying why its
// checkpoint was refused.
func TestCheckpointDoneAttacks(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, false)
	u := e2etest.AddUser(t)
	private := e2etest.ShortTempDir(t) // 0700 root: only root could create in it
	nologin := filepath.Join(private, "nologin")
	for _, tc := range []struct{ name, make, want string }{
		{"symlink to a root-only path", `ln -s ` + nologin + ` "$GPUD_CHECKPOINT_DIR/.done"`, "is a symlink"},
		{"fifo", `mkfifo "$GPUD_CHECKPOINT_DIR/.done"`, "is a named pipe"},
		{"symlink to a device", `ln -s /dev/null "$GPUD_CHECKPOINT_DIR/.done"`, "is a symlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.As(u, nil, "gpusubmit", "--parsable", "--wrap", tc.make+" && echo planted; exit 85")
			if r.Code != 0 {
				t.Fatalf("submit: exit %d %s", r.Code, r.Stderr)
			}
			id := strings.TrimSpace(r.Stdout)
			// Not hung: the exit is handled within the kill grace, and
			// the refusal is the job's reason.
			j := c.WaitState(id, 60*time.Second, "FAILED", "COMPLETED", "REQUEUED", "PENDING", "CANCELLED")
			reason, _ := j["reason"].(string)
			if j["state"] != "FAILED" || !strings.Contains(reason, "checkpoint was refused") || !strings.Contains(reason, tc.want) {
				t.Errorf("job %s: %v %q; want FAILED saying its checkpoint was refused (%s)", id, j["state"], reason, tc.want)
			}
			if out, _ := os.ReadFile(filepath.Join(u.Home, "gpud-"+id+".out")); !strings.Contains(string(out), "planted") {
				t.Errorf("job %s did not plant .done (output %q)", id, out)
			}
			if _, err := os.Lstat(nologin); err == nil {
				t.Fatalf("the agent created %s through the job's symlink", nologin)
			}
		})
	}
	// The agent is still serving: a plain job of the same user runs.
	r := c.As(u, nil, "gpusubmit", "--parsable", "--wrap", "echo fine")
	if r.Code != 0 {
		t.Fatalf("submit: exit %d %s", r.Code, r.Stderr)
	}
	if j := c.WaitState(strings.TrimSpace(r.Stdout), 60*time.Second, "COMPLETED", "FAILED"); j["state"] != "COMPLETED" {
		t.Errorf("a plain job after the attacks: %v %v", j["state"], j["reason"])
	}
}

// TestJobsCannotSeeDaemonState: a job, as a useradd user and as root,
// looks for the controller's and the node's databases and keys, and
// containerd's and runc's state. None may be visible; the job's own
// checkpoint dir, job dir and the controller's socket must be.
func TestJobsCannotSeeDaemonState(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, true)
	u := e2etest.AddUser(t)
	node := filepath.Join(c.Dir, "nodes", "node1")
	secrets := []string{
		filepath.Join(c.Dir, "state.db"), filepath.Join(c.Dir, "state.db-wal"),
		filepath.Join(c.Dir, "accounting.db"), filepath.Join(node, "outbox.db"),
		filepath.Join(c.Dir, "auth"), filepath.Join(c.Dir, "containerd"),
	}
	for _, p := range secrets[:4] {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("daemon state %s is not there to hide: %v", p, err)
		}
	}
	script := "#!/bin/sh\n"
	for _, p := range secrets {
		script += fmt.Sprintf("[ -e %[1]q ] && echo \"VISIBLE %[1]s\"\nhead -c 64 %[1]q >/dev/null 2>&1 && echo \"READABLE %[1]s\"\n", p)
	}
	// runc's state (each container's state.json, its spec inside) and the
	// host's own containerd's state: lists, when hidden, as an empty tmpfs.
	for _, d := range []string{"/run/gpud/runc", "/run/containerd"} {
		script += fmt.Sprintf("[ -n \"$(ls -A %[1]q 2>/dev/null)\" ] && echo \"VISIBLE %[1]s\"\n", d)
	}
	// The path down to the job's own directory exists; nothing beside it.
	// The checkpoint root's one entry is the job's checkpoint directory:
	// the job's directory, or (this job: no --checkpoint) its run
	// directory, GPUD_CHECKPOINT_DIR itself (checkpoint/run.go).
	script += `[ "$(ls -A ` + filepath.Join(node, "jobs") + `)" = "$(basename "$(dirname "$0")")" ] && echo JOBS-ONLY-OWN
own="${GPUD_CHECKPOINT_DIR#` + filepath.Join(c.Dir, "checkpoints") + `/}"
[ "$(ls -A ` + filepath.Join(c.Dir, "checkpoints") + `)" = "${own%%/*}" ] && echo CKPTS-ONLY-OWN
touch "$GPUD_CHECKPOINT_DIR/probe" && echo CKPT-OK
[ -d /tmp ] && [ -w /tmp ] && echo TMP-OK
[ -S ` + filepath.Join(c.Dir, "gpud.sock") + ` ] && echo SOCKET-OK
echo END
`
	check := func(who, dir string, run func(args ...string) e2etest.Result) {
		e2etest.WriteScript(t, dir, "probe.sh", script)
		if who != "root" {
			if err := os.Chown(filepath.Join(dir, "probe.sh"), int(u.UID), int(u.GID)); err != nil {
				t.Fatal(err)
			}
		}
		r := run("--parsable", "probe.sh")
		if r.Code != 0 {
			t.Fatalf("%s submits: exit %d %s", who, r.Code, r.Stderr)
		}
		id := strings.TrimSpace(r.Stdout)
		if j := c.WaitState(id, 60*time.Second, "COMPLETED", "FAILED"); j["state"] != "COMPLETED" {
			t.Fatalf("%s's probe job: %v %v", who, j["state"], j["reason"])
		}
		out, err := os.ReadFile(filepath.Join(dir, "gpud-"+id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		if strings.Contains(text, "VISIBLE") || strings.Contains(text, "READABLE") || !strings.Contains(text, "END") {
			t.Errorf("%s's job sees daemon state:\n%s", who, text)
		}
		for _, want := range []string{"JOBS-ONLY-OWN", "CKPTS-ONLY-OWN", "CKPT-OK", "TMP-OK", "SOCKET-OK"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s's job lacks %s (its own dirs and the socket must stay visible):\n%s", who, want, text)
			}
		}
	}
	check(u.Name, u.Home, func(args ...string) e2etest.Result { return c.As(u, nil, "gpusubmit", args...) })
	rootWork := e2etest.ShortTempDir(t) // under /tmp: its own dir is bound over the job's /tmp
	check("root", rootWork, func(args ...string) e2etest.Result { return c.CLI(rootWork, "gpusubmit", args...) })
}
