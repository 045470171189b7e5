package containerd

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/ocispec"
	"github.com/gpud/gpud/runtime/safefs"
)

// DefaultNamespace is the containerd namespace job containers live in.
const DefaultNamespace = "gpud"

// Snapshotter unpacks and snapshots images other than runtime.ImageHost.
const Snapshotter = "overlayfs"

// runcRuntime is the shim every job runs under; naming it avoids a
// namespace-label lookup on every container create.
const runcRuntime = "io.containerd.runc.v2"

// cleanupTimeout bounds the cleanup of a half-started container, which runs
// even when the caller's context is already done.
const cleanupTimeout = 30 * time.Second

// startTimeout bounds creating and starting a task once its container
// exists; the caller's context no longer cuts it short (see Start).
const startTimeout = 2 * time.Minute

// Options configure New.
type Options struct {
	// Address is containerd's socket ("/run/containerd/containerd.sock" or
	// a Daemon's Address()).
	Address string
	// Namespace defaults to DefaultNamespace.
	Namespace string
	// CDISpecDirs are searched for CDI specs; none means CDI devices cannot
	// be injected (a job asking for one fails to start).
	CDISpecDirs []string
	// RuncRoot is runc's state directory for our containers. Empty means
	// one derived from Address: runc's default (/run/containerd/runc/<ns>)
	// is shared by every containerd on the host, so two private daemons
	// (two standalone clusters, a test beside a demo) would collide on
	// container IDs, and a container orphaned by a kill -9 of one daemon
	// would block the same ID in another.
	RuncRoot string
	// Images configures pulls from registries and the image cache.
	Images ImageOptions
	// ShimGroupSize, when positive, lets up to that many containers of one
	// user share a runc shim (shimgroup.go); 0 gives each its own.
	ShimGroupSize int
	// ShimKeeperIdle is how long a shim group's keeper stays with no job
	// in its group (default DefaultShimKeeperIdle).
	ShimKeeperIdle time.Duration
	// Node labels this runtime's shim keepers; New deletes those of the
	// same Node that an earlier runtime left.
	Node string
	// OCIRuntime is the binary the shim runs for every container: "" or
	// "runc" (the default), "crun", or an absolute path (ociruntime.go).
	OCIRuntime string
}

// runcRoots holds the default runc roots, one per containerd address.
const runcRoots = "/run/gpud/runc"

// DefaultRuncRoot gives each containerd address its own runc root (the OCI
// runtime's state directory, runc's or crun's).
func DefaultRuncRoot(address string) string {
	sum := sha256.Sum256([]byte(address))
	return filepath.Join(runcRoots, hex.EncodeToString(sum[:6]))
}

// Runtime runs job containers on containerd. It is safe for concurrent use.
type Runtime struct {
	client *client.Client
	// address is containerd's socket (DaemonDirs asks who serves it).
	address string
	ns      string
	cdi     *cdi.Cache
	// cgroupRoot is where the cgroup hierarchies are mounted.
	cgroupRoot string
	// scope tells this runtime's cgroups from those of another containerd
	// on the same host (two clusters, or tests, using the same container
	// ids): cgroups are host-wide, container ids only per containerd.
	scope string
	// createOnly makes Start stop after creating the task, to test the
	// state a kill -9 between create and start leaves behind.
	createOnly bool
	// runcRoot is runc's state directory (see Options.RuncRoot).
	runcRoot string
	// oci is the OCI runtime the shim runs (Options.OCIRuntime).
	oci ociRuntime
	// memlock is the jobs' RLIMIT_MEMLOCK (0: unlimited), see memlockLimit.
	memlock uint64
	// images pulls from registries into the cache (pull.go).
	images *imageCache
	// groups, when not nil, puts containers in shared shims (shimgroup.go);
	// node labels its keepers, stopKeepers ends their reaper.
	groups      *shimGroups
	node        string
	stopKeepers func()
	// resignals are the catch-up signals of Signal still waiting for a
	// job process to appear (see resignal); Close ends and waits for them.
	resignals     sync.WaitGroup
	stopResignals context.CancelFunc
	resignalCtx   context.Context
	// exited are the containers whose task Wait saw exit and that were
	// not deleted since: their delete skips asking the task's status (a
	// task whose init exited stays stopped until it is deleted).
	exited sync.Map // container ID -> struct{}
	// hostRoot are the host-root containers this runtime made and has
	// not deleted: they have no snapshot, so their delete removes the
	// record without reading it first (a container made by an earlier
	// runtime is read: it may be an image's).
	hostRoot sync.Map // container ID -> struct{}
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to containerd at opts.Address and checks that it serves.
func New(ctx context.Context, opts Options) (*Runtime, error) { return newRuntime(ctx, opts) }

// newRuntime is New with more options for containerd's client (the
// tests': what the runtime asks of containerd).
func newRuntime(ctx context.Context, opts Options, copts ...client.Opt) (*Runtime, error) {
	if opts.Address == "" {
		return nil, errors.New("connect to containerd: no socket address given; set the node's containerd socket")
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	c, err := client.New(opts.Address, append([]client.Opt{client.WithDefaultNamespace(ns), client.WithDefaultRuntime(runcRuntime)}, copts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", opts.Address, err)
	}
	if _, err := c.Version(namespaces.WithNamespace(ctx, ns)); err != nil {
		c.Close()
		return nil, fmt.Errorf("connect to containerd at %s: %w; is containerd running and is the socket right?", opts.Address, err)
	}
	runcRoot := opts.RuncRoot
	if runcRoot == "" {
		runcRoot = DefaultRuncRoot(opts.Address)
	}
	const cgroupRoot = "/sys/fs/cgroup"
	ort, err := ociBinary(ctx, opts.OCIRuntime, cgroupRoot)
	if err != nil {
		c.Close()
		return nil, err
	}
	if ort.binary != "" {
		if ro, why := readOnlyOCI(opts.Address, ort.binary); ro != "" {
			ort.binary = ro
		} else {
			ort.notReadOnly = why
		}
	}
	imgs, err := newImageCache(opts.Images)
	if err != nil {
		c.Close()
		return nil, err
	}
	r := &Runtime{client: c, address: opts.Address, ns: ns, cgroupRoot: cgroupRoot, memlock: memlockLimit(), runcRoot: runcRoot,
		oci: ort, scope: cgroupScope(runcRoot), images: imgs}
	r.resignalCtx, r.stopResignals = context.WithCancel(context.Background())
	if opts.ShimGroupSize > 0 {
		r.groups, r.node = newShimGroups(opts.ShimGroupSize), opts.Node
		if err := r.deleteOldKeepers(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("connect to containerd at %s: %w", opts.Address, err)
		}
		idle := opts.ShimKeeperIdle
		if idle <= 0 {
			idle = DefaultShimKeeperIdle
		}
		kctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); r.reapKeepers(kctx, idle) }()
		r.stopKeepers = func() { cancel(); <-done }
	}
	if len(opts.CDISpecDirs) > 0 {
		// An explicit cache, never CDI's global default: the node decides
		// which directories count. No auto-refresh: it would start a file
		// watcher goroutine we do not own; Start refreshes instead.
		cache, err := cdi.NewCache(cdi.WithAutoRefresh(false), cdi.WithSpecDirs(opts.CDISpecDirs...))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("load CDI specs from %s: %w", strings.Join(opts.CDISpecDirs, ", "), err)
		}
		r.cdi = cache
	}
	return r, nil
}

// Close closes the connection to containerd; containers keep running.
// Shim keepers of groups with no container left are deleted.
func (r *Runtime) Close() error {
	r.stopResignals()
	r.resignals.Wait()
	if r.stopKeepers != nil {
		r.stopKeepers()
	}
	r.images.transport.CloseIdleConnections()
	return r.client.Close()
}

// OCIRuntime is the binary the shims run for every container ("": runc
// from their PATH) and, when it is not a read-only bind the runtime made
// (ocireadonly.go), why not ("" for runc by default).
func (r *Runtime) OCIRuntime() (binary, notReadOnly string) { return r.oci.binary, r.oci.notReadOnly }

// shimOptions are the runc v2 shim's options for each container: runc's
// (or crun's) state directory and the binary.
func (r *Runtime) shimOptions() *runcoptions.Options {
	return &runcoptions.Options{Root: r.runcRoot, BinaryName: r.oci.binary}
}

func (r *Runtime) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.ns)
}

// Start creates the container and starts its task.
func (r *Runtime) Start(ctx context.Context, cfg runtime.TaskConfig) error {
	return r.create(ctx, cfg, !r.createOnly)
}

// Prepare creates the container and its task, and leaves the task's
// process waiting to be started (runtime.Preparer): runc has made its
// namespaces, cgroup, mounts and devices; StartPrepared starts it.
func (r *Runtime) Prepare(ctx context.Context, cfg runtime.TaskConfig) error {
	return r.create(ctx, cfg, false)
}

// StartPrepared starts the process of container id, made by Prepare, for
// the job cfg describes (runtime.Preparer).
func (r *Runtime) StartPrepared(ctx context.Context, id string, cfg runtime.TaskConfig) error {
	ctx = r.nsCtx(ctx)
	// The task's status only: a container without one is not found (its
	// record, if any, is not read; the labels' update below needs none).
	st, err := r.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil {
		if err := errgrpc.ToNative(err); errdefs.IsNotFound(err) {
			return fmt.Errorf("start prepared container %s: no task: %w", id, runtime.ErrNotFound)
		}
		return fmt.Errorf("start prepared container %s: %w", id, err)
	}
	if st.Process.Status != tasktypes.Status_CREATED {
		return fmt.Errorf("start prepared container %s: task is %s, not created: %w", id, st.Process.Status, os.ErrExist)
	}
	for _, p := range outputFiles(cfg) {
		if err := createOutputFile(p, cfg.UID, cfg.GID, cfg.AdditionalGIDs, cfg.TruncateOutput); err != nil {
			return fmt.Errorf("start prepared container %s: %w", id, err)
		}
	}
	// The labels first: a restarted agent that finds the task running
	// must know whose job it is; one that finds it still created removes
	// it as a start that never happened.
	if len(cfg.Labels) > 0 {
		// client.Container's SetLabels, without the record's lookup it
		// needs first.
		paths := make([]string, 0, len(cfg.Labels))
		for k := range cfg.Labels {
			paths = append(paths, "labels."+k)
		}
		if _, err := r.client.ContainerService().Update(ctx, containers.Container{ID: id, Labels: cfg.Labels}, paths...); err != nil {
			return fmt.Errorf("start prepared container %s: set labels: %w", id, err)
		}
	}
	// As in create: a start under way is not cut short by ctx.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	if _, err := r.client.TaskService().Start(ctx, &tasks.StartRequest{ContainerID: id}); err != nil {
		return fmt.Errorf("start task %s: %w", id, errgrpc.ToNative(err))
	}
	return nil
}

// create creates the container and its task, and starts the task when
// start is set.
func (r *Runtime) create(ctx context.Context, cfg runtime.TaskConfig, start bool) (retErr error) {
	ctx = r.nsCtx(ctx)
	if err := validate(cfg); err != nil {
		return fmt.Errorf("start container %s: %w", cfg.ID, err)
	}
	if why := r.oci.hostRootProblem(cfg); why != "" {
		return fmt.Errorf("start container %s: %s", cfg.ID, why)
	}
	// No lookup first: NewContainer refuses an ID in use (os.ErrExist
	// below) before anything is made, and the output files are made only
	// after it succeeded, so a start under an ID in use (a running job
	// the agent re-adopts) never empties that job's output.

	in := ocispec.Inputs{CDI: r.cdi, MemlockBytes: r.memlock}
	labels := cfg.Labels
	var group *shimGroup
	if r.groups != nil {
		var fresh bool
		group, fresh = r.groups.join(cfg.UID)
		if fresh {
			// Not cut short by ctx, for the reason the task's creation
			// below is not: a keeper's task creation cut short went on in
			// containerd, keepGroup's cleanup deleted the keeper while its
			// shim came up, and that shim served on with nothing to reap
			// it (TestShimKeeperCutShort).
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
			_ = r.keepGroup(kctx, group) // without one, the group's shim ends with its last job
			cancel()
		}
		labels = maps.Clone(labels) // the caller's map stays as it is
		if labels == nil {
			labels = map[string]string{}
		}
		labels[shimGroupLabel] = group.name
	}
	copts := []client.NewContainerOpts{
		client.WithContainerLabels(labels),
		client.WithRuntime(runcRuntime, r.shimOptions()),
	}
	if cfg.Image != runtime.ImageHost {
		img, err := r.image(ctx, cfg.Image)
		if err != nil {
			r.groups.done(group, cfg.ID, false)
			return fmt.Errorf("start container %s: %w", cfg.ID, err)
		}
		imgSpec, err := img.Spec(ctx)
		if err != nil {
			r.groups.done(group, cfg.ID, false)
			return fmt.Errorf("start container %s: read config of image %s: %w", cfg.ID, cfg.Image, err)
		}
		in.ImageEnv, in.ImageCwd = imgSpec.Config.Env, imgSpec.Config.WorkingDir
		copts = append(copts, client.WithImage(img), client.WithSnapshotter(Snapshotter), client.WithNewSnapshot(cfg.ID, img))
	}
	sopts := append(ocispec.Build(cfg, in), oci.WithCgroup(r.cgroupsPath(cfg.ID)))
	sopts = append(sopts, r.runtimeSpecOpts()...)
	if group != nil {
		sopts = append(sopts, withShimGroup(group.name))
	}
	copts = append(copts, client.WithNewSpec(sopts...))

	var ctr client.Container // an image's container (newTask needs its snapshot's mounts)
	var err error
	if cfg.Image == runtime.ImageHost {
		err = r.newHostContainer(ctx, cfg.ID, copts...)
	} else {
		ctr, err = r.client.NewContainer(ctx, cfg.ID, copts...)
	}
	if err != nil {
		r.groups.done(group, cfg.ID, false)
		if errdefs.IsAlreadyExists(err) {
			return fmt.Errorf("start container %s: %w", cfg.ID, os.ErrExist)
		}
		return fmt.Errorf("create container %s: %w", cfg.ID, err)
	}
	defer func() {
		if retErr != nil {
			// Leave nothing half-made behind, even when ctx is done.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if err := r.delete(cctx, cfg.ID); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("clean up container %s: %w", cfg.ID, err))
			}
		}
	}()
	for _, p := range outputFiles(cfg) {
		if err := createOutputFile(p, cfg.UID, cfg.GID, cfg.AdditionalGIDs, cfg.TruncateOutput); err != nil {
			r.groups.done(group, cfg.ID, false)
			return fmt.Errorf("start container %s: %w", cfg.ID, err)
		}
	}
	// From here the start runs to its end even when ctx ends (an agent
	// shutting down): a task creation cut short on our side goes on in
	// containerd, and the cleanup above would delete the container while
	// its shim and task come up, leaving a shim that no container record
	// knows and nothing ever reaps. A finished start is a running task the
	// agent's stop or its next recovery deals with.
	ctx, cancelStart := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancelStart()
	err = r.newTask(ctx, ctr, cfg.ID)
	// Counted even when the create failed: its task may exist all the
	// same, and the cleanup's delete then keeps the group's shim safe.
	r.groups.done(group, cfg.ID, true)
	if err != nil {
		return err
	}
	if !start {
		return nil
	}
	if _, err := r.client.TaskService().Start(ctx, &tasks.StartRequest{ContainerID: cfg.ID}); err != nil {
		return fmt.Errorf("start task %s: %w", cfg.ID, errgrpc.ToNative(err))
	}
	return nil
}

// newHostContainer makes the record of container id, whose root is the
// host's (no image, no snapshot), with opts: what client.NewContainer
// does, less its lease and the lookups around it. The lease keeps what a
// container's creation makes (an image's snapshot, content) from
// containerd's garbage collector until the record names it; a host-root
// container's creation makes nothing, so its lease guarded nothing, and
// cost two more writes of containerd's metadata database per job (the
// lease's create and delete, each a transaction with its fsync, under
// the database's one writer lock that every create and delete waits for).
func (r *Runtime) newHostContainer(ctx context.Context, id string, opts ...client.NewContainerOpts) error {
	c := containers.Container{ID: id}
	for _, o := range opts {
		if err := o(ctx, r.client, &c); err != nil {
			return err
		}
	}
	if c.SnapshotKey != "" || c.Image != "" {
		return fmt.Errorf("container %s: a host-root container with an image or snapshot", id) // a caller's mistake
	}
	if _, err := r.client.ContainerService().Create(ctx, c); err != nil {
		return err
	}
	r.hostRoot.Store(id, struct{}{})
	return nil
}

// newTask creates the task of container id, getting past what a
// containerd killed mid-create leaves behind where it can. ctr is an
// image's container (nil: a host-root one): client.Container's NewTask
// looks the container up twice to find its snapshot's mounts, which a
// host-root container has none of, so its task is created directly.
func (r *Runtime) newTask(ctx context.Context, ctr client.Container, id string) error {
	mk := func() error {
		if ctr != nil {
			_, err := ctr.NewTask(ctx, cio.NullIO)
			return err
		}
		_, err := r.client.TaskService().Create(ctx, &tasks.CreateTaskRequest{ContainerID: id})
		return errgrpc.ToNative(err)
	}
	err := mk()
	// containerd 1.6 reports this one with code Unknown, so match the text.
	if err != nil && (errdefs.IsAlreadyExists(errgrpc.ToNative(err)) || strings.Contains(err.Error(), "already exists")) {
		// containerd killed mid-create reloads the half-made task from its
		// bundle after restart, yet lists the container without it; the
		// stale task blocks the ID until it is deleted.
		if derr := r.deleteTask(ctx, id); derr != nil {
			return fmt.Errorf("create task %s: %w; removing the stale task failed: %v", id, err, derr)
		}
		if err = mk(); err != nil && strings.Contains(err.Error(), "already exists") {
			// The bundle directory survives where the task does not; only a
			// fresh ID gets past it.
			return fmt.Errorf("create task %s: %w: %v", id, runtime.ErrIDInUse, err)
		}
	}
	if err != nil && staleBundle(err, r.ns, id) {
		// The same leftover, seen by the shim manager: containerd killed
		// mid-create left the bundle directory, and a restarted one
		// neither reloads nor removes it.
		return fmt.Errorf("create task %s: %w: %v", id, runtime.ErrIDInUse, err)
	}
	if err != nil {
		return fmt.Errorf("create task %s: %w", id, err)
	}
	return nil
}

// staleBundle reports whether err is a shim start failing because
// container id's bundle directory already exists ("failed to start shim:
// mkdir .../io.containerd.runtime.v2.task/<ns>/<id>: file exists").
func staleBundle(err error, ns, id string) bool {
	msg := err.Error()
	return strings.Contains(msg, "file exists") &&
		strings.Contains(msg, "io.containerd.runtime.v2.task/"+ns+"/"+id+":")
}

func validate(cfg runtime.TaskConfig) error {
	var errs []error
	if cfg.ID == "" {
		errs = append(errs, errors.New("ID is empty"))
	}
	if cfg.Image == "" {
		errs = append(errs, fmt.Errorf("image is empty; use %q for the host's root or an image reference", runtime.ImageHost))
	}
	if len(cfg.Args) == 0 {
		errs = append(errs, errors.New("no command (Args is empty)"))
	}
	return errors.Join(errs...)
}

func outputFiles(cfg runtime.TaskConfig) []string {
	var ps []string
	for _, p := range []string{cfg.StdoutPath, cfg.StderrPath} {
		if p != "" && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// createOutputFile makes sure path is a regular file the job's user owns,
// creating it and its missing parent directories if needed, and empties
// it when truncate is set (safefs.PrepareUserFile). A missing directory is
// made as the user (Slurm leaves the job failing instead; gpud starts jobs
// within milliseconds, before a client that makes the folder right after
// submitting has done so). Everything is done with the user's rights, on a
// thread of the agent with the user's filesystem identity: root creating
// the file and handing it over would let a user claim any missing file in
// a directory they cannot write (--output /etc/ld.so.preload). No shell
// runs, nothing is followed, and nothing is emptied before the file is
// checked on its descriptor: a regular file of the job's uid with no other
// hard link (another user's symlink or link to the job user's own file
// once emptied it before the check).
func createOutputFile(path string, uid, gid uint32, groups []uint32, truncate bool) error {
	return safefs.PrepareUserFile(path, safefs.Cred{UID: uid, GID: gid, Groups: groups}, truncate)
}

// image returns ref from the image store, unpacked into Snapshotter.
// Start never pulls: the node agent pulls first (PullImage), with the job
// user's credentials, so that a missing or refused image fails the job
// with its reason before anything is created.
func (r *Runtime) image(ctx context.Context, ref string) (client.Image, error) {
	img, err := r.client.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("image %s not found in containerd namespace %s; pull it (PullImage) or import it with `ctr -n %s images import FILE`", ref, r.ns, r.ns)
	}
	if err != nil {
		return nil, fmt.Errorf("look up image %s: %w", ref, err)
	}
	ok, err := img.IsUnpacked(ctx, Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("check image %s is unpacked: %w", ref, err)
	}
	if !ok {
		if err := img.Unpack(ctx, Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack image %s into %s: %w", ref, Snapshotter, err)
		}
	}
	return img, nil
}

// Wait blocks until the task exits and returns its status.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	ctx = r.nsCtx(ctx)
	resp, err := r.client.TaskService().Wait(ctx, &tasks.WaitRequest{ContainerID: id})
	if err != nil {
		err = errgrpc.ToNative(err)
		if errdefs.IsNotFound(err) {
			return runtime.ExitStatus{}, fmt.Errorf("wait for task %s: %w", id, runtime.ErrNotFound)
		}
		if ctx.Err() == nil {
			r.groups.broken(id) // its shim failed: no new container joins it
		}
		return runtime.ExitStatus{}, fmt.Errorf("wait for task %s: %w", id, err)
	}
	es := exitStatus(resp.ExitStatus, resp.ExitedAt.AsTime())
	es.OOMKilled = r.oomKilled(ctx, id)
	r.exited.Store(id, struct{}{})
	return es, nil
}

// exitStatus converts a shim exit status: a process killed by signal N is
// reported as 128+N, as a shell would. An exit code of 129-192 chosen by
// the program itself reads as a signal too; the shim gives no way to tell.
func exitStatus(code uint32, exitedAt time.Time) runtime.ExitStatus {
	es := runtime.ExitStatus{Code: int(code), ExitedAt: exitedAt}
	if code > 128 && code <= 128+64 {
		es.Signal = syscall.Signal(code - 128)
	}
	return es
}

// oomKilled reports whether the kernel OOM-killed a process in the task's
// memory cgroup. It is best effort: a missing cgroup (task deleted) reads as
// false.
func (r *Runtime) oomKilled(ctx context.Context, id string) bool {
	// The cgroup this runtime gives every container first: reading the
	// container and decoding its spec cost 5 % of the agents' and
	// controller's CPU in a burst of trivial jobs. The spec's path only
	// for a container made elsewhere (an older gpud's default path).
	if n, err := oomKillCount(r.cgroupRoot, r.cgroupsPath(id)); err == nil {
		return n > 0
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	ctr, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return false
	}
	spec, err := ctr.Spec(ctx)
	if err != nil || spec.Linux == nil || spec.Linux.CgroupsPath == "" {
		return false
	}
	n, err := oomKillCount(r.cgroupRoot, spec.Linux.CgroupsPath)
	return err == nil && n > 0
}

// cgroupScope names the cgroups of the runtime whose runc root is
// runcRoot: each containerd (and so each cluster on a host) has its own.
func cgroupScope(runcRoot string) string {
	sum := sha256.Sum256([]byte(runcRoot))
	return hex.EncodeToString(sum[:4])
}

// cgroupsPath is the cgroup (cgroupfs driver) of container id:
// "/<namespace>/<scope>-<id>". containerd's default, "/<namespace>/<id>",
// is shared by every containerd on the host that runs a container of that
// id, so a kill or fence of one would hit the other's processes.
func (r *Runtime) cgroupsPath(id string) string {
	return "/" + r.ns + "/" + r.scope + "-" + id
}

// killCgroup SIGKILLs every process in the cgroup of container id (its
// spec's, else cgroupsPath) and waits until it is empty. A missing cgroup
// is not an error.
func (r *Runtime) killCgroup(ctx context.Context, id string) error {
	path := r.cgroupsPath(id)
	if ctr, err := r.client.LoadContainer(ctx, id); err == nil {
		if spec, err := ctr.Spec(ctx); err == nil && spec.Linux != nil && spec.Linux.CgroupsPath != "" {
			path = spec.Linux.CgroupsPath
		}
	}
	return r.killCgroupPath(path)
}

// killCgroupPath is killCgroup on a cgroupfs-driver path.
func (r *Runtime) killCgroupPath(path string) error {
	procs := filepath.Join(r.cgroupRoot, "pids", path, "cgroup.procs")
	if _, err := os.Stat(filepath.Join(r.cgroupRoot, "cgroup.controllers")); err == nil {
		procs = filepath.Join(r.cgroupRoot, path, "cgroup.procs") // cgroup v2
	}
	for try := 0; try < 50; try++ {
		data, err := os.ReadFile(procs)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		pids := strings.Fields(string(data))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("processes in %s survive SIGKILL", procs)
}

// oomKillCount reads the oom_kill counter of a cgroupfs-driver cgroup path
// ("/gpud/job-1"): memory.events on cgroup v2, memory.oom_control on v1.
func oomKillCount(cgroupRoot, cgroupsPath string) (int, error) {
	file := filepath.Join(cgroupRoot, "memory", cgroupsPath, "memory.oom_control")
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		file = filepath.Join(cgroupRoot, cgroupsPath, "memory.events")
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("read OOM count: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("parse oom_kill in %s: %w", file, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", file, err)
	}
	return 0, fmt.Errorf("no oom_kill counter in %s", file)
}

// Signal delivers sig to every process of the task. Signalling a task that
// already exited is not an error.
//
// All processes, as Slurm does: the job's shell wrapper is PID 1 and
// ignores signals it has no handler for (the kernel drops them); the job
// itself must see them. A signal sent while the wrapper is the container's
// only process, before it has forked the job (a cancel right after the
// start), would reach nobody: the job, forked a moment later, would run on
// until the kill escalation. So when the wrapper was alone, Signal sends
// the signal again, once, as soon as another process appears (resignal).
// The one cost: a job forked between the look and the first kill gets the
// signal twice, within milliseconds of its start.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	ctx = r.nsCtx(ctx)
	ts := r.client.TaskService()
	init, alone := r.initAlone(ctx, id)
	if alone {
		waitInitExec(ctx, init, sig)
	}
	_, err := ts.Kill(ctx, &tasks.KillRequest{ContainerID: id, Signal: uint32(sig), All: true})
	if err == nil {
		if alone {
			r.resignals.Add(1)
			go r.resignal(id, sig, init)
		}
		return nil
	}
	err = errgrpc.ToNative(err)
	if errdefs.IsNotFound(err) {
		st, gerr := ts.Get(ctx, &tasks.GetRequest{ContainerID: id})
		if gerr == nil && st.Process.Status == tasktypes.Status_STOPPED {
			return nil
		}
		return fmt.Errorf("signal task %s with %v: %w", id, sig, runtime.ErrNotFound)
	}
	return fmt.Errorf("signal task %s with %v: %w", id, sig, err)
}

// resignalWindow bounds how long Signal's catch-up waits for the wrapper to
// fork the job; the wrapper forks within milliseconds of its start, so only
// a host starved of CPU comes near it.
const resignalWindow = 10 * time.Second

// initExecWait bounds how long Signal waits for a container's init to
// stop catching the signal (waitInitExec).
const initExecWait = time.Second

// waitInitExec waits, up to initExecWait, while process pid (a container's
// init, as the host sees it) catches sig. Right after a start the init may
// still be the OCI runtime's own (runc init, a Go program, between reading
// its start signal and exec'ing the job's wrapper): Go catches SIGTERM and
// re-raises it to die of it, which the kernel ignores for a PID namespace's
// init, so it exits 2 instead. A job cancelled within a moment of its start
// then ended with exit code 2, its wrapper never run (seen twice in full
// test runs: TestSignalBeforeJobForkedReachesJob). The wrapper shell
// catches no signal; one that does (an image's own /bin/sh) is signalled
// after the bound. A status that cannot be read (another PID namespace)
// waits for nothing.
func waitInitExec(ctx context.Context, pid uint32, sig syscall.Signal) {
	deadline := time.Now().Add(initExecWait)
	for wait := 100 * time.Microsecond; catchesSignal(pid, sig) && time.Now().Before(deadline); wait = min(2*wait, 10*time.Millisecond) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// catchesSignal reports whether process pid has a handler for sig
// (/proc/PID/status SigCgt); false when it cannot be read.
func catchesSignal(pid uint32, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return err == nil && sigCaught(b, sig)
}

// sigCaught reads /proc/PID/status's SigCgt mask (hexadecimal, bit n-1
// for signal n) for sig.
func sigCaught(status []byte, sig syscall.Signal) bool {
	for line := range strings.Lines(string(status)) {
		hex, ok := strings.CutPrefix(line, "SigCgt:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		return err == nil && sig >= 1 && sig <= 64 && mask&(1<<(sig-1)) != 0
	}
	return false
}

// initAlone reports the task's init pid and whether it runs with no other
// process in the container (the wrapper before it forked the job, or after
// the job ended). Any error reads as not alone: Signal then does what it
// did before the catch-up existed.
func (r *Runtime) initAlone(ctx context.Context, id string) (uint32, bool) {
	ts := r.client.TaskService()
	st, err := ts.Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil || st.Process == nil || st.Process.Status != tasktypes.Status_RUNNING {
		return 0, false
	}
	ps, err := ts.ListPids(ctx, &tasks.ListPidsRequest{ContainerID: id})
	if err != nil {
		return 0, false
	}
	return st.Process.Pid, len(ps.Processes) == 1 && ps.Processes[0].Pid == st.Process.Pid
}

// resignal waits for a process other than init to appear in container id
// and signals every process once more; it gives up when the task stops,
// when resignalWindow passes, or when the runtime closes.
func (r *Runtime) resignal(id string, sig syscall.Signal, init uint32) {
	defer r.resignals.Done()
	ctx, cancel := context.WithTimeout(r.nsCtx(r.resignalCtx), resignalWindow)
	defer cancel()
	ts := r.client.TaskService()
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		ps, err := ts.ListPids(ctx, &tasks.ListPidsRequest{ContainerID: id})
		if err != nil {
			return // the task is gone (or containerd is): nothing to catch up
		}
		for _, p := range ps.Processes {
			if p.Pid != init {
				_, _ = ts.Kill(ctx, &tasks.KillRequest{ContainerID: id, Signal: uint32(sig), All: true})
				return
			}
		}
		// init alone still: the job not forked yet, or already ended and
		// the wrapper on its way out.
		st, err := ts.Get(ctx, &tasks.GetRequest{ContainerID: id})
		if err != nil || st.Process == nil || st.Process.Status != tasktypes.Status_RUNNING {
			return
		}
	}
}

// Delete kills the task if it runs, deletes it and the container with its
// snapshot. A missing ID is not an error. A ctx already done deletes
// nothing; once begun, a delete runs to its end (bounded by
// cleanupTimeout) even when ctx ends meanwhile (an agent shutting down):
// a task delete cut short on our side goes on in containerd, which then
// may have dropped the task without shutting its shim down, and a
// container deleted next leaves a shim (and a prepared container's
// waiting init, the job user's) that nothing ever reaps.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.delete(r.nsCtx(ctx), id); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) delete(ctx context.Context, id string) error {
	fin := r.groups.deleting(id)
	err := r.deleteTask(ctx, id)
	fin(err == nil)
	if err != nil {
		return err
	}
	// What client.Container's Delete with WithSnapshotCleanup does, less
	// its two lookups (the task, just deleted above, and the container
	// again): the container's snapshot (image jobs), then its record.
	cs := r.client.ContainerService()
	if _, ok := r.hostRoot.Load(id); ok {
		if err := cs.Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		r.hostRoot.Delete(id)
		return nil
	}
	c, err := cs.Get(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load container: %w", err)
	}
	if c.SnapshotKey != "" && c.Snapshotter != "" {
		if err := r.client.SnapshotService(c.Snapshotter).Remove(ctx, c.SnapshotKey); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove snapshot %s: %w", c.SnapshotKey, err)
		}
	}
	if err := cs.Delete(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return err
	}
	return nil
}

// deleteTask kills (if needed) and deletes the task of container id; a
// missing task is not an error.
func (r *Runtime) deleteTask(ctx context.Context, id string) error {
	ts := r.client.TaskService()
	if _, ok := r.exited.LoadAndDelete(id); ok {
		// Wait saw it exit: stopped, so no status to ask and nothing to
		// kill. Anything else than a delete done goes the long way.
		_, err := ts.Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id})
		if err == nil {
			return nil
		}
	}
	st, err := ts.Get(ctx, &tasks.GetRequest{ContainerID: id})
	switch err = errgrpc.ToNative(err); {
	case errdefs.IsNotFound(err):
		// containerd may have lost a task whose processes still run (it was
		// killed while starting it): fence them through the cgroup, so a
		// job never runs twice at once.
		if err := r.killCgroup(ctx, id); err != nil {
			return fmt.Errorf("kill processes left in the cgroup of %s: %w", id, err)
		}
	case err != nil:
		return fmt.Errorf("get task: %w", err)
	default:
		if st.Process.Status != tasktypes.Status_STOPPED {
			if _, err := ts.Kill(ctx, &tasks.KillRequest{ContainerID: id, Signal: uint32(syscall.SIGKILL), All: true}); err != nil {
				if err := errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
					return fmt.Errorf("kill task: %w", err)
				}
			}
			if _, err := ts.Wait(ctx, &tasks.WaitRequest{ContainerID: id}); err != nil {
				if err := errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
					return fmt.Errorf("wait for killed task: %w", err)
				}
			}
		}
		if _, err := ts.Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id}); err != nil {
			if err := errgrpc.ToNative(err); !errdefs.IsNotFound(err) {
				return fmt.Errorf("delete task: %w", err)
			}
		}
	}
	return nil
}

// List returns every container in the namespace, sorted by ID, with its
// labels exactly as stored and its task's status.
func (r *Runtime) List(ctx context.Context) ([]runtime.TaskInfo, error) {
	ctx = r.nsCtx(ctx)
	ctrs, err := r.client.Containers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers in namespace %s: %w", r.ns, err)
	}
	infos := make([]runtime.TaskInfo, 0, len(ctrs))
	for _, c := range ctrs {
		info, err := c.Info(ctx, client.WithoutRefreshedMetadata)
		if err != nil {
			return nil, fmt.Errorf("list containers: read container %s: %w", c.ID(), err)
		}
		if _, ok := info.Labels[keeperLabel]; ok {
			continue // a shim group's (shimgroup.go), no job's
		}
		ti := runtime.TaskInfo{ID: c.ID(), Labels: info.Labels}
		st, err := r.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: c.ID()})
		switch err = errgrpc.ToNative(err); {
		case errdefs.IsNotFound(err):
			ti.Status = runtime.StatusCreated
		case err != nil:
			return nil, fmt.Errorf("list containers: get task %s: %w", c.ID(), err)
		default:
			ti.Status = taskStatus(st.Process.Status)
			if ti.Status == runtime.StatusExited {
				es := exitStatus(st.Process.ExitStatus, st.Process.ExitedAt.AsTime())
				es.OOMKilled = r.oomKilled(ctx, c.ID())
				ti.Exit = &es
			}
		}
		infos = append(infos, ti)
	}
	slices.SortFunc(infos, func(a, b runtime.TaskInfo) int { return strings.Compare(a.ID, b.ID) })
	return infos, nil
}

func taskStatus(s tasktypes.Status) runtime.TaskStatus {
	switch s {
	case tasktypes.Status_CREATED:
		return runtime.StatusCreated
	case tasktypes.Status_RUNNING, tasktypes.Status_PAUSED, tasktypes.Status_PAUSING:
		return runtime.StatusRunning
	case tasktypes.Status_STOPPED:
		return runtime.StatusExited
	default:
		return runtime.StatusUnknown
	}
}

// capSysResource is CAP_SYS_RESOURCE's bit in /proc/PID/status masks.
const capSysResource = 24

// memlockLimit returns the RLIMIT_MEMLOCK jobs get: unlimited (0) where this
// process may raise limits (CAP_SYS_RESOURCE, as a root agent normally has),
// else its own hard limit. The shim and runc descend from the same kind of
// root process; asking runc for more than it may grant makes every task
// fail to start ("error setting rlimit type 8"), which is worse than a
// small limit that only RDMA jobs notice.
func memlockLimit() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil || caps&(1<<capSysResource) != 0 {
			return 0
		}
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(unix.RLIMIT_MEMLOCK, &rl); err != nil || rl.Max == unix.RLIM_INFINITY {
			return 0
		}
		return rl.Max
	}
	return 0
}
