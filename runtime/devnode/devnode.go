package devnode

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDINode is the CDI entry for host node devRoot/name seen as /dev/name in
// the container. Type and numbers are left out: CDI stats HostPath when it
// injects.
func CDINode(devRoot, name string) *cdispec.DeviceNode {
	return &cdispec.DeviceNode{Path: "/dev/" + name, HostPath: filepath.Join(devRoot, name)}
}

// CheckChar reports whether path is a character device.
func CheckChar(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("device node %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return fmt.Errorf("device node %s is not a character device (mode %s)", path, fi.Mode())
	}
	return nil
}

// WriteFileAtomic writes data to a temp file in path's directory, syncs it
// and renames it over path (mode 0644), so a reader (the CDI cache) never
// sees half a spec.
func WriteFileAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return nil
}

// Mknod makes path a 0666 character device major:minor, keeping an
// existing node with the same numbers and replacing anything else.
// Needs CAP_MKNOD (root).
func Mknod(path string, major, minor uint32) error {
	dev := unix.Mkdev(major, minor)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && uint64(st.Rdev) == dev {
			return nil
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("replace %s: %w", path, err)
		}
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(dev)); err != nil {
		return fmt.Errorf("mknod %s (char %d:%d): %w; mock device nodes need root (CAP_MKNOD)", path, major, minor, err)
	}
	// Mknod honours the umask; real device nodes like these are 0666.
	if err := os.Chmod(path, 0o666); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	return nil
}

// UnusedCharMajor returns a character-device major that the kernel has not
// registered, according to the /proc/devices file at path. It searches the
// kernel's dynamic ranges (511..384, then 254..234) from the top, where a
// real driver would get its number last.
func UnusedCharMajor(path string) (uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read registered device majors: %w", err)
	}
	defer f.Close()
	used, err := parseCharMajors(f)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return pickUnusedMajor(used)
}

func pickUnusedMajor(used map[uint32]bool) (uint32, error) {
	for _, r := range [][2]uint32{{511, 384}, {254, 234}} {
		for m := r[0]; m >= r[1]; m-- {
			if !used[m] {
				return m, nil
			}
		}
	}
	return 0, fmt.Errorf("no free character device major in the dynamic ranges")
}

// parseCharMajors reads the "Character devices:" section of /proc/devices.
func parseCharMajors(r io.Reader) (map[uint32]bool, error) {
	used := map[uint32]bool{}
	sc := bufio.NewScanner(r)
	inChar := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
			continue
		case line == "" || strings.HasSuffix(line, "devices:"):
			inChar = false
			continue
		case !inChar:
			continue
		}
		num, _, _ := strings.Cut(line, " ")
		m, err := strconv.ParseUint(num, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		used[uint32(m)] = true
	}
	return used, sc.Err()
}
