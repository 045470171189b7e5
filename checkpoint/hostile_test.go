package checkpoint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// within fails the test if f takes longer than 5s: an open that blocks on
// a FIFO would otherwise hang the agent (and the test run) forever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked for 5s", what)
	}
}

// TestMarkReadyRefusesPlanted is the store half of the .done attack: a job
// that exits with the checkpoint code after putting something other than a
// regular file at .done must not make root create, open or block on it.
func TestMarkReadyRefusesPlanted(t *testing.T) {
	outside := t.TempDir()
	target := filepath.Join(outside, "nologin") // must never be created
	for _, tc := range []struct {
		name, want string
		plant      func(t *testing.T, done string)
	}{
		{"symlink to a missing root path", "symlink", func(t *testing.T, done string) {
			if err := os.Symlink(target, done); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", "named pipe", func(t *testing.T, done string) {
			if err := syscall.Mkfifo(done, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		// A job cannot mknod a device; a symlink to one is what it can do.
		{"symlink to a device", "symlink", func(t *testing.T, done string) {
			if err := os.Symlink("/dev/null", done); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", "directory", func(t *testing.T, done string) {
			if err := os.Mkdir(done, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, 3)
			st, err := s.Staging(1)
			if err != nil {
				t.Fatal(err)
			}
			writeTree(t, st, map[string]string{"model.pt": "weights"})
			tc.plant(t, filepath.Join(st, doneName))
			within(t, "MarkReady", func() {
				err = s.MarkReady(1, "")
			})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("MarkReady: %v; want ErrRefused naming a %s", err, tc.want)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("MarkReady created %s through the symlink (%v)", target, err)
			}
			if s.Ready(1) {
				t.Fatal("Ready with a planted .done")
			}
			if _, err := s.Seal(1); !errors.Is(err, ErrNotReady) {
				t.Fatalf("Seal after a refused MarkReady: %v, want ErrNotReady", err)
			}
		})
	}
}

// TestFIFOsDoNotHang swaps files of a staging directory and of a sealed
// checkpoint for FIFOs: sealing, Latest and Verify must refuse them without
// blocking.
func TestFIFOsDoNotHang(t *testing.T) {
	s := newTestStore(t, 3)
	ck := sealFiles(t, s, 1, map[string]string{"a": "1", "d/b": "2"})
	// The job owns its sealed checkpoint's files: it swaps the manifest.
	manifest := filepath.Join(ck.Dir, manifestName)
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(manifest, 0o666); err != nil {
		t.Fatal(err)
	}
	within(t, "Latest", func() {
		if _, ok, err := s.Latest(1); ok || err != nil {
			t.Errorf("Latest with a FIFO manifest: ok=%v err=%v; want no checkpoint", ok, err)
		}
	})
	within(t, "Verify", func() {
		if _, err := Verify(ck.Dir, true); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify with a FIFO manifest: %v, want ErrCorrupt", err)
		}
	})

	// A FIFO where a directory or file of the staging directory was.
	st, err := s.Staging(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(st, "d"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkReady(1, ""); err != nil {
		t.Fatal(err)
	}
	within(t, "Seal", func() {
		if _, err := s.Seal(1); err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("Seal of a staging dir holding a FIFO: %v; want it refused naming the named pipe", err)
		}
	})
}

// TestSealDoesNotFollowPlantedLinks plants a symlink named MANIFEST.json
// and a symlinked subdirectory pointing outside: sealing must neither write
// through the first nor hash what the second points at.
func TestSealDoesNotFollowPlantedLinks(t *testing.T) {
	s := newTestStore(t, 3)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := s.Staging(1)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, st, map[string]string{"out": "->" + outside})
	if err := s.MarkReady(1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(1); err == nil || !strings.Contains(err.Error(), "must be relative") {
		t.Fatalf("Seal with an absolute symlink out: %v; want it refused", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root only" {
		t.Fatalf("secret changed: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("sealing wrote outside the staging dir: %v", ents)
	}
	// The manifest name, planted as a symlink, is refused, not written.
	st, err = s.Staging(1)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, st, map[string]string{manifestName: "->" + filepath.Join(outside, "m")})
	if err := s.MarkReady(1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(1); err == nil {
		t.Fatal("Seal with a planted MANIFEST.json symlink succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "m")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Seal wrote the manifest through a planted symlink (%v)", err)
	}
}

// TestSealRefusesOthersFiles: a file in staging that is not the job's (a
// hard link to another user's file, where the kernel allows one) must not
// be hashed into the manifest.
func TestSealRefusesOthersFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another uid")
	}
	s := newTestStore(t, 3)
	st, err := s.Staging(1)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, st, map[string]string{"mine": "1", "theirs": "secret"})
	if err := os.Chown(filepath.Join(st, "theirs"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkReady(1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seal(1); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("Seal with another uid's file: %v; want it refused", err)
	}
}

// plantVictim makes a directory anyone may write holding the file
// "precious" ("keep"): what a job's user points its links at.
func plantVictim(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "precious")
	if err := os.WriteFile(file, []byte("keep"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

// shAsJobUser runs script with sh as the job's user (oldUID, a real
// second uid) and returns its output.
func shAsJobUser(script string) (string, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: oldUID, Gid: oldUID}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkVictimKept fails unless plantVictim's directory holds its file
// alone, unchanged.
func checkVictimKept(t *testing.T, dir, file string) {
	t.Helper()
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("victim changed: %q, %v", b, err)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("victim's directory holds %q, want only precious", names)
	}
}

// TestRemoveUnsealedAsJobUser attacks the removal at a job's end as the
// job's user (a real second uid), who owns its staging directory and
// nothing above it: what it plants in staging (a symlink to a victim, a
// FIFO, a deep tree, a claim's name, its staging made unreadable) goes
// without anything outside being touched, and it can neither add an
// entry beside staging (a claim or a ckpt-* that would keep the
// directory forever) nor move staging away.
func TestRemoveUnsealedAsJobUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs as a second user: needs root")
	}
	s := traversable(t)
	victimDir, victim := plantVictim(t)
	_, _, m, err := s.PrepareClaim(7, JobTag(42), oldUID, oldUID)
	if err != nil || m == (Mark{}) {
		t.Fatalf("PrepareClaim = %v, %v", m, err)
	}
	jd, st := s.JobDir(7), s.stagingDir(7)
	sh := shAsJobUser
	if out, err := sh(`set -e; cd '` + st + `'
ln -s '` + victimDir + `' link; ln -s '` + victim + `' file-link; mkfifo fifo
mkdir -p a/b/c/d; echo x > a/b/c/d/e; ln -s '` + victimDir + `' a/b/c/up
touch .claim-0123456789abcdef
chmod 000 a/b
chmod 000 .`); err != nil {
		t.Fatalf("planting as uid %d: %v: %s", oldUID, err, out)
	}
	for _, try := range []string{
		"touch " + filepath.Join(jd, ".claim-fedcba9876543210"),
		"mkdir " + filepath.Join(jd, ckptName(1)),
		"mv " + st + " " + filepath.Join(jd, "moved"),
		"mv " + st + " " + filepath.Join(victimDir, "moved"),
		"rm -rf " + jd,
	} {
		if out, err := sh(try); err == nil {
			t.Errorf("as uid %d, %q succeeded (%s); want it refused", oldUID, try, out)
		}
	}
	within(t, "RemoveUnsealed", func() {
		var ok bool
		if ok, err = s.RemoveUnsealed(7, m); !ok || err != nil {
			t.Errorf("RemoveUnsealed = %v, %v; want removed", ok, err)
		}
	})
	if diff := dirNames(t, s.Root()); len(diff) != 0 {
		t.Errorf("root after removal holds %q", diff)
	}
	checkVictimKept(t, victimDir, victim)
}
