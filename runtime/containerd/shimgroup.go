package containerd

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"

	"github.com/containerd/containerd/v2/pkg/oci"
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
const groupAnnotation = "io.containerd.runc.v2.group"

// shimGroupLabel records a container's shim group (for whoever looks at
// the node's containers: which ones share a shim).
const shimGroupLabel = "gpud.shim-group"

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
// already).
func (g *shimGroups) join(uid uint32) *shimGroup {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, gr := range g.open[uid] {
		if gr.tasks-gr.deleting > 0 && gr.tasks+gr.pending < g.size {
			gr.pending++
			return gr
		}
	}
	gr := &shimGroup{name: g.tag + "-u" + strconv.FormatUint(uint64(uid), 10) + "-" + strconv.Itoa(g.next), uid: uid, pending: 1}
	g.next++
	g.open[uid] = append(g.open[uid], gr)
	return gr
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
	if gr.tasks == 0 && gr.pending == 0 {
		g.retire(gr)
	}
	g.cond.Broadcast()
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
	if gr.tasks-gr.deleting <= 0 {
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
		if gr.tasks == 0 && gr.pending == 0 {
			g.retire(gr)
		}
		g.cond.Broadcast()
	}
}

// withShimGroup puts a container in shim group name.
func withShimGroup(name string) oci.SpecOpts {
	return oci.WithAnnotations(map[string]string{groupAnnotation: name})
}
