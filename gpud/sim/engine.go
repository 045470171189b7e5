package sim

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Epoch is virtual time zero: a trace's offset t is Epoch+t for Schedule.
var Epoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Options configure one run.
type Options struct {
	Nodes    []NodeSpec
	Estimate Estimate
	Policy   Policy
	// OnPlan, when set, sees every plan the BackfillSched policies apply,
	// at virtual time now (tests compare them with the controller's).
	OnPlan func(now time.Duration, plan sched.Plan)
	// Faults, when set, injects failures (faults.go).
	Faults *Faults
}

// JobResult is what happened to one job.
type JobResult struct {
	Start, End time.Duration
	Started    bool
	// Killed jobs hit their time limit (the estimate, when it is a limit).
	Killed bool
	// Unfittable jobs cannot run even on the empty cluster; they are left
	// out of every metric.
	Unfittable bool
}

// Result is one run's outcome.
type Result struct {
	Policy string
	Jobs   []Job
	Res    []JobResult
	// TotalGPUs is the cluster's capacity.
	TotalGPUs int
	// Busy is the number of allocated GPUs after each cycle (a step
	// function of time).
	Busy []Sample
	// Cycles is the number of Schedule calls; Wall the run's wall time.
	Cycles      int
	Wall        time.Duration
	Preemptions int
	// NeverStarted counts fittable jobs still pending when events ran out.
	NeverStarted int
	// Faults is what injected failures cost (with Options.Faults).
	Faults *FaultStats
}

// Sample is a point of a step function.
type Sample struct {
	T time.Duration
	V float64
}

// gpuRef locates a GPU in the engine's node table.
type gpuRef struct{ node, gpu int32 }

type running struct {
	job  int
	gpus []gpuRef
	// per node: CPUs and memory taken
	nodes  []int
	cpus   []int
	mem    []int64
	estEnd time.Duration
	// frac is the job's share of its one GPU; 0 for whole GPUs.
	frac float64
	// at is the index in engine.runList.
	at int
}

type engine struct {
	opts   Options
	jobs   []Job
	res    []JobResult
	nodes  []sched.Node
	busy   []int // allocated GPUs per node
	gpuIx  map[string]gpuRef
	nodeIx map[string]int

	pending []int
	// runList is Snapshot.Running for policies that give sched the
	// running jobs (BackfillSched); kept in step with run.
	runList  []sched.RunningJob
	runOf    []int // job index of each runList entry
	run      map[int]*running
	ends     endHeap
	now      time.Duration
	busyGPUs int
	version  uint64 // bumps on every start and end

	snapID      uint64
	preemptions int
	cycles      int
	series      []Sample
	easy        easyCache
	scratch     []sched.Job

	flt       *faultState
	totalGPUs int
}

// Run replays jobs (sorted by Submit; see SortBySubmit) on opts.Nodes
// under opts.Policy. It is deterministic: equal inputs give equal results.
func Run(jobs []Job, opts Options) (*Result, error) {
	if len(opts.Nodes) == 0 {
		return nil, fmt.Errorf("simulate: the cluster has no nodes")
	}
	if !slices.IsSortedFunc(jobs, func(a, b Job) int { return cmp.Compare(a.Submit, b.Submit) }) {
		return nil, fmt.Errorf("simulate: jobs are not sorted by submit time (call sim.SortBySubmit)")
	}
	start := time.Now()
	e := &engine{opts: opts, jobs: jobs, res: make([]JobResult, len(jobs)), run: map[int]*running{},
		gpuIx: map[string]gpuRef{}, nodeIx: map[string]int{}}
	e.buildNodes()
	e.markUnfittable()
	e.totalGPUs = TotalGPUs(opts.Nodes)
	if f := opts.Faults; f != nil && len(jobs) > 0 {
		perNode := make([]int, len(e.nodes))
		for ni := range e.nodes {
			perNode[ni] = len(e.nodes[ni].GPUs)
		}
		e.flt = newFaultState(f, len(jobs), perNode)
	}
	e.loop()
	r := &Result{Policy: opts.Policy.Name, Jobs: jobs, Res: e.res, TotalGPUs: e.totalGPUs, Busy: e.series,
		Cycles: e.cycles, NeverStarted: len(e.pending), Preemptions: e.preemptions}
	if e.flt != nil {
		r.Faults = e.finalStats()
	}
	r.Wall = time.Since(start)
	return r, nil
}

func (e *engine) buildNodes() {
	e.nodes = make([]sched.Node, len(e.opts.Nodes))
	e.busy = make([]int, len(e.opts.Nodes))
	for i, ns := range e.opts.Nodes {
		n := sched.Node{Name: ns.Name, State: spec.NodeIdle, CPUs: ns.CPUs, FreeCPUs: ns.CPUs, MemMiB: ns.MemMiB, FreeMemMiB: ns.MemMiB}
		if p := e.opts.Policy.JobPartition; p != "" {
			n.Partitions = []string{p}
		}
		for g := range ns.GPUs {
			uuid := ns.Name + "-gpu" + strconv.Itoa(g)
			n.GPUs = append(n.GPUs, sched.GPU{UUID: uuid, Model: ns.Model, Free: true, FreeFraction: 1})
			e.gpuIx[uuid] = gpuRef{int32(i), int32(g)}
		}
		e.nodes[i] = n
		e.nodeIx[ns.Name] = i
	}
}

// markUnfittable asks Schedule, once per distinct request, whether the
// job could start on the empty cluster. Jobs that cannot (bigger than the
// cluster, a GPU model it lacks) would block FCFS forever; they are reported, not simulated.
func (e *engine) markUnfittable() {
	type reqKey struct {
		nodes, cpus, gpus int
		mem               int64
		model             string
		frac              float64
	}
	verdict := map[reqKey]bool{}
	for i := range e.jobs {
		req := e.request(i)
		key := reqKey{req.Nodes, req.CPUsPerNode, req.GPUsPerNode, req.MemMiB, req.GPUModel, req.GPUFraction}
		ok, seen := verdict[key]
		if !seen {
			snap := &sched.Snapshot{Nodes: e.nodes, Jobs: []sched.Job{{ID: 1, SubmitTime: Epoch, Req: req}}}
			ok = len(sched.Schedule(snap, Epoch, e.opts.Policy.Config).Starts) == 1
			verdict[key] = ok
		}
		e.res[i].Unfittable = !ok
	}
}

// request is the job's per-node request as the controller normalises it
// (Nodes ≥ 1, CPUsPerNode ≥ 1).
func (e *engine) request(i int) spec.Resources { return request(&e.jobs[i], false) }

// schedJob is the pending job as Schedule sees it (compare
// controller.schedJob): the estimate is all it knows of the run time.
func (e *engine) schedJob(i int) sched.Job {
	j := &e.jobs[i]
	sj := sched.Job{ID: spec.JobID(i + 1), Priority: e.opts.Policy.priority(j, e.now, e.estimate(i)),
		SubmitTime: Epoch.Add(j.Submit), Req: e.request(i), User: j.User, Account: j.Account}
	if e.opts.Policy.Backfill == BackfillSched {
		sj.TimeLimit = e.limit(i)
	}
	sj.QOS, sj.Partition = e.opts.Policy.JobQOS, e.opts.Policy.JobPartition
	sj.Expedite = e.flt != nil && e.flt.expedite[i]
	return sj
}

// limit is the time limit sched is told: the estimate, at least 1 s (0
// would mean "no limit").
func (e *engine) limit(i int) time.Duration {
	return max(e.estimate(i), time.Second)
}

func (e *engine) estimate(i int) time.Duration { return e.opts.Estimate.Of(&e.jobs[i]) }

func (e *engine) loop() {
	next := 0 // next arrival
	for {
		var t time.Duration
		switch {
		case next < len(e.jobs) && (e.ends.Len() == 0 || e.jobs[next].Submit <= e.ends[0].t):
			t = e.jobs[next].Submit
		case e.ends.Len() > 0:
			t = e.ends[0].t
		case e.flt != nil && len(e.pending) > 0 && len(e.flt.events) > 0:
			// Jobs wait for hardware a repair brings back.
			t = e.flt.events[0].t
		default:
			return
		}
		if e.flt != nil {
			if ft, ok := e.flt.next(); ok && ft < t {
				t = ft
			}
		}
		e.now = t
		for e.ends.Len() > 0 && e.ends[0].t <= t {
			ev := heap.Pop(&e.ends).(endEvent)
			if e.run[ev.job] == ev.r { // else preempted or interrupted since
				e.finish(ev.job)
			}
		}
		if e.flt != nil {
			e.faults()
		}
		for next < len(e.jobs) && e.jobs[next].Submit <= t {
			if !e.res[next].Unfittable {
				e.pending = append(e.pending, next)
			}
			next++
		}
		if len(e.pending) > 0 {
			e.cycle()
		}
		e.series = append(e.series, Sample{T: t, V: float64(e.busyGPUs)})
	}
}

// snapshot fills a Snapshot with the nodes' free devices and the given
// pending jobs, as the controller does.
func (e *engine) snapshot(jobs []sched.Job) *sched.Snapshot {
	e.snapID++
	snap := &sched.Snapshot{ID: e.snapID, Nodes: e.nodes, Jobs: jobs}
	if e.opts.Policy.Backfill == BackfillSched {
		snap.Running = e.runList
	}
	snap.QOS, snap.Partitions = e.opts.Policy.QOS, e.opts.Policy.Partitions
	return snap
}

// call runs one Schedule over jobs and returns its plan.
func (e *engine) call(nodes []sched.Node, jobs []sched.Job) sched.Plan {
	e.cycles++
	snap := e.snapshot(jobs)
	if nodes != nil {
		snap.Nodes = nodes
	}
	return sched.Schedule(snap, Epoch.Add(e.now), e.opts.Policy.Config)
}

// pendingJobs returns the pending jobs as Schedule sees them, in
// Schedule's own order (sched.Less).
func (e *engine) pendingJobs() []sched.Job {
	js := e.scratch[:0]
	for _, i := range e.pending {
		js = append(js, e.schedJob(i))
	}
	slices.SortFunc(js, func(a, b sched.Job) int { return sched.Less(&a, &b) })
	e.scratch = js
	return js
}

// apply commits a Start: the job's GPUs, CPUs and memory become busy and
// its end is scheduled at start + true runtime, or at the estimate when the
// estimate is a limit and is shorter.
func (e *engine) apply(s sched.Start) {
	i := int(s.JobID) - 1
	r := &running{job: i}
	for _, na := range s.Nodes {
		ni := e.nodeIx[na.Node]
		n := &e.nodes[ni]
		n.FreeCPUs -= na.CPUs
		n.FreeMemMiB -= na.MemMiB
		n.Allocs++
		for _, u := range na.GPUs {
			g := e.gpuIx[u]
			gp := &n.GPUs[g.gpu]
			if na.GPUFraction > 0 && na.GPUFraction < 1 {
				// A share: the GPU counts as busy from its first sharer
				// to its last.
				r.frac = na.GPUFraction
				if gp.Free {
					e.busy[ni]++
					e.busyGPUs++
				}
				gp.Free, gp.FreeFraction = false, max(gp.FreeFraction-na.GPUFraction, 0)
			} else {
				gp.Free = false // FreeFraction stays 1, as the controller reports it
				e.busy[ni]++
				e.busyGPUs++
			}
			r.gpus = append(r.gpus, g)
		}
		r.nodes = append(r.nodes, ni)
		r.cpus = append(r.cpus, na.CPUs)
		r.mem = append(r.mem, na.MemMiB)
		e.setState(ni)
	}
	j := &e.jobs[i]
	run := j.Runtime
	if e.flt != nil {
		run = e.flt.started(i, run, e.now)
	}
	est := e.estimate(i)
	if e.opts.Estimate.Limit && est > 0 && est < run {
		run = est
		e.res[i].Killed = true
	}
	r.estEnd = e.now + est
	r.at = len(e.runList)
	e.runList = append(e.runList, sched.RunningJob{ID: s.JobID, Nodes: s.Nodes, Start: Epoch.Add(e.now), TimeLimit: e.limit(i),
		User: j.User, Account: j.Account, QOS: e.opts.Policy.JobQOS, Partition: e.opts.Policy.JobPartition,
		Priority: e.opts.Policy.priority(j, e.now, e.estimate(i))})
	e.runOf = append(e.runOf, i)
	e.res[i].Start, e.res[i].End, e.res[i].Started = e.now, e.now+run, true
	e.run[i] = r
	heap.Push(&e.ends, endEvent{t: e.now + run, job: i, r: r})
	e.version++
}

func (e *engine) finish(i int) {
	r := e.run[i]
	delete(e.run, i)
	if e.flt != nil {
		e.flt.ended(e.jobs[i].GPUs(), i, e.now)
	}
	last := len(e.runList) - 1
	if r.at != last {
		e.runList[r.at], e.runOf[r.at] = e.runList[last], e.runOf[last]
		e.run[e.runOf[r.at]].at = r.at
	}
	e.runList, e.runOf = e.runList[:last], e.runOf[:last]
	for k, ni := range r.nodes {
		n := &e.nodes[ni]
		n.FreeCPUs += r.cpus[k]
		n.FreeMemMiB += r.mem[k]
		n.Allocs--
	}
	for _, g := range r.gpus {
		gp := &e.nodes[g.node].GPUs[g.gpu]
		if r.frac > 0 {
			gp.FreeFraction += r.frac
			if gp.FreeFraction < 1-1e-9 {
				continue // other sharers remain
			}
		}
		gp.Free, gp.FreeFraction = true, 1
		e.busy[g.node]--
		e.busyGPUs--
	}
	for _, ni := range r.nodes {
		e.setState(ni)
	}
	e.version++
}

func (e *engine) setState(ni int) {
	n := &e.nodes[ni]
	switch {
	case e.flt != nil && e.flt.down[ni]:
		n.State = spec.NodeDrain // out of service (drained, or failed and DOWN): sched places nothing
	case n.Allocs == 0:
		n.State = spec.NodeIdle
	case e.busy[ni] == len(n.GPUs) && len(n.GPUs) > 0:
		n.State = spec.NodeAllocated
	default:
		n.State = spec.NodeMixed
	}
}

// removePending drops started jobs from the queue, keeping arrival order.
func (e *engine) removePending(started map[int]bool) {
	if len(started) == 0 {
		return
	}
	kept := e.pending[:0]
	for _, i := range e.pending {
		if !started[i] {
			kept = append(kept, i)
		}
	}
	e.pending = kept
}

type endEvent struct {
	t   time.Duration
	job int
	r   *running
}

// endHeap orders completions by time, then job index (deterministic).
type endHeap []endEvent

func (h endHeap) Len() int { return len(h) }
func (h endHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].job < h[b].job
}
func (h endHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *endHeap) Push(x any)   { *h = append(*h, x.(endEvent)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
