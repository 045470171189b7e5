// Package safefs is how a root daemon touches a directory a user can write
// or traverse: job directories, checkpoint staging and sealed checkpoints.
//
// A Dir is an open directory descriptor. Every operation names one entry of
// it (no "/" and no ".."), and is done with the *at system calls relative to
// that descriptor with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW, so a symlink a user
// planted is never followed and a directory swapped under the daemon cannot
// lead it elsewhere. Files are created with O_EXCL (never opened if they
// exist), opened with O_NONBLOCK (a FIFO cannot hang the daemon) and checked
// with fstat before use; ownership and modes are set with fchown and fchmod
// on the open descriptor, never by path.
//
// The directory a caller opens with OpenDir must itself be reached through
// directories only root can change (the daemon's state and checkpoint
// roots); everything below it may be hostile.
package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped by errors about an entry that is not a regular
// file (a symlink, FIFO, device, socket or directory) where one is needed.
var ErrNotRegular = errors.New("not a regular file")

// ErrNotOwned is wrapped by errors about a directory the daemon just made
// that turns out to belong to someone else (it was swapped meanwhile).
var ErrNotOwned = errors.New("not owned by this process")

// Dir is an open directory. It is not safe for concurrent Close and use.
type Dir struct {
	fd   int
	path string // for messages only; never used to reach the directory
}

// OpenDir opens the directory at path, refusing a symlink as its last
// component. The components before it are resolved normally, so they must
// be directories only root can change.
func OpenDir(path string) (*Dir, error) {
	fd, err := openDirAt(unix.AT_FDCWD, path)
	if err != nil {
		return nil, &fs.PathError{Op: "open directory", Path: path, Err: err}
	}
	return &Dir{fd: fd, path: filepath.Clean(path)}, nil
}

func openDirAt(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// Path is the path the directory was opened at, for messages.
func (d *Dir) Path() string { return d.path }

// Close releases the descriptor.
func (d *Dir) Close() error {
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// checkName accepts a single directory entry name.
func (d *Dir) checkName(op, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return &fs.PathError{Op: op, Path: filepath.Join(d.path, name), Err: fmt.Errorf("%q is not a single file name: %w", name, fs.ErrInvalid)}
	}
	return nil
}

func (d *Dir) pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: filepath.Join(d.path, name), Err: err}
}

// OpenDir opens the subdirectory name, refusing a symlink or anything that
// is not a directory (without blocking on a FIFO).
func (d *Dir) OpenDir(name string) (*Dir, error) {
	if err := d.checkName("open directory", name); err != nil {
		return nil, err
	}
	fd, err := openDirAt(d.fd, name)
	if err != nil {
		return nil, d.pathErr("open directory", name, err)
	}
	return &Dir{fd: fd, path: filepath.Join(d.path, name)}, nil
}

// Mkdir creates the subdirectory name with mode perm (exactly: the umask
// does not apply) and returns it open. An existing entry of that name, of
// any type, is an error wrapping fs.ErrExist: it is never reused, chowned or
// followed. The new directory is checked to be the one made (a directory of
// this process's uid) before it is returned.
func (d *Dir) Mkdir(name string, perm fs.FileMode) (*Dir, error) {
	if err := d.checkName("mkdir", name); err != nil {
		return nil, err
	}
	return mkdirAt(d.fd, name, filepath.Join(d.path, name), perm)
}

// MkdirPath is Mkdir of the last component of path, whose directories
// before it are resolved normally: as OpenDir's, they must be directories
// only root can change (the daemon's checkpoint root), and the last
// component's directory one only this process writes. It spares opening
// the parent.
func MkdirPath(path string, perm fs.FileMode) (*Dir, error) {
	return mkdirAt(unix.AT_FDCWD, path, filepath.Clean(path), perm)
}

func mkdirAt(dirfd int, name, path string, perm fs.FileMode) (*Dir, error) {
	// Made with perm itself unless that lets others write (then 0700
	// until checked): nobody but this process can add anything to it
	// before it is checked to be the one made.
	mode := uint32(perm.Perm())
	if mode&0o022 != 0 {
		mode = 0o700
	}
	if err := unix.Mkdirat(dirfd, name, mode); err != nil {
		return nil, &fs.PathError{Op: "mkdir", Path: path, Err: err}
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return nil, &fs.PathError{Op: "open directory", Path: path, Err: err}
	}
	sub := &Dir{fd: fd, path: path}
	have, err := sub.checkOwn()
	if err != nil {
		sub.Close()
		return nil, err
	}
	// The umask (or a set-group-ID parent) may have changed the mode;
	// most often it did not, and the fchmod is skipped.
	if have&0o7777 != uint32(perm.Perm()) {
		if err := unix.Fchmod(sub.fd, uint32(perm.Perm())); err != nil {
			sub.Close()
			return nil, &fs.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return sub, nil
}

// MkdirFor creates the subdirectory name with mode perm (exactly: the
// umask does not apply) and gives it to uid:gid (none when uid is
// negative), without opening it. It
// is for a directory d that only this process writes (a job's directory
// or checkpoint directory, root's, 0711): the entry just made cannot be
// swapped there, so it is given away by name, fchownat without following
// it (a symlink would be changed itself, never its target), and an lstat
// checks that it is the directory made, with its mode and owner (a
// directory whose mode the umask changed is opened and fchmod'ed, as
// Mkdir does). An existing entry of that name is an error wrapping
// fs.ErrExist. perm must not let others write (an error otherwise).
func (d *Dir) MkdirFor(name string, perm fs.FileMode, uid, gid int) error {
	if err := d.checkName("mkdir", name); err != nil {
		return err
	}
	return mkdirFor(d.fd, d.path, name, perm, uid, gid)
}

// MkdirPathFor is MkdirFor of the last component of path, whose
// directories before it are resolved normally: as MkdirPath's, they must
// be directories only root can change, and the last component's
// directory one only this process writes (the checkpoint root). It
// spares opening the parent.
func MkdirPathFor(path string, perm fs.FileMode, uid, gid int) error {
	return mkdirFor(unix.AT_FDCWD, "", filepath.Clean(path), perm, uid, gid)
}

// mkdirFor is MkdirFor of name relative to dirfd, the directory at dir
// (for messages).
func mkdirFor(dirfd int, dir, name string, perm fs.FileMode, uid, gid int) error {
	pathErr := func(op string, err error) error {
		return &fs.PathError{Op: op, Path: filepath.Join(dir, name), Err: err}
	}
	mode := uint32(perm.Perm())
	if mode&0o022 != 0 {
		return pathErr("mkdir", fmt.Errorf("mode %v lets others write; use Mkdir: %w", perm, fs.ErrInvalid))
	}
	if err := unix.Mkdirat(dirfd, name, mode); err != nil {
		return pathErr("mkdir", err)
	}
	if uid >= 0 {
		if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("chown", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("lstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || (uid >= 0 && int(st.Uid) != uid) {
		return pathErr("mkdir", fmt.Errorf("the new entry is a %s of uid %d: %w", TypeName(st.Mode), st.Uid, ErrNotOwned))
	}
	if st.Mode&0o7777 == mode {
		return nil
	}
	fd, err := openDirAt(dirfd, name)
	if err != nil {
		return pathErr("open directory", err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return pathErr("chmod", err)
	}
	return nil
}

// umask is this process's umask, read once (Umask).
var umask = readUmask()

// Umask is this process's umask, read once from /proc/self/status: no
// gpud process changes its umask (nothing calls umask(2) after start-up),
// so a mode the umask cannot narrow needs no fchmod after a create. When
// it cannot be read it is 0o777: every mode is then set explicitly.
func Umask() uint32 { return umask }

func readUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				return 0o777
			}
			return uint32(m)
		}
	}
	return 0o777
}

// euid is this process's effective uid. No gpud process changes it (Go
// changes credentials only for children it starts), so it is read once:
// a node agent checked it a few times for every job it starts.
var euid = os.Geteuid()

// checkOwn refuses a directory not owned by this process's euid, and
// returns its st_mode.
func (d *Dir) checkOwn() (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	if int(st.Uid) != euid {
		return 0, &fs.PathError{Op: "mkdir", Path: d.path, Err: fmt.Errorf("the new directory belongs to uid %d: %w", st.Uid, ErrNotOwned)}
	}
	return st.Mode, nil
}

// Chown gives the directory itself to uid:gid (fchown on its descriptor).
func (d *Dir) Chown(uid, gid int) error {
	if err := unix.Fchown(d.fd, uid, gid); err != nil {
		return &fs.PathError{Op: "chown", Path: d.path, Err: err}
	}
	return nil
}

// Chmod sets the directory's own mode (fchmod on its descriptor).
func (d *Dir) Chmod(perm fs.FileMode) error {
	if err := unix.Fchmod(d.fd, uint32(perm.Perm())); err != nil {
		return &fs.PathError{Op: "chmod", Path: d.path, Err: err}
	}
	return nil
}

// Sync fsyncs the directory, so entries made, renamed or removed in it
// survive a crash.
func (d *Dir) Sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return &fs.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// Create creates the regular file name with mode perm (exactly: the umask
// does not apply) and returns it open for writing. It never opens an
// existing entry (O_EXCL), so it cannot write through a symlink, into a
// FIFO or a device, or into a file someone else placed there.
func (d *Dir) Create(name string, perm fs.FileMode) (*os.File, error) {
	if err := d.checkName("create", name); err != nil {
		return nil, err
	}
	fd, err := openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, d.pathErr("create", name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	if err := f.Chmod(perm.Perm()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// WriteFile creates name (see Create) holding data with mode perm and, when
// uid is not negative, gives it to uid:gid with fchown. The file is fsynced.
func (d *Dir) WriteFile(name string, data []byte, perm fs.FileMode, uid, gid int) error {
	f, err := d.Create(name, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteNew is WriteFile without the fsync, for a file that need not
// survive a crash of the machine (a job's script: the job's container does
// not survive one either): it is created the same way (O_EXCL|O_NOFOLLOW,
// mode perm exactly, fchown on the descriptor when uid is not negative),
// through the bare descriptor.
func (d *Dir) WriteNew(name string, data []byte, perm fs.FileMode, uid, gid int) error {
	if err := d.checkName("create", name); err != nil {
		return err
	}
	return writeNew(d.fd, d.path, name, data, perm, uid, gid)
}

// writeNew is WriteNew of name relative to dirfd, the directory at dir
// (for messages).
func writeNew(dirfd int, dir, name string, data []byte, perm fs.FileMode, uid, gid int) error {
	pathErr := func(op string, err error) error {
		return &fs.PathError{Op: op, Path: filepath.Join(dir, name), Err: err}
	}
	// Made with the owner's bits of perm alone (nobody else can open it
	// before it is complete); fchmod'ed when perm gives others more or
	// the umask took some of the owner's (never so for gpud's daemons:
	// their umask is 022 or 077, and the fchmod is skipped).
	mode := uint32(perm.Perm())
	fd, err := openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o700)
	if err != nil {
		return pathErr("create", err)
	}
	if mode&^0o700 != 0 || umask&mode&0o700 != 0 {
		if err = unix.Fchmod(fd, mode); err != nil {
			err = pathErr("chmod", err)
		}
	}
	for b := data; err == nil && len(b) > 0; {
		var n int
		n, err = unix.Write(fd, b)
		switch {
		case err == unix.EINTR:
			err = nil
		case err != nil:
			err = pathErr("write", err)
		case n == 0:
			err = pathErr("write", io.ErrShortWrite)
		}
		b = b[max(n, 0):]
	}
	if err == nil && uid >= 0 {
		if err = unix.Fchown(fd, uid, gid); err != nil {
			err = pathErr("chown", err)
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = pathErr("close", cerr)
	}
	return err
}

// Touch creates name as an empty regular file, the caller's, 0600 or
// less (the umask applies: it is a marker, known by its name only). Like
// Create it never opens an existing entry.
func (d *Dir) Touch(name string) error {
	if err := d.checkName("create", name); err != nil {
		return err
	}
	fd, err := openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return d.pathErr("create", name, err)
	}
	if err := unix.Close(fd); err != nil {
		return d.pathErr("close", name, err)
	}
	return nil
}

// OpenRegular opens the regular file name for reading without following a
// symlink or blocking on a FIFO, and checks with fstat that what it opened
// is a regular file (an error wrapping ErrNotRegular otherwise).
func (d *Dir) OpenRegular(name string) (*os.File, error) {
	if err := d.checkName("open", name); err != nil {
		return nil, err
	}
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err == unix.ELOOP {
		return nil, d.pathErr("open", name, fmt.Errorf("is a symlink: %w", ErrNotRegular))
	}
	if err != nil {
		return nil, d.pathErr("open", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, d.pathErr("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, d.pathErr("open", name, fmt.Errorf("is a %s: %w", TypeName(st.Mode), ErrNotRegular))
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

func openat(dirfd int, name string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags, perm)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// Lstat describes the entry name itself (a symlink is not followed). A
// missing entry is an error wrapping fs.ErrNotExist.
func (d *Dir) Lstat(name string) (Stat, error) {
	if err := d.checkName("lstat", name); err != nil {
		return Stat{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Stat{}, d.pathErr("lstat", name, err)
	}
	return Stat{Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size}, nil
}

// Stat describes the directory itself (fstat on its descriptor).
func (d *Dir) Stat() (Stat, error) {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return Stat{}, &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return Stat{Mode: st.Mode, UID: st.Uid, GID: st.Gid, Size: st.Size}, nil
}

// Stat is what Lstat reports.
type Stat struct {
	Mode     uint32 // st_mode: type and permission bits
	UID, GID uint32
	Size     int64
}

// IsRegular reports whether the entry is a regular file.
func (s Stat) IsRegular() bool { return s.Mode&unix.S_IFMT == unix.S_IFREG }

// IsDir reports whether the entry is a directory.
func (s Stat) IsDir() bool { return s.Mode&unix.S_IFMT == unix.S_IFDIR }

// Type names the entry's type ("symlink", "named pipe", ...).
func (s Stat) Type() string { return TypeName(s.Mode) }

// TypeName names the file type in an st_mode.
func TypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "named pipe"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

// Readlink returns the target of the symlink name.
func (d *Dir) Readlink(name string) (string, error) {
	if err := d.checkName("readlink", name); err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", d.pathErr("readlink", name, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Names lists the directory's entries (without "." and ".."), in
// directory order.
func (d *Dir) Names() ([]string, error) {
	fd, err := openDirAt(d.fd, ".")
	if err != nil {
		return nil, &fs.PathError{Op: "open directory", Path: d.path, Err: err}
	}
	defer unix.Close(fd)
	// getdents on the descriptor itself: an os.File around it cost a
	// fcntl and a refused epoll registration per call, and a node agent
	// lists a job's directories at every job's start and end. A fresh
	// descriptor (".") for its own offset: d may be listed again, or by
	// several goroutines.
	return getdents(fd, d.path)
}

// OpenDirNames is OpenDir then Names of the directory opened, listed
// through its new descriptor (no second open of it).
func (d *Dir) OpenDirNames(name string) (*Dir, []string, error) {
	sub, err := d.OpenDir(name)
	if err != nil {
		return nil, nil, err
	}
	return listNew(sub)
}

// OpenDirNamesPath is OpenDir(path) then Names, listed through the new
// descriptor.
func OpenDirNamesPath(path string) (*Dir, []string, error) {
	d, err := OpenDir(path)
	if err != nil {
		return nil, nil, err
	}
	return listNew(d)
}

// listNew lists d, just opened (its offset is at the start).
func listNew(d *Dir) (*Dir, []string, error) {
	names, err := getdents(d.fd, d.path)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, names, nil
}

// getdents lists the entries of directory fd from its current offset.
func getdents(fd int, path string) ([]string, error) {
	var buf [4096]byte
	var names []string
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: path, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// Remove removes the entry name if it is not a directory, or the empty
// directory name. A symlink is removed itself, never its target. A missing
// entry is an error wrapping fs.ErrNotExist.
func (d *Dir) Remove(name string) error {
	if err := d.checkName("remove", name); err != nil {
		return err
	}
	err := unix.Unlinkat(d.fd, name, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		// Linux says EISDIR for a directory; EPERM is POSIX's word.
		if err2 := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err2 != unix.ENOTDIR {
			err = err2
		}
	}
	if err != nil {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// Unlink removes the entry name if it is not a directory (a symlink
// itself, never its target). A missing entry is an error wrapping
// fs.ErrNotExist; a directory one wrapping syscall.EISDIR.
func (d *Dir) Unlink(name string) error {
	if err := d.checkName("remove", name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// Rmdir removes the empty directory name (never a symlink's target). A
// missing entry is an error wrapping fs.ErrNotExist, one that is not
// empty an error wrapping syscall.ENOTEMPTY, one that is not a directory
// an error wrapping syscall.ENOTDIR.
func (d *Dir) Rmdir(name string) error {
	if err := d.checkName("remove", name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil {
		return d.pathErr("remove", name, err)
	}
	return nil
}

// RemoveAll removes name and everything below it without following any
// symlink; a missing name is not an error. Entries a user keeps adding
// while it runs can make it fail, never make it leave the tree.
func (d *Dir) RemoveAll(name string) error {
	if err := d.checkName("remove", name); err != nil {
		return err
	}
	return d.removeAll(name, 0)
}

// maxRemoveDepth bounds the recursion (one descriptor per level).
const maxRemoveDepth = 512

func (d *Dir) removeAll(name string, depth int) error {
	for try := 0; ; try++ {
		err := unix.Unlinkat(d.fd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR && err != unix.EPERM {
			return d.pathErr("remove", name, err)
		}
		// An empty directory (a job's tmp/ after most jobs) goes with one
		// rmdir, which never follows a symlink; anything else is walked.
		if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err == nil || err == unix.ENOENT {
			return nil
		}
		if depth >= maxRemoveDepth {
			return d.pathErr("remove", name, fmt.Errorf("deeper than %d directories", maxRemoveDepth))
		}
		sub, err := d.OpenDir(name)
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP):
			// Swapped for a file or symlink since the unlink: unlink that.
			if try < 3 {
				continue
			}
			return err
		case err != nil:
			return err
		}
		names, err := sub.Names()
		if err == nil {
			for _, n := range names {
				if err = sub.removeAll(n, depth+1); err != nil {
					break
				}
			}
		}
		sub.Close()
		if err != nil {
			return err
		}
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if (err == unix.ENOTEMPTY || err == unix.EEXIST) && try < 3 {
			continue // something was added meanwhile
		}
		return d.pathErr("remove", name, err)
	}
}

// Rename renames the entry old of d to new in dir to (renameat: neither
// name is followed if it is a symlink). An existing new is replaced as
// rename(2) does.
func (d *Dir) Rename(old string, to *Dir, new string) error {
	if err := d.checkName("rename", old); err != nil {
		return err
	}
	if err := to.checkName("rename", new); err != nil {
		return err
	}
	if err := unix.Renameat(d.fd, old, to.fd, new); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(d.path, old), New: filepath.Join(to.path, new), Err: err}
	}
	return nil
}

// Link makes new in dir to a hard link to the entry old of d (linkat
// without AT_SYMLINK_FOLLOW: a symlink old is linked itself, never its
// target). An existing new is an error wrapping fs.ErrExist, and is left
// as it is.
func (d *Dir) Link(old string, to *Dir, new string) error {
	if err := d.checkName("link", old); err != nil {
		return err
	}
	if err := to.checkName("link", new); err != nil {
		return err
	}
	if err := unix.Linkat(d.fd, old, to.fd, new, 0); err != nil {
		return &os.LinkError{Op: "link", Old: filepath.Join(d.path, old), New: filepath.Join(to.path, new), Err: err}
	}
	return nil
}

// RenameNoReplace is Rename that fails with an error wrapping
// fs.ErrExist, and changes nothing, when new exists (RENAME_NOREPLACE).
func (d *Dir) RenameNoReplace(old string, to *Dir, new string) error {
	if err := d.checkName("rename", old); err != nil {
		return err
	}
	if err := to.checkName("rename", new); err != nil {
		return err
	}
	if err := unix.Renameat2(d.fd, old, to.fd, new, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: filepath.Join(d.path, old), New: filepath.Join(to.path, new), Err: err}
	}
	return nil
}

// Fd is the directory's descriptor, for system calls this package lacks.
// It stays owned by d.
func (d *Dir) Fd() int { return d.fd }

// IsNotRegular reports whether err says an entry was not a regular file
// (including a symlink refused by O_NOFOLLOW).
func IsNotRegular(err error) bool {
	return errors.Is(err, ErrNotRegular) || errors.Is(err, syscall.ELOOP)
}
