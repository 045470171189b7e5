package sched

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/sched/preempt"
	"github.com/gpud/gpud/gpud/spec"
)

// victimSearch is the preemption search of a cycle: for a job that cannot
// start, the nodes where stopping running jobs of QOS it may preempt
// (lower QOS priority, lower job priority, past PreemptMinRuntime) lets
// it start, each with the cheapest such set of victims (preempt.Choose,
// preempt.CostOf). It reads the cycle's nodes and running jobs and
// changes nothing; cycle.preempt commits the chosen victims.
type victimSearch struct {
	// idx caches victimNodes by preemptor QOS.
	idx map[string][]victimNode
	// cands is scratch for one node's candidates.
	cands []preempt.Candidate
}

// preemptOption is a node where the preemptor fits once victims stop.
type preemptOption struct {
	node    int
	victims []preempt.Candidate
	cost    preempt.Cost
}

// preempt tries to free resources for j by stopping lower-QOS running
// jobs. On success the victims are in the plan and j holds a reservation
// on the freed resources from when they are stopped.
func (c *cycle) preempt(j *Job, prio int64, dur int64) bool {
	q := c.qos[j.QOS]
	if q == nil || len(q.Preempt) == 0 || len(c.running) == 0 || j.AwaitingVictims {
		return false
	}
	m := c.memoFor(j)
	if m.noPreempt && dur >= m.noPreemptDur {
		return false
	}
	mode := q.PreemptMode
	if mode == "" {
		mode = preempt.ModeRequeue
	}
	var at int64
	if mode == preempt.ModeCheckpoint {
		at = int64(c.cfg.CheckpointGrace)
	}
	want := max(j.Req.Nodes, 1)
	opts := c.victims.search(c, j, q, prio, dur, at)
	if len(opts) < want {
		if !m.noPreempt || dur < m.noPreemptDur {
			m.noPreempt, m.noPreemptDur = true, dur
		}
		return false
	}
	if opts[want-1].cost.Victims == 0 {
		return false // fits without preemption: only reservations are in the way
	}
	seen := map[spec.JobID]bool{}
	var nodes, freed []int
	for _, o := range opts {
		nodes = append(nodes, o.node)
		for _, v := range o.victims {
			if seen[v.ID] {
				continue
			}
			seen[v.ID] = true
			rj := &c.running[v.Index]
			rj.gone = true
			for _, p := range rj.parts {
				freed = append(freed, p.node)
				w := c.nodes[p.node]
				if rj.end > c.off {
					// Free until its expected end, as it held them (as
					// State.End: GPUs are a mask, so releasing from now on
					// and holding again from its end left them taken
					// forever after it).
					w.prof.Unhold(c.off, rj.end, p.res)
				}
				// phys keeps the victim's part: it is stopped after this
				// cycle, so only the preemptor's reservation may use it.
				w.reserved = true
			}
			c.plan.Preemptions = append(c.plan.Preemptions, Preemption{Victim: v.ID, Preemptor: j.ID, Mode: mode,
				Reason: fmt.Sprintf("preempted by job %d (QOS %s)", j.ID, q.Name)})
		}
	}
	// What the victims free of a GPU-count reservation's GPUs within its
	// windows stays the reservation's.
	c.reholdGPUs(freed)
	slices.Sort(nodes)
	// The victims' nodes have more free from now on (for reservations, not
	// for starts now): reset their reservation bounds.
	for _, m := range c.memo {
		if m.key == nil {
			continue
		}
		for _, ni := range freed {
			if !m.elig[ni] {
				continue
			}
			m.key[ni] = 0
			m.heap.push(hent{0, ni})
		}
	}
	c.hold(j, nodes, at, dur)
	c.plan.Pending = append(c.plan.Pending, Pending{JobID: j.ID, Reason: spec.ReasonResources,
		Detail: fmt.Sprintf("preempting %d job(s)", len(seen)), ExpectedStart: c.now.Add(time.Duration(at))})
	return true
}

// search returns the want (j's node count) cheapest options for j, a
// preemptor of QOS q and priority prio that would run for dur from at
// (when its victims are stopped), in cost then node order; fewer when
// there are not that many.
func (s *victimSearch) search(c *cycle, j *Job, q *QOS, prio, dur, at int64) []preemptOption {
	eligibleVictim := func(rj *runJob) bool {
		return !rj.gone && rj.qos != nil && slices.Contains(q.Preempt, rj.qos.Name) && rj.qos.Priority < q.Priority &&
			rj.r.Priority < prio && c.now.Sub(rj.r.Start) >= c.cfg.PreemptMinRuntime
	}
	want := max(j.Req.Nodes, 1)
	// opts keeps the want cheapest options, by cost then node order.
	opts := make([]preemptOption, 0, want+1)
	// A single-node preemptor only looks at nodes running a QOS it may
	// preempt; a gang may mix such nodes with free ones.
	scan := s.victimNodes(c, q)
	if want > 1 {
		scan = nil
	}
	for si := 0; ; si++ {
		var i int
		if want > 1 {
			if si >= len(c.nodes) {
				break
			}
			i = si
		} else {
			if si >= len(scan) {
				break
			}
			// Nodes come in order of a lower bound on their cost: once
			// the bound passes the best option found, nothing can win.
			if len(opts) == want {
				best := opts[want-1].cost
				if scan[si].prio > best.MaxPriority || (scan[si].prio == best.MaxPriority && scan[si].lost > best.Lost) {
					break
				}
			}
			i = scan[si].node
		}
		w := c.nodes[i]
		cands := s.cands[:0]
		for _, ri := range w.running {
			rj := &c.running[ri]
			if eligibleVictim(rj) {
				cands = append(cands, preempt.Candidate{ID: rj.r.ID, Priority: rj.r.Priority, Start: rj.r.Start, LastCheckpoint: rj.r.LastCheckpoint, Index: ri})
			}
		}
		s.cands = cands
		if len(cands) == 0 && want == 1 {
			continue
		}
		// Cheap bound: even with every candidate gone, does it fit now?
		all := w.prof.Now()
		for _, v := range cands {
			for _, p := range c.running[v.Index].parts {
				if p.node == i {
					all.GPUs |= p.res.GPUs
					all.CPUs += p.res.CPUs
					all.MemMiB += p.res.MemMiB
					all.Allocs -= p.res.Allocs
				}
			}
		}
		if _, ok := fitRes(w, j, all); !ok || !c.eligible(w, j) {
			continue
		}
		victims, ok := preempt.Choose(cands, func(vs []preempt.Candidate) bool {
			var free backfill.Res
			if w.reserved {
				p := s.without(c, w, i, vs)
				free = p.Avail(at, backfill.Add(at, dur))
			} else {
				// Without reservations the profile only grows after now.
				free = w.prof.Now()
				for _, v := range vs {
					for _, p := range c.running[v.Index].parts {
						if p.node == i {
							free.GPUs |= p.res.GPUs
							free.CPUs += p.res.CPUs
							free.MemMiB += p.res.MemMiB
							free.Allocs -= p.res.Allocs
						}
					}
				}
			}
			_, ok := fitRes(w, j, free)
			return ok
		})
		if !ok {
			continue
		}
		o := preemptOption{node: i, cost: preempt.CostOf(victims, c.now)}
		k := len(opts)
		for k > 0 && o.cost.Compare(opts[k-1].cost) < 0 {
			k--
		}
		if k < want {
			o.victims = slices.Clone(victims)
			opts = slices.Insert(opts, k, o)
			if len(opts) > want {
				opts = opts[:want]
			}
		}
	}
	return opts
}

// victimNode is a node running work that q may preempt, with lower
// bounds on the cost of any victim set there: the least priority and the
// least lost work of those jobs.
type victimNode struct {
	node int
	prio int64
	lost time.Duration
}

// victimNodes lists (once per cycle and QOS) the nodes running a job of a
// QOS that q may preempt, cheapest bound first, then in node order. The
// bounds stay valid as victims are taken: a node's cost can only grow.
func (s *victimSearch) victimNodes(c *cycle, q *QOS) []victimNode {
	if nodes, ok := s.idx[q.Name]; ok {
		return nodes
	}
	var nodes []victimNode
	for i, w := range c.nodes {
		vn := victimNode{node: i, prio: 1<<63 - 1, lost: 1<<63 - 1}
		any := false
		for _, ri := range w.running {
			rj := &c.running[ri]
			if rq := rj.qos; rq != nil && slices.Contains(q.Preempt, rq.Name) && rq.Priority < q.Priority {
				any = true
				cd := preempt.Candidate{Start: rj.r.Start, LastCheckpoint: rj.r.LastCheckpoint}
				vn.prio = min(vn.prio, rj.r.Priority)
				vn.lost = min(vn.lost, cd.Lost(c.now))
			}
		}
		if any {
			nodes = append(nodes, vn)
		}
	}
	slices.SortStableFunc(nodes, func(a, b victimNode) int {
		if x := cmp.Compare(a.prio, b.prio); x != 0 {
			return x
		}
		return cmp.Compare(a.lost, b.lost)
	})
	if s.idx == nil {
		s.idx = map[string][]victimNode{}
	}
	s.idx[q.Name] = nodes
	return nodes
}

// without returns node w's profile with the victims' parts on it freed.
func (s *victimSearch) without(c *cycle, w *workNode, ni int, vs []preempt.Candidate) *backfill.Profile {
	p := w.prof.Clone()
	for _, v := range vs {
		rj := &c.running[v.Index]
		for _, part := range rj.parts {
			if part.node != ni {
				continue
			}
			if rj.end > c.off {
				p.Unhold(c.off, rj.end, part.res) // as in preempt
			}
		}
	}
	c.holdGPUsOn(&p, ni)
	return &p
}
