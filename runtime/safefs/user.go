package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Files a root daemon opens for a user at a path the user names (a job's
// output files): the kernel must judge the path with the user's rights,
// as in the user's own process, and the file must be checked on its
// descriptor before anything is written to it.

// Cred is a user's identity for file access.
type Cred struct {
	UID, GID uint32
	// Groups are the supplementary groups (nil: the primary group only).
	Groups []uint32
}

// AsUser runs f on an OS thread of its own whose filesystem identity is
// cred's: setgroups, setfsgid and setfsuid on that thread only, so every
// path f opens, creates or walks is judged with the user's permissions
// (root's capabilities over files leave that thread's effective set with
// its fsuid), and what f creates belongs to the user. The thread is never
// handed back to the Go scheduler: it ends with f. For uid 0, f runs as
// root.
func AsUser(cred Cred, f func() error) error {
	if cred.UID == 0 {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine exits locked, and the runtime
		// then terminates the thread with its changed identity.
		goruntime.LockOSThread()
		if err := becomeUser(cred); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// becomeUser sets the calling thread's supplementary groups, fsgid and
// fsuid (raw system calls: glibc-style wrappers, and Go's syscall
// package, apply them to every thread).
func becomeUser(c Cred) error {
	groups := c.Groups
	if len(groups) == 0 {
		groups = []uint32{c.GID}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return fmt.Errorf("take uid %d's groups: %w", c.UID, e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.GID), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.UID), 0, 0)
	// setfsuid and setfsgid report no error: read them back (an invalid
	// id changes nothing and returns the current one).
	fsgid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	fsuid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if uint32(fsuid) != c.UID || uint32(fsgid) != c.GID {
		return fmt.Errorf("take uid %d gid %d for file access: the thread has %d:%d", c.UID, c.GID, uint32(fsuid), uint32(fsgid))
	}
	return nil
}

// PrepareUserFile makes path a regular file of cred's user, ready for the
// user to append to, with the user's rights (AsUser). Its directory is
// reached by userDir (missing directories made, a symlink followed only
// when it cannot be another user's trap), and the file is created with
// O_EXCL or opened with O_NOFOLLOW and O_NONBLOCK (a symlink is never
// followed, a FIFO never blocks), then checked on the descriptor: a
// regular file of the user's uid, with no other hard link (a name another
// user planted for the same file). Only then, with truncate, is it
// emptied. Nothing is written before the checks. The error says what is
// wrong and what to do.
func PrepareUserFile(path string, cred Cred, truncate bool) error {
	return inUserDir(path, cred, "; choose an --output/--error path the job's user can write", func(dfd int, path, base string) error {
		fd, err := openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			return unix.Close(fd) // new: nothing to check, nothing to empty
		}
		if !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create output file %s as uid %d: %w; choose an --output/--error path the job's user can write", path, cred.UID, err)
		}
		fd, err = openat(dfd, base, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return openFailed(dfd, base, path, cred.UID, err, "; choose an --output/--error path the job's user can write")
		}
		defer unix.Close(fd)
		if err := checkOpened(fd, path, cred.UID); err != nil {
			return err
		}
		if truncate {
			if err := unix.Ftruncate(fd, 0); err != nil {
				return fmt.Errorf("empty output file %s: %w", path, err)
			}
		}
		return nil
	})
}

// inUserDir runs fn with cred's rights (AsUser) on the directory of the
// absolute path, reached by userDir, and the path's cleaned form and base
// name; hint ends the error of a directory that cannot be reached.
func inUserDir(path string, cred Cred, hint string, fn func(dfd int, path, base string) error) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("output file %q: path is not absolute", path)
	}
	path = filepath.Clean(path)
	dir, base := filepath.Split(path)
	return AsUser(cred, func() error {
		dfd, err := userDir(dir, cred.UID)
		if err != nil {
			return fmt.Errorf("output file %s: %w%s", path, err, hint)
		}
		defer unix.Close(dfd)
		return fn(dfd, path, base)
	})
}

// openFailed is the error of a failed open of base under dfd for path:
// what is there where that is why (a symlink, a FIFO without a reader, a
// directory, another user's file), else the open's error and hint.
func openFailed(dfd int, base, path string, uid uint32, err error, hint string) error {
	var st unix.Stat_t
	if lerr := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); lerr == nil {
		if err := checkUserFile(path, &st, uid); err != nil {
			return err
		}
	}
	return fmt.Errorf("open output file %s as uid %d: %w%s", path, uid, err, hint)
}

// checkOpened checks an opened output file on its descriptor: a regular
// file of uid with no other hard link (checkUserFile).
func checkOpened(fd int, path string, uid uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("check output file %s: %w", path, err)
	}
	return checkUserFile(path, &st, uid)
}

// AppendUserFile appends b to path, a regular file of cred's user (made
// if missing), with the user's rights (AsUser): its directory reached as
// PrepareUserFile reaches it, the file opened O_APPEND and O_NOFOLLOW (a
// symlink is never followed, a FIFO never blocks) and checked on its
// descriptor (a regular file of the user's uid with no other hard link)
// before anything is written.
func AppendUserFile(path string, cred Cred, b []byte) error {
	return inUserDir(path, cred, "", func(dfd int, path, base string) error {
		fd, err := openat(dfd, base, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return openFailed(dfd, base, path, cred.UID, err, "")
		}
		defer unix.Close(fd)
		if err := checkOpened(fd, path, cred.UID); err != nil {
			return err
		}
		for len(b) > 0 {
			n, err := unix.Write(fd, b)
			if err != nil {
				return fmt.Errorf("append to output file %s: %w", path, err)
			}
			b = b[n:]
		}
		return nil
	})
}

// maxSymlinks bounds the symlinks one walk follows (the kernel's own
// limit is 40).
const maxSymlinks = 40

// userDir opens the directory at the absolute path dir, component by
// component from "/" (O_PATH, so a directory the user may only traverse
// is reached too), making missing directories (0755 less the umask) with
// the caller's identity. A symlink is followed only when the user or root
// owns it, or the owner of the directory holding it does and no one else
// may write that directory: the kernel's fs.protected_symlinks rule, for
// every directory rather than only sticky ones, so another user's symlink
// planted in a shared directory (a group's project directory, /tmp
// without the sysctl) never leads the job's output into the user's own
// files. It returns an O_PATH descriptor of the directory.
func userDir(dir string, uid uint32) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	rest := strings.Split(dir, "/")
	walked := "/" // for messages
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		next, err := openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && name != ".." {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			} else {
				err = fmt.Errorf("create directory %s: %w", filepath.Join(walked, name), err)
			}
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("%s: %w", filepath.Join(walked, name), unwrapPath(err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			unix.Close(fd)
			fd, walked = next, filepath.Join(walked, name)
		case unix.S_IFLNK:
			target, err := followable(fd, next, &st, uid, filepath.Join(walked, name))
			unix.Close(next)
			if links++; err == nil && links > maxSymlinks {
				err = fmt.Errorf("%s: too many levels of symbolic links", filepath.Join(walked, name))
			}
			if err != nil {
				unix.Close(fd)
				return -1, err
			}
			if filepath.IsAbs(target) {
				unix.Close(fd)
				if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return -1, err
				}
				walked = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
		default:
			unix.Close(next)
			unix.Close(fd)
			return -1, fmt.Errorf("%s is not a directory (%s)", filepath.Join(walked, name), TypeName(st.Mode))
		}
	}
	return fd, nil
}

// followable returns the target of the symlink open at lfd (lst is its
// stat), which sits in the directory open at dirfd, when a walk for uid
// may follow it (see userDir); otherwise an error naming it.
func followable(dirfd, lfd int, lst *unix.Stat_t, uid uint32, name string) (string, error) {
	ok := lst.Uid == uid || lst.Uid == 0
	if !ok {
		var dst unix.Stat_t
		if err := unix.Fstat(dirfd, &dst); err != nil {
			return "", err
		}
		ok = dst.Uid == lst.Uid && dst.Mode&0o022 == 0
	}
	if !ok {
		return "", fmt.Errorf("%s is a symlink of uid %d in a directory others may write; gpud follows only symlinks of the job's user, of root, or of the owner of a directory no one else may write (use the path it points to)", name, lst.Uid)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(lfd, "", buf)
	if err != nil {
		return "", fmt.Errorf("read symlink %s: %w", name, err)
	}
	return string(buf[:n]), nil
}

// checkUserFile refuses anything but a regular file of uid with one name.
func checkUserFile(path string, st *unix.Stat_t, uid uint32) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("output file %s exists and is not a regular file (%s); remove it or choose another --output/--error path", path, TypeName(st.Mode))
	case st.Uid != uid:
		return fmt.Errorf("output file %s exists and belongs to uid %d, not the job's uid %d; remove it or choose another --output/--error path", path, st.Uid, uid)
	case st.Nlink > 1:
		return fmt.Errorf("output file %s has %d hard links: another name reaches the same file (one another user may have made); remove it or choose another --output/--error path", path, st.Nlink)
	}
	return nil
}

// unwrapPath drops *fs.PathError's op and path (the message names them).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
