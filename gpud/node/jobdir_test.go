package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestJobDirIgnoresPlantedEntries: a job directory left behind with
// script and tmp pointing elsewhere (an earlier agent's, or planted) is
// cleared without following anything, and the new one is made afresh:
// the targets keep their content, owner and mode.
func TestJobDirIgnoresPlantedEntries(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "passwd")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(e *env) {
		dir := filepath.Join(e.dir, "jobs", cid)
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o777); err != nil {
			t.Fatal(err)
		}
		for name, target := range map[string]string{"script": victim, "tmp": outside, "sub/up": outside} {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	})
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)

	if b, err := os.ReadFile(victim); err != nil || string(b) != "root:x:0:0\n" {
		t.Fatalf("victim now %q (%v)", b, err)
	}
	for _, p := range []string{victim, outside} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
			t.Errorf("%s given to uid %d", p, st.Uid)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("victim removed: %v", err)
	}
	dir := filepath.Join(e.dir, "jobs", cid)
	for name, dirWant := range map[string]bool{"script": false, "tmp": true} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink != 0 || fi.IsDir() != dirWant {
			t.Errorf("%s is %v; want a fresh %s", name, fi.Mode(), map[bool]string{true: "directory", false: "file"}[dirWant])
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "script")); err != nil || string(b) != a.Job.Script {
		t.Errorf("script = %q (%v)", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("leftover sub/ still there: %v", err)
	}
}

// TestJobDirRemovedWithWhatTheJobLeft: a job that left files, directories
// and a symlink to elsewhere in its tmp/, and a job directory holding more
// than a start makes (a step's records), is removed whole once the job
// has exited, without following the link: what it points to stays.
func TestJobDirRemovedWithWhatTheJobLeft(t *testing.T) {
	outside := t.TempDir()
	kept := filepath.Join(outside, "kept")
	if err := os.WriteFile(kept, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil)
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	dir := filepath.Join(e.dir, "jobs", cid)
	if err := os.MkdirAll(filepath.Join(dir, "tmp", "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"tmp/a/b/out": "x", "tmp/top": "y", ".part-1.json": "{}"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "tmp", "elsewhere")); err != nil {
		t.Fatal(err)
	}
	e.rt.Exit(cid, runtime.ExitStatus{})
	e.waitExited(t, "a7")
	e.waitGone(t, cid)
	if b, err := os.ReadFile(kept); err != nil || string(b) != "mine" {
		t.Fatalf("the link's target's file is now %q (%v)", b, err)
	}
}

// TestJobDirAttackedByItsUser: the job's user (uid 1000 here), who can
// reach the running job's directory, can change nothing in it but its
// tmp/ (and its own script): no entry added, removed, renamed or swapped
// in jobs/<id>/ or in jobs/. That is what lets root reach the directory's
// entries as <id>/<entry> from jobs/'s descriptor (safefs.Sub) instead
// of through a descriptor of its own. Links the user leaves in tmp/ are
// removed at the end without being followed.
func TestJobDirAttackedByItsUser(t *testing.T) {
	u := newUserAttack(t)
	e := u.e
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	jobs := filepath.Join(e.dir, "jobs")
	dir := filepath.Join(jobs, cid)
	asUser := func(cmd string) error { return u.as(a.Job.UID, a.Job.GID, cmd, "D="+dir, "J="+jobs) }
	// What the user may do: write in tmp/ (this also shows that the
	// refusals below are the directories' modes, not an unreachable path).
	for _, cmd := range []string{`ln -s "$V" "$D/tmp/passwd"`, `ln -s "$O" "$D/tmp/outside"`, `echo x > "$D/tmp/file"`} {
		if err := asUser(cmd); err != nil {
			t.Fatalf("as the job's user, %s: %v", cmd, err)
		}
	}
	for _, cmd := range []string{
		`ln -s "$V" "$D/planted"`,         // an entry beside script and tmp/
		`rm -f "$D/script"`,               // the script root removes by name
		`mv "$D/tmp" "$D/tmp.old"`,        // tmp/ swapped ...
		`ln -s "$O" "$D/tmp2"`,            // ... for a link
		`mv "$D" "$J/moved"`,              // the job directory itself
		`ln -s "$O" "$J/gpud-8-1-node-1"`, // a job directory planted ahead
	} {
		if err := asUser(cmd); err == nil {
			t.Errorf("as the job's user, %s succeeded; want it refused", cmd)
		}
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o711 || !fi.IsDir() {
		t.Fatalf("job directory is %v of uid %d; want root's 0711 directory", fi.Mode(), st.Uid)
	}
	e.rt.Exit(cid, runtime.ExitStatus{})
	e.waitExited(t, "a7")
	e.waitGone(t, cid)
	u.untouched(t)
}

// TestRunDirAttackedByItsUser: the checkpoint run directory of a job
// without --checkpoint (checkpoint/run.go) is the job's user's, in the
// checkpoint root, which only root writes. As that user (uid 1000, the
// directories above open for traversal): writing in it works; moving or
// removing it, planting a run directory ahead or the job's directory
// (where a seal would move it) are refused. What the user leaves in it
// is never followed: a checkpoint holding a link out of it is refused at
// the seal, and the run directory, then the job's directory made for the
// seal, are removed without touching what the links name.
func TestRunDirAttackedByItsUser(t *testing.T) {
	u := newUserAttack(t)
	e := u.e
	a := ckptAsg(7, e.home, 0, 1) // no --checkpoint, one node: a run directory
	a.Job.UID, a.Job.GID = 1000, 1000
	e.fc.Set(a)
	e.waitStarted(t, cid)
	ckpts := filepath.Join(e.dir, "checkpoints")
	run := filepath.Join(ckpts, checkpoint.RunName(cid))
	asUser := func(cmd string) error { return u.as(a.Job.UID, a.Job.GID, cmd, "R="+run, "C="+ckpts) }
	for _, cmd := range []string{`echo abc > "$R/state"`, `ln -s "$V" "$R/passwd"`, `mkdir "$R/sub" && ln -s "$O" "$R/sub/outside"`, `touch "$R/.done"`} {
		if err := asUser(cmd); err != nil {
			t.Fatalf("as the job's user, %s: %v", cmd, err)
		}
	}
	for _, cmd := range []string{
		`mv "$R" "$C/moved"`,                  // the run directory moved, to be swapped
		`ln -s "$O" "$C/run-gpud-8-1-node-1"`, // a run directory planted ahead
		`ln -s "$O" "$C/7"`,                   // the job's directory, where the seal moves it
	} {
		if err := asUser(cmd); err == nil {
			t.Errorf("as the job's user, %s succeeded; want it refused", cmd)
		}
	}
	if fi, err := os.Lstat(run); err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Fatalf("run directory %v (%v); want the user's directory, in place", fi, err)
	}
	e.rt.Exit(cid, runtime.ExitStatus{}) // .done made: sealed at exit, refused (links out of it)
	ex := e.waitExited(t, "a7")
	if cks := checkpointEvents(e.eventsOf("a7")); len(cks) != 0 || ex.State != spec.StateCompleted {
		t.Errorf("exit %s, checkpoints %+v; want COMPLETED, none sealed (its links leave it)", ex.State, cks)
	}
	e.waitGone(t, cid)
	waitFor(t, "the run directory and the job's directory removed", func() bool {
		_, err := os.Lstat(run)
		_, jerr := os.Lstat(filepath.Join(ckpts, "7"))
		return errors.Is(err, fs.ErrNotExist) && errors.Is(jerr, fs.ErrNotExist)
	}, e.on()...)
	u.untouched(t)
}

// userAttack is the scaffolding of the tests that attack a job's
// directories as the job's user (root only): a victim file in a directory
// outside everything the agent writes, and the test's directories above
// jobs/ and the checkpoints opened for traversal (root's; nobody else can
// write them), so that the user reaches the job's directories and the
// attack means something.
type userAttack struct {
	e               *env
	victim, outside string
}

func newUserAttack(t *testing.T) *userAttack {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs commands as the job's user")
	}
	u := &userAttack{outside: t.TempDir()}
	u.victim = filepath.Join(u.outside, "passwd")
	if err := os.WriteFile(u.victim, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u.e = newEnv(t, nil)
	for _, d := range []string{filepath.Dir(u.e.dir), u.e.dir, filepath.Dir(u.outside), u.outside} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// as runs cmd in a shell as uid:gid, with env and V (the victim) and O
// (the outside directory) in its environment.
func (u *userAttack) as(uid, gid uint32, cmd string, env ...string) error {
	c := exec.Command("/bin/sh", "-c", cmd)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	c.Env = append(env, "V="+u.victim, "O="+u.outside)
	out, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// untouched fails t unless the victim and the outside directory (what the
// user's links named) are as they were.
func (u *userAttack) untouched(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(u.victim); err != nil || string(b) != "root:x:0:0\n" {
		t.Fatalf("victim now %q (%v)", b, err)
	}
	if _, err := os.Stat(u.outside); err != nil {
		t.Fatalf("the directory a link named: %v", err)
	}
}

// TestEndedJobsStepSocketPooled: a job's step socket leaves its job
// directory at the job's end for the node's pool (root's, 0700, beside
// jobs/), and the next job of the same user serves its steps on it, in
// its own job directory, mode 0600 (gpud/node/step's sockpool.go).
func TestEndedJobsStepSocketPooled(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(e.dir, "jobs", cid, step.SocketName), &st); err != nil {
		t.Fatal(err)
	}
	ino := st.Ino
	e.rt.Exit(cid, runtime.ExitStatus{})
	e.waitExited(t, "a7")
	e.waitGone(t, cid)
	pool := filepath.Join(e.dir, "step-sockets")
	if err := syscall.Lstat(pool, &st); err != nil || st.Mode&0o7777 != 0o700 || int(st.Uid) != os.Geteuid() {
		t.Fatalf("pool directory mode %o uid %d (%v); want the agent's, 0700", st.Mode&0o7777, st.Uid, err)
	}
	if ents, err := os.ReadDir(pool); err != nil || len(ents) != 1 {
		t.Fatalf("pool after job 7's end: %v (%v); want its socket", ents, err)
	}
	b := asg(8, e.home)
	e.fc.Set(b)
	cid8 := ContainerID(8, 1, "node-1")
	e.waitStarted(t, cid8)
	sock := filepath.Join(e.dir, "jobs", cid8, step.SocketName)
	if err := syscall.Lstat(sock, &st); err != nil || st.Ino != ino || st.Mode&0o7777 != 0o600 || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Fatalf("job 8's step socket: inode %d (job 7's %d), mode %o (%v); want job 7's socket, 0600", st.Ino, ino, st.Mode, err)
	}
	if os.Geteuid() == 0 && st.Uid != b.Job.UID {
		t.Errorf("job 8's step socket is uid %d's; want %d", st.Uid, b.Job.UID)
	}
	if ents, err := os.ReadDir(pool); err != nil || len(ents) != 0 {
		t.Errorf("pool while job 8 runs: %v (%v); want it empty", ents, err)
	}
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(`{"args":["x"],"het_group":2}` + "\n")); err != nil {
		t.Fatal(err)
	}
	m, err := api.ReadStepFrame(bufio.NewReader(c))
	if err != nil || m.Kind != api.StepError || !strings.Contains(m.Error, "job 8 ") {
		t.Fatalf("a step on job 8's socket: %+v (%v); want job 8's refusal of the het group", m, err)
	}
}
