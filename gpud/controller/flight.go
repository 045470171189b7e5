package controller

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// A full scheduling cycle over a large queue held the owner loop for its
// whole length: 0.1–2.5 s over 50,000–100,000 queued jobs in the
// 1,000-node loadtest, during which no start, exit or heartbeat was
// answered. A flight takes the snapshot on the owner loop, as before,
// and runs sched.NewState (the pure scheduler: ordering the queue,
// placing, reserving) on a goroutine of its own; the owner loop goes on
// serving calls meanwhile, and the last State (when nothing only a full
// cycle follows has happened) goes on answering submissions and job ends
// as before. When the plan comes back, the owner loop lands it: a start
// is applied only where it still holds — the job still pending and not
// changed since the snapshot, its nodes not changed, up, not draining,
// with the GPUs, CPUs and memory it was given free now — and what no
// longer holds is left to the next event or cycle. The new State is then
// told what happened since its snapshot (sched.State Retract, Release,
// Taken, Gone, Offer) and answers the next events; when something only a
// full cycle follows happened meanwhile (a node change, a config reload,
// a requeue: what sets kick), the State is dropped and another full
// cycle follows.
//
// Only the plain case flies: a cycle the incremental path may follow
// (no dependencies, no %MAX arrays, no preemptor waiting, no
// heterogeneous job), no QOS that preempts, no advance reservation, no
// node powered down, no fractional or MIG job pending. Anything else
// runs synchronously, as before. So do cycles that took under asyncMin
// or over fewer than flyMinJobs pending jobs: a small queue's cycle is
// cheaper than a hand-over.

// flyMinJobs is schedState.flyMinJobs's default: a full cycle plans off
// the owner loop only over at least this many pending jobs.
const flyMinJobs = 2000

// asyncMinFullCycle is schedState.asyncMin's default: full cycles that
// took at least this long (snapshot and planning) plan off the owner
// loop.
const asyncMinFullCycle = 50 * time.Millisecond

// flight is a full cycle planning off the owner loop.
type flight struct {
	now     time.Time     // the controller clock the plan is for
	snapDur time.Duration // the owner loop's time taking the snapshot
	done    chan flightResult
	// oldInc: the last State answers events while the plan is made.
	oldInc bool
	// kicked: a change only a full cycle follows came meanwhile.
	kicked bool
	// Since the snapshot: jobs the owner loop started (by the last
	// State), jobs whose resources came back, jobs submitted, jobs
	// changed in any way, nodes saved, nodes whose image inventory moved.
	started, ended, submitted []spec.JobID
	touched                   map[spec.JobID]bool
	nodes                     map[string]bool
	images                    []string
}

type flightResult struct {
	st   *sched.State
	plan sched.Plan
	err  error
	took time.Duration
}

// flightDone is the channel the flight's plan comes back on; nil (never
// ready) when none is under way.
func (c *Controller) flightDone() <-chan flightResult {
	if f := c.sched.flight; f != nil {
		return f.done
	}
	return nil
}

// mayFly reports whether the full cycle over snap may plan off the owner
// loop (see above).
func (c *Controller) mayFly(snap *sched.Snapshot) bool {
	s := &c.sched
	if s.asyncMin <= 0 || s.fullDur < s.asyncMin || len(snap.Jobs) < s.flyMinJobs || s.afterDeps || s.anyDeps || len(s.arrayLimited) > 0 || len(s.waiting) > 0 ||
		len(snap.AdvanceReservations) > 0 || c.following {
		return false
	}
	for _, q := range c.cfg.QOS {
		if len(q.Preempt) > 0 {
			return false
		}
	}
	for i := range snap.Nodes {
		if p := snap.Nodes[i].Power; p != "" && p != spec.PowerOn {
			return false
		}
	}
	for i := range snap.Jobs {
		if r := &snap.Jobs[i].Req; r.GPUFraction > 0 || r.GPUProfile != "" {
			return false
		}
	}
	return true
}

// fly starts planning snap (taken at now, in snapDur) off the owner
// loop. The last State keeps answering events meanwhile when it may
// (oldInc: nothing only a full cycle follows made this one due).
func (c *Controller) fly(snap *sched.Snapshot, now time.Time, snapDur time.Duration, oldInc bool) {
	s := &c.sched
	f := &flight{now: now, snapDur: snapDur, done: make(chan flightResult, 1), oldInc: oldInc,
		touched: map[spec.JobID]bool{}, nodes: map[string]bool{}}
	s.flight = f
	cfg := c.schedConfig()
	hook := s.flightHook
	go func() {
		var r flightResult
		began := time.Now()
		defer func() {
			if p := recover(); p != nil {
				r = flightResult{err: fmt.Errorf("%v\n%s", p, debug.Stack())}
			}
			r.took = time.Since(began)
			f.done <- r
		}()
		if hook != nil {
			hook()
		}
		r.st, r.plan = sched.NewState(snap, now, cfg)
	}()
}

// noteFlight records tx's changes for the flight under way (commit).
func (c *Controller) noteFlight(tx *txn) {
	f := c.sched.flight
	if f == nil {
		return
	}
	for id := range tx.touched {
		f.touched[id] = true
	}
	for name := range tx.persistNodes {
		f.nodes[name] = true
	}
	if len(tx.admin) > 0 {
		f.kicked = true // partitions, reservations, node states the snapshot had
	}
}

// policyChanged tells the flight under way that the policy it plans
// under changed (config reload, admin change).
func (c *Controller) policyChanged() {
	if f := c.sched.flight; f != nil {
		f.kicked = true
	}
}

// land applies the flight's plan where it still holds and keeps its
// State when it may (see above).
func (c *Controller) land(ctx context.Context, r flightResult) {
	s := &c.sched
	f := s.flight
	s.flight = nil
	if c.following {
		return // no longer the leader: the leader schedules
	}
	start := time.Now()
	tx := newTxn()
	if err := c.safely(fmt.Sprintf("scheduling cycle (snapshot %d) landing", s.snapID), func() error { return c.landInto(tx, f, r) }); err != nil {
		s.inc = nil
		s.dirty, s.full = true, true
	}
	if c.commit(ctx, tx) != nil {
		s.inc = nil // logged by commit; inc may be ahead of the reloaded state
	}
	// Pacing counts the owner loop's time only: the snapshot and this.
	s.lastDur = f.snapDur + time.Since(start)
	s.lastEnd = time.Now()
	c.obs.CycleDone(s.lastDur)
}

func (c *Controller) landInto(tx *txn, f *flight, r flightResult) error {
	s := &c.sched
	s.submitted, s.freed = s.submitted[:0], s.freed[:0] // in f: the new State learns them below
	if r.err != nil {
		c.log.Error("scheduling cycle failed", "err", r.err)
		s.inc = nil
		s.dirty, s.full = true, true
		return nil
	}
	now := c.now()
	kicked := f.kicked || s.full
	s.stale = false // this is the periodic cycle's answer
	plan := r.plan
	var dropped []spec.JobID
	held := map[string]*usage{}
	kept := plan.Starts[:0:0]
	for _, st := range plan.Starts {
		if c.startHolds(f, st, held) {
			kept = append(kept, st)
		} else {
			dropped = append(dropped, st.JobID)
		}
	}
	plan.Starts = kept
	c.notePrefetch(plan, now)
	if cfg := c.schedConfig(); !cfg.Priority.Weights.Zero() {
		r.st.EachPriority(func(id spec.JobID, total int64) {
			if rec := c.st.pending[id]; rec != nil && rec.job.Priority != total {
				rec.job.Priority = total
				tx.touched[id] = rec
			}
		})
	}
	c.apply(tx, plan, now)
	s.fullDur = f.snapDur + r.took
	s.flights++
	s.flightDropped += len(dropped)
	c.log.Info("scheduling cycle landed", "snapshot", s.snapID, "starts", len(kept), "dropped", len(dropped), "kicked", kicked,
		"started_meanwhile", len(f.started), "ended_meanwhile", len(f.ended), "planned_ms", r.took.Milliseconds(), "snapshot_ms", f.snapDur.Milliseconds())
	if kicked {
		// Only a full cycle follows what changed: it comes next.
		s.inc = nil
		s.dirty, s.full = true, true
		return nil
	}
	st := r.st
	ok := true
	for _, id := range dropped {
		ok = ok && st.Retract(id)
	}
	for _, id := range f.ended {
		st.Release(id)
	}
	started := map[spec.JobID]bool{}
	for _, id := range f.started {
		started[id] = true
		rec := c.st.jobs[id]
		if rec == nil || rec.job.Alloc == nil || rec.job.State.Terminal() || rec.job.State == spec.StatePending {
			st.Gone(id)
			continue
		}
		var live []spec.NodeAlloc
		for _, p := range rec.job.Alloc.Nodes {
			if !p.Ended {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			st.Gone(id)
		} else {
			ok = ok && st.Taken(c.schedJob(&rec.job), live, now)
		}
	}
	for id := range f.touched {
		if !started[id] && c.st.pending[id] == nil {
			st.Gone(id) // left the queue meanwhile (nothing it holds: else it was started above)
		}
	}
	if !ok {
		// Something the State cannot follow (a fractional job started
		// meanwhile): a full cycle decides next.
		s.inc = nil
		s.dirty, s.full = true, true
		return nil
	}
	for _, name := range f.images {
		st.SetImages(name, c.nodeImageSet(name))
	}
	// Its fairshare report is the snapshot's, taken at f.now (as the
	// synchronous full cycle's at its now).
	s.inc, s.incAt, s.incOK, s.full, s.shareAt = st, f.now, true, false, f.now
	s.incEvents = len(f.ended) + len(f.submitted)
	c.apply(tx, st.Offer(now), now)
	// Together, in the order a full cycle takes them (as cycleIncremental).
	jobs := make([]sched.Job, 0, len(f.submitted))
	for _, id := range f.submitted {
		if rec := c.st.pending[id]; rec != nil {
			jobs = append(jobs, c.schedJob(&rec.job))
		}
	}
	if len(jobs) > 0 {
		c.apply(tx, st.SubmitAll(jobs, now), now)
	}
	if st.Capped() {
		tx.more = true
	}
	return nil
}

// startHolds reports whether a start the flight planned still holds now
// (see above); held is what this landing's earlier starts took, by node,
// on top of what the node holds (state.usage), and a start that holds
// is added to it.
func (c *Controller) startHolds(f *flight, st sched.Start, held map[string]*usage) bool {
	if rec := c.st.pending[st.JobID]; rec == nil || f.touched[st.JobID] {
		return false
	}
	for _, p := range st.Nodes {
		n := c.st.nodes[p.Node]
		if n == nil || f.nodes[p.Node] || n.down || n.adminDown() || n.late || n.drain || p.GPUFraction > 0 || len(p.MIG) > 0 {
			return false
		}
		u := held[p.Node]
		if u == nil {
			x := c.st.usage(n)
			u = &x
			held[p.Node] = u
		}
		if slices.ContainsFunc(p.GPUs, func(g string) bool { return u.gpus[g] }) ||
			u.cpus+p.CPUs > n.inv.CPUs || u.mem+p.MemMiB > n.inv.MemMiB {
			return false
		}
	}
	for _, p := range st.Nodes {
		u := held[p.Node]
		for _, g := range p.GPUs {
			u.gpus[g] = true
		}
		u.cpus += p.CPUs
		u.mem += p.MemMiB
	}
	return true
}
