package controller

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Expected is a pending job the scheduler expects to start on a node (a
// backfill reservation of the last full cycle), for the node to prepare
// the job's container ahead of it (node.toml prepared_containers): the
// job as it would be assigned, without its script and environment (the
// start brings them; they are no part of a container's shape), and its
// planned part on the node. Only the scheduler's reservations are sent,
// and it reserves a node for a job only where the job may run (partition,
// access rules, advance reservations), so no node prepares for a user
// who may not use it.
type Expected struct {
	Job   spec.Job
	Node  spec.NodeAlloc
	Start time.Time
}

// expectPerNode bounds the jobs a node is asked to prepare for: the
// soonest first (each waiting container holds a shim and runc's init).
const expectPerNode = 2

// noteExpected keeps, from a full cycle's plan, each node's expected
// single-node batch jobs within prefetchHorizon. Like notePrefetch it runs
// on the owner loop; heartbeats read the result off it.
func (c *Controller) noteExpected(plan sched.Plan, now time.Time) {
	if !c.expectAsked.Load() {
		return // no node prepares containers: nothing to note
	}
	var m map[string][]Expected
	for _, r := range plan.Reservations {
		if len(r.Nodes) != 1 || len(r.Nodes[0].MIG) > 0 || r.Start.After(now.Add(prefetchHorizon)) {
			continue // several nodes, MIG slices (made per job), or far off
		}
		rec := c.st.pending[r.JobID]
		if rec == nil || rec.view == nil || rec.job.Interactive || rec.job.HetJobID != 0 {
			continue
		}
		j := rec.view.Job() // the published copy: its slices are never changed
		j.Script, j.Env = "", nil
		if m == nil {
			m = map[string][]Expected{}
		}
		n := r.Nodes[0]
		m[n.Node] = append(m[n.Node], Expected{Job: j, Node: n, Start: r.Start})
	}
	for name, es := range m {
		slices.SortFunc(es, func(a, b Expected) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Job.ID, b.Job.ID)) })
		m[name] = es[:min(len(es), expectPerNode)]
	}
	c.expect.Store(&m)
}

// ExpectedFor returns the jobs node should prepare containers for (see
// Expected), soonest first; safe off the owner loop (heartbeats). The
// first call makes full cycles note them (until then none is asked).
func (c *Controller) ExpectedFor(node string) []Expected {
	if !c.expectAsked.Load() {
		c.expectAsked.Store(true)
	}
	if m := c.expect.Load(); m != nil {
		return (*m)[node]
	}
	return nil
}
