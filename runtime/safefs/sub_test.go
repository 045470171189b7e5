package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSub: MkdirSub makes a directory with its exact mode and never
// reuses an entry (a planted symlink stays a symlink, its target
// untouched) nor makes one others could write; a Sub's entries are made,
// given away and removed as Dir's are (O_EXCL|O_NOFOLLOW, fchownat and
// unlinkat without following), so a symlink planted at an entry's name
// is never written through, chowned or followed; names that are not
// single entries are refused; Remove removes the Sub once empty.
func TestSub(t *testing.T) {
	d, dir, victim := setup(t)
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = 65534, 65534
	}
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.MkdirSub("planted", 0o711); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MkdirSub over a symlink = %v, want fs.ErrExist", err)
	}
	if _, err := d.MkdirSub("open", 0o775); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("MkdirSub 0775 = %v, want fs.ErrInvalid", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "open")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused MkdirSub left %v", err)
	}
	for _, name := range []string{"", ".", "..", "a/b"} {
		if _, err := d.MkdirSub(name, 0o711); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("MkdirSub(%q) = %v, want fs.ErrInvalid", name, err)
		}
	}
	s, err := d.MkdirSub("job", 0o711)
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "job")
	if fi, err := os.Lstat(sub); err != nil || fi.Mode() != fs.ModeDir|0o711 || s.Path() != sub {
		t.Fatalf("MkdirSub made %v (%v) at %s; want drwx--x--x at %s", fi.Mode(), err, s.Path(), sub)
	}
	if err := s.MkdirFor("tmp", 0o700, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteNew("script", []byte("#!/bin/sh\n"), 0o700, uid, gid); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"tmp": fs.ModeDir | 0o700, "script": 0o700} {
		fi, err := os.Lstat(filepath.Join(sub, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s is %v (%v), want %v", name, fi.Mode(), err, want)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); uid >= 0 && (int(st.Uid) != uid || int(st.Gid) != gid) {
			t.Errorf("%s: owner %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
	}
	// Entries planted as symlinks (as if the Sub's precondition failed
	// for a moment): never written through, given away or followed.
	for name, target := range map[string]string{"file": victim, "dir": filepath.Dir(victim)} {
		if err := os.Symlink(target, filepath.Join(sub, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteNew("file", []byte("owned\n"), 0o600, uid, gid); !errors.Is(err, fs.ErrExist) {
		t.Errorf("WriteNew over a symlink = %v, want fs.ErrExist", err)
	}
	if err := s.MkdirFor("dir", 0o700, uid, gid); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MkdirFor over a symlink = %v, want fs.ErrExist", err)
	}
	if err := s.MkdirFor("tmp", 0o700, uid, gid); !errors.Is(err, fs.ErrExist) {
		t.Errorf("MkdirFor over a directory = %v, want fs.ErrExist", err)
	}
	if err := s.MkdirFor("shared", 0o770, uid, gid); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("MkdirFor 0770 = %v, want fs.ErrInvalid", err)
	}
	if err := s.Rmdir("dir"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("Rmdir of a symlink to a directory = %v, want ENOTDIR", err)
	}
	for _, name := range []string{"file", "dir"} {
		if err := s.Unlink(name); err != nil {
			t.Errorf("Unlink(%s): %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "../planted", "tmp/x"} {
		if err := s.Unlink(name); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Unlink(%q) = %v, want fs.ErrInvalid", name, err)
		}
	}
	if err := s.Remove(); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("Remove of a Sub with entries = %v, want ENOTEMPTY", err)
	}
	if err := s.Unlink("tmp"); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("Unlink of a directory = %v, want EISDIR", err)
	}
	if err := s.Unlink("script"); err != nil {
		t.Fatal(err)
	}
	if err := s.Rmdir("tmp"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlink("script"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Unlink of a missing entry = %v, want fs.ErrNotExist", err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	again, err := d.Sub("job")
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Remove(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove of a removed Sub = %v, want fs.ErrNotExist", err)
	}
	if _, err := d.Sub("a/b"); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("Sub(a/b) = %v, want fs.ErrInvalid", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "planted")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the planted symlink is now %v (%v)", fi, err)
	}
	checkVictim(t, victim)
}

// TestMkdirSubModeExactUnderAnyUmask: the umask never narrows a Sub's
// mode nor that of a directory made in it (each is chmod'ed when it
// did).
func TestMkdirSubModeExactUnderAnyUmask(t *testing.T) {
	d, dir, _ := setup(t)
	saved := umask
	t.Cleanup(func() { umask = saved })
	for _, m := range []int{0o022, 0o077, 0o777} {
		old := syscall.Umask(m)
		umask = uint32(m) // as Umask would have read it at start-up
		const name = "u"
		s, err := d.MkdirSub(name, 0o711)
		if err == nil {
			err = s.MkdirFor("tmp", 0o700, -1, -1)
		}
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || fi.Mode() != fs.ModeDir|0o711 {
			t.Errorf("MkdirSub under umask %03o: %v %v, want drwx--x--x", m, fi.Mode(), err)
		}
		if fi, err := os.Lstat(filepath.Join(dir, name, "tmp")); err != nil || fi.Mode() != fs.ModeDir|0o700 {
			t.Errorf("Sub.MkdirFor under umask %03o: %v %v, want drwx------", m, fi.Mode(), err)
		}
		if err := s.Rmdir("tmp"); err != nil {
			t.Fatal(err)
		}
		if err := s.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}
