package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs/pkg/errgrpc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/ocispec"
)

// Shim groups (Options.ShimGroupSize, node.toml shim_group_size). Every
// container normally gets a runc v2 shim of its own: a daemon that
// containerd starts (exec of the shim binary, whose "start" command execs
// the daemon again), which serves the container over ttrpc and reaps its
// process. runc v2's shim serves several containers when their OCI specs
// carry the same groupAnnotation (CRI does this for the containers of a
// pod, with io.kubernetes.cri.sandbox-id): the "start" command then finds
// the group's shim listening and hands its address back, and the daemon
// start is saved. Each container keeps its own runc container, cgroup,
// namespaces, devices and process; only the supervisor is shared.
//
// A group is one user's (the uid the container's process runs as), never
// two users': a shim crash, hang or OOM kill ends every container it
// serves, so one user's jobs never take another's down with them, and at
// most ShimGroupSize containers share one, which bounds what one shim
// death ends (every one of them is seen by Wait as an exit, the same as
// any container dying).
//
// The shim exits when the last container it serves is deleted, and a
// create that picks a shim just before that, or while the shim is still
// exiting (its socket yet listening), finds it gone ("failed to start
// shim: ... connect: no such file or directory"); the shim counts a
// container only once runc has created it, so a create under way does not
// keep it alive either. So the runtime keeps per group the tasks it
// created and not yet deleted, the deletes and the creates under way: a
// create joins a group only while some task of the group is not being
// deleted, else it starts a group (a shim) of a name never used before.
// A delete that leaves no task outside the deletes under way retires the
// group (its name is never joined again) and waits for the group's creates
// under way to finish first (their tasks then keep the shim).
//
// That bookkeeping is this Runtime's alone, so its groups are its alone:
// their names carry a tag drawn at New. Two agents on one containerd (a
// standalone cluster's nodes) never put containers in each other's shims,
// and a restarted agent never puts new containers in the shims of the
// containers it re-adopts (it does not know how full they are, nor when
// their last one goes); those shims end with their last container.
//
// Jobs end and start at different times, so a group with nothing but
// its jobs would often be empty, its shim gone, and the next job's create
// would start a shim again (trivial jobs on two busy nodes: two creates in
// three did). So each group gets a keeper when it starts: a container of
// the group whose task is created and never started (runc's init waiting,
// as user nobody, in a cgroup and namespaces of its own, running nothing),
// which keeps the shim serving while the group's jobs come and go. A
// keeper whose group had no job for Options.ShimKeeperIdle is deleted,
// and its shim then exits; at Close all are deleted (the shims of groups
// with jobs left serve on for them). Keepers are
// labelled with Options.Node, and New deletes those an earlier runtime of
// the same node left (their shims serve on for the jobs still in them);
// List never shows them. A group whose container's Wait fails for
// another reason than its task being gone (its shim died) is retired.
const groupAnnotation = "io.containerd.runc.v2.group"

// shimGroupLabel records a container's shim group (for whoever looks at
// the node's containers: which ones share a shim).
const shimGroupLabel = "gpud.shim-group"

// keeperLabel marks a keeper; its value is the runtime's Options.Node.
const keeperLabel = "gpud.shim-keeper"

// DefaultShimKeeperIdle is Options.ShimKeeperIdle's default.
const DefaultShimKeeperIdle = 30 * time.Second

type shimGroups struct {
	size int
	// tag makes this runtime's group names its own.
	tag  string
	mu   sync.Mutex
	cond *sync.Cond
	// open are the groups containers may join, per uid; next numbers the
	// next group.
	open map[uint32][]*shimGroup
	next int
	// of is the group of each container whose task this runtime counts.
	of map[string]*shimGroup
	// keepers are the groups whose keeper exists.
	keepers []*shimGroup
}

// shimGroup is one group: its shim serves its tasks.
type shimGroup struct {
	name string
	uid  uint32
	// tasks created and not deleted, and the creates and deletes under
	// way.
	tasks, pending, deleting int
	// retired: out of open, never joined again.
	retired bool
	// keeper is the id of its keeper container ("": none), keeping
	// whether it is being created; idle is when its last task went.
	keeper  string
	keeping bool
	idle    time.Time
}

func newShimGroups(size int) *shimGroups {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	g := &shimGroups{size: size, tag: hex.EncodeToString(b[:]), open: map[uint32][]*shimGroup{}, of: map[string]*shimGroup{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// join picks the shim group for a container of user uid and counts a
// create under way in it; done must follow. Group names are
// "<tag>-u<uid>-<n>" (shim sockets are per containerd and namespace
// already). fresh is a group started for this create, which should get
// a keeper (kept) before the create; a create that joins a group whose
// keeper is being made waits for it (its shim is starting).
func (g *shimGroups) join(uid uint32) (gr *shimGroup, fresh bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gr := range g.open[uid] {
		if (gr.keeper != "" || gr.keeping || gr.tasks-gr.deleting > 0) && gr.tasks+gr.pending < g.size {
			gr.pending++
			for gr.keeping {
				g.cond.Wait()
			}
			return gr, false
		}
	}
	gr = &shimGroup{name: g.tag + "-u" + strconv.FormatUint(uint64(uid), 10) + "-" + strconv.Itoa(g.next), uid: uid, pending: 1, keeping: true}
	g.next++
	g.open[uid] = append(g.open[uid], gr)
	return gr, true
}

// kept ends the making of gr's keeper: container id, or none ("").
func (g *shimGroups) kept(gr *shimGroup, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr.keeping = false
	if id != "" {
		gr.keeper = id
		g.keepers = append(g.keepers, gr)
	}
	g.cond.Broadcast()
}

// idleKeepers takes out of their groups, and returns, the keepers of the
// groups with no task nor create under way that are retired or have been
// idle since before before; with a zero before (Close), those of every
// group with no create under way: a group's jobs keep its shim serving
// without the keeper, and nobody joins a group after Close (the next
// runtime of the node would delete the keeper anyway, and where none
// comes, a keeper left would wait forever). Their groups are retired, so
// their shims may exit once their jobs are gone.
func (g *shimGroups) idleKeepers(before time.Time) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	g.keepers = slices.DeleteFunc(g.keepers, func(gr *shimGroup) bool {
		if gr.pending > 0 || !before.IsZero() && (gr.tasks > 0 || !gr.retired && !gr.idle.Before(before)) {
			return false
		}
		g.retire(gr)
		ids = append(ids, gr.keeper)
		gr.keeper = ""
		return true
	})
	return ids
}

// broken retires the group of container id (its shim failed it).
func (g *shimGroups) broken(id string) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr, ok := g.of[id]; ok {
		g.retire(gr)
	}
}

// done ends the create under way that join counted; created says whether
// container id's task may now exist in the group's shim. A nil g or gr
// (no groups) does nothing.
func (g *shimGroups) done(gr *shimGroup, id string, created bool) {
	if g == nil || gr == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr.pending--
	if created {
		gr.tasks++
		g.of[id] = gr
	}
	g.emptied(gr)
	g.cond.Broadcast()
}

// emptied retires gr, or starts its idle time if it has a keeper, when
// it has no task nor create under way.
func (g *shimGroups) emptied(gr *shimGroup) {
	if gr.tasks > 0 || gr.pending > 0 {
		return
	}
	if gr.keeper == "" {
		g.retire(gr)
	} else {
		gr.idle = time.Now()
	}
}

// retire takes gr out of the groups containers join.
func (g *shimGroups) retire(gr *shimGroup) {
	if gr.retired {
		return
	}
	gr.retired = true
	open := g.open[gr.uid]
	if i := slices.Index(open, gr); i >= 0 {
		open = slices.Delete(open, i, i+1)
	}
	if len(open) == 0 {
		delete(g.open, gr.uid)
	} else {
		g.open[gr.uid] = open
	}
}

// deleting is called before container id's task is deleted; the returned
// function after, with whether it is gone. A delete that leaves no task of
// the group outside the deletes under way retires the group and waits for
// its creates under way. A nil g (no groups) does nothing.
func (g *shimGroups) deleting(id string) func(gone bool) {
	if g == nil {
		return func(bool) {}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, ok := g.of[id]
	if !ok {
		return func(bool) {}
	}
	gr.deleting++
	if gr.keeper == "" && gr.tasks-gr.deleting <= 0 {
		g.retire(gr)
		for gr.pending > 0 {
			g.cond.Wait()
		}
	}
	return func(gone bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		gr.deleting--
		if gone {
			delete(g.of, id)
			gr.tasks--
		}
		g.emptied(gr)
		g.cond.Broadcast()
	}
}

// withShimGroup puts a container in shim group name.
func withShimGroup(name string) oci.SpecOpts {
	return oci.WithAnnotations(map[string]string{groupAnnotation: name})
}

// keepGroup creates gr's keeper (see groupAnnotation); on failure the
// group goes on without one.
func (r *Runtime) keepGroup(ctx context.Context, gr *shimGroup) (err error) {
	id := "shimkeeper-" + gr.name
	defer func() {
		if err != nil {
			id = ""
		}
		r.groups.kept(gr, id)
	}()
	cfg := runtime.TaskConfig{ID: id, Image: runtime.ImageHost, Args: []string{"/bin/true"}, UID: nobodyID, GID: nobodyID,
		Hostname: "shimkeeper", HostRootReadOnly: true}
	sopts := append(ocispec.Build(cfg, ocispec.Inputs{MemlockBytes: r.memlock}), oci.WithCgroup(r.cgroupsPath(id)), withShimGroup(gr.name))
	sopts = append(sopts, r.runtimeSpecOpts()...)
	if r.oci.crun {
		sopts = append(sopts, withCrunKeeperRoot)
	}
	// On the host's root, like a host-root job's container: no lease
	// (newHostContainer).
	err = r.newHostContainer(ctx, id,
		client.WithContainerLabels(map[string]string{keeperLabel: r.node, shimGroupLabel: gr.name}),
		client.WithRuntime(runcRuntime, r.shimOptions()),
		client.WithNewSpec(sopts...))
	if err != nil {
		return fmt.Errorf("create shim keeper %s: %w", id, err)
	}
	if _, err := r.client.TaskService().Create(ctx, &tasks.CreateTaskRequest{ContainerID: id}); err != nil {
		err = errgrpc.ToNative(err)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		return errors.Join(fmt.Errorf("create shim keeper task %s: %w", id, err), r.delete(cctx, id))
	}
	return nil
}

// withCrunKeeperRoot gives a keeper under crun the bundle's empty root
// instead of the host's: crun binds no host root read-only, and before
// 1.22 none at all (ociRuntime.hostRootProblem). Its process never starts,
// but crun looks the command (the wrapper's shell) up at create, so that
// one file is bound in.
func withCrunKeeperRoot(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	if s.Process == nil || len(s.Process.Args) == 0 || !filepath.IsAbs(s.Process.Args[0]) {
		return errors.New("shim keeper under crun: no absolute command in its spec")
	}
	cmd := s.Process.Args[0]
	bin, err := filepath.EvalSymlinks(cmd)
	if err != nil {
		return fmt.Errorf("shim keeper under crun: %w", err)
	}
	s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/" && m.Source == "/" })
	s.Mounts = append(s.Mounts, specs.Mount{Destination: cmd, Type: "bind", Source: bin, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	return nil
}

// nobodyID is the uid and gid keepers' processes have.
const nobodyID = 65534

// reapKeepers deletes the keepers idle for ShimKeeperIdle, every half of
// it, until ctx ends; then those of groups with nothing in them.
func (r *Runtime) reapKeepers(ctx context.Context, idle time.Duration) {
	t := time.NewTicker(idle / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.deleteKeepers(r.groups.idleKeepers(time.Time{}))
			return
		case <-t.C:
			r.deleteKeepers(r.groups.idleKeepers(time.Now().Add(-idle)))
		}
	}
}

func (r *Runtime) deleteKeepers(ids []string) {
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(r.nsCtx(context.Background()), cleanupTimeout)
		_ = r.delete(ctx, id) // a keeper left behind goes at the next New
		cancel()
	}
}

// deleteOldKeepers deletes the keepers an earlier runtime of this node
// left; the shims serve on for the containers still in them.
func (r *Runtime) deleteOldKeepers(ctx context.Context) error {
	ctx = r.nsCtx(ctx)
	ctrs, err := r.client.Containers(ctx, "labels."+`"`+keeperLabel+`"==`+strconv.Quote(r.node))
	if err != nil {
		return fmt.Errorf("list shim keepers: %w", err)
	}
	for _, c := range ctrs {
		if err := r.delete(ctx, c.ID()); err != nil {
			return fmt.Errorf("delete shim keeper %s: %w", c.ID(), err)
		}
	}
	return nil
}
