package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// setup returns an open Dir over a fresh directory and a file outside it
// that no operation may touch.
func setup(t *testing.T) (*Dir, string, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "user")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, dir, victim
}

func checkVictim(t *testing.T, victim string) {
	t.Helper()
	b, err := os.ReadFile(victim)
	if err != nil || string(b) != "precious\n" {
		t.Fatalf("victim %s changed: %q %v", victim, b, err)
	}
	fi, err := os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("victim %s owner/mode changed: uid %d mode %v", victim, st.Uid, fi.Mode())
	}
}

// withTimeout fails the test if f does not return in time (a FIFO open
// that blocks would otherwise hang the test run).
func withTimeout(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked for 5s", what)
	}
}

func TestCreateNeverOpensExisting(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(victim, filepath.Join(dir, "script")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"script", "fifo", "plain"} {
		withTimeout(t, "WriteFile over "+name, func() {
			err := d.WriteFile(name, []byte("#!/bin/sh\n"), 0o755, os.Geteuid(), os.Getegid())
			if !errors.Is(err, fs.ErrExist) {
				t.Errorf("WriteFile over existing %s: %v, want fs.ErrExist", name, err)
			}
		})
	}
	checkVictim(t, victim)
}

func TestWriteFileModeAndOwner(t *testing.T) {
	d, dir, _ := setup(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534 // nobody: fchown really hands it over
	}
	if err := d.WriteFile("script", []byte("echo hi\n"), 0o755, uid, gid); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(dir, "script"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != 0o755 || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Fatalf("script: mode %v uid %d gid %d; want -rwxr-xr-x %d:%d despite umask 077", fi.Mode(), st.Uid, st.Gid, uid, gid)
	}
}

func TestMkdirRefusesExisting(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(dir, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "made"), 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tmp", "made"} {
		if sub, err := d.Mkdir(name, 0o700); !errors.Is(err, fs.ErrExist) {
			if sub != nil {
				sub.Close()
			}
			t.Errorf("Mkdir over existing %s: %v, want fs.ErrExist", name, err)
		}
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	sub, err := d.Mkdir("new", 0o711)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if fi, err := os.Lstat(filepath.Join(dir, "new")); err != nil || fi.Mode() != fs.ModeDir|0o711 {
		t.Fatalf("new dir: %v %v; want drwx--x--x despite umask 077", fi.Mode(), err)
	}
	checkVictim(t, victim)
}

// TestMkdirModeExactUnderAnyUmask: Mkdir's mode is perm whatever the
// umask, whether the mkdir made it so (no fchmod) or a fchmod did.
func TestMkdirModeExactUnderAnyUmask(t *testing.T) {
	d, dir, _ := setup(t)
	for i, tc := range []struct {
		umask int
		perm  fs.FileMode
	}{{0, 0o711}, {0o022, 0o711}, {0o022, 0o700}, {0o077, 0o700}, {0o777, 0o711}, {0, 0o775}, {0o022, 0o775}} {
		old := syscall.Umask(tc.umask)
		name := fmt.Sprintf("d%d", i)
		sub, err := d.Mkdir(name, tc.perm)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		sub.Close()
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode() != fs.ModeDir|tc.perm {
			t.Errorf("Mkdir(%v) under umask %03o: %v %v", tc.perm, tc.umask, fi.Mode(), err)
		}
	}
}

// TestMkdirFor: the directory is made with its mode under any umask and
// given away; an existing entry (a symlink, a directory) is refused and
// left as it was; a mode that lets others write is refused.
func TestMkdirFor(t *testing.T) {
	d, dir, victim := setup(t)
	if os.Geteuid() != 0 {
		t.Skip("gives directories away: needs root")
	}
	for i, umask := range []int{0, 0o022, 0o077, 0o277, 0o777} {
		old := syscall.Umask(umask)
		name := fmt.Sprintf("d%d", i)
		err := d.MkdirFor(name, 0o700, 65534, 65534)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != fs.ModeDir|0o700 {
			t.Errorf("MkdirFor under umask %03o: %v %v, want drwx------", umask, fi.Mode(), err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("MkdirFor under umask %03o: owner %d:%d, want 65534:65534", umask, st.Uid, st.Gid)
		}
	}
	if err := d.MkdirFor("mine", 0o711, -1, -1); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "mine")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Errorf("MkdirFor without an owner: %v, %v; want the caller's", fi, err)
	}
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "mine"} {
		if err := d.MkdirFor(name, 0o700, 65534, 65534); !errors.Is(err, fs.ErrExist) {
			t.Errorf("MkdirFor over existing %s: %v, want fs.ErrExist", name, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(dir, "mine")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Errorf("the existing directory was given away: %v, %v", fi, err)
	}
	if err := d.MkdirFor("open", 0o770, 65534, 65534); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("MkdirFor 0770 = %v, want fs.ErrInvalid", err)
	}
	checkVictim(t, victim)
}

// TestTouchAndOpenDirNames: Touch never opens what is there (a symlink,
// a file); OpenDirNames lists a directory and refuses a symlink or FIFO.
func TestTouchAndOpenDirNames(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo"} {
		withTimeout(t, "Touch "+name, func() {
			if err := d.Touch(name); !errors.Is(err, fs.ErrExist) {
				t.Errorf("Touch(%s) = %v, want fs.ErrExist", name, err)
			}
		})
	}
	if err := d.Touch("mark"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "mark")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm()&^0o600 != 0 {
		t.Errorf("Touch made %v (%v), want an empty file 0600 or less", fi, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // more than one getdents buffer
		if err := os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("file-with-a-long-name-%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sub, names, err := d.OpenDirNames("sub")
	if err != nil || len(names) != 300 {
		t.Fatalf("OpenDirNames(sub) = %d names, %v; want 300", len(names), err)
	}
	again, err := sub.Names()
	sub.Close()
	if err != nil || len(again) != 300 {
		t.Errorf("Names after OpenDirNames = %d names, %v; want 300", len(again), err)
	}
	for _, name := range []string{"link", "fifo"} {
		withTimeout(t, "OpenDirNames "+name, func() {
			if sub, _, err := d.OpenDirNames(name); err == nil {
				sub.Close()
				t.Errorf("OpenDirNames(%s) succeeded; want it refused", name)
			}
		})
	}
	checkVictim(t, victim)
}

func TestOpenDirRefusesSymlinkAndFIFO(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "fifo"} {
		withTimeout(t, "OpenDir "+name, func() {
			if sub, err := d.OpenDir(name); err == nil {
				sub.Close()
				t.Errorf("OpenDir(%s) succeeded; want it refused", name)
			}
		})
	}
	if _, err := OpenDir(filepath.Join(dir, "link")); err == nil {
		t.Error("package OpenDir followed a symlink as its last component")
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../victim"} {
		if _, err := d.OpenRegular(bad); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("OpenRegular(%q): %v, want fs.ErrInvalid", bad, err)
		}
	}
}

func TestOpenRegularRefusesSpecial(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "dev")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"link": "symlink", "fifo": "named pipe", "dev": "symlink", "sub": "directory"} {
		withTimeout(t, "OpenRegular "+name, func() {
			f, err := d.OpenRegular(name)
			if err == nil {
				f.Close()
				t.Errorf("OpenRegular(%s) succeeded", name)
				return
			}
			if !IsNotRegular(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("OpenRegular(%s): %v; want ErrNotRegular naming %q", name, err, want)
			}
		})
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := d.OpenRegular("data")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "abc" {
		t.Fatalf("read data: %q %v", b, err)
	}
}

func TestRemoveAllStaysInside(t *testing.T) {
	d, dir, victim := setup(t)
	outside := filepath.Dir(victim)
	tree := filepath.Join(dir, "job")
	for _, p := range []string{"a/b/c", "d", "g/h"} { // g/h: empty, inside one that is not
		if err := os.MkdirAll(filepath.Join(tree, p), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"a/up": outside, "a/b/v": victim, "e": "/"} {
		if err := os.Symlink(target, filepath.Join(tree, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "a/b/c/fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "d/f"), []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	withTimeout(t, "RemoveAll", func() {
		if err := d.RemoveAll("job"); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Lstat(tree); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("job tree still there: %v", err)
	}
	if err := d.RemoveAll("job"); err != nil {
		t.Fatalf("RemoveAll of a missing entry: %v", err)
	}
	checkVictim(t, victim)
	if _, err := os.Stat(filepath.Join(outside, "user")); err != nil {
		t.Fatalf("RemoveAll reached outside: %v", err)
	}
}

func TestRemoveAndRenameDoNotFollow(t *testing.T) {
	d, dir, victim := setup(t)
	if err := os.Symlink(victim, filepath.Join(dir, ".done")); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(".done"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	if err := d.Rename("l", d, "m"); err != nil {
		t.Fatal(err)
	}
	if target, err := d.Readlink("m"); err != nil || target != victim {
		t.Fatalf("renamed link: %q %v", target, err)
	}
	st, err := d.Lstat("m")
	if err != nil || st.Type() != "symlink" {
		t.Fatalf("Lstat(m): %+v %v; want a symlink", st, err)
	}
	if _, err := d.Lstat("gone"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Lstat of a missing entry: %v", err)
	}
	checkVictim(t, victim)
}

// TestPrepareUserFile (issue 24, hole 2): a job's output file is made and
// checked with the user's rights before anything is written to it: a
// symlink or a hard link another user planted to the job user's own file,
// a FIFO, another user's file, are refused and left as they were, even
// with truncate; the user's own file is emptied only with truncate.
func TestPrepareUserFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (it takes another uid's identity)")
	}
	const uid, gid = 4321, 4321
	base := t.TempDir()
	for d := base; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shared := filepath.Join(base, "shared") // like a group's project directory: not sticky
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	important := filepath.Join(home, "important")
	if err := os.WriteFile(important, []byte("eighteen bytes...\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(important, uid, gid); err != nil {
		t.Fatal(err)
	}
	cred := Cred{UID: uid, GID: gid}
	intact := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(important); err != nil || string(b) != "eighteen bytes...\n" {
			t.Fatalf("%s: the user's file became %q (%v)", what, b, err)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(p string) error
		want  string
	}{
		{"symlink to the user's file", func(p string) error { return os.Symlink(important, p) }, "not a regular file (symlink)"},
		{"hard link to the user's file", func(p string) error { return os.Link(important, p) }, "2 hard links"},
		// (Both writable by all: the checks, not the modes, refuse them.)
		{"FIFO", func(p string) error {
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				return err
			}
			return os.Chmod(p, 0o666)
		}, "not a regular file (named pipe)"},
		{"another user's file", func(p string) error {
			if err := os.WriteFile(p, []byte("root's"), 0o666); err != nil {
				return err
			}
			return os.Chmod(p, 0o666)
		}, "belongs to uid 0"},
	} {
		p := filepath.Join(shared, strings.ReplaceAll(tc.name, " ", "_")+".out")
		if err := tc.plant(p); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := PrepareUserFile(p, cred, true)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "choose another --output/--error path") {
			t.Errorf("%s: %v; want a refusal saying %q and what to do", tc.name, err, tc.want)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s: took %v (blocked?)", tc.name, time.Since(start))
		}
		intact(tc.name)
		// A notify message (AppendUserFile) is refused the same way.
		if err := AppendUserFile(p, cred, []byte("slurmstepd: error: hi\n")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: append: %v; want a refusal saying %q", tc.name, err, tc.want)
		}
		intact(tc.name + " (append)")
	}
	if b, _ := os.ReadFile(filepath.Join(shared, "another_user's_file.out")); string(b) != "root's" {
		t.Errorf("another user's file became %q", b)
	}
	// The user's own: made, owned by the user, kept or emptied.
	own := filepath.Join(shared, "logs", "job.out")
	if err := PrepareUserFile(own, cred, true); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{own, filepath.Dir(own)} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("%s belongs to %d:%d; want the user's %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
	if err := os.WriteFile(own, []byte("old run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := PrepareUserFile(own, cred, false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(own); string(b) != "old run\n" {
		t.Errorf("append mode emptied the file: %q", b)
	}
	if err := AppendUserFile(own, cred, []byte("slurmstepd: error: hi\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(own); string(b) != "old run\nslurmstepd: error: hi\n" {
		t.Errorf("after AppendUserFile the file is %q", b)
	}
	if err := PrepareUserFile(own, cred, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(own); len(b) != 0 {
		t.Errorf("truncate mode left %q", b)
	}
	// A directory on the way that another user made a symlink to the
	// user's home, in the shared directory: refused, the file intact.
	// The user's own symlink, and root's, are followed.
	trap := filepath.Join(shared, "bobdir")
	if err := os.Symlink(home, trap); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(trap, 5555, 5555); err != nil {
		t.Fatal(err)
	}
	if err := PrepareUserFile(filepath.Join(trap, "important"), cred, true); err == nil || !strings.Contains(err.Error(), "bobdir is a symlink of uid 5555") {
		t.Errorf("another user's symlink on the way: %v; want refused naming it", err)
	}
	intact("another user's symlink on the way")
	for _, owner := range []int{uid, 0} {
		mine := filepath.Join(shared, fmt.Sprintf("link-of-%d", owner))
		if err := os.Symlink("logs/../logs", mine); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(mine, owner, owner); err != nil {
			t.Fatal(err)
		}
		if err := PrepareUserFile(filepath.Join(mine, "job.out"), cred, false); err != nil {
			t.Errorf("through a symlink of uid %d: %v", owner, err)
		}
	}
	// A directory the user may only traverse is walked through.
	traverse := filepath.Join(base, "traverse")
	if err := os.Mkdir(traverse, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(traverse, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(home, filepath.Join(traverse, "home")); err != nil {
		t.Fatal(err)
	}
	if err := PrepareUserFile(filepath.Join(traverse, "home", "new", "x.out"), cred, true); err != nil {
		t.Errorf("through a traverse-only directory and root's symlink: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(home, "new", "x.out")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uid {
		t.Errorf("x.out under the user's home: %v", err)
	}
	// The user's rights: nothing where the user cannot write.
	rootOnly := filepath.Join(base, "etc")
	if err := os.Mkdir(rootOnly, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := PrepareUserFile(filepath.Join(rootOnly, "ld.so.preload"), cred, false); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a file in a directory only root may write: %v; want permission denied", err)
	}
	// The agent's own threads keep root's identity.
	if err := os.WriteFile(filepath.Join(rootOnly, "still-root"), nil, 0o600); err != nil {
		t.Errorf("after AsUser, the process is no longer root: %v", err)
	}
}

// TestMkdirPathAndLink: MkdirPath makes and opens the path's last
// component with its mode, refusing an existing entry (a symlink is never
// followed); OpenDirNamesPath refuses a symlink; Link never replaces an
// existing entry and links a symlink itself, not its target.
func TestMkdirPathAndLink(t *testing.T) {
	d, dir, victim := setup(t)
	old := syscall.Umask(0o077)
	sub, err := MkdirPath(filepath.Join(dir, "made"), 0o711)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if fi, err := os.Lstat(filepath.Join(dir, "made")); err != nil || fi.Mode() != fs.ModeDir|0o711 {
		t.Errorf("MkdirPath: %v %v; want drwx--x--x", fi.Mode(), err)
	}
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"made", "link"} {
		if sub, err := MkdirPath(filepath.Join(dir, name), 0o711); !errors.Is(err, fs.ErrExist) {
			if sub != nil {
				sub.Close()
			}
			t.Errorf("MkdirPath over existing %s: %v, want fs.ErrExist", name, err)
		}
	}
	if sub, _, err := OpenDirNamesPath(filepath.Join(dir, "link")); err == nil {
		sub.Close()
		t.Error("OpenDirNamesPath followed a symlink")
	}
	if sub, names, err := OpenDirNamesPath(dir); err != nil || len(names) != 2 {
		t.Errorf("OpenDirNamesPath = %q, %v; want made and link", names, err)
	} else {
		sub.Close()
	}
	if err := d.WriteNew("file", []byte("x"), 0o600, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := d.Link("file", d, "made"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Link over an existing directory: %v, want fs.ErrExist", err)
	}
	if err := d.Link("link", d, "link2"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link2")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Link of a symlink made %v (%v), want the symlink itself", fi, err)
	}
	if err := d.Link("file", d, "file2"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "file2")); err != nil || string(b) != "x" {
		t.Errorf("file2 = %q, %v", b, err)
	}
	checkVictim(t, victim)
}

// TestWriteNewMode: WriteNew's file has mode perm exactly, whether the
// create made it so (perm within the owner's bits: no fchmod) or a
// fchmod did (perm giving others more), and is given away; the process's
// umask is the one Umask read (a test that changes the umask meanwhile
// is not what a gpud process does).
func TestWriteNewMode(t *testing.T) {
	d, dir, _ := setup(t)
	if got, want := Umask(), readUmask(); got != want {
		t.Fatalf("Umask() = %03o, the process's is %03o", got, want)
	}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
	}
	for i, perm := range []fs.FileMode{0o700, 0o600, 0o400, 0o644, 0o755} {
		name := fmt.Sprintf("f%d", i)
		if err := d.WriteNew(name, []byte("data\n"), perm, uid, gid); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || fi.Mode() != perm {
			t.Errorf("WriteNew(%v) under umask %03o: %v %v", perm, Umask(), fi.Mode(), err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); uid >= 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
			t.Errorf("WriteNew(%v): owner %d:%d, want %d:%d", perm, st.Uid, st.Gid, uid, gid)
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "data\n" {
			t.Errorf("WriteNew(%v): holds %q, %v", perm, b, err)
		}
	}
}
