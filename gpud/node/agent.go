package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/statefile"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/safefs"
)

// Agent is a node agent. Create it with New and run it with Run, once.
type Agent struct {
	// runnerDeps holds the agent's configuration, runtime, outbox (ob),
	// checkpoint store (ckpt), clock, logger and inventory; it is all its
	// runners see of it (runnerdeps.go). ob and ckpt are set by Run
	// before any goroutine starts.
	runnerDeps
	// retain: the sealed checkpoint directories' report and removal
	// (retain.go).
	retain retainer
	client ControllerClient
	opts   options
	// invMu guards cfg.Inventory, which refreshMIGLayout updates.
	invMu sync.Mutex
	migs  migDevs

	ran atomic.Bool
	// skewWarned: the log said once that this node's clock differs
	// from the controller's (localStarts).
	skewWarned atomic.Bool
	// starts are the allocations' starts on this node's clock
	// (localStarts; the assignments loop's goroutine alone).
	starts localStartsState
	// health is nil unless WithHealth was given.
	health *healthWatcher

	mu      sync.Mutex
	runners map[string]*runner // by alloc ID
	// owners is who each assigned allocation belongs to, from the last
	// assignments answer (adopted runners learn it there too).
	owners map[string]RunningJob
	// cgroups is each running allocation's last cgroup reading, taken by
	// the usage sampler (RunningJob.CPUSeconds, MemBytes).
	cgroups map[string]runtime.TaskUsage
	// runnerWG counts runner goroutines (and a prefetch's); Run waits for
	// it after its loops.
	runnerWG sync.WaitGroup
	// pf pulls pending jobs' images ahead (prefetch.go).
	pf prefetcher

	// fenceMu guards fence (fence.go: self-fencing when cut off from
	// the controller). Lock order: fenceMu before mu.
	fenceMu sync.Mutex
	fence   fenceState

	// pollMu guards poll, the cancel function of the assignments poll in
	// flight, and repollAsked (repoll).
	pollMu      sync.Mutex
	poll        context.CancelFunc
	repollAsked bool

	// rev is the node's copy of the controller's revocation lists and
	// stepKey the key step tickets are verified with (revoke.go).
	rev     *auth.Revocations
	stepKey atomic.Pointer[string]

	// The controller's identity (ident.go): identMu is held for reading
	// while an answer is reconciled, for writing while a change of
	// identity sets the old one's allocations apart; ctlSilent says the
	// last answer had none; foreignStops are the old identity's runners
	// being stopped (mu).
	identMu      sync.RWMutex
	ctlSilent    atomic.Bool
	foreignStops map[*runner]bool

	// hold is the send loop's hold of started events (sendhold.go).
	hold sendHold
}

// New checks cfg and returns an agent that will talk to the controller
// through client (an *api.Client in production) and run jobs through rt.
func New(cfg Config, client ControllerClient, rt runtime.Runtime, opts ...Option) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("configure node agent: %w", err)
	}
	if c, ok := client.(*api.Client); ok && c == nil {
		client = nil
	}
	if client == nil || rt == nil {
		return nil, errors.New("configure node agent: a controller client and a runtime are required")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.fill()
	gpus := make(map[string]spec.GPU, len(cfg.Inventory.GPUs))
	for _, g := range cfg.Inventory.GPUs {
		gpus[g.UUID] = g
	}
	nics := make(map[string]spec.NIC, len(cfg.Inventory.NICs))
	for _, n := range cfg.Inventory.NICs {
		nics[n.Name] = n
	}
	a := &Agent{
		runnerDeps: runnerDeps{
			cfg:        cfg,
			rt:         rt,
			log:        o.log.With("node", cfg.Name),
			clock:      o.clock,
			gpus:       gpus,
			nics:       nics,
			pins:       newCPUPins(cfg.SysfsRoot, o.log),
			kick:       make(chan struct{}, 1),
			images:     &imageState{},
			backoffMin: o.backoffMin,
			backoffMax: o.backoffMax,
		},
		client:  client,
		opts:    o,
		runners: map[string]*runner{},
		owners:  map[string]RunningJob{},
		cgroups: map[string]runtime.TaskUsage{},
		migs:    migDevs{whole: map[string]int{}},

		foreignStops: map[*runner]bool{},
	}
	a.runnerDeps.pool = newPreparedPool(&a.runnerDeps)
	a.runnerDeps.mayCheckpoint = a.mayCheckpoint
	a.runnerDeps.otherAttempt = a.otherAttempt
	a.runnerDeps.acquireDevices = a.acquireDevices
	a.runnerDeps.releaseDevices = a.releaseDevices
	a.runnerDeps.refreshMIGLayout = a.refreshMIGLayout
	if o.healthSampler != nil {
		a.health = newHealthWatcher(a)
	}
	a.runnerDeps.gateGPUs = a.health.gateStart
	a.runnerDeps.holdGPUs = a.health.holdGPUs
	numa := make(map[string]int, len(gpus))
	for id, g := range gpus {
		numa[id] = g.NUMANode
	}
	// The revocation lists' copy is trusted for fenceAfter since the
	// controller last confirmed it (revoke.go); until the first answer
	// says node_timeout, the default's.
	a.rev = auth.NewRevocationCopy(a.fenceAfter(), o.net.Now)
	a.runnerDeps.steps = step.NewNode(step.Config{Node: cfg.Name, Version: cfg.Version, KillGrace: cfg.KillGrace,
		Runtime: rt, Clock: o.clock, Log: a.log, Peers: o.peers, Net: o.stepNet, Tools: cfg.ToolsDir, GPUNUMA: numa,
		Revocations: a.rev, TicketKey: a.ticketKey, Now: o.net.Now, SocketPool: cfg.stepSocketPool()}, stepHost{a})
	return a, nil
}

// Name is the node's name.
func (a *Agent) Name() string { return a.cfg.Name }

// Running returns the IDs of the allocations the agent has runners for,
// sorted: what it reports in heartbeats.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.runners))
	for id := range a.runners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// RunningJob is one job running on this node, for the node's metrics.
type RunningJob struct {
	JobID   spec.JobID
	AllocID string
	User    string
	Account string
	// GPUs are the device UUIDs of this node's part (MIG UUIDs for slices).
	GPUs []string
	// Attempt, Start (the allocation's start as the controller placed it)
	// and GPUFraction (a share of one GPU; 0 for whole GPUs) come with the
	// user, from the controller's answer.
	Attempt     int
	Start       time.Time
	GPUFraction float64
	// CPUSeconds (since the task started) and MemBytes (in use) are the
	// job's cgroup as the usage sampler last read it, when HasUsage.
	CPUSeconds float64
	MemBytes   int64
	HasUsage   bool
}

// RunningJobs lists the jobs the agent has runners for, by alloc ID. A
// re-adopted container's user, account and GPUs are known once the
// controller's next assignments answer names it; until then only its job
// and alloc IDs are.
func (a *Agent) RunningJobs() []RunningJob {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]RunningJob, 0, len(a.runners))
	for id, r := range a.runners {
		if r.ended.Load() {
			continue // its exit is (being) recorded: no sample may follow it
		}
		j, ok := a.owners[id]
		if !ok {
			j = RunningJob{JobID: r.jobID, AllocID: id}
		}
		if u, ok := a.cgroups[id]; ok {
			j.CPUSeconds, j.MemBytes, j.HasUsage = u.CPUSeconds, u.MemBytes, true
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(x, y RunningJob) int { return strings.Compare(x.AllocID, y.AllocID) })
	return out
}

// Run opens the outbox, recovers the containers an earlier agent left,
// registers, and then heartbeats, follows assignments and delivers events
// until ctx ends. It returns nil when ctx ends: job containers keep
// running (shutting the agent down is not killing its jobs) and the next
// agent re-adopts them. It returns an error only when it cannot start.
func (a *Agent) Run(ctx context.Context) error {
	if !a.ran.CompareAndSwap(false, true) {
		return errors.New("run node agent: Run was already called; create a new Agent")
	}
	for _, d := range []string{a.cfg.StateDir, a.cfg.jobsDir()} {
		// 0711: job directories below are owned by their users and must
		// be reachable by them, but not listable.
		// An older agent made them 0755: tightened, with a log line.
		fixes, err := statefile.Dir(d, 0o711)
		if err != nil {
			return fmt.Errorf("create node state directory %s: %w", d, err)
		}
		statefile.Log(a.log, fixes)
	}
	// jobs/ open for the whole run: each job's directory is made and
	// removed through it (one open and close fewer at each).
	jobs, err := safefs.OpenDir(a.cfg.jobsDir())
	if err != nil {
		return fmt.Errorf("open node state directory %s: %w", a.cfg.jobsDir(), err)
	}
	a.jobs = jobs
	defer jobs.Close() // deferred first: runs after the runners and the pool are done
	ckpt, err := checkpoint.New(a.cfg.CheckpointRoot, a.cfg.CheckpointKeep, checkpoint.WithClock(a.clock.Now), checkpoint.WithLogger(a.log))
	if err != nil {
		return fmt.Errorf("open checkpoint root of node %s: %w", a.cfg.Name, err)
	}
	a.ckpt = ckpt
	// In-process peers (gpud standalone) and the step listener.
	stopSteps := a.steps.Run(ctx)
	defer stopSteps()
	open := openOutbox
	if a.opts.memOutbox {
		open = func(ctx context.Context, _ *slog.Logger, _ string, _ time.Time) (*outbox, error) {
			return openMemoryOutbox(ctx)
		}
	}
	ob, err := open(ctx, a.log, a.cfg.StateDir, a.clock.Now())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	a.ob = ob
	defer func() {
		if err := ob.Close(); err != nil {
			a.log.Warn("close outbox", "err", err)
		}
	}()
	// A clean stop (ctx ended, after the runners returned) leaves no
	// exited task behind (stop.go).
	clean := false
	defer func() {
		if clean {
			a.stopCleanly()
		}
	}()
	// Runners started by recovery or reconcile end when ctx ends; wait
	// for them before the outbox closes, whatever happens below. An
	// early error return cancels them first (as a shutdown: their
	// containers keep running).
	defer a.runnerWG.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if err := a.recoverContainers(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if a.pool != nil {
		// Before the runners' wait (deferred above): it runs first.
		stopPool := a.pool.run(ctx)
		defer stopPool()
	}

	var loops sync.WaitGroup
	loops.Add(1)
	go func() {
		defer loops.Done()
		a.sendLoop(ctx)
	}()
	if a.health != nil {
		loops.Add(1)
		go func() {
			defer loops.Done()
			a.health.run(ctx)
		}()
	}
	interval := a.register(ctx)
	if ctx.Err() == nil {
		loops.Add(3)
		go func() {
			defer loops.Done()
			a.heartbeatLoop(ctx, interval)
		}()
		go func() {
			defer loops.Done()
			a.usageLoop(ctx)
		}()
		go func() {
			defer loops.Done()
			a.assignmentsLoop(ctx)
		}()
	}
	loops.Wait()
	clean = true
	if a.cfg.StopJobsOnStop {
		a.log.Info("node agent stopping; its job containers are stopped too", "running", len(a.Running()))
	} else {
		a.log.Info("node agent stopped; job containers keep running", "running", len(a.Running()))
	}
	return nil
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// inventory copies cfg.Inventory; callers hold invMu.
func (a *Agent) inventory() spec.Inventory {
	inv := a.cfg.Inventory
	inv.GPUs = slices.Clone(inv.GPUs)
	return inv
}

// registerTimeout bounds one registration request.
const registerTimeout = time.Minute

// register registers the inventory, retrying until the controller
// answers or ctx ends, and returns the heartbeat interval to use.
func (a *Agent) register(ctx context.Context) time.Duration {
	bo := a.newBackoff()
	for {
		a.invMu.Lock()
		inv := a.inventory()
		a.invMu.Unlock()
		sent := a.opts.net.Now()
		// Bounded, so a request hung on a dead connection is retried,
		// but generously: under a registration storm a controller may
		// take long to answer, and a retry adds to its load.
		rctx, cancel := context.WithTimeout(ctx, registerTimeout)
		// Running: the containers it re-adopted (recoverContainers ran
		// first) resume their interrupted runs as the node comes back.
		resp, err := a.client.RegisterNode(rctx, api.RegisterRequest{Inventory: inv, Revocations: a.rev.Version(), Running: a.Running()})
		cancel()
		if err == nil && !a.learnController(ctx, resp.ControllerID) {
			err = errors.New("the controller's identity could not be kept in the outbox")
		}
		if err == nil {
			a.contactOK(sent, resp.NodeTimeout())
			a.learnRevocations(sent, resp.Revocations)
			iv := a.cfg.HeartbeatInterval
			if resp.HeartbeatIntervalSec > 0 {
				iv = time.Duration(resp.HeartbeatIntervalSec) * time.Second
			}
			a.health.hold(resp.GPUsOut)
			a.log.Info("node registered", "cpus", a.cfg.Inventory.CPUs, "mem_mib", a.cfg.Inventory.MemMiB,
				"gpus", len(a.cfg.Inventory.GPUs), "heartbeat_interval", iv)
			return iv
		}
		if ctx.Err() != nil {
			return 0
		}
		d := bo.next()
		a.log.Warn("register node with controller; retrying", "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return 0
		}
	}
}

// heartbeatLoop heartbeats every interval. Each heartbeat has its own
// timeout (heartbeatTimeout), and a failed one is retried after a short
// jittered backoff, never later than the next interval, so one request
// lost on a dead connection does not cost two intervals (with a
// node_timeout of three, the node would then be one more loss from
// DOWN).
func (a *Agent) heartbeatLoop(ctx context.Context, interval time.Duration) {
	defer a.retain.wg.Wait() // a checkpoint scan or removal (retain.go)
	t := time.NewTimer(interval)
	defer t.Stop()
	bo := a.newBackoff()
	failing := false
	var healthC <-chan struct{}
	if a.health != nil {
		healthC = a.health.changed
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-healthC: // a GPU just became unhealthy: tell at once
		}
		began := time.Now()
		sent := a.opts.net.Now()
		hctx, cancel := context.WithTimeout(ctx, a.heartbeatTimeout(interval))
		events := a.health.pendingEvents()
		nicReport, nicProblems := a.health.nicReport()
		req := api.HeartbeatRequest{Running: a.Running(), GPUProblems: a.health.current(),
			GPUEvents: events, NICReport: nicReport, NICProblems: nicProblems, Revocations: a.rev.Version(),
			Prepares: a.pool != nil, Sealed: a.sealedReport()}
		if puller, ok := a.rt.(runtime.ImagePuller); ok {
			req.Images, req.Pulls = a.images.inventory(hctx, puller), a.images.pullsNow()
		}
		resp, err := a.client.HeartbeatAnswer(hctx, a.cfg.Name, req)
		cancel()
		next := max(interval-time.Since(began), 0) // the cadence of a ticker
		if err != nil && ctx.Err() == nil {
			// Never at once: a heartbeat that timed out on an
			// overloaded controller must not come straight back.
			next = min(bo.next(), interval)
		}
		t.Reset(next)
		switch {
		case err == nil:
			bo.reset()
			a.health.ackEvents(len(events))
			a.contactOK(sent, resp.NodeTimeout())
			a.learnRevocations(sent, resp.Revocations)
			a.prefetch(ctx, resp.Prefetch)
			a.prepareExpected(ctx, resp.Prepare) // expect.go
			a.images.answered(resp.ImagesVersion)
			a.retainEnded(ctx, resp.Sealed, resp.Ended) // retain.go
			if a.heartbeatAnswered(sent) {
				a.repoll() // a fence waits for an answer asked after this one
			}
			if failing {
				a.log.Info("heartbeats reach the controller again")
				// The sender may be in a long backoff: deliver what
				// happened meanwhile now, not up to a backoff later.
				select {
				case a.kick <- struct{}{}:
				default:
				}
			}
			failing = false
		case ctx.Err() != nil:
			return
		case errors.Is(err, spec.ErrNotFound):
			// The controller does not know this node (its state was
			// reset): register again.
			a.log.Warn("controller does not know this node; registering again", "err", err)
			if iv := a.register(ctx); iv > 0 && iv != interval {
				interval = iv
				t.Reset(iv)
			}
		default:
			if req.Sealed != nil {
				// Not again until an answer says the controller takes
				// the list (one rolled back to an older version refuses it).
				a.retain.takes.Store(false)
			}
			if !failing {
				a.log.Warn("heartbeat to controller failed; retrying", "err", err, "retry_in", next)
			}
			failing = true
		}
	}
}

// assignmentsLoop follows the node's assignments and reconciles on every
// answer, unchanged ones included (level-triggered: a missed or failed
// action is retried by the next answer): on a watch stream when the
// client has one (AssignmentsWatcher: one long-lived answer on the open
// connection, a line per change), by long polls otherwise and with a
// controller that does not stream (it answers the watch as a poll).
func (a *Agent) assignmentsLoop(ctx context.Context) {
	var after uint64
	bo := a.newBackoff()
	watcher, _ := a.client.(AssignmentsWatcher)
	for {
		sent := a.opts.net.Now()
		hb := a.lastHeartbeat()
		pctx, cancel := context.WithCancel(ctx)
		if a.pollCancel(cancel) {
			after = 0 // asked to poll again: an answer at once
		}
		// Borrow: answered reads the stream's set in place (no copy of
		// it per line) and keeps nothing of it.
		req := api.AssignmentsRequest{After: after, Wait: a.cfg.PollWait, Revocations: a.rev.Version(), Borrow: true}
		var answers int
		var foreign bool
		take := func(resp *api.AssignmentsResponse) error {
			if !a.learnController(ctx, resp.ControllerID) {
				foreign = true
				return errForeignAnswer
			}
			answers++
			bo.reset()
			a.answered(ctx, sent, hb, resp)
			// A restarted controller starts again from generation 0 and
			// answers at once; follow it down as well as up.
			after = resp.Generation
			if ctx.Err() == nil && answers > 1 && a.rejoinedSince(sent) {
				// Back after a cut the stream outlived: answers to a
				// request sent after the rejoin may un-fence checkpoints
				// (confirmAssigned); ask again.
				return errResync
			}
			return ctx.Err()
		}
		var err error
		if watcher != nil {
			_, err = watcher.WatchAssignments(pctx, a.cfg.Name, req, take)
		} else {
			var resp api.AssignmentsResponse
			if resp, err = a.client.PollAssignments(pctx, a.cfg.Name, req); err == nil {
				err = take(&resp)
			}
		}
		a.pollCancel(nil)
		repolled := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case foreign:
			d := bo.next()
			if !sleep(ctx, d) {
				return
			}
		case err == nil || errors.Is(err, errResync):
		case repolled:
			after = 0
		case answers > 0:
			// A stream that broke after answering: asked again at once
			// (its first answer comes at once, the whole set).
			a.log.Info("assignments watch stream from the controller ended; asking again", "err", err)
		default:
			d := bo.next()
			a.log.Warn("poll assignments from controller; retrying", "err", err, "retry_in", d)
			if !sleep(ctx, d) {
				return
			}
		}
	}
}

var (
	errForeignAnswer = errors.New("an answer of another controller identity")
	errResync        = errors.New("the assignments are asked again")
)

// answered takes one assignments answer to a request sent at sent, when
// the last answered heartbeat had been sent at hb. It changes nothing in
// resp's assignments and keeps no pointer into them (a watch stream's
// are borrowed: AssignmentsRequest.Borrow); what it keeps is copied.
func (a *Agent) answered(ctx context.Context, sent, hb time.Time, resp *api.AssignmentsResponse) {
	a.learnRevocations(sent, resp.Revocations)
	a.learnTicketKey(resp.StepTicketKey)
	starts := a.localStarts(resp)
	// Only a successful answer reaches reconcile, so nothing is
	// stopped or fenced before the agent knows what the controller
	// wants.
	// An allocation the answer lists (to run, or to stop: either way
	// not requeued elsewhere yet) may checkpoint again if the node
	// was out of touch; done before reconcile, so a stop that asks
	// for a checkpoint first gets one.
	listed := make(map[string]bool, len(resp.Assignments))
	for i := range resp.Assignments { // by index: a copy of each is ~1.6 KB
		listed[resp.Assignments[i].Alloc.ID] = true
	}
	a.confirmAssigned(sent, listed)
	a.identMu.RLock()
	a.reconcile(ctx, hb, a.opts.net.Now(), resp.Assignments, starts)
	a.identMu.RUnlock()
}

// localStarts translates the allocations' start times, stamped on the
// controller's clock, to this node's (the clock of job time): each
// started as long before the answer arrived as the controller says it
// started before it answered. A node whose clock is an hour ahead of the
// controller's would otherwise time every job out at once, and one an
// hour behind give every job an hour more (a clock step of either does
// the same). It returns them in the answer's order (zero: none; as
// stamped when the controller does not say its clock), in a slice valid
// until the next answer.
//
// An allocation keeps the start it was first given here while the
// controller stamps the same start (the controller measures a run on its
// monotonic clock and a watch stream keeps the start it sent: most
// lines repeat it): translated again at each answer it moved by the
// answers' delays, and each runner's deadline timer was armed again at
// every line. A stamp that moves (a step of the controller's clock, a
// new stream's first line, another member's answer) is translated anew.
// The translation keeps this node's monotonic reading, so keeping it
// outlives a step of this node's clock as translating again did.
func (a *Agent) localStarts(resp *api.AssignmentsResponse) []time.Time {
	out := a.starts.buf[:0]
	a.starts.mark = !a.starts.mark
	var got time.Time
	if !resp.Now.IsZero() {
		got = a.runnerDeps.clock.Now()
		if skew := resp.Now.Sub(got).Abs(); skew > time.Second && a.skewWarned.CompareAndSwap(false, true) {
			a.log.Warn("this node's clock differs from the controller's; job time limits are measured from each job's start as the controller saw it, on this node's clock", "controller_ahead_by", resp.Now.Sub(got).Round(time.Millisecond))
		}
	}
	for i := range resp.Assignments {
		al := &resp.Assignments[i].Alloc
		start := al.StartTime.Time
		if !start.IsZero() && !got.IsZero() {
			k := a.starts.kept[al.ID]
			if k == nil {
				if a.starts.kept == nil {
					a.starts.kept = map[string]*keptStart{}
				}
				k = &keptStart{}
				a.starts.kept[al.ID] = k
			}
			if k.local.IsZero() || !k.stamped.Equal(start) {
				// Not spec.NewTime: the start keeps got's monotonic
				// reading, so a deadline taken from it and armed later (a
				// gang start's wait, an image pull) is not moved by a step
				// of this node's clock in between.
				k.stamped, k.local = start, got.Add(-resp.Now.Sub(start))
			}
			k.mark = a.starts.mark
			start = k.local
		}
		out = append(out, start)
	}
	for id, k := range a.starts.kept {
		if k.mark != a.starts.mark {
			delete(a.starts.kept, id) // no longer listed (or stamped)
		}
	}
	a.starts.buf = out
	return out
}

// localStartsState is what localStarts keeps between answers (the
// assignments loop's goroutine alone uses it).
type localStartsState struct {
	kept map[string]*keptStart // by allocation ID
	mark bool                  // flips at each answer: what it did not list goes
	buf  []time.Time
}

// keptStart is an allocation's start as the controller stamped it and as
// translated to this node's clock when that stamp first came.
type keptStart struct {
	stamped, local time.Time
	mark           bool
}

// pollCancel sets the cancel function of the assignments poll in flight
// (nil: none); it reports whether a repoll was asked while none was.
func (a *Agent) pollCancel(cancel context.CancelFunc) bool {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	a.poll = cancel
	asked := a.repollAsked && cancel != nil
	if cancel != nil {
		a.repollAsked = false
	}
	return asked
}

// repoll has the assignments asked again at once: the poll in flight is
// cancelled, or the next one answers at once.
func (a *Agent) repoll() {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	if a.poll != nil {
		a.poll()
		return
	}
	a.repollAsked = true
}

// reconcile moves the node towards the controller's desired set, as
// answered at received to a poll sent when the last answered heartbeat
// had been sent at hb (mayFence); starts are the allocations' starts on
// this node's clock (localStarts), in asgs' order. asgs are read in
// place (~1.6 KB each, every line): what a runner keeps is a copy.
func (a *Agent) reconcile(ctx context.Context, hb, received time.Time, asgs []api.Assignment, starts []time.Time) {
	want := make(map[string]bool, len(asgs))
	owners := make(map[string]RunningJob, len(asgs))
	defer func() {
		a.mu.Lock()
		a.owners = owners
		a.mu.Unlock()
	}()
	for i := range asgs {
		asg, start := &asgs[i], starts[i]
		id := asg.Alloc.ID
		self, ok := nodeAllocOf(&asg.Alloc, a.cfg.Name)
		if id == "" || !ok {
			a.log.Warn("ignoring assignment that does not place the job on this node", "job_id", asg.Job.ID, "alloc_id", id)
			continue
		}
		want[id] = true
		owners[id] = RunningJob{JobID: asg.Job.ID, AllocID: id, User: asg.Job.User, Account: asg.Job.Account, GPUs: self.GPUs,
			Attempt: asg.Alloc.Attempt, Start: start, GPUFraction: self.GPUFraction}
		a.mu.Lock()
		r := a.runners[id]
		a.mu.Unlock()
		if r != nil && a.ob.foreignOf(id) != "" {
			// An earlier controller's runner under this ID: never handed
			// the new assignment; it runs afresh once the old one is gone.
			a.stopForeign(r, a.ob.foreignOf(id))
			continue
		}
		if r != nil {
			r.learn(asg, start, self)
			r.suspendTo(ctx, asg, start) // runnersuspend.go
			if asg.Stop {
				r.stopAfter(stopState(asg), asg.StopReason, asg.Checkpoint)
			} else {
				if asg.Signal != "" {
					r.signal(ctx, asg.Signal, asg.SignalSeq, asg.Job.SignalTarget)
				}
				if len(asg.Job.StepSignals) > 0 {
					r.steps.Signals(ctx, asg.Job.StepSignals)
				}
				if len(asg.Job.Notices) > 0 {
					r.notify(ctx, asg, self) // runnernotify.go
				}
			}
			continue
		}
		var sub int64 // the job's fingerprint (outbox subs)
		if !asg.Job.SubmitTime.IsZero() {
			sub = asg.Job.SubmitTime.UnixNano()
		}
		if a.ob.exitedHere(id, sub) {
			continue // ended here; the controller lists it until it applies the exit
		}
		rec, err := a.ob.alloc(ctx, id)
		if err != nil {
			a.log.Error("read outbox; will retry on the next assignments answer", "alloc_id", id, "err", err)
			continue
		}
		if old := a.ob.foreignOf(id); old != "" {
			// An allocation of an earlier controller under this ID
			// (ident.go): the assigned one is another.
			a.log.Warn("the outbox holds an allocation of an earlier controller state under this ID; forgetting it, the assigned job runs",
				"alloc_id", id, "job_id", asg.Job.ID, "old_controller_id", old, "held_started", rec.Started, "held_exited", rec.Exited)
			if err := a.ob.forgetAlloc(ctx, id); err != nil {
				a.log.Error("forget an earlier controller's allocation in the outbox; will retry on the next assignments answer", "alloc_id", id, "err", err)
				continue
			}
			rec = allocRecord{}
		} else if sub != 0 && rec.SubmitNS != 0 && rec.SubmitNS != sub {
			// Another job's allocation under this ID: the controller's
			// state was reset (a new state.db numbers jobs from 1 again)
			// while this node kept its outbox. Its record would have the
			// new job taken for one that ended here, never run.
			a.log.Warn("the outbox holds an allocation of another job under this ID (was the controller's state reset?); forgetting it, the assigned job runs",
				"alloc_id", id, "job_id", asg.Job.ID, "submitted", asg.Job.SubmitTime.Time, "held_submitted", time.Unix(0, rec.SubmitNS).UTC(),
				"held_started", rec.Started, "held_exited", rec.Exited)
			if err := a.ob.forgetAlloc(ctx, id); err != nil {
				a.log.Error("forget another job's allocation in the outbox; will retry on the next assignments answer", "alloc_id", id, "err", err)
				continue
			}
			rec = allocRecord{}
		}
		if rec.Exited {
			continue // ended here already; its exit is (being) reported
		}
		if asg.Stop {
			// Never started here: it ends now, as asked.
			ev := a.exitEvent(id, asg.Job.ID, stopState(asg), asg.StopReason, runtime.ExitStatus{})
			if err := a.record(ctx, ev); err != nil {
				a.log.Error("record exit of a stopped allocation; will retry", "alloc_id", id, "err", err)
			}
			continue
		}
		if sub != 0 && rec.SubmitNS == 0 {
			a.ob.fingerprint(id, sub)
		}
		a.startRunner(ctx, newRunner(&a.runnerDeps, localAssignment(asg, start), self, rec))
	}
	// Fence: a container whose allocation the controller no longer lists
	// belongs to a job that was requeued or ended elsewhere, once the
	// controller has heard what runs here (mayFence).
	a.mu.Lock()
	var fence, foreign []*runner
	for id, r := range a.runners {
		switch {
		case a.ob.foreignOf(id) != "":
			// An earlier controller's (ident.go): this one can never
			// claim it, so no heartbeat need come first.
			foreign = append(foreign, r)
		case !want[id]:
			fence = append(fence, r)
		}
	}
	a.mu.Unlock()
	for _, r := range foreign {
		a.stopForeign(r, a.ob.foreignOf(r.allocID))
	}
	if len(fence) > 0 && !a.mayFence(hb, received) {
		a.log.Info("controller does not list allocations that run here, but has not had this node's heartbeat since it answered; fencing waits for it",
			"allocs", len(fence))
		return
	}
	for _, r := range fence {
		r.unassigned.Store(true)
		r.stop(spec.StateCancelled, fmt.Sprintf("fenced: allocation %s is no longer assigned to node %s", r.allocID, a.cfg.Name))
	}
}

func stopState(asg *api.Assignment) spec.JobState {
	if asg.StopState == "" {
		return spec.StateCancelled
	}
	return asg.StopState
}

func nodeAllocOf(al *spec.Alloc, node string) (spec.NodeAlloc, bool) {
	for _, n := range al.Nodes {
		if n.Node == node {
			return n, true
		}
	}
	return spec.NodeAlloc{}, false
}

// startRunner registers r and starts its goroutine.
func (a *Agent) startRunner(ctx context.Context, r *runner) {
	a.mu.Lock()
	a.runners[r.allocID] = r
	a.mu.Unlock()
	a.runnerWG.Add(1)
	go func() {
		defer a.runnerWG.Done()
		defer close(r.done)
		defer a.removeRunner(r)
		r.run(ctx)
	}()
}

// otherAttempt reports whether the agent has a runner, not ended, for
// another allocation of r's job (checkpoint.go: its checkpoint directory
// then stays).
func (a *Agent) otherAttempt(r *runner) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.runners {
		if o != r && o.jobID == r.jobID && o.allocID != r.allocID && !o.ended.Load() {
			return true
		}
	}
	return false
}

func (a *Agent) removeRunner(r *runner) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runners[r.allocID] == r {
		delete(a.runners, r.allocID)
	}
}

// sendLoop delivers outbox events in seq order until ctx ends, retrying
// with backoff while the controller is unreachable.
func (a *Agent) sendLoop(ctx context.Context) {
	bo := a.newBackoff()
	var retry <-chan time.Time
	// Acknowledged rows are deleted with the next record's commit; flush
	// deletes them once none came for ackFlushDelay (outbox.acked).
	flushT := time.NewTimer(ackFlushDelay)
	flushT.Stop()
	defer flushT.Stop()
	// holdT ends a hold of started events (sendhold.go).
	holdT := time.NewTimer(time.Hour)
	holdT.Stop()
	defer holdT.Stop()
	for {
		failed := false
		var hold <-chan time.Time
		for {
			// Read before the events: a change of identity between the two
			// sends new events saying the old one, which are refused and
			// sent again, never old ones saying the new (ident.go).
			ctl := a.eventsController()
			evs, err := a.ob.pending(ctx, 100)
			if err != nil || len(evs) == 0 {
				if err != nil && ctx.Err() == nil {
					a.log.Error("read outbox", "err", err)
					failed = true
				}
				a.held()
				break
			}
			if d := a.holdFor(evs); d > 0 {
				// Started events only: posted with what comes next, an
				// exit at once, or at the hold's bound.
				holdT.Reset(d)
				hold = holdT.C
				break
			}
			a.held()
			resp, err := a.client.EventsFor(ctx, a.cfg.Name, evs, a.runnerDeps.clock.Now(), ctl)
			if err != nil {
				if ctx.Err() == nil {
					a.log.Warn("deliver events to controller; will retry", "events", len(evs), "first_seq", evs[0].Seq, "err", err)
				}
				failed = true
				break
			}
			if resp.AckedSeq < evs[0].Seq {
				a.log.Warn("controller acknowledged none of the events; will retry", "first_seq", evs[0].Seq, "acked_seq", resp.AckedSeq)
				failed = true
				break
			}
			if err := a.ob.ack(ctx, resp.AckedSeq); err != nil {
				if ctx.Err() == nil {
					a.log.Error("drop acknowledged events from outbox", "err", err)
				}
				failed = true
				break
			}
			bo.reset()
		}
		retry = nil
		if failed {
			retry = time.After(bo.next())
		}
		var flush <-chan time.Time
		if a.ob.unflushed() {
			flushT.Reset(ackFlushDelay)
			flush = flushT.C
		}
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-retry:
		case <-hold:
		case <-flush:
			if err := a.ob.flushAcks(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("delete acknowledged events from outbox; will retry", "err", err)
			}
		}
		flushT.Stop()
		holdT.Stop()
	}
}

// recoverContainers finds the containers this node's earlier agent left:
// it re-adopts running ones and reports (then deletes) those that exited
// meanwhile. It retries List until the runtime answers or ctx ends.
func (a *Agent) recoverContainers(ctx context.Context) error {
	var infos []runtime.TaskInfo
	bo := a.newBackoff()
	for {
		var err error
		infos, err = a.rt.List(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d := bo.next()
		a.log.Warn("list containers for recovery; retrying", "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
	a.removePreparedLeftovers(ctx, infos) // prepared.go
	keep := map[string]bool{}
	for _, ti := range infos {
		if ti.Labels[LabelNode] != a.cfg.Name || ti.Labels[LabelPrepared] != "" {
			continue // another agent's (standalone mode shares containerd), or removed above
		}
		allocID := ti.Labels[LabelAlloc]
		job, err := strconv.ParseUint(ti.Labels[LabelJob], 10, 64)
		if allocID == "" || err != nil {
			a.log.Warn("container has this node's label but no valid job or alloc label; leaving it alone", "container", ti.ID)
			keep[ti.ID] = true
			continue
		}
		rec, err := a.ob.alloc(ctx, allocID)
		if err != nil {
			return fmt.Errorf("recover container %s: %w", ti.ID, err)
		}
		log := a.log.With("job_id", job, "alloc_id", allocID, "container", ti.ID)
		switch ti.Status {
		case runtime.StatusExited:
			if err := a.recordExit(ctx, log, ti, allocID, spec.JobID(job), rec); err != nil {
				return fmt.Errorf("recover container %s: %w", ti.ID, err)
			}
			a.cleanup(ctx, log, ti.ID)
		case runtime.StatusCreated:
			// Created but never started: nothing ran and no event was
			// recorded; removing it lets reconcile start it afresh.
			log.Info("removing container that never started")
			a.cleanup(ctx, log, ti.ID)
		default:
			var deadline time.Time
			if s := ti.Labels[LabelDeadline]; s != "" {
				if deadline, err = time.Parse(time.RFC3339Nano, s); err != nil {
					log.Warn("container has a bad deadline label; no time limit enforced", "deadline", s)
				}
			}
			r := &runner{d: &a.runnerDeps, id: ti.ID, allocID: allocID, jobID: spec.JobID(job), deadline: deadline,
				adopted: true, rec: rec, signalSeq: rec.SignalSeq, noticeSeq: rec.NoticeSeq, done: make(chan struct{}), stopCh: make(chan struct{}),
				steps:  a.steps.NewAlloc(allocID, spec.JobID(job)),
				learnC: make(chan learned, 1),
				// A stop begun before the restart keeps its reason; the
				// controller's next answer repeats the request itself.
				stopState: rec.StopState, stopWhy: rec.StopWhy}
			r.outputReady.Store(true) // its output files were made when it started
			keep[ti.ID] = true
			log.Info("re-adopting running container", "status", ti.Status)
			a.startRunner(ctx, r)
		}
	}
	// Job directories without a container are left from a start that
	// never happened; the allocation will get a fresh one.
	ents, err := os.ReadDir(a.cfg.jobsDir())
	if err != nil {
		return fmt.Errorf("list job directories in %s: %w", a.cfg.jobsDir(), err)
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			a.removeJobDir(a.log, e.Name())
		}
	}
	a.removeLeftRuns(keep) // checkpoint.go
	return nil
}

// recordExit records the exit of ti, a container of allocID whose task
// exited while no runner watched it (the agent was down or stopping),
// unless the outbox has it already.
func (a *Agent) recordExit(ctx context.Context, log *slog.Logger, ti runtime.TaskInfo, allocID string, job spec.JobID, rec allocRecord) error {
	if rec.Exited {
		return nil
	}
	st := runtime.ExitStatus{Code: -1}
	if ti.Exit != nil {
		st = *ti.Exit
	}
	state, reason := exitState(st, rec.StopState, rec.StopWhy)
	if !rec.Started && rec.StopState == "" && st.Signal == syscall.SIGKILL && !st.OOMKilled {
		// Nobody here sent that SIGKILL and the start was never
		// confirmed: containerd killed a task it was still
		// creating when it died. The node failed the job, not
		// the job itself; the controller requeues it if allowed.
		state, reason = spec.StateNodeFail, "killed by the container runtime while the node agent was down, before its start was confirmed"
	}
	if err := a.record(ctx, a.exitEvent(allocID, job, state, reason, st)); err != nil {
		return err
	}
	log.Info("reported exit that no runner saw", "state", state, "exit_code", st.Code)
	return nil
}
