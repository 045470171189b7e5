package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// schedState coalesces scheduling: events set dirty; a cycle runs when the
// owner is next free, but no sooner than twice the last cycle's duration
// after it, so a huge queue under a submission storm spends at most about
// a third of the owner's time scheduling.
type schedState struct {
	dirty        bool
	lastEnd      time.Time // monotonic, real time: pacing, not job time
	lastDur      time.Duration
	lastPeriodic time.Time // controller clock
	snapID       uint64
	// waiting maps a preemptor to its victims while it waits for them to
	// stop; it may preempt nothing more meanwhile (see snapshot).
	waiting map[spec.JobID][]spec.JobID
	// arrayLimited are the array tasks the last snapshot left out because
	// their array runs its %MAX tasks already; apply gives them
	// ReasonJobArrayTaskLimit.
	arrayLimited []spec.JobID
	// afterDeps is set when a pending job waits on another's start
	// (after:ID): a cycle that starts jobs then triggers another.
	afterDeps bool
	// active lists the jobs holding resources at the last snapshot.
	active []spec.JobID

	// inc keeps the last full cycle's work so that a cycle triggered only
	// by plain submissions and job ends answers them through sched.State
	// (milliseconds at 100,000 jobs) instead of a full cycle. full asks
	// for a full cycle: any other change (node, hold, release, requeue,
	// config, timer) invalidates what inc knows. incOK is false when the
	// full cycle saw something the incremental path cannot follow
	// (dependencies, %MAX arrays, preemptors waiting).
	anyDeps bool // some pending job has a dependency
	inc     *sched.State
	incAt   time.Time // controller clock of inc's full cycle
	incOK   bool
	fullDur time.Duration // wall time of inc's full cycle
	// incMin is the full-cycle cost from which events are answered
	// incrementally: below it a full cycle is cheap and keeps every
	// pending reason and priority exact (tests lower it).
	incMin           time.Duration
	full             bool
	submitted, freed []spec.JobID
	// ageless is set when nothing the full cycle read changes with time
	// alone (ageInputs): then inc stays what a full cycle would rebuild
	// past its interval, as long as it is told every event, and the
	// interval does not end it. incEvents counts the events inc answered
	// since its full cycle or its last compaction (its queue and profiles
	// grow with them): past keptMax (maxKeptEvents; tests lower it) a
	// full cycle rebuilds it. With nothing pending it is compacted
	// instead, every keptMax/8 events (compactInc).
	ageless   bool
	incEvents int
	keptMax   int
	// fairshare is set when inc's priorities read a fairshare report
	// (which moves as jobs run); shareAt is when it was taken. A State
	// past its interval gets a new one before it answers submissions
	// into an empty queue (cycleIncremental). shareEnded says a job
	// ended since it was taken: the end billed its account at once, so
	// the report is old before its interval is over, and the next
	// submissions into an empty queue get a new one too.
	fairshare  bool
	shareAt    time.Time
	shareEnded bool
}

// shareAfterEnd is how old the kept State's fairshare report must be for
// an end to have it taken anew (cycleIncremental). A report walks every
// running job: taken at every batch after an end (the default
// configuration weighs fairshare, one account), it cost the controller
// ~0.75 CPU-ms per start in the live burst at 1,000 x 8 (8,000 running
// jobs; 0.84 -> 1.5-1.75 CPU-s per 1,000, docs/fleet.md "Session 16 —
// the lead").
// Once a second is what the usage feed's refresh costs already.
const shareAfterEnd = time.Second

// maxKeptEvents bounds the submissions and ends one State answers between
// compactions (compactInc): each leaves a queue entry and profile steps
// behind, and a State kept through an empty queue (ageless) is not
// renewed by the interval. In the live burst at 1,000 × 8 a State
// answered ~10,000 events per 5-s interval; with jobs pending all along
// (no compaction) the periodic full cycle renews it first.
const maxKeptEvents = 32768

// incMinFullCycle is schedState.incMin's default.
const incMinFullCycle = 25 * time.Millisecond

// maxIncEvents bounds the submissions one incremental cycle answers one by
// one (each is inserted into the ordered queue); beyond it a full cycle is
// cheaper. Job ends are bounded by maxIncEnds.
const maxIncEvents = 256

// maxIncEnds is how many job ends one incremental cycle may answer. A full
// cycle's cost grows with the queue; an end's mostly with the jobs it
// offers its resources to before one takes them (sched.State.End). So
// with more than 8 × maxIncEvents jobs pending, up to an eighth of their
// number are answered incrementally: in the 100,000-job loadtest ends
// came in thousands between two cycles, and each such pile brought a full
// cycle over the whole queue. With at most maxIncEvents pending, an end's
// walk is short (and cycleIncremental stops at a full cycle's time):
// up to 8 × maxIncEvents ends. In the live burst at 1,000 × 8 a batch
// behind a slow commit brought more than 256 ends with a few jobs pending,
// and its jobs waited for a full cycle after their commit.
func (c *Controller) maxIncEnds() int {
	if len(c.st.pending) <= maxIncEvents {
		return 8 * maxIncEvents
	}
	return max(maxIncEvents, len(c.st.pending)/8)
}

// incremental reports whether the next cycle may use c.sched.inc.
func (c *Controller) incremental(now time.Time) bool {
	s := &c.sched
	return s.inc != nil && s.incOK && !s.full && (s.fullDur >= s.incMin || c.onlyNewPending()) &&
		len(s.submitted) <= maxIncEvents && len(s.freed) <= c.maxIncEnds() && c.incCurrent(now)
}

// onlyNewPending reports whether every pending job is one submitted since
// the last cycle (s.submitted): the State then holds no pending job, and
// answers the ends and the submissions exactly as a full cycle would
// (sched.State.SubmitAll), so even when a full cycle is cheap (under
// incMin) it is not needed for exact reasons and priorities. In the live
// burst at 1,000 nodes the full cycle often took under incMin; the
// submissions then waited for the full cycle's pacing, after their
// commit.
func (c *Controller) onlyNewPending() bool {
	s := &c.sched
	if len(s.submitted) < len(c.st.pending) {
		return false
	}
	n := 0
	for _, id := range s.submitted {
		if c.st.pending[id] != nil {
			n++
		}
	}
	return n == len(c.st.pending)
}

// incCurrent reports whether c.sched.inc is still what a full cycle at
// now would give, events told: within the scheduling interval of its
// full cycle (the periodic full cycle renews it while jobs are pending),
// or at any age when nothing it read changes with time alone (ageless),
// up to maxKeptEvents events. A fairshare report does move, but it only
// orders pending jobs: with none pending but new ones, a report taken
// now (cycleIncremental) is all a full cycle would read anew. A live burst empties the queue every few
// batches; with no job pending at the interval's tick no full cycle ran,
// the State aged out and the next submissions waited for a full cycle
// after their commit (~10 % of batches, session 13).
func (c *Controller) incCurrent(now time.Time) bool {
	s := &c.sched
	// A State an End left stale (MIG slices, GPU shares it cannot give
	// back) under-counts free capacity from then on: dynamic MIG jobs
	// spread over GPUs a full cycle packs.
	return !s.inc.Stale() && (now.Sub(s.incAt) < c.cfg.SchedInterval || s.ageless && (!s.fairshare || c.onlyNewPending())) &&
		s.incEvents+len(s.submitted)+len(s.freed) <= s.keptMax
}

// compactInc compacts c.sched.inc (sched.State.Compact) when no job is
// pending and it has answered keptMax/8 events since its full cycle or
// its last compaction (a compaction walks every node's profile). In a
// live burst the queue empties after nearly every batch but the State
// was never renewed: at 1,000 × 8, 20,000 submissions and their ends
// passed maxKeptEvents, the State was dropped mid-burst, and the next
// batch's jobs waited for a full cycle after their commit.
func (c *Controller) compactInc(now time.Time) {
	s := &c.sched
	if s.inc != nil && len(c.st.pending) == 0 && s.incEvents >= s.keptMax/8 && s.inc.Compact(now) {
		s.incEvents = 0
	}
}

// incrementalSubmit reports whether a new pending job can be answered by
// sched.State.Submit: nothing the controller resolves each full cycle
// (dependency, %MAX array limit, hold, begin time) and no preemption.
func (c *Controller) incrementalSubmit(j *spec.Job) bool {
	if j.Depend != "" || j.Hold || arrayLimit(j) > 0 || !j.BeginTime.IsZero() {
		return false
	}
	q, ok := c.cfg.qos(j.QOS)
	return !ok || q.PreemptMode == PreemptOff || len(q.Preempt) == 0
}

// stopGrace is how soon a job told to stop is expected to give its
// resources back; the backfill profile uses it as the job's end.
const stopGrace = time.Minute

// schedConfig is the scheduler's view of the controller's config.
func (c *Controller) schedConfig() sched.Config { return c.pol.Config }

const maxCycleGap = time.Second

// cycleDue returns 0 when a cycle should run now, how long to wait for
// one, or -1 when none is needed.
func (c *Controller) cycleDue() time.Duration {
	if !c.sched.dirty {
		return -1
	}
	gap := min(2*c.sched.lastDur, maxCycleGap)
	if wait := gap - time.Since(c.sched.lastEnd); wait > 0 {
		return wait
	}
	return 0
}

// cycle runs one scheduling cycle and applies its plan: persist the
// starts first, then bump the nodes' generations (commit does both in
// that order).
func (c *Controller) cycle(ctx context.Context) {
	start := time.Now()
	if c.nothingPending() {
		return
	}
	tx := newTxn()
	if err := c.scheduleInto(tx, start); err != nil {
		c.sched.inc = nil
	} else if c.commit(ctx, tx) != nil {
		c.sched.inc = nil // logged by commit; inc may be ahead of the reloaded state
	}
	c.cycleDone(start)
}

// cycleDone paces the next cycle after one that began at start.
func (c *Controller) cycleDone(start time.Time) {
	c.sched.lastDur = time.Since(start)
	c.sched.lastEnd = time.Now()
	c.obs.CycleDone(c.sched.lastDur)
}

// nothingPending ends the cycle due when no job is pending: starts,
// reasons, reservations and preemptions are all about pending jobs. A
// fleet registering with an empty queue ran a full cycle (a snapshot of
// every node) per registration batch: 15 % of the controller's CPU while
// 10,000 nodes joined (gpud loadtest). Nodes may change meanwhile, so the
// next pending job brings a full cycle unless inc is kept:
//
// The last full cycle's State is kept, though, while it may still answer
// events (keepInc): in a live burst the queue empties after nearly every
// batch, and dropping it made every next submission wait for a full cycle
// rather than be started in its own batch (cycleInBatch).
func (c *Controller) nothingPending() bool {
	if len(c.st.pending) > 0 {
		return false
	}
	c.dropPrefetch() // prefetch.go: nothing pending, nothing expected
	s := &c.sched
	if !c.keepInc() {
		s.inc = nil
	}
	s.dirty, s.submitted, s.freed = false, s.submitted[:0], s.freed[:0]
	s.lastDur, s.lastEnd = 0, time.Now()
	return true
}

// keepInc hands the ends since the last cycle to s.inc with nothing
// pending (they free resources, and nobody is there to take them) and
// reports whether s.inc is still good for the next events: not after a
// change only a full cycle follows (s.full), nor past the interval.
func (c *Controller) keepInc() bool {
	s := &c.sched
	now := c.now()
	// No bound on the ends: with nothing pending each End frees its nodes
	// and offers them to nobody.
	if s.inc == nil || !s.incOK || s.full || !c.incCurrent(now) {
		return false
	}
	s.incEvents += len(s.freed)
	s.shareEnded = s.shareEnded || len(s.freed) > 0
	for _, id := range s.freed {
		if p := s.inc.End(id, now); len(p.Starts)+len(p.Preemptions) > 0 {
			return false // nothing is pending to start: never expected; a full cycle sorts it out
		}
	}
	if s.inc.Stale() {
		return false
	}
	c.compactInc(now)
	return true
}

// scheduleInto runs one scheduling cycle's decisions into tx (a full
// cycle, or an incremental one through the last full cycle's State); the
// caller commits tx. An error (a panic in the cycle) leaves tx with what
// the cycle had applied before it.
func (c *Controller) scheduleInto(tx *txn, start time.Time) error {
	s := &c.sched
	s.dirty = false
	return c.safely(fmt.Sprintf("scheduling cycle (snapshot %d)", s.snapID+1), func() error {
		now := c.now()
		if c.incremental(now) {
			c.cycleIncremental(tx, now, start)
			return nil
		}
		s.inc, s.full, s.submitted, s.freed = nil, false, s.submitted[:0], s.freed[:0]
		c.imageMoves.take() // the snapshot reads every inventory as it is now
		snap := c.snapshot(now)
		cfg := c.schedConfig()
		st, plan := sched.NewState(snap, now, cfg)
		s.inc, s.incAt, s.incEvents, s.shareAt, s.shareEnded = st, now, 0, now, false
		c.notePrefetch(plan, now)
		s.incOK = !s.afterDeps && len(s.arrayLimited) == 0 && len(s.waiting) == 0 && !c.sched.anyDeps
		if !cfg.Priority.Weights.Zero() {
			st.EachPriority(func(id spec.JobID, total int64) {
				// Shown, not persisted (like reasons); a start saves the
				// job with the priority it started at.
				if rec := c.st.pending[id]; rec != nil && rec.job.Priority != total {
					rec.job.Priority = total
					tx.touched[id] = rec
				}
			})
		}
		c.apply(tx, plan, now)
		s.fullDur = time.Since(start)
		if st.Capped() {
			// More may start: the next cycle follows at once, going on
			// through the queue this one ordered when it may (resume).
			tx.more = true
		}
		return nil
	})
}

// maxInBatchFull is the largest queue over which cycleInBatch runs a full
// cycle (the last full cycle's duration says it is cheap, but the queue
// may have grown since through incremental submissions).
const maxInBatchFull = 4 * maxIncEvents

// cycleInBatch runs the cycle that tx's submissions and job ends make
// due inside tx, before the batch commits, rather than after it in a
// transaction of its own (event-driven start): a job that fits free
// capacity is started by the commit that acknowledges its submission (or
// the end that freed its GPUs), one durable write and one fsync fewer
// per start, with no wait for a cycle. It is the same cycle, run by the
// same rules: the queue in priority order with every higher-priority
// waiting job's reservation held (sched.State.Submit for a new job,
// State.End for freed resources; a full cycle when those may not be used).
// Only when that cycle is cheap: an incremental one (at once: one Submit
// or End per event), or, when its pacing (cycleDue) says it is due, a
// full one that took under incMin last time over a small queue, so the
// batch's replies wait for no full cycle over a large queue.
func (c *Controller) cycleInBatch(tx *txn) bool {
	if c.following || len(tx.submitted)+len(tx.freed) == 0 {
		return false
	}
	start := time.Now()
	c.noteSched(tx)
	tx.kick, tx.more, tx.submitted, tx.freed = false, false, nil, nil
	s := &c.sched
	inc := c.incremental(c.now())
	switch {
	case inc && !s.inc.Capped():
		// Each event answered by State.Submit or End: cheap whatever the
		// pacing (which spaces full cycles and the resumes of a capped
		// one, so that events are not starved behind them).
	case c.cycleDue() != 0:
		return false // the loop runs it after the commit, as before
	case !inc && (s.fullDur >= s.incMin || len(c.st.pending) > maxInBatchFull):
		return false // a full cycle that may be long: after the commit
	}
	if c.nothingPending() {
		return false
	}
	if err := c.scheduleInto(tx, start); err != nil {
		s.inc = nil
		s.dirty, s.full = true, true
	}
	c.cycleDone(start)
	return true
}

// cycleIncremental answers the job ends and submissions since the last
// cycle through the State of the last full cycle: ends first (they free
// resources), then submissions in id order. Each answer is safe but may
// be conservative; the next full cycle (timer or any other change)
// revisits everything.
//
// Answering ends one by one may cost more than a full cycle (an end whose
// resources no queued job can take walks the queue): once the ends have
// taken as long as the last full cycle, a full cycle follows at once for
// the rest (it looks at everything anew).
func (c *Controller) cycleIncremental(tx *txn, now, start time.Time) {
	s := &c.sched
	for _, name := range c.imageMoves.take() {
		// Inventories that came since the full cycle (images.go).
		s.inc.SetImages(name, c.nodeImageSet(name))
	}
	s.incEvents += len(s.freed) + len(s.submitted)
	s.shareEnded = s.shareEnded || len(s.freed) > 0
	for i, id := range s.freed {
		if i > 0 && time.Since(start) > s.fullDur {
			tx.kick = true
			s.submitted, s.freed = s.submitted[:0], s.freed[:0]
			return
		}
		c.apply(tx, s.inc.End(id, now), now)
	}
	// Together, in the order a full cycle takes them (priority).
	jobs := make([]sched.Job, 0, len(s.submitted))
	for _, id := range s.submitted {
		if rec := c.st.pending[id]; rec != nil {
			jobs = append(jobs, c.schedJob(&rec.job))
		}
	}
	if age := now.Sub(s.shareAt); len(jobs) > 0 && s.fairshare && (s.shareEnded && age >= shareAfterEnd || age >= c.cfg.SchedInterval) && c.onlyNewPending() {
		// Past the interval, or after an end billed an account, the
		// report is old; with only the new jobs pending, the one a full
		// cycle would take now (incCurrent). A job submitted after
		// another ended is ordered with that job's usage, as gpuq prio
		// shows it (TestFairshareSeesEndsWithinInterval), once the
		// report is shareAfterEnd old. With older jobs pending, a new
		// report would reorder them, which only a full cycle does: they
		// keep their order until the next one, within the interval.
		s.inc.SetFairshare(c.fairshareReport(now))
		s.shareAt, s.shareEnded = now, false
	}
	if len(jobs) > 0 {
		c.apply(tx, s.inc.SubmitAll(jobs, now), now)
	}
	s.submitted, s.freed = s.submitted[:0], s.freed[:0]
	if s.inc.Capped() {
		plan, ok := s.inc.Resume(now)
		c.apply(tx, plan, now)
		if !ok {
			tx.kick = true // a job that may preempt: a full cycle decides it
		} else {
			tx.more = s.inc.Capped()
		}
	}
	// Its submissions started (the queue emptied): a live burst's
	// batches bring submissions and ends together, and a State compacted
	// only between batches with ends alone grew past maxKeptEvents.
	c.compactInc(now)
}

// resumable reports whether the jobs a full cycle's start limit held back
// may be decided by sched.State.Resume rather than by a new full cycle:
// the same conditions as for incremental cycles (Resume itself stops
// before a job that may preempt).
func (c *Controller) resumable(now time.Time) bool {
	s := &c.sched
	return s.inc != nil && s.incOK && !s.full && s.fullDur >= s.incMin && c.incCurrent(now)
}

// snapshot copies the state the scheduler needs.
func (c *Controller) snapshot(now time.Time) *sched.Snapshot {
	c.sched.snapID++
	snap := &sched.Snapshot{ID: c.sched.snapID, Nodes: make([]sched.Node, 0, len(c.st.nodes)), Jobs: make([]sched.Job, 0, len(c.st.pending))}
	var active []spec.JobID
	for _, name := range c.st.nodeNames() {
		sn, jobs := c.schedNode(name)
		active = append(active, jobs...)
		snap.Nodes = append(snap.Nodes, sn)
	}
	slices.Sort(active)
	c.sched.active = slices.Compact(active)
	steady := true // every running job runs on toward its limit
	for _, id := range c.sched.active {
		if rec := c.st.jobs[id]; rec != nil && rec.job.Alloc != nil {
			snap.Running = append(snap.Running, c.runningJob(&rec.job, now))
			steady = steady && rec.job.State == spec.StateRunning && rec.job.StopState == ""
		}
	}
	snap.QOS = c.pol.QOS
	snap.Partitions = c.pol.Partitions
	snap.AccountLimits = c.accountLimits()
	snap.AdvanceReservations = c.schedResvs() // reservation.go
	if c.cfg.Priority.Fairshare != 0 && len(c.cfg.Accounts) > 0 {
		// Costs a walk over the jobs running now and the pending jobs'
		// users (ended usage is kept: the feed's, or endedusage.go);
		// only when fairshare weighs in.
		snap.Fairshare = c.fairshareReport(now)
	}
	c.sched.ageless = steady && ageless(snap)
	c.sched.fairshare = snap.Fairshare != nil
	for id, victims := range c.sched.waiting {
		if c.st.pending[id] == nil || !slices.ContainsFunc(victims, c.stopping) {
			delete(c.sched.waiting, id)
		}
	}
	c.sched.arrayLimited = c.sched.arrayLimited[:0]
	c.sched.afterDeps = false
	c.sched.anyDeps = false
	single := c.singletons(snap)
	// Pending tasks of arrays with a %MAX, held back until it is known
	// how many may start.
	var limited map[spec.JobID][]sched.Job
	for _, rec := range c.st.pending {
		// Built in place: a sched.Job is some 400 bytes, and building it
		// aside then appending it copied each twice, a third of the
		// snapshot's CPU at 100,000 pending jobs (gpud loadtest's profile).
		snap.Jobs = append(snap.Jobs, sched.Job{})
		sj := &snap.Jobs[len(snap.Jobs)-1]
		c.fillSchedJob(sj, &rec.job)
		if _, ok := c.sched.waiting[rec.job.ID]; ok {
			// Its victims still hold what it needs: it waits for them
			// rather than preempting more jobs meanwhile.
			sj.AwaitingVictims = true
		}
		if rec.job.Depend != "" {
			c.depFlags(sj, rec, single)
			c.sched.anyDeps = true
		}
		if rec.job.HetJobID != 0 {
			// A heterogeneous job's components start together or not at
			// all: only a full cycle, which sees them all, may start one
			// (sched.State.Submit and End decide one job at a time).
			c.sched.anyDeps = true
		}
		if arrayLimit(&rec.job) > 0 && !sj.Held && !sj.DependencyPending && !sj.DependencyNeverSatisfied {
			if limited == nil {
				limited = map[spec.JobID][]sched.Job{}
			}
			limited[rec.job.ArrayJobID] = append(limited[rec.job.ArrayJobID], *sj)
			snap.Jobs = snap.Jobs[:len(snap.Jobs)-1]
			continue
		}
	}
	if limited != nil {
		c.limitArrays(snap, limited)
	}
	return snap
}

// ageless reports whether nothing in snap but its jobs, nodes and
// fairshare moves with time alone, so that a State built from it and told
// every event since stays what a full cycle would build later
// (schedState.ageless): no GPU-hour budget (it is spent as jobs run), no
// advance reservation (their windows come and go). Running jobs that stop
// or are suspended move their expected ends with time too (runningJob);
// snapshot checks those. The fairshare report is taken anew when needed
// (schedState.fairshare). Job age is not among them: the State ages its
// queue by now (sched.State.SubmitAll), and with nothing pending there is
// no order to drift.
func ageless(snap *sched.Snapshot) bool {
	if len(snap.AdvanceReservations) > 0 {
		return false
	}
	for _, l := range snap.AccountLimits {
		if l.MaxGPUHours > 0 {
			return false
		}
	}
	return true
}

// singletons returns a builder of the singleton index over snap, built
// at most once and only when some job needs it.
func (c *Controller) singletons(*sched.Snapshot) func() *singletonIndex {
	var x *singletonIndex
	return func() *singletonIndex {
		if x == nil {
			x = c.newSingletonIndex(c.sched.active)
		}
		return x
	}
}

// depFlags sets sj's dependency flags from rec's dependency.
func (c *Controller) depFlags(sj *sched.Job, rec *jobRec, single func() *singletonIndex) {
	switch c.evalDepend(rec, single) {
	case depWaiting:
		sj.DependencyPending = true
		if strings.Contains(rec.job.Depend, "after:") {
			c.sched.afterDeps = true
		}
	case depNever:
		sj.DependencyNeverSatisfied = true
	}
}

// limitArrays adds to snap at most %MAX minus the running tasks of each
// array, lowest task ids first; the rest wait with
// ReasonJobArrayTaskLimit.
func (c *Controller) limitArrays(snap *sched.Snapshot, limited map[spec.JobID][]sched.Job) {
	running := map[spec.JobID]int{}
	for _, id := range c.sched.active {
		if rec := c.st.jobs[id]; rec != nil && rec.job.ArrayJobID != 0 {
			if _, ok := limited[rec.job.ArrayJobID]; ok {
				running[rec.job.ArrayJobID]++
			}
		}
	}
	for _, aid := range slices.Sorted(maps.Keys(limited)) {
		tasks := limited[aid]
		slices.SortFunc(tasks, func(a, b sched.Job) int { return cmp.Compare(a.ID, b.ID) })
		free := max(arrayLimit(&c.st.jobs[tasks[0].ID].job)-running[aid], 0)
		free = min(free, len(tasks))
		snap.Jobs = append(snap.Jobs, tasks[:free]...)
		for _, t := range tasks[free:] {
			c.sched.arrayLimited = append(c.sched.arrayLimited, t.ID)
		}
	}
}

// stopping reports whether job id still holds resources on some node.
func (c *Controller) stopping(id spec.JobID) bool {
	rec := c.st.jobs[id]
	return rec != nil && rec.job.State != spec.StatePending && len(rec.liveNodes()) > 0
}

// runningJob is an active job as the scheduler sees it. A job already
// told to stop is no victim (it has no QOS here) and is expected to give
// its resources back within stopGrace (plus the checkpoint grace).
func (c *Controller) runningJob(j *spec.Job, now time.Time) sched.RunningJob {
	r := sched.RunningJob{ID: j.ID, Nodes: j.Alloc.Nodes, Start: c.runs.start("job:"+j.Alloc.ID, j.StartTime.Time, now), TimeLimit: j.TimeLimit.Std(),
		Priority: j.Priority, QOS: j.QOS, Account: j.Account, User: j.User, Partition: j.Partition}
	if lc := j.LastCheckpoint; lc.Attempt == j.Alloc.Attempt && lc.Time.After(r.Start) {
		r.LastCheckpoint = lc.Time.Time
	}
	if j.State == spec.StateSuspended && j.StopState == "" {
		// Its limit runs on by the time it stays suspended (jobadmin.go);
		// it is no victim while frozen.
		r.QOS = ""
		if r.TimeLimit > 0 {
			r.TimeLimit += max(now.Sub(j.SuspendTime.Time), 0)
		}
		return r
	}
	if j.State != spec.StateRunning || j.StopState != "" {
		grace := stopGrace
		if j.StopCheckpoint {
			grace += c.cfg.CheckpointGrace
		}
		r.QOS = ""
		r.TimeLimit = max(now.Sub(r.Start), 0) + grace
	}
	return r
}

// schedNode is node name as the scheduler sees it, and the jobs on it.
func (c *Controller) schedNode(name string) (sched.Node, []spec.JobID) {
	n := c.st.nodes[name]
	u := c.st.usage(n)
	sn := sched.Node{
		Name:       name,
		State:      n.displayState(u),
		Features:   n.features(),
		Partitions: c.cfg.partitionsOf(name),
		CPUs:       n.inv.CPUs,
		FreeCPUs:   n.inv.CPUs - u.cpus,
		MemMiB:     n.inv.MemMiB,
		FreeMemMiB: n.inv.MemMiB - u.mem,
		Allocs:     len(u.jobs),
		Weight:     n.weight(),      // admin.go
		Power:      c.powerOf(name), // power.go
		IdleSince:  c.power.idleSince[name],
		Images:     c.nodeImageSet(name), // images.go
	}
	groups := nvlinkGroups(n.inv.GPUs)
	for i, g := range n.inv.GPUs {
		sn.GPUs = append(sn.GPUs, sched.GPU{UUID: g.UUID, Model: g.Model, Free: !u.gpus[g.UUID], MIGEnabled: g.MIGEnabled,
			FreeFraction: u.freeFraction(g.UUID), Unhealthy: g.Health != "" && g.Health != "ok",
			NUMANode: g.NUMANode, NVLinkGroup: groups[i], MIG: schedMIG(g, u), NICs: g.NICs})
	}
	sn.NICs = schedNICs(n.inv) // mig.go
	return sn, u.jobs
}

// nodeReasons says why no node runs pending job j now, per reason
// (gpuq show); "" for MIG jobs.
func (c *Controller) nodeReasons(j *spec.Job) string {
	snap := &sched.Snapshot{Nodes: make([]sched.Node, 0, len(c.st.nodes))}
	for _, name := range c.st.nodeNames() {
		sn, _ := c.schedNode(name)
		snap.Nodes = append(snap.Nodes, sn)
	}
	return sched.FormatNodeCounts(sched.Explain(snap, c.schedJob(j), c.now()))
}

func (c *Controller) schedJob(j *spec.Job) sched.Job {
	var sj sched.Job
	c.fillSchedJob(&sj, j)
	return sj
}

// fillSchedJob sets *sj, a zero sched.Job, to j as the scheduler sees it.
func (c *Controller) fillSchedJob(sj *sched.Job, j *spec.Job) {
	sj.ID, sj.Partition, sj.Priority, sj.Expedite = j.ID, j.Partition, j.Priority, j.Expedited
	sj.SubmitTime, sj.BeginTime, sj.Held, sj.Req = j.SubmitTime.Time, j.BeginTime.Time, j.Hold, j.Resources
	sj.Account, sj.User, sj.QOS, sj.Nice, sj.TimeLimit = j.Account, j.User, j.QOS, j.Nice, j.TimeLimit.Std()
	sj.Reservation, sj.TimeMin = j.Reservation, j.TimeMin.Std() // reservation.go, --time-min
	if j.Reservation != "" {
		sj.Groups = c.st.groups[j.UID] // a reservation's Groups=
	}
	sj.HetJobID, sj.HetOffset, sj.HetSize = j.HetJobID, j.HetOffset, j.HetSize // het.go
	if j.Image != "" && j.Image != spec.ImageHost {
		sj.Image = spec.ImageKey(j.Image) // images.go
	}
	if p := c.cfg.partition(j.Partition); p == nil || p.State == PartitionDown || p.State == PartitionInactive {
		sj.PartitionDown = true
	}
	if r, ok := c.st.ineligible[j.ID]; ok {
		sj.Ineligible, sj.IneligibleDetail = r.reason, r.err.Error()
	}
	// -p a,b: the job's other partitions that are up now.
	for _, name := range j.Partitions {
		if p := c.cfg.partition(name); name != j.Partition && p != nil && p.State != PartitionDown && p.State != PartitionInactive &&
			len(c.partitionAccess(p, j.Account, j.QOS, ownerOf(j, c.st.groups[j.UID]))) == 0 {
			sj.Alternatives = append(sj.Alternatives, name)
		}
	}
}

// apply turns a plan into state: preemptions stop their victims (as gpuq
// requeue or cancel would), starts become RUNNING jobs with a new alloc
// (id "<job>.<attempt>"); pending reasons and expected starts are updated
// in memory and published.
func (c *Controller) apply(tx *txn, plan sched.Plan, now time.Time) {
	// Before the starts leave the pending set: PURGE_COMP counts them.
	c.resvUpkeep(tx, &plan, now) // reservation.go
	for _, p := range plan.Preemptions {
		rec := c.st.jobs[p.Victim]
		if rec == nil || rec.job.State != spec.StateRunning || rec.job.StopState != "" {
			continue
		}
		c.preempt(tx, rec, p, now)
		c.obs.JobPreempted(rec.job.Partition, p.Mode)
		if c.sched.waiting == nil {
			c.sched.waiting = map[spec.JobID][]spec.JobID{}
		}
		c.sched.waiting[p.Preemptor] = append(c.sched.waiting[p.Preemptor], p.Victim)
	}
	for _, s := range plan.Starts {
		rec := c.st.pending[s.JobID]
		if rec == nil {
			continue
		}
		j := &rec.job
		if s.Partition != "" && slices.Contains(j.Partitions, s.Partition) {
			j.Partition = s.Partition // -p a,b: it starts in this one
		}
		if s.TimeLimit > 0 && (j.TimeLimit == 0 || s.TimeLimit < j.TimeLimit.Std()) {
			// --time-min: it starts with the time that fits (Slurm sets
			// the job's limit so).
			j.TimeLimit = spec.Duration(s.TimeLimit)
		}
		attempt := j.Attempt + 1
		a := &spec.Alloc{ID: fmt.Sprintf("%d.%d", j.ID, attempt), JobID: j.ID, Attempt: attempt, StartTime: spec.NewTime(now)}
		var names, gpus []string
		for _, p := range s.Nodes {
			if n := c.st.nodes[p.Node]; n != nil {
				p.Addr, p.StepPort = n.inv.Addr, n.inv.StepPort
				n.allocs[a.ID] = j.ID
			}
			a.Nodes = append(a.Nodes, p)
			names = append(names, p.Node)
			gpus = append(gpus, p.GPUs...)
			tx.bump[p.Node] = true
		}
		j.Attempt = attempt
		j.Alloc = a
		j.Expedited = false
		j.State, j.Reason = spec.StateRunning, spec.ReasonNone
		j.StopState, j.StopReason = "", ""
		j.StartTime, j.EndTime = spec.NewTime(now), spec.Time{}
		j.ExpectedStart, j.NodeReasons = spec.Time{}, ""
		j.Nodes, j.GPUs = names, gpus
		c.dropInterrupted(rec) // its old run, if any, is fenced now
		delete(c.st.pending, j.ID)
		delete(c.sched.waiting, j.ID)
		tx.saveJob(rec)
		c.obs.JobStarted(j.Partition)
		if s.Backfilled {
			c.obs.JobBackfilled(j.Partition)
		}
		c.log.Info("job started", "job_id", j.ID, "alloc_id", a.ID, "nodes", names, "backfilled", s.Backfilled)
	}
	if len(plan.Starts) > 0 && c.sched.afterDeps {
		tx.kick = true // after:ID dependencies may now hold
	}
	for _, id := range c.sched.arrayLimited {
		rec := c.st.pending[id]
		if rec == nil || rec.job.Reason == spec.ReasonJobArrayTaskLimit && rec.job.ExpectedStart.IsZero() {
			continue
		}
		rec.job.Reason = spec.ReasonJobArrayTaskLimit
		rec.job.ExpectedStart = spec.Time{}
		tx.touched[id] = rec
	}
	for _, p := range plan.Pending {
		rec := c.st.pending[p.JobID]
		if rec == nil {
			continue
		}
		if rec.job.NodeReasons != "" && !placementReason(p.Reason) {
			// Held back before placement (a hold, a dependency, a limit):
			// the last node counts no longer say why it waits.
			rec.job.NodeReasons = ""
			tx.touched[p.JobID] = rec
		}
		if rec.job.Reason == p.Reason && rec.job.ExpectedStart.Equal(p.ExpectedStart) {
			continue
		}
		// Reasons and expected starts are shown, not persisted: a restart
		// recomputes them.
		rec.job.Reason = p.Reason
		rec.job.ExpectedStart = spec.NewTime(p.ExpectedStart)
		tx.touched[p.JobID] = rec
	}
	// Why no node runs a job that could not be placed, counted per reason
	// in the cycle (sched.PlacementMetric): gpuq show, squeue %r and
	// scontrol show job print it. Shown, not persisted.
	for _, m := range plan.Placement {
		rec := c.st.pending[m.JobID]
		if rec == nil || rec.job.NodeReasons == m.Summary {
			continue
		}
		rec.job.NodeReasons = m.Summary
		tx.touched[m.JobID] = rec
	}
}

// placementReason reports whether a job pending for reason went through
// placement (and so has node counts).
func placementReason(reason string) bool {
	switch reason {
	case spec.ReasonResources, spec.ReasonPriority, spec.ReasonReservation, spec.ReasonReservedMaint:
		return true
	}
	return false
}

// preempt stops a running victim for its preemptor the way gpuq requeue
// (or cancel) does: the node is told to stop it (PREEMPTED, so it is
// queued again with its id and submit time, or CANCELLED), checkpointing
// first in checkpoint mode when the job takes checkpoints.
func (c *Controller) preempt(tx *txn, rec *jobRec, p sched.Preemption, now time.Time) {
	j := &rec.job
	reason := p.Reason
	if reason == "" {
		reason = fmt.Sprintf("preempted by job %d", p.Preemptor)
	}
	c.log.Info("job preempted", "job_id", j.ID, "preemptor", p.Preemptor, "mode", p.Mode, "reason", reason)
	live := len(rec.liveNodes()) > 0
	switch {
	case p.Mode == PreemptCancel && !live:
		c.finish(tx, rec, spec.StateCancelled, 0, 0, reason, now)
		return
	case p.Mode == PreemptCancel:
		j.StopState, j.StopCheckpoint = spec.StateCancelled, false
	case !live:
		c.requeue(tx, rec, reason)
		return
	default:
		j.StopState = spec.StatePreempted
		j.StopCheckpoint = p.Mode == PreemptCheckpoint && checkpoints(j)
	}
	j.State = spec.StateCompleting
	j.StopReason, j.Reason = reason, reason
	c.bumpLive(tx, rec)
	tx.saveJob(rec)
}

// nvlinkGroups numbers the NVLink islands of a node's GPUs (1, 2, … in
// GPU order; 0 for a GPU with no NVLink peer): GPUs are in one island
// when a chain of reported peers joins them, since NVLink (or NVSwitch)
// reachability is symmetric even when a node reports one direction.
func nvlinkGroups(gpus []spec.GPU) []int {
	idx := make(map[string]int, len(gpus))
	for i, g := range gpus {
		idx[g.UUID] = i
	}
	parent := make([]int, len(gpus))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	linked := make([]bool, len(gpus))
	for i, g := range gpus {
		for _, p := range g.NVLinkPeers {
			if j, ok := idx[p]; ok && j != i {
				linked[i], linked[j] = true, true
				a, b := find(i), find(j)
				parent[max(a, b)] = min(a, b)
			}
		}
	}
	out := make([]int, len(gpus))
	num := map[int]int{}
	for i := range gpus {
		if !linked[i] {
			continue
		}
		r := find(i)
		if num[r] == 0 {
			num[r] = len(num) + 1
		}
		out[i] = num[r]
	}
	return out
}
