package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/preempt"
	"github.com/gpud/gpud/gpud/spec"
)

// The twin replays a site's own accounting (gpud simulate
// --from-accounting) the way the controller runs it: every job keeps its
// user, account, QOS, partition, nice, dependency, array and time limit;
// the snapshot carries the QOS and partition tables, the account limits
// and the fairshare report; preemptions requeue or cancel their victims;
// cycles run when jobs arrive or end and every scheduling interval, as
// the controller's do (gpud/controller/schedule.go). Only the run times
// come from the record: when a job starts, and so everything downstream,
// is the scheduler's decision under the policy given.

// TwinJob is one job of the accounting, as the replay needs it.
type TwinJob struct {
	ID                  spec.JobID
	Name, User, Account string
	QOS, Partition      string
	Submit              time.Time
	// Begin is --begin (zero: none); the job is not eligible before it.
	Begin time.Time
	// Req is the per-node request as the controller normalises it
	// (Nodes ≥ 1, CPUsPerNode ≥ 1, TotalGPUs folded into GPUsPerNode).
	Req       spec.Resources
	TimeLimit time.Duration
	// Runtime is how long the job runs once started: its last attempt's
	// run time. A job that runs into its time limit stops there.
	Runtime time.Duration
	// Outcome is how the job ended (COMPLETED, FAILED, TIMEOUT, ...);
	// dependencies (afterok, afternotok) read it.
	Outcome spec.JobState
	// CancelAt is when a job that never started was cancelled: the
	// replay drops it then if it is still waiting. Zero: never.
	CancelAt time.Time
	Nice     int
	Depend   string
	// ArrayJobID and ArrayTaskID place an array task; ArrayMax is its
	// array's %MAX (0: none).
	ArrayJobID  spec.JobID
	ArrayTaskID int
	ArrayMax    int
	// Fixed jobs were running when the replay starts: they hold Alloc
	// from RealStart for Runtime and are not scheduled.
	Fixed bool
	Alloc []spec.NodeAlloc
	// RealStart is the job's first start in the accounting (zero: it
	// never started); RealAttempts its starts.
	RealStart    time.Time
	RealAttempts int
	// Reservation is the advance reservation the job asked for.
	Reservation string
	// TimeMin is --time-min.
	TimeMin time.Duration
}

// TwinPolicy is the controller's scheduling policy
// (controller.Config.SchedPolicy gives it).
type TwinPolicy struct {
	Config     sched.Config
	QOS        []sched.QOS
	Partitions []sched.Partition
	// DownPartitions take no job: their jobs wait (PartitionDown).
	DownPartitions []string
	// BasePriority is a job's sched.Job.Priority from its QOS and nice
	// (what orders jobs when every multifactor weight is 0).
	BasePriority func(qos string, nice int) int64
	// Interval is the periodic cycle's (scheduler.interval).
	Interval time.Duration
	// Accounts is the configured fairshare tree (users listed in the
	// accounts); nil leaves the snapshot without fairshare, as the
	// controller does when the fairshare weight is 0 or no account is
	// configured.
	Accounts      *fairshare.Tree
	Fairshare     fairshare.Config
	AccountLimits []sched.AccountLimit
	// Reservations are the advance reservations, as the controller
	// gives them to every cycle.
	Reservations []sched.AdvanceReservation
}

// TwinOptions configure one replay.
type TwinOptions struct {
	// Nodes are the cluster, everything free (partitions set per node).
	Nodes  []sched.Node
	Policy TwinPolicy
	// Start is the replay's start: jobs submitted earlier enter the
	// queue then, and Fixed jobs hold their allocations.
	Start time.Time
	// Past is the fairshare usage that ended before Start, decayed to
	// Start.
	Past []fairshare.Past
	// OnPlan, when set, sees every plan at the time it was made.
	OnPlan func(now time.Time, plan sched.Plan)
}

// TwinJobResult is what happened to one job in the replay.
type TwinJobResult struct {
	Started bool
	// Start is the first start, End the end of the last attempt.
	Start, End time.Time
	Attempts   int
	Preempted  int
	Backfilled bool
	// Cancelled jobs were dropped at their CancelAt while waiting.
	Cancelled bool
	// Never: the job's dependency can never be satisfied, or it never
	// fits the cluster; it is left out of waits.
	Never bool
	// Killed: the job hit its time limit.
	Killed bool
}

// TwinResult is a replay's outcome.
type TwinResult struct {
	Jobs      []TwinJob
	Res       []TwinJobResult
	TotalGPUs int
	Start     time.Time
	// Busy is the allocated GPUs after each event (a step function;
	// T is the offset from Start).
	Busy   []Sample
	Cycles int
	// Skipped are the periodic cycles not run because they could decide
	// nothing (twin.quiet).
	Skipped int
	// Unordered are the cycles run without a fairshare report: nothing
	// in their queue to order (twin.ordered).
	Unordered   int
	Preemptions int
	Wall        time.Duration
}

const (
	twEnd = iota // ends first: they free what the others may take
	twCancel
	twSubmit
	twTick
)

type twEvent struct {
	t    time.Time
	kind int
	job  int
	gen  int // an end is stale once its job was preempted
}

type twHeap []twEvent

func (h twHeap) Len() int { return len(h) }
func (h twHeap) Less(a, b int) bool {
	if c := h[a].t.Compare(h[b].t); c != 0 {
		return c < 0
	}
	if h[a].kind != h[b].kind {
		return h[a].kind < h[b].kind
	}
	return h[a].job < h[b].job
}
func (h twHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *twHeap) Push(x any)   { *h = append(*h, x.(twEvent)) }
func (h *twHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// twin job states
const (
	tsWaiting = iota // not submitted yet
	tsPending
	tsRunning
	tsDone
)

type twRun struct {
	alloc []spec.NodeAlloc
	start time.Time
	gen   int
	at    int // index in runList
}

type twin struct {
	o      TwinOptions
	jobs   []TwinJob
	res    []TwinJobResult
	state  []int8
	byID   map[spec.JobID]int
	arrays map[spec.JobID][]int

	nodes  []sched.Node
	nodeIx map[string]int
	gpuIx  map[string]gpuRef
	busy   []int

	pending  []int
	run      map[int]*twRun
	runList  []sched.RunningJob
	runOf    []int
	events   twHeap
	now      time.Time
	busyGPUs int
	gen      int
	snapID   uint64
	cycles   int
	preempts int
	series   []Sample
	// past is the fairshare usage that has ended, by (account, user).
	past map[[2]string]*fairshare.Past
	down map[string]bool
	deps map[int]*spec.Dependency
	// idle: the last cycle, at lastCycle, found that the periodic cycles
	// after it decide nothing until the next event (quiet); skipped
	// counts the cycles not run so.
	idle      bool
	lastCycle time.Time
	skipped   int
	unordered int
	// fs is the fairshare tree kept between cycles (nil until the first).
	fs *twinFS
	// prio is each job's priority as the controller keeps it: the base
	// from its QOS and nice, then its total in the last full cycle
	// that ordered it.
	prio []int64
	// base keeps the cycles' node and running-job setup between them
	// (sched.Base): take touches the nodes it changes, start and finish
	// keep its running jobs in runList's order. nil: every cycle builds
	// it from the snapshot (twinFullSetup).
	base *sched.Base
}

// twinFullSetup makes every cycle build its setup from the snapshot, as
// before sched.Base: the test that the two decide alike sets it.
var twinFullSetup = false

// RunTwin replays jobs under o and reports what happened to each. It is
// deterministic: equal inputs give equal results.
func RunTwin(jobs []TwinJob, o TwinOptions) (*TwinResult, error) {
	if len(o.Nodes) == 0 {
		return nil, fmt.Errorf("simulate: the cluster has no nodes")
	}
	if o.Policy.BasePriority == nil {
		o.Policy.BasePriority = func(string, int) int64 { return 0 }
	}
	wall := time.Now()
	e := &twin{o: o, jobs: jobs, res: make([]TwinJobResult, len(jobs)), state: make([]int8, len(jobs)),
		byID: make(map[spec.JobID]int, len(jobs)), arrays: map[spec.JobID][]int{}, nodeIx: map[string]int{},
		gpuIx: map[string]gpuRef{}, run: map[int]*twRun{}, past: map[[2]string]*fairshare.Past{},
		down: map[string]bool{}, deps: map[int]*spec.Dependency{}, now: o.Start}
	for _, p := range o.Policy.DownPartitions {
		e.down[p] = true
	}
	for i := range o.Past {
		p := o.Past[i]
		e.past[[2]string{p.Account, p.User}] = &p
	}
	e.nodes = slices.Clone(o.Nodes)
	e.busy = make([]int, len(e.nodes))
	total := 0
	for i := range e.nodes {
		n := &e.nodes[i]
		n.GPUs = slices.Clone(n.GPUs)
		n.FreeCPUs, n.FreeMemMiB, n.Allocs, n.State = n.CPUs, n.MemMiB, 0, spec.NodeIdle
		e.nodeIx[n.Name] = i
		for g := range n.GPUs {
			n.GPUs[g].Free, n.GPUs[g].FreeFraction = true, 1
			e.gpuIx[n.GPUs[g].UUID] = gpuRef{int32(i), int32(g)}
		}
		total += len(n.GPUs)
	}
	if !twinFullSetup {
		e.base = sched.NewBase(e.nodes)
	}
	e.prio = make([]int64, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		e.prio[i] = o.Policy.BasePriority(j.QOS, j.Nice)
		e.byID[j.ID] = i
		if j.ArrayJobID != 0 {
			e.arrays[j.ArrayJobID] = append(e.arrays[j.ArrayJobID], i)
		}
		switch {
		case j.Fixed:
			e.startFixed(i)
		default:
			heap.Push(&e.events, twEvent{t: maxTime(j.Submit, o.Start), kind: twSubmit, job: i})
			if !j.CancelAt.IsZero() {
				heap.Push(&e.events, twEvent{t: maxTime(j.CancelAt, o.Start), kind: twCancel, job: i})
			}
		}
	}
	for _, ids := range e.arrays {
		slices.SortFunc(ids, func(a, b int) int { return cmp.Compare(jobs[a].ID, jobs[b].ID) })
	}
	e.loop()
	for i := range e.res {
		if e.state[i] == tsPending {
			e.res[i].Never = true
		}
	}
	return &TwinResult{Jobs: jobs, Res: e.res, TotalGPUs: total, Start: o.Start, Busy: e.series, Cycles: e.cycles,
		Skipped: e.skipped, Unordered: e.unordered, Preemptions: e.preempts, Wall: time.Since(wall)}, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (e *twin) loop() {
	interval := e.o.Policy.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	nextTick := e.o.Start.Add(interval)
	for {
		var t time.Time
		hasEv := e.events.Len() > 0
		switch {
		case len(e.pending) > 0 && (hasEv && nextTick.Before(e.events[0].t) || !hasEv && e.beginAhead()):
			t = nextTick
		case hasEv:
			t = e.events[0].t
		default:
			return // what still waits can never run
		}
		e.now = t
		dirty := false
		for e.events.Len() > 0 && !e.events[0].t.After(t) {
			ev := heap.Pop(&e.events).(twEvent)
			switch ev.kind {
			case twEnd:
				if r := e.run[ev.job]; r != nil && r.gen == ev.gen {
					e.finish(ev.job, false)
					dirty = true
				}
			case twCancel:
				if e.state[ev.job] == tsPending {
					e.removePending(map[int]bool{ev.job: true})
					e.state[ev.job] = tsDone
					e.res[ev.job].Cancelled = true
					dirty = true
				}
			case twSubmit:
				if e.state[ev.job] == tsWaiting {
					e.state[ev.job] = tsPending
					e.pending = append(e.pending, ev.job)
					dirty = true
				}
			}
		}
		tick := !t.Before(nextTick)
		if dirty {
			e.idle = false
		}
		if !nextTick.After(t) {
			nextTick = nextTick.Add((t.Sub(nextTick)/interval + 1) * interval)
		}
		switch {
		case len(e.pending) == 0:
		case dirty:
			e.cycle()
		case tick && e.idle && !e.beginSince(e.lastCycle, t):
			// The periodic cycle could start or preempt nothing: see idle.
			e.skipped++
		case tick:
			// The periodic cycle revisits begin times, ages, fairshare.
			e.cycle()
		}
		e.series = append(e.series, Sample{T: t.Sub(e.o.Start), V: float64(e.busyGPUs)})
	}
}

// beginSince reports whether a pending job's --begin passed in (from, to].
func (e *twin) beginSince(from, to time.Time) bool {
	for _, i := range e.pending {
		if b := e.jobs[i].Begin; b.After(from) && !b.After(to) {
			return true
		}
	}
	return false
}

// quiet reports whether, after a cycle whose plan was plan, the periodic
// cycles that follow with no event between them (no submission, end or
// cancellation) can decide nothing, so the replay may skip them: the
// plan started and preempted nothing; no pending job's QOS may preempt; there are no
// advance reservations (their windows open and close on the clock); and
// no pending job fits what is free now even if it were alone, so no
// order of the queue (ages and fairshare change it between cycles) and
// no backfill reservation can start one. Without events what is free
// stays as it is, and the holes under reservations only shrink as the
// clock moves on. A --begin that passes ends the skipping (beginSince).
// Skipped cycles are counted, not run: on a month of a busy 1,000-node
// cluster they were most of the replay.
func (e *twin) quiet(plan sched.Plan) bool {
	if len(plan.Starts) > 0 || len(plan.Preemptions) > 0 || e.o.OnPlan != nil || len(e.o.Policy.Reservations) > 0 {
		return false
	}
	memo := map[twShape]bool{}
	for _, i := range e.pending {
		if e.preemptor(e.jobs[i].QOS) {
			return false
		}
		r := &e.jobs[i].Req
		sh := twShape{part: e.jobs[i].Partition, nodes: max(r.Nodes, 1), cpus: r.CPUsPerNode, gpus: r.GPUsPerNode, mem: r.MemMiB}
		if r.GPUProfile != "" || r.GPUFraction > 0 || r.TotalGPUs > 0 || r.RDMA > 0 || r.MemWholeNode || e.jobs[i].TimeMin > 0 {
			return false // shapes the count below does not follow
		}
		fits, seen := memo[sh]
		if !seen {
			fits = e.mayFit(sh)
			memo[sh] = fits
		}
		if fits {
			return false
		}
	}
	return true
}

// twShape is what mayFit looks at of a request.
type twShape struct {
	part              string
	nodes, cpus, gpus int
	mem               int64
}

// mayFit reports whether enough nodes of the partition have the CPUs,
// memory and whole free GPUs a request needs per node. It looks at less
// than the scheduler does (models, features, node lists, topology), so
// it may say yes where the scheduler says no, never the reverse.
func (e *twin) mayFit(sh twShape) bool {
	parts := strings.Split(sh.part, ",")
	n := 0
	for i := range e.nodes {
		nd := &e.nodes[i]
		if nd.FreeCPUs < sh.cpus || nd.FreeMemMiB < sh.mem {
			continue
		}
		if sh.part != "" && !slices.ContainsFunc(parts, func(p string) bool { return slices.Contains(nd.Partitions, p) }) {
			continue
		}
		free := 0
		for g := range nd.GPUs {
			if x := &nd.GPUs[g]; x.Free && !x.Unhealthy && x.Profile == "" && !x.MIGEnabled {
				free++
			}
		}
		if free >= sh.gpus {
			if n++; n >= sh.nodes {
				return true
			}
		}
	}
	return false
}

// beginAhead reports whether a pending job waits for its --begin.
func (e *twin) beginAhead() bool {
	for _, i := range e.pending {
		if e.jobs[i].Begin.After(e.now) {
			return true
		}
	}
	return false
}

// cycle runs Schedule until a plan neither reaches the start cap nor
// preempts (the victims' resources come back at once, and the
// controller runs its next cycle when their nodes report them stopped).
func (e *twin) cycle() {
	for {
		snap := e.snapshot()
		e.cycles++
		var st *sched.State
		var plan sched.Plan
		if e.base != nil {
			st, plan = sched.NewStateFrom(e.base, snap, e.now, e.o.Policy.Config)
		} else {
			st, plan = sched.NewState(snap, e.now, e.o.Policy.Config)
		}
		if !e.o.Policy.Config.Priority.Weights.Zero() {
			// The controller keeps each pending job's last priority and
			// a running job the one it started at: preemption weighs it.
			st.EachPriority(func(id spec.JobID, total int64) { e.prio[e.byID[id]] = total })
		}
		if e.o.OnPlan != nil {
			e.o.OnPlan(e.now, plan)
		}
		preempted := false
		for _, p := range plan.Preemptions {
			i, ok := e.byID[p.Victim]
			if !ok || e.state[i] != tsRunning || e.jobs[i].Fixed {
				continue
			}
			e.preempts++
			e.res[i].Preempted++
			e.finish(i, true)
			if p.Mode == preempt.ModeCancel {
				e.res[i].Cancelled = true
			} else {
				e.state[i] = tsPending
				e.pending = append(e.pending, i)
			}
			preempted = true
		}
		started := map[int]bool{}
		for _, s := range plan.Starts {
			i := e.byID[s.JobID]
			e.start(i, s)
			started[i] = true
		}
		e.removePending(started)
		capped := e.o.Policy.Config.MaxStartsPerCycle > 0 && len(plan.Starts) >= e.o.Policy.Config.MaxStartsPerCycle
		if len(e.pending) == 0 || !capped && !preempted && !(len(started) > 0 && e.afterDeps()) {
			e.lastCycle, e.idle = e.now, e.quiet(plan)
			return
		}
	}
}

// afterDeps reports whether a pending job waits on another's start
// (after:ID): a cycle that starts jobs triggers another, as in the
// controller.
func (e *twin) afterDeps() bool {
	for _, i := range e.pending {
		if d := e.dep(i); d != nil {
			for _, it := range d.Items {
				if it.Kind == spec.DepAfter {
					return true
				}
			}
		}
	}
	return false
}

func (e *twin) dep(i int) *spec.Dependency {
	s := e.jobs[i].Depend
	if s == "" {
		return nil
	}
	d, ok := e.deps[i]
	if !ok {
		d, _ = spec.ParseDependency(s) // nil: never satisfied
		e.deps[i] = d
	}
	return d
}

func (e *twin) snapshot() *sched.Snapshot {
	e.snapID++
	snap := &sched.Snapshot{ID: e.snapID, Nodes: e.nodes, Running: e.runList, QOS: e.o.Policy.QOS,
		Partitions: e.o.Policy.Partitions, AccountLimits: e.o.Policy.AccountLimits, AdvanceReservations: e.o.Policy.Reservations}
	if e.o.Policy.Accounts != nil {
		if e.ordered() {
			snap.Fairshare = e.fairshare()
		} else {
			e.unordered++
		}
	}
	var single *twSingletons
	limited := map[spec.JobID][]int{}
	jobs := make([]sched.Job, 0, len(e.pending))
	for _, i := range e.pending {
		sj := e.schedJob(i)
		if e.jobs[i].Depend != "" {
			if single == nil {
				single = e.singletons()
			}
			switch e.evalDepend(i, single) {
			case depWait:
				sj.DependencyPending = true
			case depNo:
				sj.DependencyNeverSatisfied = true
			}
		}
		if j := &e.jobs[i]; j.ArrayMax > 0 && !sj.DependencyPending && !sj.DependencyNeverSatisfied {
			limited[j.ArrayJobID] = append(limited[j.ArrayJobID], i)
			continue
		}
		jobs = append(jobs, sj)
	}
	for _, aid := range slices.Sorted(maps.Keys(limited)) {
		tasks := limited[aid]
		slices.SortFunc(tasks, func(a, b int) int { return cmp.Compare(e.jobs[a].ID, e.jobs[b].ID) })
		running := 0
		for _, t := range e.arrays[aid] {
			if e.state[t] == tsRunning {
				running++
			}
		}
		free := min(max(e.jobs[tasks[0]].ArrayMax-running, 0), len(tasks))
		for _, t := range tasks[:free] {
			jobs = append(jobs, e.schedJob(t))
		}
	}
	snap.Jobs = jobs
	return snap
}

// ordered reports whether the cycle's order of the queue can matter,
// so that the fairshare report the priorities need is worth building:
// with one job pending or none there is nothing to order. A lone job's
// priority is still read by preemption, where its QOS may preempt
// (its priority against the victims') or be preempted (the priority
// it started at, against a later preemptor's). Most of a replay's
// cycles answer one submission to an empty queue, and the report was a
// third of each (it walks every running job).
func (e *twin) ordered() bool {
	switch {
	case len(e.pending) > 1 || e.o.OnPlan != nil:
		return true
	case len(e.pending) == 0:
		return false
	}
	q := e.jobs[e.pending[0]].QOS
	if e.preemptor(q) {
		return true
	}
	for i := range e.o.Policy.QOS {
		if slices.Contains(e.o.Policy.QOS[i].Preempt, q) {
			return true
		}
	}
	return false
}

// preemptor reports whether QOS q may preempt another.
func (e *twin) preemptor(q string) bool {
	for i := range e.o.Policy.QOS {
		if x := &e.o.Policy.QOS[i]; x.Name == q && len(x.Preempt) > 0 {
			return true
		}
	}
	return false
}

func (e *twin) schedJob(i int) sched.Job {
	j := &e.jobs[i]
	return sched.Job{ID: j.ID, Partition: j.Partition, Priority: e.prio[i],
		SubmitTime: j.Submit, BeginTime: j.Begin, Req: j.Req, Account: j.Account, User: j.User, QOS: j.QOS,
		Nice: j.Nice, TimeLimit: j.TimeLimit, PartitionDown: e.down[j.Partition], Reservation: j.Reservation, TimeMin: j.TimeMin}
}

// fairshare is the report the controller builds each cycle: the tree
// as configured plus every user seen with ended usage, a running or a
// pending job (one share each), the ended usage and the jobs running
// now. The configured tree with the users of the ended usage, and that
// usage's order, are kept between cycles (fsCache): they only grow, and
// rebuilding both was a third of a cycle on a month's replay. A user
// with only running or pending jobs joins a copy for this cycle alone,
// as in the controller, which forgets a user whose jobs were all
// cancelled while pending.
func (e *twin) fairshare() *fairshare.Report {
	fs := e.fsCache()
	past := make([]fairshare.Past, 0, len(fs.keys))
	for _, k := range fs.keys {
		past = append(past, *e.past[k])
	}
	usage := make([]fairshare.Usage, 0, len(e.runOf))
	var extra map[[2]string]bool
	note := func(i int) {
		k := [2]string{e.jobs[i].Account, e.jobs[i].User}
		if _, ok := fs.idx[k[0]]; ok && k[1] != "" && !fs.seen[k] {
			if extra == nil {
				extra = map[[2]string]bool{}
			}
			extra[k] = true
		}
	}
	for k, i := range e.runOf {
		usage = append(usage, e.usage(i, e.runList[k].Start, time.Time{}, e.runList[k].Nodes))
		note(i)
	}
	for _, i := range e.pending {
		note(i)
	}
	t := fs.tree
	if extra != nil {
		t = &fairshare.Tree{Accounts: slices.Clone(t.Accounts)}
		touched := map[int]bool{}
		for k := range extra {
			i := fs.idx[k[0]]
			if !touched[i] {
				touched[i] = true
				t.Accounts[i].Users = slices.Clone(t.Accounts[i].Users)
			}
			t.Accounts[i].Users = append(t.Accounts[i].Users, fairshare.User{Name: k[1], Shares: 1})
		}
		for i := range touched {
			slices.SortStableFunc(t.Accounts[i].Users, byUserName)
		}
	}
	return fairshare.ComputeWithPast(t, past, usage, e.now, e.o.Policy.Fairshare)
}

// twinFS is the fairshare tree the twin's cycles share: the configured
// accounts plus each user seen so far, users sorted by name within their
// account, and the keys of the ended usage in (account, user) order.
type twinFS struct {
	tree *fairshare.Tree
	idx  map[string]int
	seen map[[2]string]bool
	keys [][2]string
}

func (e *twin) fsCache() *twinFS {
	if e.fs != nil {
		return e.fs
	}
	base := e.o.Policy.Accounts
	fs := &twinFS{tree: &fairshare.Tree{Accounts: slices.Clone(base.Accounts)}, idx: make(map[string]int, len(base.Accounts)),
		seen: map[[2]string]bool{}}
	for i := range fs.tree.Accounts {
		a := &fs.tree.Accounts[i]
		a.Users = slices.Clone(a.Users)
		if _, dup := fs.idx[a.Name]; !dup {
			fs.idx[a.Name] = i
		}
		for _, u := range a.Users {
			fs.seen[[2]string{a.Name, u.Name}] = true
		}
		slices.SortStableFunc(a.Users, byUserName)
	}
	e.fs = fs
	for _, k := range slices.SortedFunc(maps.Keys(e.past), cmpKey) {
		e.fsPast(k)
	}
	return fs
}

// fsPast records that the ended usage has an entry for k.
func (e *twin) fsPast(k [2]string) {
	if e.fs == nil {
		return // fsCache lists e.past when it is first built
	}
	i, found := slices.BinarySearchFunc(e.fs.keys, k, cmpKey)
	if !found {
		e.fs.keys = slices.Insert(e.fs.keys, i, k)
	}
	e.fs.add(k[0], k[1])
}

// add gives a user seen for the first time one share in its account (an
// account the tree does not have keeps the user out, as the controller
// does).
func (fs *twinFS) add(account, user string) {
	i, ok := fs.idx[account]
	if !ok || user == "" || fs.seen[[2]string{account, user}] {
		return
	}
	fs.seen[[2]string{account, user}] = true
	a := &fs.tree.Accounts[i]
	a.Users = append(a.Users, fairshare.User{Name: user, Shares: 1})
	slices.SortStableFunc(a.Users, byUserName)
}

func byUserName(a, b fairshare.User) int { return cmp.Compare(a.Name, b.Name) }

func cmpKey(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) }

func (e *twin) usage(i int, start, end time.Time, alloc []spec.NodeAlloc) fairshare.Usage {
	j := &e.jobs[i]
	u := fairshare.Usage{Account: j.Account, User: j.User, Start: start, End: end, Model: j.Req.GPUModel, Profile: j.Req.GPUProfile}
	for _, n := range alloc {
		if n.GPUFraction > 0 {
			u.Fraction += n.GPUFraction
		} else {
			u.GPUs += float64(len(n.GPUs) + len(n.MIG))
		}
	}
	return u
}

// bill adds an ended attempt to the ended usage.
func (e *twin) bill(i int, start time.Time, alloc []spec.NodeAlloc) {
	if e.o.Policy.Accounts == nil {
		return
	}
	j := &e.jobs[i]
	k := [2]string{j.Account, j.User}
	p := e.past[k]
	if p == nil {
		p = &fairshare.Past{Account: j.Account, User: j.User, At: e.now}
		e.past[k] = p
		e.fsPast(k)
	}
	p.DecayTo(e.now, &e.o.Policy.Fairshare)
	u := e.usage(i, start, e.now, alloc)
	p.Add(&u, &e.o.Policy.Fairshare)
}

// start places job i as s says.
func (e *twin) start(i int, s sched.Start) {
	j := &e.jobs[i]
	e.take(s.Nodes, 1)
	e.gen++
	r := &twRun{alloc: s.Nodes, start: e.now, gen: e.gen, at: len(e.runList)}
	e.run[i] = r
	e.state[i] = tsRunning
	part := j.Partition
	if s.Partition != "" {
		part = s.Partition
	}
	limit := j.TimeLimit
	if s.TimeLimit > 0 {
		limit = s.TimeLimit // --time-min: started shortened
	}
	e.runList = append(e.runList, sched.RunningJob{ID: j.ID, Nodes: s.Nodes, Start: e.now, TimeLimit: limit,
		Priority: e.prio[i], QOS: j.QOS, Account: j.Account, User: j.User, Partition: part})
	e.runOf = append(e.runOf, i)
	if e.base != nil {
		e.base.Start(&e.runList[len(e.runList)-1])
	}
	res := &e.res[i]
	if !res.Started {
		res.Started, res.Start, res.Backfilled = true, e.now, s.Backfilled
	}
	res.Attempts++
	run := j.Runtime
	if limit > 0 && run > limit {
		run = limit
	}
	res.Killed = limit > 0 && j.Runtime > limit
	heap.Push(&e.events, twEvent{t: e.now.Add(run), kind: twEnd, job: i, gen: r.gen})
}

// startFixed puts a job that was running at the replay's start on its
// real allocation (what of it the cluster still has).
func (e *twin) startFixed(i int) {
	j := &e.jobs[i]
	var alloc []spec.NodeAlloc
	at := map[int32]int{} // node index → entry in alloc
	for _, na := range j.Alloc {
		if ni, ok := e.nodeIx[na.Node]; ok {
			at[int32(ni)] = len(alloc)
			na.GPUs = nil
			alloc = append(alloc, na)
		}
	}
	// The record lists the devices, not their nodes: each goes to the
	// entry of the node the inventory puts it on.
	for _, na := range j.Alloc {
		for _, u := range na.GPUs {
			if g, ok := e.gpuIx[u]; ok {
				if k, ok := at[g.node]; ok {
					alloc[k].GPUs = append(alloc[k].GPUs, u)
				}
			}
		}
	}
	if len(alloc) == 0 {
		e.state[i] = tsDone
		return
	}
	saved := e.now
	e.now = j.RealStart
	e.start(i, sched.Start{JobID: j.ID, Nodes: alloc})
	e.now = saved
}

// take (sign 1) or give back (-1) an allocation's resources.
func (e *twin) take(alloc []spec.NodeAlloc, sign int) {
	for _, na := range alloc {
		ni, ok := e.nodeIx[na.Node]
		if !ok {
			continue
		}
		n := &e.nodes[ni]
		if e.base != nil {
			e.base.Touch(ni)
		}
		n.FreeCPUs -= sign * na.CPUs
		n.FreeMemMiB -= int64(sign) * na.MemMiB
		n.Allocs += sign
		for _, u := range na.GPUs {
			g, ok := e.gpuIx[u]
			if !ok {
				continue
			}
			gp := &n.GPUs[g.gpu]
			wasFree := gp.Free
			if na.GPUFraction > 0 && na.GPUFraction < 1 {
				gp.FreeFraction -= float64(sign) * na.GPUFraction
				gp.FreeFraction = math.Min(math.Max(gp.FreeFraction, 0), 1)
				gp.Free = gp.FreeFraction > 1-1e-9
				if gp.Free {
					gp.FreeFraction = 1
				}
			} else {
				gp.Free = sign < 0
				gp.FreeFraction = 1
			}
			switch {
			case wasFree && !gp.Free:
				e.busy[ni]++
				e.busyGPUs++
			case !wasFree && gp.Free:
				e.busy[ni]--
				e.busyGPUs--
			}
		}
		switch {
		case n.Allocs == 0:
			n.State = spec.NodeIdle
		case e.busy[ni] == len(n.GPUs) && len(n.GPUs) > 0:
			n.State = spec.NodeAllocated
		default:
			n.State = spec.NodeMixed
		}
	}
}

// finish ends job i's attempt now: by its end, or preempted.
func (e *twin) finish(i int, preempted bool) {
	r := e.run[i]
	delete(e.run, i)
	last := len(e.runList) - 1
	if r.at != last {
		e.runList[r.at], e.runOf[r.at] = e.runList[last], e.runOf[last]
		e.run[e.runOf[r.at]].at = r.at
	}
	e.runList, e.runOf = e.runList[:last], e.runOf[:last]
	if e.base != nil {
		e.base.End(r.at)
	}
	e.take(r.alloc, -1)
	e.bill(i, r.start, r.alloc)
	e.state[i] = tsDone
	e.res[i].End = e.now
	if preempted {
		e.res[i].Killed = false
	}
}

func (e *twin) removePending(drop map[int]bool) {
	if len(drop) == 0 {
		return
	}
	e.pending = slices.DeleteFunc(e.pending, func(i int) bool { return drop[i] })
}

// Dependencies, as the controller evaluates them (depend.go there).
const (
	depOK = iota
	depWait
	depNo
)

type twSingletons struct {
	active     map[string]bool
	minPending map[string]spec.JobID
}

func (e *twin) singletons() *twSingletons {
	x := &twSingletons{active: map[string]bool{}, minPending: map[string]spec.JobID{}}
	for _, i := range e.runOf {
		x.active[e.jobs[i].User+"\x00"+e.jobs[i].Name] = true
	}
	for _, i := range e.pending {
		k := e.jobs[i].User + "\x00" + e.jobs[i].Name
		if m, ok := x.minPending[k]; !ok || e.jobs[i].ID < m {
			x.minPending[k] = e.jobs[i].ID
		}
	}
	return x
}

func (e *twin) evalDepend(i int, single *twSingletons) int {
	d := e.dep(i)
	if d == nil {
		return depNo
	}
	res := depOK
	if d.Any {
		res = depNo
	}
	for _, it := range d.Items {
		r := e.evalItem(i, it, single)
		if d.Any {
			if r == depOK {
				return depOK
			}
			if r == depWait {
				res = depWait
			}
		} else {
			if r == depNo {
				return depNo
			}
			if r == depWait {
				res = depWait
			}
		}
	}
	return res
}

func (e *twin) evalItem(i int, it spec.DepItem, single *twSingletons) int {
	j := &e.jobs[i]
	if it.Kind == spec.DepSingleton {
		k := j.User + "\x00" + j.Name
		if m, ok := single.minPending[k]; single.active[k] || ok && m < j.ID {
			return depWait
		}
		return depOK
	}
	res := depOK
	for _, r := range it.Refs {
		var targets []int
		if tasks, ok := e.arrays[r.ID]; ok {
			for _, t := range tasks {
				if r.Task < 0 || e.jobs[t].ArrayTaskID == r.Task {
					targets = append(targets, t)
				}
			}
		} else if t, ok := e.byID[r.ID]; ok && r.Task < 0 {
			targets = []int{t}
		}
		// A job outside the replay ended before it began: its
		// dependents were free to go as far as the replay can tell.
		for _, t := range targets {
			switch e.depOne(it.Kind, t) {
			case depNo:
				return depNo
			case depWait:
				res = depWait
			}
		}
	}
	return res
}

func (e *twin) depOne(kind spec.DepKind, t int) int {
	done := e.state[t] == tsDone
	ok := e.jobs[t].Outcome == spec.StateCompleted && !e.res[t].Cancelled && !e.res[t].Killed
	switch kind {
	case spec.DepAfter:
		if e.res[t].Started || done {
			return depOK
		}
	case spec.DepAfterAny:
		if done {
			return depOK
		}
	case spec.DepAfterOK:
		if done && ok {
			return depOK
		}
		if done {
			return depNo
		}
	case spec.DepAfterNotOK:
		if done && ok {
			return depNo
		}
		if done {
			return depOK
		}
	}
	return depWait
}
