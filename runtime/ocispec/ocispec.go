package ocispec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/runtime"
)

// Inputs are what Build needs beyond the TaskConfig: the node's CDI cache and,
// for an image other than runtime.ImageHost, the image's configured
// environment and working directory.
type Inputs struct {
	CDI      *cdi.Cache
	ImageEnv []string
	ImageCwd string
	// MemlockBytes is the job's RLIMIT_MEMLOCK; 0 means MemlockUnlimited.
	// A node that cannot raise limits (no CAP_SYS_RESOURCE) passes its own
	// hard limit, since runc could not set more.
	MemlockBytes uint64
}

// CFSPeriod is the CFS period (µs) CPU limits are expressed in.
const CFSPeriod = 100000

// ShellPath is the shell the output wrapper runs; it must exist in the
// container's root (the host's, or the image's).
const ShellPath = runtime.ShellPath

// Build returns the spec options for cfg, in the order they must apply. It is
// the only place that composes a job's spec: later options override earlier
// ones where they touch the same field (the job's Env last of all, so it wins
// over the image's and CDI's variables).
func Build(cfg runtime.TaskConfig, in Inputs) []oci.SpecOpts {
	var opts []oci.SpecOpts
	if cfg.Image == runtime.ImageHost {
		opts = append(opts, WithHostRoot(cfg.HostRootReadOnly))
	} else {
		// Jobs share the host's network namespace, so they resolve names
		// the way the host does.
		opts = append(opts, oci.WithHostHostsFile, oci.WithHostResolvconf, oci.WithEnv(in.ImageEnv))
		if cfg.ReadOnlyRoot {
			opts = append(opts, oci.WithRootFSReadonly())
		}
	}
	memlock := in.MemlockBytes
	if memlock == 0 {
		memlock = MemlockUnlimited
	}
	cwd := cfg.Cwd
	if cwd == "" {
		cwd = in.ImageCwd
	}
	opts = append(opts,
		WithProcess(cfg.Args, cwd),
		WithUser(cfg.UID, cfg.GID, cfg.AdditionalGIDs),
		oci.WithNoNewPrivileges,
		WithJobNamespaces(cfg.Hostname),
		WithBindMounts(cfg.Mounts),
		WithLimits(cfg.CPUs, cfg.MemoryBytes),
		WithCPUSet(cfg.CPUSet, cfg.CPUMems),
		WithShmSize(cfg.MemoryBytes),
		WithMemlock(memlock),
		WithCDIDevices(in.CDI, cfg.CDIDevices),
		WithShellWrapper(cfg.StdoutPath, cfg.StderrPath),
		WithEnvLast(cfg.Env),
	)
	return opts
}

// WithHostRoot makes the host's root filesystem the container's root, with
// the host's submounts (NFS homes, scratch) visible: writable under the
// job's uid's permissions, as on a Slurm node, or read-only (readOnly),
// except for the job's own binds. Daemon state is hidden by the job's
// mounts either way (runtime.Mount.Hide).
//
// Why not Root.Path "/": runc cannot pivot_root when the new root is the
// current root (EBUSY). Instead the root stays the bundle's empty rootfs
// directory and the first mount rbinds the host's "/" onto it, inside the
// container's mount namespace, so the host's mount table is never touched;
// the mounts after it (proc, dev, the job's binds) land on top of it and
// pivot_root sees a proper mount point. Mount points the job's binds need
// are created in the host's filesystem, so their destinations should exist
// on the host.
func WithHostRoot(readOnly bool) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if s.Root == nil || s.Root.Path == "" {
			s.Root = &specs.Root{Path: "rootfs"}
		}
		// runc remounts the new root (the host's, bound below) read-only
		// after the mounts when Readonly is set; writable, the bind's
		// own mode is what counts.
		s.Root.Readonly = readOnly
		mode := "rw"
		if readOnly {
			mode = "ro"
		}
		host := specs.Mount{
			Destination: "/", Type: "bind", Source: "/",
			// rslave: host mounts made later (automounted homes) still
			// appear; nothing the job mounts goes back.
			Options: []string{"rbind", "rslave", mode},
		}
		s.Mounts = append([]specs.Mount{host}, s.Mounts...)
		return nil
	}
}

// WithProcess sets the command and working directory.
func WithProcess(args []string, cwd string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if len(args) == 0 {
			return errors.New("set process: no command (Args is empty)")
		}
		if cwd == "" {
			cwd = "/"
		}
		if !filepath.IsAbs(cwd) {
			return fmt.Errorf("set process: working directory %q is not absolute", cwd)
		}
		ensureProcess(s)
		s.Process.Args = slices.Clone(args)
		s.Process.Cwd = cwd
		return nil
	}
}

// WithUser runs the process as uid:gid with the supplementary groups. A
// non-root job keeps the default capability bounding set (so setuid helpers
// behave as on the host) but holds no effective, permitted, inheritable or
// ambient capability; root keeps the runtime's default set, never more.
func WithUser(uid, gid uint32, additionalGIDs []uint32) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ensureProcess(s)
		s.Process.User = specs.User{UID: uid, GID: gid, AdditionalGids: slices.Clone(additionalGIDs)}
		if uid != 0 {
			if s.Process.Capabilities == nil {
				s.Process.Capabilities = &specs.LinuxCapabilities{}
			}
			s.Process.Capabilities.Effective = nil
			s.Process.Capabilities.Permitted = nil
			s.Process.Capabilities.Inheritable = nil
			s.Process.Capabilities.Ambient = nil
		}
		return nil
	}
}

// WithJobNamespaces gives the job its own pid, ipc, uts and mount namespaces
// but the host's network namespace: jobs of one allocation talk to each other
// (NCCL, MPI, torch.distributed) like Slurm jobs do, by host address. It sets
// the hostname and replaces a sysfs mount by a read-only bind of the host's.
func WithJobNamespaces(hostname string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ensureLinux(s)
		own := []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace}
		var nss []specs.LinuxNamespace
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace || slices.Contains(own, ns.Type) {
				continue
			}
			nss = append(nss, ns)
		}
		for _, t := range own {
			nss = append(nss, specs.LinuxNamespace{Type: t})
		}
		s.Linux.Namespaces = nss
		s.Hostname = hostname
		// A fresh sysfs belongs to the mounter's network namespace, and the
		// kernel refuses it (EBUSY) in the host's; bind the host's /sys
		// read-only instead, as docker and podman do for host networking.
		for i, m := range s.Mounts {
			if m.Destination == "/sys" && m.Type == "sysfs" {
				s.Mounts[i] = specs.Mount{
					Destination: "/sys", Type: "bind", Source: "/sys",
					Options: []string{"rbind", "rslave", "nosuid", "noexec", "nodev", "ro"},
				}
			}
		}
		return nil
	}
}

// WithBindMounts adds the job's bind mounts (submit dir, job dir, per-job
// /tmp, site mounts) and hidden directories (runtime.Mount.Hide: an empty
// tmpfs over daemon state) after the default ones, so they win on equal
// destinations. Sources and destinations must be absolute.
//
// Mounts are applied shallowest destination first: a later mount over a
// parent (a per-job /tmp, say) would otherwise hide an earlier one beneath
// it (the job's own directory under /tmp).
func WithBindMounts(mounts []runtime.Mount) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ordered := slices.Clone(mounts)
		slices.SortStableFunc(ordered, func(a, b runtime.Mount) int {
			if c := cmp.Compare(pathDepth(a.Dest), pathDepth(b.Dest)); c != 0 {
				return c
			}
			// A hidden directory first, so a bind at the same path (a
			// root job's work dir that is the state dir) stays visible.
			return cmp.Compare(hideRank(b), hideRank(a))
		})
		for _, m := range ordered {
			if m.Hide {
				if !filepath.IsAbs(m.Dest) {
					return fmt.Errorf("hide %s: the path must be absolute", m.Dest)
				}
				s.Mounts = append(s.Mounts, hideMount(m.Dest))
				continue
			}
			if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Dest) {
				return fmt.Errorf("add mount %s -> %s: source and destination must be absolute paths", m.Source, m.Dest)
			}
			s.Mounts = append(s.Mounts, bindMount(m.Source, m.Dest, m.ReadOnly))
		}
		return nil
	}
}

// pathDepth counts the components of a cleaned absolute path ("/" is 0).
func pathDepth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

func hideRank(m runtime.Mount) int {
	if m.Hide {
		return 1
	}
	return 0
}

// hideMount is an empty tmpfs over dst: root's, 0755 (the job traverses it
// to the binds below) and small, since a non-root job cannot write to it
// and runc only makes mount points in it.
func hideMount(dst string) specs.Mount {
	return specs.Mount{
		Destination: filepath.Clean(dst),
		Type:        "tmpfs",
		Source:      "tmpfs",
		Options:     []string{"nosuid", "nodev", "noexec", "mode=0755", "size=1m"},
	}
}

func bindMount(src, dst string, readOnly bool) specs.Mount {
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	return specs.Mount{
		Destination: filepath.Clean(dst),
		Type:        "bind",
		Source:      filepath.Clean(src),
		// rprivate: the job's mounts must not propagate back to the host.
		Options: []string{"rbind", "rprivate", "nosuid", "nodev", mode},
	}
}

// WithLimits caps CPU time with a CFS quota of cpus cores (0 = unlimited)
// and memory at memoryBytes (0 = unlimited) with swap equal to the limit, so
// a job cannot escape its memory limit into swap and is OOM-killed instead.
func WithLimits(cpus float64, memoryBytes int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if cpus < 0 || math.IsNaN(cpus) || math.IsInf(cpus, 0) {
			return fmt.Errorf("set CPU limit: %v is not a valid number of CPUs", cpus)
		}
		if memoryBytes < 0 {
			return fmt.Errorf("set memory limit: %d bytes is negative", memoryBytes)
		}
		ensureResources(s)
		if cpus > 0 {
			quota := int64(math.Ceil(cpus * CFSPeriod))
			period := uint64(CFSPeriod)
			if s.Linux.Resources.CPU == nil {
				s.Linux.Resources.CPU = &specs.LinuxCPU{}
			}
			s.Linux.Resources.CPU.Quota = &quota
			s.Linux.Resources.CPU.Period = &period
		}
		if memoryBytes > 0 {
			limit, swap := memoryBytes, memoryBytes
			if s.Linux.Resources.Memory == nil {
				s.Linux.Resources.Memory = &specs.LinuxMemory{}
			}
			s.Linux.Resources.Memory.Limit = &limit
			s.Linux.Resources.Memory.Swap = &swap
		}
		return nil
	}
}

// WithCPUSet pins the job to cores cpus and memory nodes mems (the
// kernel's list format, "0-3,8"; empty leaves either unrestricted): the node
// puts GPU jobs on cores of their GPUs' NUMA node.
func WithCPUSet(cpus, mems string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if cpus == "" && mems == "" {
			return nil
		}
		for _, l := range []string{cpus, mems} {
			if strings.Trim(l, "0123456789,-") != "" {
				return fmt.Errorf("set cpuset: %q is not a CPU or memory node list like \"0-3,8\"", l)
			}
		}
		ensureResources(s)
		if s.Linux.Resources.CPU == nil {
			s.Linux.Resources.CPU = &specs.LinuxCPU{}
		}
		s.Linux.Resources.CPU.Cpus = cpus
		s.Linux.Resources.CPU.Mems = mems
		return nil
	}
}

// WithShmSize sizes the container's /dev/shm tmpfs to sizeBytes (0: the
// tmpfs default, half the node's RAM). containerd's default of 64 MiB breaks
// PyTorch DataLoader workers and NCCL's shared-memory transport; tmpfs pages
// are charged to the job's memory cgroup, so the job's memory limit is the
// natural size.
func WithShmSize(sizeBytes int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if sizeBytes < 0 {
			return fmt.Errorf("size /dev/shm: %d bytes is negative", sizeBytes)
		}
		for i, m := range s.Mounts {
			if m.Destination != "/dev/shm" || m.Type != "tmpfs" {
				continue
			}
			opts := slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return strings.HasPrefix(o, "size=") })
			if sizeBytes > 0 {
				opts = append(opts, "size="+strconv.FormatInt(sizeBytes, 10))
			}
			s.Mounts[i].Options = opts
		}
		return nil
	}
}

// MemlockUnlimited is the RLIMIT_MEMLOCK value for "no limit".
const MemlockUnlimited = math.MaxUint64

// WithMemlock sets RLIMIT_MEMLOCK (soft and hard) to limit bytes: RDMA
// (ibverbs, NCCL over InfiniBand) pins its buffers and fails with the usual
// 64 KiB or 8 MiB default, so nodes grant MemlockUnlimited.
func WithMemlock(limit uint64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ensureProcess(s)
		memlock := specs.POSIXRlimit{Type: "RLIMIT_MEMLOCK", Hard: limit, Soft: limit}
		for i, r := range s.Process.Rlimits {
			if r.Type == memlock.Type {
				s.Process.Rlimits[i] = memlock
				return nil
			}
		}
		s.Process.Rlimits = append(s.Process.Rlimits, memlock)
		return nil
	}
}

// WithCDIDevices injects the named CDI devices (device nodes, mounts, hooks,
// env) from cache. The cache is refreshed first so a spec the node wrote
// after startup is seen. An unknown device is an error naming it and the
// directories searched.
func WithCDIDevices(cache *cdi.Cache, devices []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if len(devices) == 0 {
			return nil
		}
		if cache == nil {
			return fmt.Errorf("inject CDI devices %s: no CDI spec directories configured; set the node's CDI directory",
				strings.Join(devices, ", "))
		}
		// Refresh reports broken spec files; they only matter if a device
		// we need is missing, so keep them for that message.
		refreshErr := cache.Refresh()
		unresolved, err := cache.InjectDevices(s, devices...)
		if len(unresolved) > 0 {
			msg := fmt.Sprintf("inject CDI devices: unknown device(s) %s: no CDI spec in %s defines them; check the node's CDI spec",
				strings.Join(unresolved, ", "), strings.Join(cache.GetSpecDirectories(), ", "))
			if refreshErr != nil {
				return fmt.Errorf("%s (spec errors: %w)", msg, refreshErr)
			}
			return errors.New(msg)
		}
		if err != nil {
			return fmt.Errorf("inject CDI devices %s: %w", strings.Join(devices, ", "), err)
		}
		return nil
	}
}

// WithShellWrapper runs the job under a shell that stays PID 1 of the
// container and appends the job's stdout to stdoutPath and its stderr to
// stderrPath (equal paths: one merged file; empty: discarded):
//
//	/bin/sh -c '"$@" >>OUT 2>>ERR; exit $?' gpud-job ARGS...
//
// Why the shell stays PID 1: the kernel drops signals without a handler sent
// to a pid namespace's init, so a job that is PID 1 would ignore SIGTERM and
// the checkpoint signal. The shell ignores them; Runtime.Signal delivers
// them to every process (kill --all), so the job gets them and the shell
// exits with the job's status (128+N when a signal ended it). The trailing
// "exit $?" keeps shells that exec their last command from doing so.
//
// Why redirect in the container: output must be written without the node
// agent in the data path so it survives an agent restart or kill -9, and
// containerd's file:// stdio merges both streams into one root-owned file.
// The shell runs as the job's user, so the files are opened with the user's
// rights. Each file is bind-mounted at its own path so the redirect works
// whatever the root is; the caller creates the files, owned by the job's
// user, before the task starts. The root must provide ShellPath.
func WithShellWrapper(stdoutPath, stderrPath string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		ensureProcess(s)
		if len(s.Process.Args) == 0 {
			return errors.New("wrap job in shell: no command to wrap (set the process first)")
		}
		for _, p := range []string{stdoutPath, stderrPath} {
			if p != "" && !filepath.IsAbs(p) {
				return fmt.Errorf("redirect job output to %q: path is not absolute", p)
			}
		}
		s.Process.Args = runtime.WrapperArgs(s.Process.Args, stdoutPath, stderrPath)
		seen := map[string]bool{}
		for _, p := range []string{stdoutPath, stderrPath} {
			if p == "" || seen[p] {
				continue
			}
			seen[p] = true
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: p, Type: "bind", Source: p,
				Options: []string{"bind", "rprivate", "nosuid", "nodev", "noexec", "rw"},
			})
		}
		return nil
	}
}

// shellQuote quotes s for POSIX sh: inside single quotes nothing is special
// except the single quote itself.
func shellQuote(s string) string { return runtime.ShellQuote(s) }

// WithEnvLast sets the job's environment on top of what is there (the
// runtime default PATH, the image's, CDI's): an entry replaces a variable of
// the same name. It must be the last option so the node's combined
// NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES win over CDI's per-device ones.
func WithEnvLast(env []string) oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		for _, e := range env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				return fmt.Errorf("set environment: %q is not NAME=value", e)
			}
		}
		return oci.WithEnv(env)(ctx, c, ctr, s)
	}
}

func ensureProcess(s *oci.Spec) {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
}

func ensureLinux(s *oci.Spec) {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
}

func ensureResources(s *oci.Spec) {
	ensureLinux(s)
	if s.Linux.Resources == nil {
		s.Linux.Resources = &specs.LinuxResources{}
	}
}
