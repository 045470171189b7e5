package safefs

import (
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Sub is a subdirectory of a Dir that this process made and alone
// writes, in a Dir that it alone writes (a job's directory, root's, 0711,
// in the node agent's jobs/, root's, 0711). Its entries are reached from
// the parent's descriptor as "name/entry", with the entry's own safety
// (O_EXCL|O_NOFOLLOW, AT_SYMLINK_NOFOLLOW, fchown on the descriptor), and
// no descriptor of it is opened: since nobody else can remove, rename or
// replace name (only this process writes its parent) nor add an entry to
// it, the path reaches what a descriptor of it would. It saves opening,
// checking and keeping a descriptor per directory: a node agent makes
// one directory per job start and keeps it for the job's run.
//
// A Sub is only as safe as that precondition: never make one of a
// directory another user can write or of one in such a directory.
type Sub struct {
	d    *Dir
	name string
}

// MkdirSub makes subdirectory name of d, which only this process writes,
// with mode perm (exactly: the umask does not apply) and returns it as a
// Sub. perm must not let others write (the Sub's precondition; an error
// otherwise). An existing entry of that name, of any type, is an error
// wrapping fs.ErrExist: it is never reused. Since only this process adds
// entries to d, what mkdirat made is this process's directory, so it is
// not opened to be checked as Mkdir checks it, and chmod'ed only when
// the umask narrowed its mode.
func (d *Dir) MkdirSub(name string, perm fs.FileMode) (Sub, error) {
	if err := d.checkName("mkdir", name); err != nil {
		return Sub{}, err
	}
	mode := uint32(perm.Perm())
	if mode&0o022 != 0 {
		return Sub{}, d.pathErr("mkdir", name, fmt.Errorf("mode %v lets others write; a Sub must be this process's alone: %w", perm, fs.ErrInvalid))
	}
	if err := unix.Mkdirat(d.fd, name, mode); err != nil {
		return Sub{}, d.pathErr("mkdir", name, err)
	}
	// By name: the entry is the directory just made (only this process
	// writes d), and fchmodat cannot decline to follow a symlink.
	if umask&mode != 0 {
		if err := unix.Fchmodat(d.fd, name, mode, 0); err != nil {
			return Sub{}, d.pathErr("chmod", name, err)
		}
	}
	return Sub{d: d, name: name}, nil
}

// Sub is subdirectory name of d as a Sub, for a directory MkdirSub made
// (its entries' removal at the end of its use). name must be a single
// entry name.
func (d *Dir) Sub(name string) (Sub, error) {
	if err := d.checkName("open directory", name); err != nil {
		return Sub{}, err
	}
	return Sub{d: d, name: name}, nil
}

// Path is the directory's path, for messages.
func (s Sub) Path() string { return filepath.Join(s.d.path, s.name) }

// rel is entry's path from the parent's descriptor, once entry is
// checked to be a single name.
func (s Sub) rel(op, entry string) (string, error) {
	if err := s.d.checkName(op, entry); err != nil {
		return "", err
	}
	return s.name + "/" + entry, nil
}

// MkdirFor is Dir.MkdirFor of entry in s: entry made with mode perm
// (exactly: chmod'ed by name when the umask narrowed it), then given to
// uid:gid (none when uid is negative) by fchownat without following. An
// existing entry of that name is an error wrapping fs.ErrExist; perm
// must not let others write. Unlike Dir.MkdirFor's, the new entry is not
// lstat'ed to be checked: only this process adds entries to a Sub, so
// what mkdirat made is there, a directory, and a fchownat that succeeded
// gave it away.
func (s Sub) MkdirFor(entry string, perm fs.FileMode, uid, gid int) error {
	rel, err := s.rel("mkdir", entry)
	if err != nil {
		return err
	}
	pathErr := func(op string, err error) error {
		return &fs.PathError{Op: op, Path: filepath.Join(s.d.path, rel), Err: err}
	}
	mode := uint32(perm.Perm())
	if mode&0o022 != 0 {
		return pathErr("mkdir", fmt.Errorf("mode %v lets others write; use Mkdir: %w", perm, fs.ErrInvalid))
	}
	if err := unix.Mkdirat(s.d.fd, rel, mode); err != nil {
		return pathErr("mkdir", err)
	}
	// Before it is given away, while it is still this process's.
	if umask&mode != 0 {
		if err := unix.Fchmodat(s.d.fd, rel, mode, 0); err != nil {
			return pathErr("chmod", err)
		}
	}
	if uid >= 0 {
		if err := unix.Fchownat(s.d.fd, rel, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("chown", err)
		}
	}
	return nil
}

// WriteNew is Dir.WriteNew of entry in s (created O_EXCL|O_NOFOLLOW,
// fchown on its descriptor, not fsynced).
func (s Sub) WriteNew(entry string, data []byte, perm fs.FileMode, uid, gid int) error {
	rel, err := s.rel("create", entry)
	if err != nil {
		return err
	}
	return writeNew(s.d.fd, s.d.path, rel, data, perm, uid, gid)
}

// Unlink is Dir.Unlink of entry in s: a symlink is removed itself, a
// directory is an error wrapping syscall.EISDIR.
func (s Sub) Unlink(entry string) error {
	rel, err := s.rel("remove", entry)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(s.d.fd, rel, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(s.d.path, rel), Err: err}
	}
	return nil
}

// Rmdir is Dir.Rmdir of entry in s (never a symlink's target).
func (s Sub) Rmdir(entry string) error {
	rel, err := s.rel("remove", entry)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(s.d.fd, rel, unix.AT_REMOVEDIR); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(s.d.path, rel), Err: err}
	}
	return nil
}

// Remove removes s itself, once empty (Dir.Rmdir of its name).
func (s Sub) Remove() error { return s.d.Rmdir(s.name) }
