package sched

import (
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/spec"
)

// State keeps a full cycle's work — the queue in priority order, every
// node's time–resource profile with its starts and reservations, and the
// per-shape fit memos and reservation heaps — so that an event-triggered
// cycle after one submit or one end costs a small fraction of a full
// cycle.
//
// The controller keeps one State between full cycles: after a full cycle
// (NewState, on a timer or after many events) it answers a submit with
// Submit and a job end with End, applies the returned (partial) Plan the
// same way as a full one, and runs a new full cycle periodically; a node
// change or config reload should trigger a full cycle. Each incremental
// answer is safe — it never over-allocates and never delays a
// reservation — but may be conservative:
//   - Submit treats the new job as backfill: it starts if it fits now
//     without delaying any reservation; otherwise it waits (and gets a
//     reservation behind the existing ones). It never preempts; a job
//     whose QOS may preempt should trigger a full cycle.
//   - End frees the job's resources and offers them, in priority order, to
//     pending single-node jobs; gangs and earlier reservations for other
//     jobs wait for the next full cycle to move.
//
// A State is not safe for concurrent use; Plans it returns carry only
// what changed.
type State struct {
	c    *cycle
	done map[spec.JobID]bool // started since the full cycle
	runs map[spec.JobID]int  // snapshot running job → index (running)
	// head is the queue index before which every job has started
	// (done): End's walk starts there. Starts go mostly to the head of
	// the queue, and walking thousands of started jobs at each End cost
	// more than the End itself in a 100,000-job drain.
	head int
	// stale is set by an End that freed MIG slices or a GPU share (see
	// Stale).
	stale bool
	// gpuless counts the jobs queued since the full cycle that ask for
	// no GPU (whether they started or not): while there is none, CPUs
	// left on a node with no GPU free are no room for anyone (room).
	gpuless int
}

// gpuless reports whether j asks for no GPU at all.
func gpuless(j *Job) bool {
	return j.Req.GPUsPerNode == 0 && j.Req.GPUFraction == 0 && j.Req.GPUProfile == ""
}

// NewState runs a full cycle (the same Plan as Schedule) and keeps its
// work for Submit and End.
func NewState(snap *Snapshot, now time.Time, cfg Config) (*State, Plan) {
	return newState(newCycle(snap, now, cfg))
}

// newState runs the full cycle c and keeps its work.
func newState(c *cycle) (*State, Plan) {
	c.track = true
	c.started = map[spec.JobID]startRec{}
	c.resv = map[spec.JobID]startRec{}
	plan := c.run()
	st := &State{c: c, done: map[spec.JobID]bool{}}
	for _, s := range plan.Starts {
		st.done[s.JobID] = true
	}
	for _, wj := range c.queue {
		if gpuless(wj.j) {
			st.gpuless++
		}
	}
	return st, plan
}

// running finds a snapshot running job's index. The map is built at
// the first End: a State that answers none (the simulator's, one per
// event) does not pay for it.
func (st *State) running(id spec.JobID) (int, bool) {
	if st.runs == nil {
		st.runs = make(map[spec.JobID]int, len(st.c.running))
		for i := range st.c.running {
			st.runs[st.c.running[i].r.ID] = i
		}
	}
	i, ok := st.runs[id]
	return i, ok
}

// EachPriority calls fn with each job the full cycle ordered and its total
// priority, in scheduling order (jobs it started included). It is the
// same Total that Priorities computes, without a second pass.
func (st *State) EachPriority(fn func(id spec.JobID, total int64)) {
	for _, w := range st.c.queue {
		fn(w.j.ID, w.prio)
	}
}

func (st *State) at(now time.Time) {
	st.c.plan = Plan{}
	st.c.het, st.c.hetDone = nil, nil
	st.c.unplaced = st.c.unplaced[:0]
	st.c.off = max(int64(now.Sub(st.c.now)), st.c.off)
}

// SetFairshare replaces the fairshare report the State's priorities read
// (Snapshot.Fairshare). With no job pending in the State, a report taken
// now makes its next SubmitAll what a full cycle now would give, however
// old the State; jobs already queued keep the order they had.
func (st *State) SetFairshare(r *fairshare.Report) { st.c.share = r }

// Submit schedules one newly submitted job at now.
func (st *State) Submit(j Job, now time.Time) Plan {
	return st.SubmitAll([]Job{j}, now)
}

// SubmitAll schedules jobs submitted together at now, in the order a full
// cycle decides them (queueOrder: priority, then submit time, then id),
// with one Plan for them all. Into a State with no job pending it decides
// them as a full cycle over a snapshot taken then would, at any age of
// the State, as long as it was told every end
// (TestStateThroughEmptyQueueMatchesFullCycle); with jobs pending it
// answers each as Submit describes.
func (st *State) SubmitAll(jobs []Job, now time.Time) Plan {
	c := st.c
	st.at(now)
	ws := make([]wjob, len(jobs))
	for i := range jobs {
		ws[i] = wjob{j: &jobs[i], prio: c.priority(&jobs[i]).Total}
	}
	if len(ws) > 1 {
		slices.SortFunc(ws, queueOrder)
	}
	for _, wj := range ws {
		i, _ := slices.BinarySearchFunc(c.queue, wj, queueOrder)
		c.queue = slices.Insert(c.queue, i, wj)
		st.head = min(st.head, i)
		if gpuless(wj.j) {
			st.gpuless++
		}
		if i > c.capAt {
			// Behind jobs the full cycle's start limit held back: it
			// waits for them (Resume decides it in its turn).
			c.pending(wj.j, spec.ReasonPriority, capDetail)
			continue
		}
		c.capAt++
		c.decide(wj, false)
	}
	c.placementMetrics()
	for _, s := range c.plan.Starts {
		st.done[s.JobID] = true
	}
	return c.plan
}

// End frees a running job's resources at now (it ended, was cancelled or
// its node part exited) and starts the pending single-node jobs, in
// priority order, that now fit on its nodes without delaying any
// reservation.
func (st *State) End(id spec.JobID, now time.Time) Plan {
	c := st.c
	st.at(now)
	var freed []int
	if rec, ok := c.started[id]; ok {
		for _, p := range rec.parts {
			w := c.nodes[p.node]
			addPhys(w, p.res)
			c.rebucket(p.node)
			if rec.end > c.off {
				w.prof.Unhold(max(rec.at, c.off), rec.end, p.res)
			}
			freed = append(freed, p.node)
		}
		// Started since the full cycle (or by it): its count against
		// the limits ends with it, as a snapshot running job's does
		// below. (It was kept until the next full cycle, holding back
		// the user's next job under a QOS MaxJobsPerUser that far.)
		c.lim.remove(rec.lim.qos, rec.lim.user, rec.lim.account, rec.lim.gpus)
		st.stale = st.stale || rec.partial
		delete(c.started, id)
	} else if ri, ok := st.running(id); ok && !c.running[ri].gone {
		rj := &c.running[ri]
		rj.gone = true
		for _, p := range rj.parts {
			w := c.nodes[p.node]
			addPhys(w, p.res)
			c.rebucket(p.node)
			if rj.end > c.off {
				// Free until its expected end, as it held them; from
				// there on they were free already, or a reservation's.
				// (Releasing from now on and holding again from its end
				// on left its GPUs taken forever after its end: no job
				// whose time limit outlasts the ended job's could take
				// them until the next full cycle.)
				w.prof.Unhold(c.off, rj.end, p.res)
			}
			freed = append(freed, p.node)
		}
		c.lim.remove(rj.r.QOS, rj.r.User, rj.r.Account, rj.gpuCount)
		st.stale = st.stale || slices.ContainsFunc(rj.r.Nodes, func(a spec.NodeAlloc) bool { return len(a.MIG) > 0 || a.GPUFraction > 0 })
	} else {
		return c.plan
	}
	c.gen++
	slices.Sort(freed)
	freed = slices.Compact(freed)
	c.reholdGPUs(freed) // a GPU-count reservation's GPUs it freed stay held
	// Reservation bounds of the freed nodes may be earlier now, and a
	// shape that failed to place (the memo's cached failure and its
	// cursor past nodes that did not fit) may fit them now: without
	// this, the next submission of a shape that waited once stayed
	// pending ("Priority") on a free node until the next full cycle.
	for _, m := range c.memo {
		m.failed = false
		if len(freed) > 0 {
			m.physCursor = min(m.physCursor, freed[0])
		}
		if m.key == nil {
			continue
		}
		for _, ni := range freed {
			if m.elig[ni] {
				m.key[ni] = c.off
				m.heap.push(hent{c.off, ni})
			}
		}
	}
	for st.head < len(c.queue) && st.done[c.queue[st.head].j.ID] {
		st.head++
	}
	// failed are the shapes (with a duration) that fit none of the freed
	// nodes: a later job of the same shape cannot fit either, since what
	// is free only shrinks as jobs start, unless a start gives back a
	// reservation (then failed is cleared). Without it an end whose
	// resources no job may take walked the whole queue, and in a queue
	// of thousands of alike jobs that cost more than a full cycle.
	type failKey struct {
		s   shape
		dur int64
	}
	var failed map[failKey]bool
	var lastFailed failKey // the last added to failed
	for _, wj := range c.queue[st.head:] {
		if !st.room(freed) {
			break
		}
		j := wj.j
		if st.done[j.ID] || wantNodes(j) > 1 || j.Reservation != "" {
			continue
		}
		dur := durOf(j)
		rec, hasResv := c.resv[j.ID]
		k, keyed := shapeOf(j)
		keyed = keyed && !hasResv && len(j.Alternatives) == 0
		fk := failKey{k, dur}
		if keyed && (fk == lastFailed || failed[fk]) {
			continue // a queue of alike jobs compares, not hashes
		}
		if reason, _ := c.gate(j); reason != "" {
			continue
		}
		if hasResv {
			st.unhold(rec)
		}
		started := false
		// In its own partition first, then its alternatives (-p a,b).
	choices:
		for _, cj := range c.choices(j) {
			for _, ni := range freed {
				w := c.nodes[ni]
				if !c.eligible(w, cj) {
					continue
				}
				if g, ok := fitRes(w, cj, w.freeNow(c.off, dur)); ok {
					c.start(cj, []pick{{node: ni, gpus: g}}, dur)
					st.done[j.ID] = true
					delete(c.resv, j.ID)
					started = true
					break choices
				}
			}
		}
		switch {
		case hasResv && !started:
			st.rehold(rec)
		case hasResv:
			clear(failed) // its reservation's holds are gone
			lastFailed = failKey{}
		case !started && keyed:
			if failed == nil {
				failed = map[failKey]bool{}
			}
			failed[fk] = true
			lastFailed = fk
		}
	}
	return c.plan
}

// Compact drops what the State keeps of past events when no job is
// pending in it: the queue entries of the jobs it started, the fit memos,
// what the blocked jobs that since started left behind (the first
// blocked job's "Resources", the backfill depth used), and every node
// profile's steps before now (Profile.Fold). A State told every event
// since its full cycle keeps the jobs it started and the snapshot's
// running jobs, which is all a full cycle over an empty queue reads, so
// it answers as before (TestStateThroughEmptyQueueMatchesFullCycle
// compacts); but its size is that of what runs, not of every submission
// and end since its full cycle. It reports false, changing nothing,
// when a queued job has not started or a reservation is held.
func (st *State) Compact(now time.Time) bool {
	c := st.c
	if len(c.resv) > 0 {
		return false
	}
	for _, wj := range c.queue[st.head:] {
		if !st.done[wj.j.ID] {
			return false
		}
	}
	st.at(now)
	if cap(c.queue) > 1024 {
		c.queue = nil
	} else {
		clear(c.queue)
		c.queue = c.queue[:0]
	}
	c.capAt, st.head, st.gpuless = 0, 0, 0
	clear(st.done)
	c.blocked, c.nresv = false, 0
	clear(c.memo)
	for _, w := range c.nodes {
		w.prof.Fold(c.off)
	}
	return true
}

// Stale reports whether an End freed what the State cannot give back:
// MIG slices (and a GPU their first slice took from whole-GPU jobs) or a
// fractional GPU share. The State stays safe (it under-counts what is
// free, never over-allocates) but no longer answers as a full cycle
// would: jobs wait, or slices spread over GPUs a full cycle would pack.
// The controller then runs a full cycle instead of keeping it.
func (st *State) Stale() bool { return st.stale }

// Capped reports whether the full cycle's start limit
// (Config.MaxStartsPerCycle) held back jobs that Resume has not decided
// yet.
func (st *State) Capped() bool { return st.c.capAt < len(st.c.queue) }

// Resume goes on where the full cycle's start limit stopped it: it decides
// the jobs held back, in scheduling order, as the full cycle would have
// (starts, reservations, reasons), until the limit is reached again. It
// never preempts: it stops before a job whose QOS may preempt and reports
// false, and a full cycle (which may preempt for it) should follow. A
// queue that a full cycle takes a large fraction of a second to order is
// thus walked once per full cycle, not once per limit's worth of starts.
func (st *State) Resume(now time.Time) (Plan, bool) {
	c := st.c
	st.at(now)
	ok := true
	for c.capAt < len(c.queue) && !c.atCap() {
		wj := c.queue[c.capAt]
		if st.done[wj.j.ID] {
			c.capAt++
			continue
		}
		if q := c.qos[wj.j.QOS]; q != nil && len(q.Preempt) > 0 {
			ok = false
			break
		}
		c.capAt++
		c.decide(wj, false)
	}
	c.placementMetrics()
	for _, s := range c.plan.Starts {
		st.done[s.JobID] = true
	}
	return c.plan, ok
}

// room reports whether any freed node still has a GPU free now, or CPUs
// when some queued job asks for no GPU. (CPUs left beside taken GPUs
// kept End walking the whole queue after every end that started a job:
// a fifth of the controller's CPU in the 100,000-job loadtest.)
func (st *State) room(freed []int) bool {
	for _, ni := range freed {
		if p := st.c.nodes[ni].phys; p.GPUs != 0 || p.CPUs > 0 && st.gpuless > 0 {
			return true
		}
	}
	return false
}

func (st *State) unhold(rec startRec) {
	for _, p := range rec.parts {
		st.c.nodes[p.node].prof.Unhold(rec.at, rec.end, p.res)
	}
}

func (st *State) rehold(rec startRec) {
	for _, p := range rec.parts {
		st.c.nodes[p.node].prof.Hold(rec.at, rec.end, p.res)
	}
}

func addPhys(w *workNode, r backfill.Res) {
	w.phys.GPUs |= r.GPUs
	w.phys.CPUs += r.CPUs
	w.phys.MemMiB += r.MemMiB
	w.phys.Allocs -= r.Allocs
}
