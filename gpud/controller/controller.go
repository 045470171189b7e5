package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/wallclock"
)

// Store persists the controller's state. The owner loop is its only
// caller. gpud/store implements it.
type Store interface {
	// Load returns every stored job, every node and the next job id to
	// hand out. Called once, at New, and again after a failed Apply to
	// resynchronise memory with disk.
	Load(ctx context.Context) (jobs []spec.Job, nodes []spec.Node, nextJobID spec.JobID, err error)
	// Apply upserts jobs and nodes and, when nextJobID is not zero, the id
	// counter, in ONE durable transaction: all of it or none of it. The
	// controller acknowledges nothing in the batch before Apply returns nil.
	// Nodes carry Inventory, State (IDLE, DOWN or DRAIN) and Reason.
	Apply(ctx context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID) error
}

// Recorder receives jobs that reached a terminal state (accounting), and
// jobs whose attempt ended with the job going back to PENDING (requeue,
// preemption, node failure), with that attempt's Alloc, StartTime and
// EndTime, so every attempt is billed. It is called from a goroutine of
// its own, in batches, never from the owner
// loop; a failing call is retried later with the same jobs, so RecordJobs
// must be idempotent by job id and attempt.
type Recorder interface {
	RecordJobs(ctx context.Context, jobs []spec.Job) error
}

// Caller is who makes a request, from unix-socket peer credentials.
type Caller struct {
	UID, GID uint32
	User     string
	// Known is false when the transport gave no identity.
	Known bool
	// Groups are the caller's group names, primary and supplementary, as
	// the server resolved them from the user database; nil when unknown.
	// [[partition]] allow_groups judges them (access.go).
	Groups []string
}

func (c Caller) root() bool { return c.Known && c.UID == 0 }

// Option configures a Controller.
type Option func(*Controller)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Controller) { c.log = l } }

// WithClock replaces time.Now for every timestamp the controller takes
// and every timeout it judges (tests pass a fake).
func WithClock(now func() time.Time) Option { return func(c *Controller) { c.now = now } }

// WithTicker replaces the controller's housekeeping ticker (1s): each
// receive checks node timeouts and runs the periodic cycle when due.
// Tests pass a channel they send to.
func WithTicker(tick <-chan time.Time) Option { return func(c *Controller) { c.tick = tick } }

// WithRecorder sets where terminal jobs and ended attempts are recorded
// (accounting).
func WithRecorder(r Recorder) Option { return func(c *Controller) { c.recorder = r } }

// WithReload sets the hook Reconfigure calls to obtain a new Config.
func WithReload(f func() (Config, error)) Option { return func(c *Controller) { c.reload = f } }

// Controller is the owner of all cluster state. Create it with New and
// run it with Run; its methods are safe for concurrent use and fail with
// spec.ErrUnavailable when Run is not running.
type Controller struct {
	log      *slog.Logger
	store    Store
	now      func() time.Time
	tick     <-chan time.Time
	recorder Recorder
	feed     *usageFeed
	feedWake chan struct{}
	obs      Observer
	reload   func() (Config, error)
	// runHook runs idle_hook programs (WithIdleHook) from hookLoop.
	runHook   func(ctx context.Context, ev IdleEvent) error
	hookQueue chan IdleEvent
	// runPower runs the [power] programs (WithPowerProgram) from
	// powerLoop.
	runPower   func(ctx context.Context, r PowerRun) error
	powerQueue chan PowerRun
	// budget is each account's GPU-hours over its budget period, from
	// SetBudgetUsage (nil until the first).
	budget atomic.Pointer[map[string]float64]
	// prefetch is each node's images to pull ahead, from the last full
	// cycle's reservations (prefetch.go); read by heartbeats off the
	// owner loop.
	prefetch atomic.Pointer[map[string][]Prefetch]
	// expect is each node's expected jobs to prepare containers for
	// (expect.go), noted with prefetch.
	expect atomic.Pointer[map[string][]Expected]
	// expectAsked is set once a node asked for its expected jobs.
	expectAsked atomic.Bool
	// heard is each node's *heardRec: when its last heartbeat arrived,
	// noted by Heartbeat off the owner loop (see Controller.Heartbeat and
	// lastHeard).
	heard sync.Map
	// imageMoves names the nodes whose image inventory changed since the
	// scheduler's State last took it (images.go).
	imageMoves imageMoves
	// nodeTimeout is cfg.NodeTimeout in nanoseconds, for the node
	// protocol's answers off the owner loop (NodeTimeout).
	nodeTimeout atomic.Int64
	// published is cfg as of its last change, for readers off the owner
	// loop (Viewer); never modified once stored.
	published atomic.Pointer[Config]
	// runs measures how long allocations have run on the monotonic
	// clock (runclock.go).
	runs runClock
	// epoch is c.now() at New: heartbeat arrivals are kept as offsets
	// from it (on the monotonic clock; noteHeard).
	epoch time.Time
	// leadSince is when this controller last took the lead (started
	// leading, or won an election): silence before it is not counted
	// against nodes (overdue). Owner only.
	leadSince time.Time

	// ident is the state's identity (identity.go), set by load and
	// ensureIdentity on the owner, read by the node protocol's answers.
	ident atomic.Pointer[string]

	// following is true on a member of an HA group that is not the
	// leader (leader.go): no housekeeping, no cycles, no recorder.
	following bool
	// recCtx is the recorder goroutine's context, for Lead's recheck.
	recCtx context.Context

	ops chan *op
	// roles carries Lead, Follow and Refresh (leader.go), each run alone.
	roles   chan *op
	started chan struct{} // closed when Run starts serving
	stopped chan struct{} // closed when Run has stopped serving
	runOnce sync.Once
	// forget are kept audit entries to drop (auditcarry.go).
	forget forgets

	// rec is the recorder's queue, shared with its goroutine.
	recMu    sync.Mutex
	recQueue []spec.Job
	// unfed is the fairshare usage of ended attempts handed to the
	// recorder that the usage feed has not read yet (usagefeed.go), each
	// with its enqueue sequence (recSeq); recFlushed is the sequence the
	// last successful flush covered.
	unfed      []unfedUsage
	recSeq     uint64
	recFlushed atomic.Uint64
	// feedLow is the earliest end time of the jobs flushed to accounting
	// since the usage feed last read (zero: none; recMu; usagefeed.go).
	feedLow time.Time
	recWake chan struct{}
	// recLinger is how long a wake waits for more records (recorder.go).
	recLinger time.Duration
	// recFlush carries FlushRecords' requests to the recorder's loop.
	recFlush chan chan struct{}
	evQueue  []spec.NodeEvent
	// rvQueue holds reservation windows for a ReservationRecorder
	// (reservation.go).
	rvQueue []spec.ResvRecord
	// stepQueue holds ended steps for a StepRecorder (steps.go).
	stepQueue []spec.JobSteps

	// gather is the group commit's wait for more requests
	// (WithGroupCommit; owner only).
	gather gatherState

	// Owner state: touched only by the goroutine in Run (and New before it).
	cfg Config
	// pol is cfg.SchedPolicy(), kept in step with cfg.
	pol   SchedPolicy
	st    *state
	sched schedState
	// admin is scontrol's live changes (admin.go).
	admin adminState
	// power is power saving's bookkeeping (power.go).
	power powerState
	// endedUse is the ended attempts' fairshare usage without a usage feed
	// (endedusage.go).
	endedUse endedUsage
	// batchEnded is, with a usage feed, the usage of the attempts that
	// ended in the batch under way: its commit hands them to the
	// recorder and unfed, and empties it (noteEnded).
	batchEnded []fairshare.Usage
	// endedBuf is a committed txn's ended slice, emptied, for the next
	// txn that ends a job to take (endJobCopy): one array reused on the
	// owner loop, rather than each batch growing its own from nil (a
	// spec.Job is 1,360 bytes, and growing by appends allocated about
	// twice each ended job).
	endedBuf []spec.Job
	// txFree is the last batch's txn, emptied, for the next (takeTxn).
	txFree *txn
}

// op is one request to the owner. fn runs on the owner goroutine; done
// is closed after the batch it ran in is committed.
type op struct {
	fn   func(tx *txn) error
	err  error
	done chan struct{}
	// carry is the call's audit entry, committed with its changes when
	// fn succeeds (auditcarry.go).
	carry *AuditCarry
}

// New loads the state from store and returns a controller ready to Run.
func New(cfg Config, store Store, opts ...Option) (*Controller, error) {
	cfg.normalize()
	c := &Controller{
		log:        slog.Default(),
		store:      store,
		now:        wallclock.Now,
		ops:        make(chan *op, 4096),
		roles:      make(chan *op),
		started:    make(chan struct{}),
		stopped:    make(chan struct{}),
		recWake:    make(chan struct{}, 1),
		recLinger:  recordLinger,
		recFlush:   make(chan chan struct{}),
		feedWake:   make(chan struct{}, 1),
		obs:        nopObserver{},
		hookQueue:  make(chan IdleEvent, idleHookQueue),
		powerQueue: make(chan PowerRun, 256),
		cfg:        cfg,
		pol:        cfg.SchedPolicy(),
	}
	c.sched.incMin = incMinFullCycle
	c.sched.keptMax = maxKeptEvents
	c.admin.fileParts = slices.Clone(cfg.Partitions)
	c.nodeTimeout.Store(int64(cfg.NodeTimeout))
	c.published.Store(&cfg)
	for _, o := range opts {
		o(c)
	}
	c.epoch = c.now()
	c.leadSince = c.epoch
	if err := c.load(context.Background()); err != nil {
		return nil, err
	}
	if !c.following {
		// An HA member's leader makes it when it leads (the group's
		// log is not running yet).
		if err := c.ensureIdentity(context.Background()); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// load replaces the in-memory state with the store's.
func (c *Controller) load(ctx context.Context) error {
	jobs, nodes, next, err := c.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("load controller state: %w", err)
	}
	if err := c.loadAdmin(ctx); err != nil {
		return err
	}
	now := c.now()
	st := newState(next, now)
	// Every node's silence is counted from when this controller took
	// the lead, whatever it did before (overdue): a reload while leading
	// (after a failed commit) does not restart it.
	for i := range nodes {
		st.addNode(&nodes[i], c.leadSince)
		h := c.heardRec(nodes[i].Name)
		// Its next heartbeat goes through the owner loop once, to
		// bring it back if the state says DOWN.
		h.up.Store(false)
		h.resume.Store(false)
	}
	for i := range jobs {
		rec := &jobRec{job: jobs[i]}
		// A job stored by an older gpud may carry a credential; it is not
		// given to the job (nor shown) and leaves state.db at the job's
		// next save.
		rec.job.Env, _ = spec.DropSecretEnv(rec.job.Env, c.cfg.SecretEnv)
		// A pull's progress is the nodes' to tell again (images.go).
		rec.job.ImagePull = nil
		rec.publish()
		st.addJob(rec)
		if run := rec.job.Interrupted; run != nil && rec.job.State == spec.StatePending {
			for _, p := range run.Alloc.Nodes {
				c.heardRec(p.Node).resume.Store(true)
			}
		}
		if a := rec.job.Alloc; a != nil {
			for _, p := range a.Nodes {
				if p.Ended {
					continue
				}
				n := st.nodes[p.Node]
				if n == nil {
					c.log.Warn("job allocated on a node the store does not know", "job_id", rec.job.ID, "node", p.Node)
					continue
				}
				n.allocs[a.ID] = rec.job.ID
			}
		}
	}
	// Waiters of the old state (after a failed Apply) must re-query.
	if c.st != nil {
		for _, n := range c.st.nodes {
			close(n.changed)
		}
		for _, ws := range c.st.waiters {
			for _, w := range ws {
				close(w)
			}
		}
	}
	// Group memberships are learned again from calls; jobs keep the
	// ones last seen.
	if c.st != nil {
		st.groups = c.st.groups
	}
	c.st = st
	// Without a feed, fairshare's ended usage is the store's again
	// (endedusage.go: what a restart keeps).
	c.endedUse = endedUsage{}
	c.attachAdmin()
	c.declareCloudNodes() // power.go
	c.overlayPartitions()
	// The configuration may have changed while the controller was down.
	c.recheckAccess()
	c.sched.dirty, c.sched.full = true, true
	return nil
}

// Run serves requests until ctx ends. It may be called once.
func (c *Controller) Run(ctx context.Context) error {
	first := false
	c.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("controller: Run called twice")
	}
	var wg sync.WaitGroup
	recCtx, stopRec := context.WithCancel(context.WithoutCancel(ctx))
	c.recCtx = recCtx
	if c.recorder != nil {
		chk, _ := c.recorder.(RecordChecker)
		var ended []spec.JobID
		if c.following {
			chk = nil // Lead rechecks
		}
		if chk != nil {
			ended = c.ended()
		}
		wg.Go(func() {
			if chk != nil {
				c.recheckRecords(recCtx, chk, ended)
			}
			c.recordLoop(recCtx)
		})
	}
	feedCtx, stopFeed := context.WithCancel(ctx)
	if p, ok := c.store.(Purger); ok {
		if chk, ok := c.recorder.(RecordChecker); ok {
			wg.Go(func() { c.purgeLoop(feedCtx, chk, p) })
		}
	}
	if c.runHook != nil {
		wg.Go(func() { c.hookLoop(feedCtx) })
	}
	if c.runPower != nil {
		wg.Go(func() { c.powerLoop(feedCtx) })
	}
	if c.feed != nil {
		c.loadFeed(ctx)
		interval := c.cfg.SchedInterval
		wg.Go(func() { c.feedLoop(feedCtx, interval) })
	}
	defer func() {
		c.drainOps()
		close(c.stopped)
		stopFeed()
		stopRec()
		wg.Wait()
	}()

	tick := c.tick
	if tick == nil {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	cycleTimer := time.NewTimer(time.Hour)
	cycleTimer.Stop()
	defer cycleTimer.Stop()
	close(c.started)
	c.log.Info("controller serving", "jobs", len(c.st.jobs), "nodes", len(c.st.nodes), "next_job_id", c.st.nextID)

	for {
		select {
		case <-ctx.Done():
			return nil
		case o := <-c.ops:
			batch := []*op{o}
		drain:
			for len(batch) < cap(c.ops) {
				select {
				case o := <-c.ops:
					batch = append(batch, o)
				default:
					break drain
				}
			}
			if c.gather.max > 0 && !c.following {
				batch = c.gatherMore(ctx, batch)
			}
			c.runBatch(ctx, batch)
		case o := <-c.roles:
			c.runBatch(ctx, []*op{o})
		case <-tick:
			if !c.following {
				c.housekeep(ctx)
			}
		case <-cycleTimer.C:
		}
		if c.following {
			continue
		}
		if wait := c.cycleDue(); wait == 0 {
			c.cycle(ctx)
		} else if wait > 0 {
			cycleTimer.Reset(wait)
		}
	}
}

// drainOps fails every op still queued when Run stops.
func (c *Controller) drainOps() {
	for {
		select {
		case o := <-c.ops:
			o.err = spec.Errorf(spec.ErrUnavailable, "the gpud controller is shutting down; retry when it is back")
			close(o.done)
		default:
			return
		}
	}
}

// call runs fn on the owner and waits until its batch is committed.
func (c *Controller) call(ctx context.Context, fn func(tx *txn) error) error {
	return c.callOn(ctx, c.ops, fn)
}

func (c *Controller) callOn(ctx context.Context, ops chan<- *op, fn func(tx *txn) error) error {
	o := &op{fn: fn, done: make(chan struct{}), carry: carryOf(ctx)}
	select {
	case ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopped:
		return spec.Errorf(spec.ErrUnavailable, "the gpud controller is not running; retry when it is back")
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stopped:
		// Ops drained at stop are closed before stopped is.
		select {
		case <-o.done:
			return o.err
		default:
			return spec.Errorf(spec.ErrUnavailable, "the gpud controller stopped; retry when it is back")
		}
	}
}

// runBatch applies ops in order, commits their changes in one transaction
// and only then replies to them.
func (c *Controller) runBatch(ctx context.Context, batch []*op) {
	tx := c.takeTxn()
	defer c.giveTxn(tx)
	for _, o := range batch {
		first := c.st.nextID
		o.err = c.safely("request", func() error { return o.fn(tx) })
		if o.carry != nil && o.err == nil && c.CarriesAudit() {
			// The jobs it made: ids are handed out one after another.
			o.carry.first, o.carry.end = first, c.st.nextID
			tx.carries = append(tx.carries, o.carry)
		}
	}
	inBatch := c.cycleInBatch(tx) // schedule.go
	if err := c.commit(ctx, tx); err != nil {
		if inBatch {
			c.sched.inc = nil // it may be ahead of the reloaded state
		}
		for _, o := range batch {
			if o.err == nil {
				o.err = err
			}
		}
	}
	for _, o := range batch {
		close(o.done)
	}
}

// safely runs f, turning a panic into an error so one bad request or
// cycle cannot take the controller down.
func (c *Controller) safely(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("panic in controller "+what, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error in controller %s: %v", what, r)
		}
	}()
	return f()
}

// commit persists tx, then publishes it: new job views, node generation
// bumps (waking long-polls) and job waiters. On a store failure the state
// is reloaded from disk, so memory never runs ahead of what is durable.
func (c *Controller) commit(ctx context.Context, tx *txn) error {
	// The batch's ended attempts are in unfed after it (enqueueRecords),
	// or in the state reloaded after a failure.
	defer func() { c.batchEnded = c.batchEnded[:0] }()
	tx.forget = c.takeForgets()
	if len(tx.persistJobs) > 0 || len(tx.persistNodes) > 0 || tx.counter || len(tx.admin) > 0 || len(tx.carries) > 0 || len(tx.forget) > 0 {
		if c.following {
			return c.refuseFollowerCommit(ctx)
		}
		jobs := make([]*spec.Job, 0, len(tx.persistJobs))
		for _, rec := range tx.persistJobs {
			jobs = append(jobs, &rec.job)
		}
		slices.SortFunc(jobs, func(a, b *spec.Job) int { return cmp.Compare(a.ID, b.ID) })
		nodes := make([]*spec.Node, 0, len(tx.persistNodes))
		for _, n := range tx.persistNodes {
			nodes = append(nodes, n.record())
		}
		var next spec.JobID
		if tx.counter {
			next = c.st.nextID
		}
		start := time.Now()
		err := c.commitAdmin(context.WithoutCancel(ctx), tx) // admin.go
		if err == nil {
			if len(tx.carries) > 0 || len(tx.forget) > 0 {
				err = c.applyAudited(context.WithoutCancel(ctx), tx, jobs, nodes, next) // auditcarry.go
			} else {
				err = c.store.Apply(context.WithoutCancel(ctx), jobs, nodes, next)
			}
		}
		c.gather.took = time.Since(start)
		if err != nil {
			c.putForgetsBack(tx.forget)
			c.log.Error("state commit failed; reloading state from the store", "err", err)
			if lerr := c.load(ctx); lerr != nil {
				// Memory may now be ahead of disk; nothing else is safe.
				panic(fmt.Sprintf("controller state commit failed (%v) and reload failed (%v)", err, lerr))
			}
			if isNotLeader(err) || errors.Is(err, spec.ErrUnavailable) {
				return err // the HA group's answer says what happened
			}
			return spec.Errorf(spec.ErrUnavailable, "cannot save controller state: %v; check the state directory's disk", err)
		}
	}
	for id, rec := range tx.touched {
		rec.publish()
		if ws := c.st.waiters[id]; ws != nil {
			for _, w := range ws {
				close(w)
			}
			delete(c.st.waiters, id)
		}
	}
	for name := range tx.bump {
		if n := c.st.nodes[name]; n != nil {
			c.bumpAnswering(n)
		}
	}
	if len(tx.ended) > 0 {
		for i := range tx.ended {
			c.recordModel(&tx.ended[i])
		}
		c.enqueueRecords(tx.ended) // copies them
		clear(tx.ended)            // holds no ended job's strings
		c.endedBuf = tx.ended[:0]
	}
	c.queueHooks(tx.hooks)
	c.queuePower(tx.power)
	c.enqueueNodeEvents(tx.nodeEvents)
	c.enqueueResvRecords(tx.resvRecs)
	c.enqueueSteps(tx.steps)
	c.noteSched(tx)
	return nil
}

// noteSched hands tx's scheduling events to the next cycle.
func (c *Controller) noteSched(tx *txn) {
	if tx.kick {
		c.sched.dirty, c.sched.full = true, true
	}
	if tx.more {
		// A cycle's start limit held jobs back: the next cycle goes on
		// with them, incrementally when it may (cycleIncremental), by a
		// full cycle otherwise.
		c.sched.dirty = true
		if !c.resumable(c.now()) {
			c.sched.full = true
		}
	}
	if len(tx.submitted)+len(tx.freed) > 0 {
		c.sched.dirty = true
		c.sched.submitted = append(c.sched.submitted, tx.submitted...)
		c.sched.freed = append(c.sched.freed, tx.freed...)
	}
}

// txn collects the effects of a batch of ops.
type txn struct {
	persistJobs  map[spec.JobID]*jobRec
	persistNodes map[string]*nodeRec
	counter      bool
	// touched jobs get a new published view (superset of persistJobs).
	touched map[spec.JobID]*jobRec
	bump    map[string]bool
	ended   []spec.Job
	// nodeEvents go to the recorder after the commit, like ended.
	nodeEvents []spec.NodeEvent
	// resvRecs are reservation windows for the recorder, after the commit.
	resvRecs []spec.ResvRecord
	// steps are ended job steps for a StepRecorder, after the commit.
	steps []spec.JobSteps
	// kick asks for a full scheduling cycle; submitted (plain new pending
	// jobs) and freed (jobs whose resources all came back) can be
	// answered incrementally (see schedState.inc).
	kick bool
	// more: a cycle's start limit held pending jobs back (see
	// sched.State.Resume).
	more             bool
	submitted, freed []spec.JobID
	// hooks are idle_hook runs, started once the batch is committed.
	hooks []IdleEvent
	// power are [power] program runs, started once it is committed.
	power []PowerRun
	// admin are changes of the admin's live state (admin.go), written
	// before the jobs and nodes.
	admin []spec.AdminRecord
	// carries are the audit entries of the batch's calls that succeeded,
	// committed with its changes; forget are kept entries now in the
	// audit log, dropped with them (auditcarry.go).
	carries []*AuditCarry
	forget  []int64
}

func newTxn() *txn {
	return &txn{persistJobs: map[spec.JobID]*jobRec{}, persistNodes: map[string]*nodeRec{},
		touched: map[spec.JobID]*jobRec{}, bump: map[string]bool{}}
}

// maxReusedTxn bounds the entries a batch's txn may have held in each of
// its maps to be reused: clearing a map costs its capacity, which a full
// cycle's thousands of jobs would leave to every later small batch.
const maxReusedTxn = 256

// takeTxn is a txn for the owner loop's next batch: the last batch's,
// emptied (giveTxn), or a new one. Its four maps were a quarter of what a
// live burst's owner loop allocated besides the jobs themselves
// (BenchmarkLiveBurst1000x8's profile: a txn per batch of a few calls).
func (c *Controller) takeTxn() *txn {
	if tx := c.txFree; tx != nil {
		c.txFree = nil
		return tx
	}
	return newTxn()
}

// giveTxn keeps tx's maps, emptied, for the next batch (takeTxn); its
// slices are dropped, as what the commit handed on may hold them. Only
// the owner loop calls it, after the batch's ops are answered.
func (c *Controller) giveTxn(tx *txn) {
	if max(len(tx.persistJobs), len(tx.persistNodes), len(tx.touched), len(tx.bump)) > maxReusedTxn {
		return
	}
	pj, pn, t, b := tx.persistJobs, tx.persistNodes, tx.touched, tx.bump
	clear(pj)
	clear(pn)
	clear(t)
	clear(b)
	*tx = txn{persistJobs: pj, persistNodes: pn, touched: t, bump: b}
	c.txFree = tx
}

// endJobCopy adds a copy of j to tx.ended, in the owner's reused array
// (endedBuf) if no other txn has taken it.
func (c *Controller) endJobCopy(tx *txn, j *spec.Job) {
	if tx.ended == nil {
		tx.ended, c.endedBuf = c.endedBuf, nil
	}
	tx.ended = append(tx.ended, *j)
}

// saveJob marks rec to be persisted and republished.
func (tx *txn) saveJob(rec *jobRec) {
	tx.persistJobs[rec.job.ID] = rec
	tx.touched[rec.job.ID] = rec
}

func (tx *txn) saveNode(n *nodeRec) { tx.persistNodes[n.inv.Name] = n }

// JobView is a published, immutable view of a job. Readers share it;
// the owner replaces it when the job changes.
type JobView struct {
	job spec.Job
	// brief and raw are BriefJSON's and ListJSON's encodings, made by
	// the first reader: the owner loop publishes a view at every change
	// of a job (submit, start, end, ...), and most are replaced before
	// anyone lists them, so encoding each at publication cost the loop a
	// quarter of its CPU in a 100,000-job drain (BenchmarkDrain1000x8's
	// profile), and an ended job held its brief (~300 bytes) until
	// purged. Two readers racing both encode the same bytes; either
	// store wins. Pointers, not a sync.Once and a slice each, keep the
	// view in the 1,408-byte size class (a spec.Job is 1,360).
	brief atomic.Pointer[[]byte]
	raw   atomic.Pointer[[]byte]
	// full is AppendJSON's encoding (nil until a node's assignments
	// answer first sends the view).
	full atomic.Pointer[[]byte]
}

// maxKeptJobJSON bounds the encoding a view keeps for AppendJSON: a job
// with a larger script or environment is encoded at each answer instead
// (kept, 8,000 running jobs of a 1 MiB script would hold 8 GiB).
const maxKeptJobJSON = 16 << 10

// AppendJSON appends the job's JSON to b: spec.Job.AppendJSON's bytes
// (json.Marshal's), script and environment included. The first call
// keeps them with the view (up to maxKeptJobJSON): a node's assignments
// answer carries every job on the node and is sent again at each change
// of any of them, while a running job's view changes rarely.
func (v *JobView) AppendJSON(b []byte) []byte {
	if p := v.full.Load(); p != nil {
		return append(b, *p...)
	}
	n := len(b)
	b = v.job.AppendJSON(b)
	if len(b)-n <= maxKeptJobJSON {
		kept := slices.Clone(b[n:])
		v.full.Store(&kept)
	}
	return b
}

// Job returns a copy of the job. Its slices are shared and must not be
// modified.
func (v *JobView) Job() spec.Job { return v.job }

// ListJSON returns the job's JSON encoding for listings (as spec.Job
// marshals, but without Script, Args and Env, which can be kilobytes per
// job and which no listing shows; GET /v1/jobs/{id} has them). It is
// computed once per view, by the first reader (off the owner loop), so a
// listing encodes only the jobs that changed since the last one.
func (v *JobView) ListJSON() []byte {
	if p := v.raw.Load(); p != nil {
		return *p
	}
	summary := v.job
	summary.Script, summary.Args, summary.Env = "", nil, nil
	// spec.Job.AppendJSON: json.Marshal's bytes, without reflection.
	var scratch [2048]byte
	raw := slices.Clone(summary.AppendJSON(scratch[:0]))
	v.raw.Store(&raw)
	return raw
}

// BriefJSON returns the job's brief listing encoding (spec.Job's
// AppendBriefJSON: what gpuq's table shows, zero values omitted),
// computed once per view by its first reader (squeue's listing).
func (v *JobView) BriefJSON() []byte {
	if p := v.brief.Load(); p != nil {
		return *p
	}
	var scratch [512]byte
	brief := slices.Clone(v.job.AppendBriefJSON(scratch[:0]))
	v.brief.Store(&brief)
	return brief
}

// newView publishes j as it is now. It shares j's Alloc: the owner
// replaces a job's Alloc (cloneAlloc, then its change), never changes
// one in place, so a view's stays as published without a copy per view
// (an ended job kept one until purged).
func newView(j *spec.Job) *JobView { return &JobView{job: *j} }

func cloneAlloc(a *spec.Alloc) *spec.Alloc {
	if a == nil {
		return nil
	}
	b := *a
	b.Nodes = slices.Clone(a.Nodes)
	return &b
}
