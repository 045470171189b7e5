package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
)

// containerd's built-in defaults (containerd --help, defaults_linux.go).
const (
	defaultDaemonRoot   = "/var/lib/containerd"
	defaultDaemonState  = "/run/containerd"
	defaultDaemonConfig = "/etc/containerd/config.toml"
)

// DaemonDirs returns the directories of containerd's and runc's state for
// the containerd this runtime talks to, which jobs must not see:
//   - containerd's root: images, snapshots, and meta.db (0644), which holds
//     every container's OCI spec with its environment; containerd before
//     2.0 made the root 0711, so any user could read meta.db at its fixed
//     path;
//   - containerd's state: the task bundles, each with its config.json
//     (0644 in a 0700 directory);
//   - runc's root (Options.RuncRoot; by default all of /run/gpud/runc,
//     where another gpud runtime's are too): each container's state.json;
//   - containerd's default root and state, which another containerd on
//     the host (the system's, Docker's) fills the same way.
//
// A root job on the host's root reads them all whatever their modes.
//
// The root is the one containerd reports (its metadata plugin's path); the
// state is read from the command line of the process serving the socket
// (--state, or --config and the file's state key) when it runs in this
// PID namespace, else it is containerd's default. Directories that do not
// exist are the caller's to skip. The node agent covers them with an empty
// tmpfs in jobs on the host's root, as it does its own state.
func (r *Runtime) DaemonDirs(ctx context.Context) ([]string, error) {
	ctx = namespaces.WithNamespace(ctx, r.ns)
	is := r.client.IntrospectionService()
	var root string
	resp, err := is.Plugins(ctx, `type=="io.containerd.metadata.v1"`)
	if err != nil {
		return nil, fmt.Errorf("ask containerd for its root directory: %w", err)
	}
	for _, p := range resp.Plugins {
		// <root>/io.containerd.metadata.v1.bolt/meta.db
		if path := p.Exports["path"]; filepath.IsAbs(path) {
			root = filepath.Dir(filepath.Dir(path))
		}
	}
	state := ""
	// containerd's PID from the socket's peer credentials (its
	// introspection leaves the PID out in some versions); 0 when it runs
	// in another PID namespace, where its /proc is not ours to read.
	if pid, err := peerPID(r.address); err != nil {
		return nil, fmt.Errorf("find containerd's process: %w", err)
	} else if pid > 0 {
		cmdRoot, cmdState, err := daemonFlags(pid)
		if err != nil {
			return nil, fmt.Errorf("read containerd's state directory: %w", err)
		}
		state = cmdState
		if root == "" {
			root = cmdRoot
		}
	}
	if state == "" {
		state = defaultDaemonState
	}
	if root == "" {
		root = defaultDaemonRoot
	}
	// containerd's defaults too: another containerd on this host (the
	// system's, Docker's) keeps its jobs' specs there.
	runc := r.runcRoot
	if filepath.Dir(runc) == runcRoots {
		runc = runcRoots // the default runc roots of every containerd here
	}
	dirs := []string{root, state, runc, defaultDaemonRoot, defaultDaemonState}
	slices.Sort(dirs)
	return slices.Compact(dirs), nil
}

// peerPID is the PID of the process listening on the unix socket
// address, as this PID namespace numbers it (0: not visible here).
func peerPID(address string) (int, error) {
	conn, err := net.DialTimeout("unix", strings.TrimPrefix(address, "unix://"), 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("peer credentials of %s: %w", address, credErr)
	}
	return int(cred.Pid), nil
}

// daemonFlags reads containerd's root and state directories from the
// command line of process pid and the config file it names (see
// parseDaemonArgs).
func daemonFlags(pid int) (root, state string, err error) {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return "", "", err
	}
	cwd := func() (string, error) { return os.Readlink(filepath.Join(proc, "cwd")) }
	return parseDaemonArgs(strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00"), cwd, os.ReadFile)
}

// parseDaemonArgs finds containerd's root and state in its command line
// args (args[0] is the program) and the config file they name (relative
// to cwd(), the daemon's working directory; default
// /etc/containerd/config.toml, which may be missing): a flag wins over the
// file; "" where neither says, which means containerd's default.
func parseDaemonArgs(args []string, cwd func() (string, error), readFile func(string) ([]byte, error)) (root, state string, err error) {
	configPath := ""
	for i := 1; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		var dst *string
		switch name {
		case "--root":
			dst = &root
		case "--state":
			dst = &state
		case "--config", "-c":
			dst = &configPath
		default:
			continue
		}
		if !hasVal && i+1 < len(args) {
			i++
			val = args[i]
		}
		*dst = val
	}
	explicit := configPath != ""
	if !explicit {
		configPath = defaultDaemonConfig
	}
	if !filepath.IsAbs(configPath) {
		dir, err := cwd()
		if err != nil {
			return "", "", fmt.Errorf("resolve containerd's config %s: %w", configPath, err)
		}
		configPath = filepath.Join(dir, configPath)
	}
	var cfg struct {
		Root  string `toml:"root"`
		State string `toml:"state"`
	}
	data, err := readFile(configPath)
	switch {
	case errors.Is(err, os.ErrNotExist) && !explicit:
	case err != nil:
		return "", "", fmt.Errorf("read containerd's config %s: %w", configPath, err)
	default:
		// Only the two keys: the rest of the file is containerd's.
		if err := toml.Unmarshal(data, &cfg); err != nil {
			return "", "", fmt.Errorf("read containerd's config %s: %w", configPath, err)
		}
	}
	if root == "" {
		root = cfg.Root
	}
	if state == "" {
		state = cfg.State
	}
	for _, p := range []string{root, state} {
		if p != "" && !filepath.IsAbs(p) {
			return "", "", fmt.Errorf("containerd's directory %q is not absolute; give containerd absolute root and state paths", p)
		}
	}
	return root, state, nil
}
