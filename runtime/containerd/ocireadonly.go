package containerd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// The OCI runtime from a read-only mount. crun (and runc's init) guard
// against a container overwriting the host's runtime binary through
// /proc/self/exe (CVE-2019-5736): unless the running binary is already
// safe, each run makes a read-only copy of itself (a bind mount of a
// temporary file, or the whole binary copied into a sealed memfd) and
// executes itself again from it. crun runs 4 times per container (create,
// start, the shim's delete and containerd's dead-shim cleanup, "Session 15
// — trivial" in docs/fleet.md), so every container paid 4 extra execs of
// crun and the mounts or copies before them.
//
// crun and runc count a binary as safe without the copy when it lies on a
// read-only file system and the environment says _LIBCONTAINER_CLONED_BINARY
// (crun's cloned_binary.c, is_self_cloned: "to make sure that it's *our*
// bind-mount we check CLONED_BINARY_ENV"). The protection stays: a
// container process that opens the runtime's /proc/PID/exe for writing
// goes through the read-only mount and gets EROFS, and with the variable
// set a binary on a writable file system is still copied. So when the
// containerd that runs the shims has the variable (StartDaemon sets it;
// a system containerd needs Environment=_LIBCONTAINER_CLONED_BINARY=1 in
// its unit) and shares this process's mount namespace (so it sees the
// mount), the node binds the OCI runtime read-only at
// /run/gpud/oci/<hash of its path>/<name> and gives the shims that path.
// Otherwise the shims run the binary as configured, copied as before.

// clonedBinaryEnv is the variable crun and runc read (CLONED_BINARY_ENV).
const clonedBinaryEnv = "_LIBCONTAINER_CLONED_BINARY"

// readOnlyOCIDir holds the read-only binds, one directory per binary.
const readOnlyOCIDir = "/run/gpud/oci"

// readOnlyOCI returns a read-only bind of the OCI runtime binary real (a
// path ociBinary checked), for the shims of the containerd at address, or
// "" and why not.
func readOnlyOCI(address, real string) (path, why string) {
	pid, err := peerPID(address)
	if err != nil || pid == 0 {
		return "", fmt.Sprintf("containerd's process at %s not found (%v)", address, err)
	}
	if why := daemonCopiesRuntime(filepath.Join("/proc", strconv.Itoa(pid)), "/proc/self"); why != "" {
		return "", why
	}
	sum := sha256.Sum256([]byte(real))
	return bindReadOnly(real, filepath.Join(readOnlyOCIDir, hex.EncodeToString(sum[:6]), filepath.Base(real)))
}

// daemonCopiesRuntime says why the runtime under the containerd whose
// /proc entry is proc would copy itself even from a read-only mount that
// the process at self made ("": it would not): the daemon's environment
// lacks clonedBinaryEnv=1, or it sees another mount namespace.
func daemonCopiesRuntime(proc, self string) string {
	env, err := os.ReadFile(filepath.Join(proc, "environ"))
	if err != nil {
		return fmt.Sprintf("containerd's environment unreadable: %v", err)
	}
	if !bytes.Contains(append([]byte{0}, env...), []byte("\x00"+clonedBinaryEnv+"=1\x00")) {
		return "containerd's environment has no " + clonedBinaryEnv + "=1"
	}
	var theirs, ours unix.Stat_t
	if err := unix.Stat(filepath.Join(proc, "ns", "mnt"), &theirs); err != nil {
		return fmt.Sprintf("containerd's mount namespace unreadable: %v", err)
	}
	if err := unix.Stat(filepath.Join(self, "ns", "mnt"), &ours); err != nil {
		return fmt.Sprintf("own mount namespace unreadable: %v", err)
	}
	if theirs.Dev != ours.Dev || theirs.Ino != ours.Ino {
		return "containerd runs in another mount namespace"
	}
	return ""
}

// bindReadOnly makes target a read-only bind mount of real, or finds it
// one already (an earlier run's: shims of running containers exec it, so
// it is never unmounted), and returns target, or "" and why not. Under
// the mount, target holds a copy of real, so a shim that does not see the
// mount still runs the same binary (copied by itself, as before).
func bindReadOnly(real, target string) (string, why string) {
	bindMu.Lock() // two runtimes of one process (a standalone's nodes) bind once
	defer bindMu.Unlock()
	var src unix.Stat_t
	if err := unix.Stat(real, &src); err != nil {
		return "", err.Error()
	}
	if boundFrom(target, &src) {
		return target, ""
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	if err := rootOnlyDir(dir); err != nil {
		return "", err.Error()
	}
	// EBUSY: target is the mount point of an earlier run's bind (of a
	// binary since replaced); the new bind goes on top of it.
	if err := copyExecutable(real, target); err != nil && !errors.Is(err, unix.EBUSY) {
		return "", err.Error()
	}
	if err := unix.Mount(real, target, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Sprintf("bind %s at %s: %v", real, target, err)
	}
	if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.Unmount(target, unix.MNT_DETACH)
		return "", fmt.Sprintf("make %s read-only: %v", target, err)
	}
	if !boundFrom(target, &src) {
		return "", fmt.Sprintf("%s is not a read-only bind of %s after mounting", target, real)
	}
	return target, ""
}

// bindMu serialises bindReadOnly within the process.
var bindMu sync.Mutex

// boundFrom says whether path is the file src on a read-only mount.
func boundFrom(path string, src *unix.Stat_t) bool {
	var st unix.Stat_t
	var fs unix.Statfs_t
	if unix.Stat(path, &st) != nil || unix.Statfs(path, &fs) != nil {
		return false
	}
	return st.Dev == src.Dev && st.Ino == src.Ino && fs.Flags&unix.ST_RDONLY != 0
}

// rootOnlyDir checks that dir and every directory above it are root's and
// not group- or world-writable.
func rootOnlyDir(dir string) error {
	var st unix.Stat_t
	for p := dir; ; p = filepath.Dir(p) {
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
			return fmt.Errorf("%s is not a directory of root's that only root can write (uid %d, mode %#o)", p, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}

// copyExecutable puts a copy of src at dst (mode 0755, root's), replacing
// what is there by a rename: an earlier copy may be running.
func copyExecutable(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	tmp := out.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(0o755); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
