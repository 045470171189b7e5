// Package statefile keeps the daemons' state private: SQLite databases
// are 0600 from their creation, and so are their -wal, -shm and -journal
// files (SQLite creates those with the main file's mode and owner, see
// findCreateFileMode in sqlite3.c), and state directories are 0700, or
// 0711 where users must reach something inside (the API socket, job
// directories). Files found on disk with looser modes, made by an older
// gpud, are tightened and reported so the daemon can log it.
package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"syscall"
)

// FileMode is the mode of every database file.
const FileMode fs.FileMode = 0o600

// Fix is one mode a file or directory was found with and tightened from.
type Fix struct {
	Path     string
	Old, New fs.FileMode
}

func (f Fix) String() string { return fmt.Sprintf("%s: mode %#o -> %#o", f.Path, f.Old, f.New) }

// Companions are the files SQLite keeps next to a database.
var Companions = []string{"-wal", "-shm", "-journal"}

// DB makes sure the SQLite database at path is private before SQLite
// opens it: a missing file is created empty with mode 0600 (O_EXCL and
// O_NOFOLLOW: nothing planted there is followed), and the file and its
// -wal, -shm and -journal are tightened to 0600 when they are looser. A
// symbolic link or anything but a regular file is refused.
func DB(path string) ([]Fix, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FileMode)
	switch {
	case err == nil:
		// The umask may have narrowed the mode, never widened it; set it
		// exactly on the descriptor.
		err = f.Chmod(FileMode)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("create database %s with mode %#o: %w", path, FileMode, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return nil, fmt.Errorf("create database %s: %w; check that its directory exists and is writable by this daemon", path, err)
	}
	var fixes []Fix
	for _, p := range append([]string{path}, companions(path)...) {
		fx, err := tighten(p, FileMode)
		if err != nil {
			return fixes, err
		}
		if fx != nil {
			fixes = append(fixes, *fx)
		}
	}
	return fixes, nil
}

func companions(path string) []string {
	out := make([]string, len(Companions))
	for i, s := range Companions {
		out[i] = path + s
	}
	return out
}

// tighten chmods the regular file at p to want if it has bits beyond
// want; a missing file is fine.
func tighten(p string, want fs.FileMode) (*Fix, error) {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ENOENT) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("state file %s is a symbolic link; the daemon refuses to follow it: move it away", p)
	}
	if err != nil {
		return nil, fmt.Errorf("check mode of state file %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("check mode of state file %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("state file %s is a %s, not a regular file: move it away", p, fi.Mode().Type())
	}
	old := fi.Mode().Perm()
	if old&^want == 0 {
		return nil, nil
	}
	if err := f.Chmod(want); err != nil {
		return nil, fmt.Errorf("make state file %s private (mode %#o, found %#o): %w", p, want, old, err)
	}
	return &Fix{Path: p, Old: old, New: want}, nil
}

// Dir creates the directory dir (and missing parents) with mode, or
// tightens an existing one to mode when it has bits beyond it (a
// tighter directory is left as the site made it). Use 0700 for a
// directory only the daemon enters and 0711 for one users must traverse
// but not list (the API socket's, the node's job directories' parent).
func Dir(dir string, mode fs.FileMode) ([]Fix, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, mode); err != nil {
			return nil, fmt.Errorf("create state directory %s: %w", dir, err)
		}
		// Exactly mode, whatever the umask took away.
		if err := os.Chmod(dir, mode); err != nil {
			return nil, fmt.Errorf("set mode of state directory %s: %w", dir, err)
		}
		return nil, nil
	}
	// The site may point state_dir at a symbolic link (/var/lib/gpud ->
	// /data/gpud): the configured path is the administrator's, so it is
	// followed.
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("check state directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state directory %s is not a directory", dir)
	}
	old := fi.Mode().Perm()
	if old&^mode == 0 {
		return nil, nil
	}
	if err := os.Chmod(dir, mode); err != nil {
		return nil, fmt.Errorf("make state directory %s mode %#o (found %#o): %w", dir, mode, old, err)
	}
	return []Fix{{Path: dir, Old: old, New: mode}}, nil
}

// Log reports each fix as a warning on log: the file was readable by
// users the daemon did not mean to let in, possibly for a long time.
func Log(log *slog.Logger, fixes []Fix) {
	for _, f := range fixes {
		log.Warn("state file was open to other users; made it private",
			"path", f.Path, "old_mode", fmt.Sprintf("%#o", f.Old), "new_mode", fmt.Sprintf("%#o", f.New))
	}
}
