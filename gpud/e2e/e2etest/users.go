package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// LocalUser is a throwaway local account made with useradd.
type LocalUser struct {
	Name     string
	UID, GID uint32
	Home     string // a work dir it owns
}

func AddUser(t testing.TB) LocalUser { return AddUserTag(t, "") }

// AddUserTag is addUser for a second (third...) user: tag makes the name
// differ.
func AddUserTag(t testing.TB, tag string) LocalUser {
	t.Helper()
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skip("SKIP (loud): useradd not found; the multi-user test needs it (apt-get install passwd)")
	}
	name := fmt.Sprintf("gpude2e%d%s", os.Getpid()%100000, tag)
	_ = exec.Command("userdel", name).Run() // left by a killed run, if any
	if out, err := exec.Command("useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
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
