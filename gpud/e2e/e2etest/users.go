package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// LocalUser is a throwaway local account made with useradd.
type LocalUser struct {
	Name     string
	UID, GID uint32
	Home     string // a work dir it owns
}

// userSeq numbers the users this process adds.
var userSeq atomic.Int32

func AddUser(t testing.TB) LocalUser { return AddUserTag(t, "") }

// AddUserTag is addUser for a second (third...) user: tag makes the name
// differ.
func AddUserTag(t testing.TB, tag string) LocalUser {
	t.Helper()
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("SKIP (loud): useradd not found; the multi-user test needs it (apt-get install passwd)")
	}
	// Unique per process and call: tests of a package may run in
	// parallel, and other test binaries beside them.
	name := fmt.Sprintf("gpude2e%d_%d%s", os.Getpid()%100000, userSeq.Add(1), tag)
	_, _ = accounts("userdel", name) // left by a killed run, if any
	if out, err := accounts("useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := accounts("userdel", name); err != nil {
			t.Errorf("userdel %s: %v\n%s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	home := ShortTempDir(t)
	if err := os.Chmod(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	return LocalUser{Name: name, UID: uint32(uid), GID: uint32(gid), Home: home}
}

// OpenCluster starts a one-node standalone that a useradd user can reach.
// With outsideTmp its state dir is under /var/tmp, not /tmp: a job's /tmp
// is its own, which would hide a state dir under /tmp whatever gpud did.
func OpenCluster(t *testing.T, outsideTmp bool) *Cluster {
	t.Helper()
	var c *Cluster
	if outsideTmp {
		RequirePrereq(t)
		dir, err := os.MkdirTemp("/var/tmp", "ge2e-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c = &Cluster{T: t, Dir: dir, Extra: []string{"--kill-grace", "2s"}}
		c.Start(1)
		t.Cleanup(func() {
			c.CancelAll()
			c.Stop(syscall.SIGTERM)
			KillStrayShims(t, c.Dir)
			if t.Failed() {
				t.Logf("gpud standalone log:\n%s", c.Log.String())
			}
		})
	} else {
		c = StartCluster(t, 1, "--kill-grace", "2s")
	}
	for _, d := range []string{c.Dir, BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// accounts runs useradd or userdel, again while another one holds the
// lock on /etc/passwd (tests in parallel, other test binaries).
func accounts(cmd string, args ...string) ([]byte, error) {
	for try := 0; ; try++ {
		out, err := exec.Command(cmd, args...).CombinedOutput()
		if err == nil || try == 50 || !strings.Contains(string(out), "lock") {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
