package sched

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// Heterogeneous jobs: the components of one (Job.HetJobID) each have
// their own request, partition and limit, and start in the same cycle or
// not at all, like a gang's nodes. The group is decided when its first
// component comes up in queue order: each component is placed in offset
// order on what the ones before it left (so components may share a
// node), and if one does not fit, the starts already made for the group
// are undone and every component waits.
//
// A group that does not fit makes no backfill reservation and preempts
// nothing: lower jobs that fit may start before it (docs/slurm-compat.md).

// hetGroup is the pending components of heterogeneous job lead in the
// queue, in offset order.
func (c *cycle) hetGroup(lead spec.JobID) []*Job {
	if c.het == nil {
		c.het = map[spec.JobID][]*Job{}
		for _, wj := range c.queue {
			if id := wj.j.HetJobID; id != 0 {
				c.het[id] = append(c.het[id], wj.j)
			}
		}
		for _, g := range c.het {
			slices.SortFunc(g, func(a, b *Job) int { return cmp.Compare(a.HetOffset, b.HetOffset) })
		}
	}
	return c.het[lead]
}

// hetStarted is one component started while its group is decided.
type hetStarted struct {
	j     *Job
	picks []pick
	parts []runPart
	dur   int64
}

// decideHet starts the group of component j whole, or explains why each
// of its components waits.
func (c *cycle) decideHet(j *Job) {
	lead := j.HetJobID
	if c.hetDone == nil {
		c.hetDone = map[spec.JobID]bool{}
	}
	if c.hetDone[lead] {
		return
	}
	c.hetDone[lead] = true
	group := c.hetGroup(lead)
	wait := func(reason, detail string) {
		for _, g := range group {
			c.pending(g, reason, detail)
		}
	}
	if len(group) != j.HetSize {
		wait(spec.ReasonResources, fmt.Sprintf("heterogeneous job %d: %d of its %d components are pending; the others must be too", lead, len(group), j.HetSize))
		return
	}
	for _, g := range group {
		if reason, detail := c.gate(g); reason != "" {
			wait(reason, fmt.Sprintf("component %d+%d: %s", lead, g.HetOffset, cmp.Or(detail, reason)))
			return
		}
		if isFrac(g) || g.Req.GPUProfile != "" || g.Reservation != "" {
			wait(spec.ReasonBadConstraints, fmt.Sprintf("component %d+%d asks for GPU shares, MIG slices or a reservation, which heterogeneous jobs cannot have", lead, g.HetOffset))
			return
		}
	}
	if c.atCap() {
		wait(spec.ReasonPriority, capDetail)
		return
	}
	nstarts := len(c.plan.Starts)
	var done []hetStarted
	for _, g := range group {
		dur := durOf(g)
		// A fresh memo: the group's own starts change what is free, and
		// are undone if a later component does not fit, so what they make
		// fit or not must not be remembered for other jobs of the shape.
		picks, fitting, _ := c.placeNow(g, dur, &fitMemo{})
		if picks == nil {
			c.undoHet(done, nstarts)
			reason := spec.ReasonPriority
			if !c.blocked {
				reason, c.blocked = spec.ReasonResources, true
			}
			wait(reason, fmt.Sprintf("heterogeneous job %d: component %d+%d needs %s; %d of %d nodes fit it now",
				lead, lead, g.HetOffset, describe(g.Req), fitting, len(c.nodes)))
			return
		}
		picks = slices.Clone(picks)
		parts := c.start(g, picks, dur)
		done = append(done, hetStarted{j: g, picks: picks, parts: parts, dur: dur})
	}
}

// undoHet takes back the starts a group made before one of its
// components did not fit: what they took on each node, their plan
// entries (the plan had nstarts before) and their count against limits.
func (c *cycle) undoHet(done []hetStarted, nstarts int) {
	for i := len(done) - 1; i >= 0; i-- {
		s := done[i]
		for _, p := range s.parts {
			w := c.nodes[p.node]
			addPhys(w, p.res)
			w.prof.Unhold(c.off, backfill.Add(c.off, s.dur), p.res)
			c.rebucket(p.node)
		}
		if c.track {
			delete(c.started, s.j.ID)
		}
		c.lim.remove(s.j.QOS, s.j.User, s.j.Account, startGPUs(s.j, s.picks))
	}
	if len(done) > 0 {
		c.gen++
	}
	c.plan.Starts = c.plan.Starts[:nstarts]
}
