package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/runtime"
)

// The OCI runtime (Options.OCIRuntime, node.toml oci_runtime) is the binary
// containerd's runc v2 shim execs to create, start, signal and delete a
// container: runc by default, or crun (C: no Go runtime to start for each
// of the three calls per container and for the container's init). It is
// the shim's BinaryName option, so every container of this runtime (jobs,
// prepared containers, shim keepers) runs under it; the shim, its groups
// and every gpud behaviour stay the same.

// OCIRuntimeRunc and OCIRuntimeCrun are the names OCIRuntime takes besides
// an absolute path.
const (
	OCIRuntimeRunc = "runc"
	OCIRuntimeCrun = "crun"
)

// crunSpecVersion is the ociVersion of specs for crun. containerd's client
// writes its runtime-spec module's version (1.3.0), which crun 1.8 refuses
// ("unknown version specified": it takes 1.0.x and 1.1.x only; checked
// here); every field gpud's specs set (runtime/ocispec, containerd's
// defaults) is a 1.0 one, and TestOCIRuntimeCrunIsolation checks that
// crun's containers come out as runc's.
const crunSpecVersion = "1.1.0"

// probeTimeout bounds the OCI runtime's `--version` at New.
const probeTimeout = 10 * time.Second

// crunHostRootVersion is the first crun that builds host-root jobs right.
// A host-root job's first mount binds the host's "/" onto the container's
// root (ocispec.WithHostRoot); crun before 1.22 goes on resolving the later
// mounts (/proc, /dev, the job's binds and the mounts hiding the daemons'
// state) against the directory under that bind, so they end up hidden
// beneath it and the job sees the host's /dev and the daemons' state
// (containers/crun#1752, fixed in 1.22 by 64a2e0e). crun 1.8.1 (Debian 12)
// also fails on the "/" destination itself ("mount `/` to “: Invalid
// argument").
var crunHostRootVersion = [3]int{1, 22, 0}

// ociRuntime is what New learns of the OCI runtime.
type ociRuntime struct {
	// binary is the shim's BinaryName ("": runc).
	binary string
	// crun: it is crun (its spec version; a read-only host root refused);
	// hostRoot: it builds host-root jobs (runc, or crun from 1.22).
	crun, hostRoot bool
	// version is its first line of --version ("" for runc by default).
	version string
	// notReadOnly says why binary is not a read-only bind made by
	// readOnlyOCI ("" when it is, or for runc by default).
	notReadOnly string
}

// ociBinary resolves name ("" or "runc": runc from the shim's PATH, as
// containerd does; "crun": crun found on PATH; else an absolute path) to
// the shim's BinaryName ("" for runc) and checks that it can serve: a
// regular executable that only root can change (the shim runs it as root
// for every container), that answers --version, and, for crun, a cgroup
// setup crun accepts.
func ociBinary(ctx context.Context, name, cgroupRoot string) (ociRuntime, error) {
	if name == "" || name == OCIRuntimeRunc {
		return ociRuntime{hostRoot: true}, nil
	}
	path := name
	if name == OCIRuntimeCrun {
		p, err := exec.LookPath(OCIRuntimeCrun)
		if err != nil {
			return ociRuntime{}, fmt.Errorf("OCI runtime crun: not found on PATH; install it (apt-get install crun) or give its absolute path")
		}
		path = p
	} else if !filepath.IsAbs(name) {
		return ociRuntime{}, fmt.Errorf("OCI runtime %q: not %q, %q or an absolute path", name, OCIRuntimeRunc, OCIRuntimeCrun)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ociRuntime{}, fmt.Errorf("OCI runtime %s: %w", path, err)
	}
	if err := rootOnly(real); err != nil {
		return ociRuntime{}, fmt.Errorf("OCI runtime %s: %w", path, err)
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out, err := exec.CommandContext(pctx, real, "--version").CombinedOutput()
	if err != nil {
		return ociRuntime{}, fmt.Errorf("OCI runtime %s: %s --version: %w: %s", path, real, err, bytes.TrimSpace(out))
	}
	first, _, _ := strings.Cut(string(out), "\n")
	o := ociRuntime{binary: real, version: strings.TrimSpace(first), hostRoot: true}
	if v, ok := strings.CutPrefix(o.version, "crun version "); ok {
		o.crun = true
		o.hostRoot = !versionBefore(v, crunHostRootVersion)
		if why := CrunCgroupProblem(cgroupRoot); why != "" {
			return ociRuntime{}, fmt.Errorf("OCI runtime %s: %s", path, why)
		}
	}
	return o, nil
}

// versionBefore says whether version "X.Y[.Z...]" is before min; one it
// cannot read counts as before.
func versionBefore(version string, min [3]int) bool {
	var v [3]int
	f := strings.Fields(version)
	if len(f) == 0 {
		return true
	}
	parts := strings.SplitN(f[0], ".", 3)
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimRightFunc(p, func(r rune) bool { return r < '0' || r > '9' }))
		if err != nil {
			return true
		}
		v[i] = n
	}
	return slices.Compare(v[:], min[:]) < 0
}

// rootOnly checks that path is a regular executable file that only root
// can change: it and every directory above it owned by root and not
// writable by group or others (a user who could replace it would run code
// as root in every container's creation).
func rootOnly(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		return errors.New("not an executable regular file")
	}
	for p := path; ; p = filepath.Dir(p) {
		if err := unix.Stat(p, &st); err != nil {
			return err
		}
		if st.Uid != 0 || st.Mode&0o022 != 0 {
			return fmt.Errorf("%s is owned by uid %d with mode %#o: it and its directories must be root's and not group- or world-writable", p, st.Uid, st.Mode&0o7777)
		}
		if p == "/" {
			return nil
		}
	}
}

// CrunCgroupProblem says why crun cannot create containers on this host's
// cgroups at root ("/sys/fs/cgroup"), or "" if it can. crun (1.8) supports
// cgroup v2 alone and cgroup v1 with or without a v2 hierarchy beside it
// (hybrid), but refuses a hybrid setup whose v2 hierarchy holds a
// controller ("cgroups in hybrid mode not supported, drop all controllers
// from cgroupv2"): the fix is to bind those controllers to v1 hierarchies.
func CrunCgroupProblem(root string) string {
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return fmt.Sprintf("cannot read the cgroup file system at %s: %v", root, err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return "" // cgroup v2 alone (or no tmpfs of v1 hierarchies): crun's own checks apply
	}
	unified := filepath.Join(root, "unified")
	if err := unix.Statfs(unified, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return "" // cgroup v1 alone
	}
	b, err := os.ReadFile(filepath.Join(unified, "cgroup.controllers"))
	if err != nil {
		return fmt.Sprintf("cannot read %s: %v", filepath.Join(unified, "cgroup.controllers"), err)
	}
	return hybridProblem(root, unified, strings.Fields(string(b)))
}

// hybridProblem says why crun refuses hybrid cgroups (v1 under root, v2 at
// unified) whose v2 hierarchy holds controllers ctls, and how to fix it;
// "" with none.
func hybridProblem(root, unified string, ctls []string) string {
	if len(ctls) == 0 {
		return ""
	}
	var fix []string
	for _, c := range ctls {
		fix = append(fix, fmt.Sprintf("mkdir %s/%s && mount -t cgroup -o %s none %s/%s", root, c, c, root, c))
	}
	return fmt.Sprintf("crun refuses this host's hybrid cgroups (cgroup v1 under %s, cgroup v2 at %s) while the v2 hierarchy holds controllers (%s): bind them to cgroup v1 hierarchies (as root, once no v2 cgroup uses them: %s), boot with cgroup v2 alone (systemd.unified_cgroup_hierarchy=1), or keep oci_runtime = %q",
		root, unified, strings.Join(ctls, " "), strings.Join(fix, "; "), OCIRuntimeRunc)
}

// withSpecVersion sets the spec's ociVersion.
func withSpecVersion(v string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Version = v
		return nil
	}
}

// runtimeSpecOpts are what the OCI runtime needs of every spec.
func (r *Runtime) runtimeSpecOpts() []oci.SpecOpts {
	if r.oci.crun {
		return []oci.SpecOpts{withSpecVersion(crunSpecVersion)}
	}
	return nil
}

// hostRootProblem says why the OCI runtime cannot run cfg ("" if it can):
// a host-root job under a crun before 1.22 (crunHostRootVersion), or a
// read-only host root under crun (crun leaves the host root's bind
// writable when asked for "ro": its read-only remount lands on the
// directory under the bind, seen with crun 1.8.1).
func (o ociRuntime) hostRootProblem(cfg runtime.TaskConfig) string {
	if cfg.Image != runtime.ImageHost || !o.crun {
		return ""
	}
	if !o.hostRoot {
		return fmt.Sprintf("%s cannot run jobs on the host's root (image %q): crun before %d.%d puts the job's mounts under the host root's bind (containers/crun#1752); use crun %d.%d or later, an image (default_image), or oci_runtime = %q",
			o.version, runtime.ImageHost, crunHostRootVersion[0], crunHostRootVersion[1], crunHostRootVersion[0], crunHostRootVersion[1], OCIRuntimeRunc)
	}
	if cfg.HostRootReadOnly {
		return fmt.Sprintf("a read-only host root (node.toml host_root = \"read-only\") is not supported with crun: crun leaves the host root's bind writable; use host_root = \"writable\" or oci_runtime = %q", OCIRuntimeRunc)
	}
	return ""
}
