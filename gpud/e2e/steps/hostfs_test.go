package steps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestHostFilesystem: a user's job on the host's root sees the host's
// filesystems as on a Slurm node: it writes into a directory its user
// owns outside every directory gpud binds (a scratch area), is refused by
// permissions (not by a read-only root) where its user may not write, and
// has a /tmp of its own. A step whose working directory the job cannot see
// (srun run from a directory under the host's /tmp) starts in /tmp with
// slurmstepd's error line, instead of failing.
func TestHostFilesystem(t *testing.T) {
	u := e2etest.AddUser(t) // first: its userdel after the cluster's stop
	c := e2etest.StartCluster(t, 1)
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Outside /tmp (the job's own) and outside everything gpud binds: only
	// a writable host root lets the job write there.
	scratch, err := os.MkdirTemp("/var/tmp", "gpud-e2e-scratch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	locked := filepath.Join(scratch, "locked")
	if err := os.Mkdir(locked, 0o755); err != nil { // root's
		t.Fatal(err)
	}
	mine := filepath.Join(scratch, "mine")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("gpud-e2e-hostfs-%d", time.Now().UnixNano())
	e2etest.WriteScript(t, u.Home, "fs.sh", fmt.Sprintf(`#!/bin/sh
echo mine > %[1]s/out && echo wrote mine
echo locked > %[2]s/out 2>&1 || echo refused locked
touch %[2]s/out 2>&1 | sed 's/.*: //'
echo private > /tmp/%[3]s && echo wrote tmp
echo end
`, mine, locked, tag))
	if err := os.Chown(filepath.Join(u.Home, "fs.sh"), int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	r := c.As(u, nil, "sbatch", "--parsable", "--output=fs-%j.out", "fs.sh")
	if r.Code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED")
	b, _ := os.ReadFile(filepath.Join(u.Home, "fs-"+id+".out"))
	out := string(b)
	for _, want := range []string{"wrote mine\n", "refused locked\n", "Permission denied\n", "wrote tmp\n", "end\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the job's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Read-only file system") {
		t.Errorf("the host's root is read-only in the job:\n%s", out)
	}
	if got, err := os.ReadFile(filepath.Join(mine, "out")); err != nil || string(got) != "mine\n" {
		t.Errorf("%s/out: %q, %v; want the job's write", mine, got, err)
	}
	if _, err := os.Stat(filepath.Join(locked, "out")); err == nil {
		t.Errorf("the user's job wrote into root's %s", locked)
	}
	if _, err := os.Stat(filepath.Join("/tmp", tag)); err == nil {
		os.Remove(filepath.Join("/tmp", tag))
		t.Errorf("the job's /tmp/%s appeared in the host's /tmp", tag)
	}

	// A step from a directory the job cannot see: the host's /tmp is not
	// the job's.
	sock := stepJob(t, c, 1)
	hidden, err := os.MkdirTemp("/tmp", "gpud-e2e-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(hidden) })
	cmd := srunCmd(sock, "pwd")
	cmd.Dir = hidden
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil || string(stdout) != "/tmp\n" {
		t.Errorf("srun pwd from %s: %v, stdout %q, stderr %q; want it to run in /tmp", hidden, err, stdout, stderr.String())
	}
	if want := "slurmstepd: error: couldn't chdir to `" + hidden + "': No such file or directory: going to /tmp instead\n"; !strings.Contains(stderr.String(), want) {
		t.Errorf("srun pwd from %s: stderr %q; want slurmstepd's %q", hidden, stderr.String(), want)
	}
	// From a directory the job sees, the step starts there, with no line.
	cmd = srunCmd(sock, "pwd")
	cmd.Dir = "/usr"
	stderr.Reset()
	cmd.Stderr = &stderr
	if stdout, err := cmd.Output(); err != nil || string(stdout) != "/usr\n" || stderr.Len() != 0 {
		t.Errorf("srun pwd from /usr: %v, stdout %q, stderr %q; want /usr and nothing else", err, stdout, stderr.String())
	}
}
