package controller

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/gpud/gpud/gpud/spec"
)

// NodeImages is a node's image inventory (api.ImageInventory): the
// images in its cache, as spec.ImageKey names them, and their version.
type NodeImages struct {
	Version string
	Images  []string
}

// PullNote is a pull of a job's image under way on a node
// (api.PullProgress).
type PullNote struct {
	Job         spec.JobID
	Done, Total int64
	Prefetch    bool
}

// nodeImages is a node's inventory as the scheduler reads it; never
// modified once stored (snapshots share the set).
type nodeImages struct {
	version string
	set     map[string]bool
}

// NodeImages takes what a node's heartbeat says of images: its cache's
// inventory when it changed (inv nil: unchanged), for the scheduler to
// prefer nodes that hold a job's image (sched/image.go), and the pulls
// under way for jobs, shown on the jobs (squeue %r, scontrol show job).
// It returns the inventory version the controller holds for the node.
//
// The inventory is kept in memory only, off the owner loop like the
// heartbeat itself, and shown to no user: which images a node holds
// tells which images its users run. A restarted (or newly elected)
// controller answers "" and the node sends it again. Pulls go through
// the owner loop only while the node reports some (or just stopped),
// and a node speaks only for its own jobs: a job's own pull counts only
// from a node of its current allocation, a prefetch only from a node the
// controller asked to prefetch that job's image.
func (c *Controller) NodeImages(ctx context.Context, who Caller, name string, inv *NodeImages, pulls []PullNote) (string, error) {
	if err := requireRoot(who, "a node's image report"); err != nil {
		return "", err
	}
	h := c.heardRec(name)
	if inv != nil {
		ni := &nodeImages{version: inv.Version, set: make(map[string]bool, len(inv.Images))}
		for _, img := range inv.Images {
			ni.set[img] = true
		}
		if old := h.images.Swap(ni); old == nil || old.version != ni.version {
			c.imageMoves.add(name)
		}
	}
	version := ""
	if ni := h.images.Load(); ni != nil {
		version = ni.version
	}
	if len(pulls) == 0 && !h.pulling.Load() {
		return version, nil
	}
	err := c.call(ctx, func(tx *txn) error {
		c.notePulls(tx, name, pulls)
		return nil
	})
	h.pulling.Store(len(pulls) > 0)
	return version, err
}

// notePulls sets the pulls node reports on their jobs and clears those
// it reported before and no longer does. Shown, not persisted.
func (c *Controller) notePulls(tx *txn, node string, pulls []PullNote) {
	if c.st.pullsOn == nil {
		c.st.pullsOn = map[string][]spec.JobID{}
	}
	var now []spec.JobID
	prefetching := c.PrefetchFor(node)
	for _, p := range pulls {
		rec := c.st.jobs[p.Job]
		if rec == nil {
			continue
		}
		j := &rec.job
		if p.Prefetch {
			if j.State != spec.StatePending || !slices.ContainsFunc(prefetching, func(f Prefetch) bool { return f.Job == p.Job }) {
				continue
			}
		} else if _, ok := rec.livePart(node); !ok || j.State != spec.StateRunning {
			continue
		}
		now = append(now, p.Job)
		ip := &spec.ImagePull{Node: node, Done: p.Done, Total: p.Total, Prefetch: p.Prefetch}
		if j.ImagePull == nil || *j.ImagePull != *ip {
			j.ImagePull = ip
			tx.touched[j.ID] = rec
		}
	}
	for _, id := range c.st.pullsOn[node] {
		if slices.Contains(now, id) {
			continue
		}
		if rec := c.st.jobs[id]; rec != nil && rec.job.ImagePull != nil && rec.job.ImagePull.Node == node {
			rec.job.ImagePull = nil
			tx.touched[id] = rec
		}
	}
	if len(now) == 0 {
		delete(c.st.pullsOn, node)
	} else {
		c.st.pullsOn[node] = now
	}
}

// imageMoves are the nodes whose inventory changed since the scheduler's
// State (sched.State, the last full cycle's) last took it: heartbeats
// store inventories off the owner loop, and the next incremental cycle
// hands them to the State (State.SetImages), so that a job submitted
// after its image reached a node is placed there without waiting for a
// full cycle. A full cycle's snapshot reads them all anew.
type imageMoves struct {
	mu    sync.Mutex
	nodes map[string]bool
}

func (m *imageMoves) add(name string) {
	m.mu.Lock()
	if m.nodes == nil {
		m.nodes = map[string]bool{}
	}
	m.nodes[name] = true
	m.mu.Unlock()
}

// take returns the nodes added since the last take, sorted, and forgets
// them.
func (m *imageMoves) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.nodes) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(m.nodes))
	clear(m.nodes)
	return names
}

// nodeImageSet is the inventory of node name for the scheduler (nil:
// none known).
func (c *Controller) nodeImageSet(name string) map[string]bool {
	if v, ok := c.heard.Load(name); ok {
		if ni := v.(*heardRec).images.Load(); ni != nil {
			return ni.set
		}
	}
	return nil
}

// pullCost records on the job's part on node what its image cost before
// it started (an EventStarted's PullMS and PullBytes) and ends the pull's
// note; it reports whether the job changed.
func (c *Controller) pullCost(rec *jobRec, node string, ev NodeEvent) bool {
	changed := false
	if p := rec.job.ImagePull; p != nil && p.Node == node {
		rec.job.ImagePull = nil
		changed = true
	}
	if ev.PullMS == 0 && ev.PullBytes == 0 {
		return changed
	}
	// The published view shares the Alloc (newView): a changed part goes
	// into a copy.
	var a *spec.Alloc
	for i, p := range rec.job.Alloc.Nodes {
		if p.Node == node && !p.Ended && (p.PullMS != ev.PullMS || p.PullBytes != ev.PullBytes) {
			if a == nil {
				a = cloneAlloc(rec.job.Alloc)
			}
			a.Nodes[i].PullMS, a.Nodes[i].PullBytes = ev.PullMS, ev.PullBytes
		}
	}
	if a != nil {
		rec.job.Alloc = a
		changed = true
	}
	return changed
}
