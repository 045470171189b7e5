package sim

import (
	"container/heap"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/health"
)

// Faults inject hardware and software failures into a replay (gpud
// simulate --failures): the goodput study of docs/health.md.
//
// A GPU fault becomes the readings a node agent would take (an XID, an
// uncorrected ECC count, a failed diagnostic) and goes through the node's
// health.Model under Triage, the table node.toml's [health] triage builds:
// the model's findings decide, as in the agent, whether the GPU or the
// whole node leaves service, and a clean probe after the repair readmits
// it (Model.Readmit). Placement around the drained GPU or node and the
// expedited requeue are sched.Schedule's (GPU.Unhealthy, NodeDrain,
// Job.Expedite), as the controller hands them over. What the simulator
// adds is only the cluster's side: when hardware fails, how long repairs
// take, and what a job loses.
type Faults struct {
	// PerGPUHour is the interruption rate per GPU-hour.
	PerGPUHour float64
	Causes     []Cause
	Seed       uint64
	// Triage decides each GPU finding's action (health.DefaultTriage:
	// drain-gpu; WholeNode turns every drain-gpu into drain-node).
	Triage health.Triage
	// Expedite puts jobs requeued by hardware at top priority
	// (--requeue=expedite, a partition's requeue_expedite).
	Expedite bool
	// CheckpointFirst: a job moved off hardware that still works (the
	// healthy GPUs of a drained node) checkpoints before it stops, as the
	// controller asks it to; without it the job is stopped and restarts
	// from its last periodic checkpoint (an ordinary requeue).
	CheckpointFirst bool
	// CheckpointEvery is how often a running job checkpoints (work since
	// the last checkpoint is lost when it crashes); 0: never.
	CheckpointEvery time.Duration
	// CheckpointCost is the time a checkpoint-first stop takes (the GPUs
	// stay allocated); RestartCost a requeued attempt's start-up before
	// useful work (loading the checkpoint).
	CheckpointCost, RestartCost time.Duration
	// GPURepair and NodeRepair are the mean times until a faulted GPU or
	// failed node reads clean again (exponential); the model then probes
	// it after its ProbeAfter.
	GPURepair, NodeRepair time.Duration
	// Horizon ends fault injection (0: failures last as long as the run).
	Horizon time.Duration
}

// Scope is what a cause takes down.
type Scope int

// Scopes of a cause.
const (
	// ScopeGPU: one GPU misbehaves; the health model reads it.
	ScopeGPU Scope = iota
	// ScopeNodeCrash: the node fails at once (network, power, CPU...):
	// its jobs crash and are requeued as the controller requeues the
	// jobs of a node that stops responding.
	ScopeNodeCrash
	// ScopeNodeDrain: the node needs unplanned maintenance: it is
	// drained, its jobs moved (checkpoint first when the policy says so).
	ScopeNodeDrain
	// ScopeJob: the job fails (a software bug, an NCCL timeout): it
	// restarts from its last checkpoint, no hardware leaves service.
	ScopeJob
)

// Cause is one line of a failure mix.
type Cause struct {
	Name string
	// Count weighs the cause (Meta's counts of 419 interruptions).
	Count int
	Scope Scope
	// Fault marks a GPU cause's reading (ScopeGPU); Diag instead reports
	// a failed background diagnostic (silent data corruption).
	Fault func(r *health.Reading, rng *rand.Rand)
	Diag  bool
}

// MetaRate is Meta's Llama 3 405B run: 419 unexpected interruptions in 54
// days on 16,384 GPUs (Dubey et al., "The Llama 3 Herd of Models", 2024,
// §3.3.4), per GPU-hour.
var MetaRate = 419.0 / (54 * 24 * 16384)

// MetaCauses is the same run's root-cause table (Table 5): GPU causes as
// the XIDs and counters the agent reads for them, node-wide causes by how
// the node goes, job failures by themselves.
func MetaCauses() []Cause {
	xid := func(xs ...int) func(*health.Reading, *rand.Rand) {
		return func(r *health.Reading, rng *rand.Rand) { r.XIDs = append(r.XIDs, xs[rng.IntN(len(xs))]) }
	}
	return []Cause{
		{Name: "faulty GPU (NVLink included)", Count: 148, Scope: ScopeGPU, Fault: xid(79, 74, 62)},
		{Name: "GPU HBM3 memory", Count: 72, Scope: ScopeGPU, Fault: func(r *health.Reading, _ *rand.Rand) {
			r.ECCUncorrected++
			r.XIDs = append(r.XIDs, 48)
		}},
		{Name: "software bug", Count: 54, Scope: ScopeJob},
		{Name: "network switch/cable", Count: 35, Scope: ScopeNodeCrash},
		{Name: "host maintenance (unplanned)", Count: 32, Scope: ScopeNodeDrain},
		{Name: "GPU SRAM memory", Count: 19, Scope: ScopeGPU, Fault: xid(94, 95)},
		{Name: "GPU system processor", Count: 17, Scope: ScopeGPU, Fault: xid(119, 120)},
		{Name: "NIC", Count: 7, Scope: ScopeNodeCrash},
		{Name: "NCCL watchdog timeout", Count: 7, Scope: ScopeJob},
		{Name: "silent data corruption", Count: 6, Scope: ScopeGPU, Diag: true},
		{Name: "GPU thermal interface and sensor", Count: 6, Scope: ScopeGPU, Fault: func(r *health.Reading, _ *rand.Rand) {
			r.TempC = 97
		}},
		{Name: "SSD", Count: 3, Scope: ScopeNodeCrash},
		{Name: "power supply", Count: 3, Scope: ScopeNodeCrash},
		{Name: "server chassis", Count: 2, Scope: ScopeNodeCrash},
		{Name: "IO expansion board", Count: 2, Scope: ScopeNodeCrash},
		{Name: "dependency", Count: 2, Scope: ScopeJob},
		{Name: "CPU", Count: 2, Scope: ScopeNodeCrash},
		{Name: "system memory", Count: 2, Scope: ScopeNodeCrash},
	}
}

// WholeNode is t with every drain-gpu rule turned into drain-node: the
// baseline where one bad GPU takes its node out, written the way a site
// would write it in node.toml ([health] triage overrides).
func WholeNode(t health.Triage) (health.Triage, error) {
	over := map[string]string{}
	for code, r := range t {
		if r.Action == health.DrainGPU || r.Action == health.DrainSlice { // no MIG here: a slice is its GPU
			over[code] = string(r.Class) + ":" + string(health.DrainNode)
		}
	}
	return health.ParseTriage(t, over)
}

// FaultStats are what the failures cost a run.
type FaultStats struct {
	// Injected counts the failures by cause name; Interruptions the job
	// attempts they ended (a whole-node drain can end several).
	Injected      map[string]int
	Interruptions int
	// Missed are failures that hit hardware already out of service or an
	// idle GPU's job-scoped failure (nothing to interrupt).
	Missed int
	// GPUDrains and NodeDrains count the health model's actions;
	// Readmitted the clean probes that brought hardware back.
	GPUDrains, NodeDrains, Readmitted int
	// Expedited counts hardware requeues started at top priority.
	Expedited int
	// Useful GPU-seconds (each finished job's run time × GPUs) and
	// Allocated ones (every attempt, lost work and restarts included).
	Useful, Allocated float64
	// Lost is the work thrown away by crashes (GPU-seconds); Overhead the
	// checkpoint-first stops and restarts.
	Lost, Overhead float64
	// InterruptedJobs ran more than one attempt; their EffectiveTime is
	// Σ run time × GPUs ÷ Σ (end − first start) × GPUs: Meta's "effective
	// training time" (requeue waits count against it).
	InterruptedJobs int
	EffectiveTime   float64
	// RequeueWait is the mean time from an interruption to the next start.
	RequeueWait time.Duration
}

// Goodput is useful ÷ allocated GPU-seconds.
func (s *FaultStats) Goodput() float64 {
	if s.Allocated == 0 {
		return 1
	}
	return s.Useful / s.Allocated
}

type faultKind int

const (
	evFault faultKind = iota
	evRepair
)

type faultEvent struct {
	t    time.Duration
	kind faultKind
	seq  int
	// cause (evFault); node and gpu (evRepair: gpu -1 is the node)
	cause     int
	node, gpu int
	// pick seeds the cause's own choices (which XID); repair is how long
	// until the hardware reads clean again.
	pick   uint64
	repair time.Duration
}

type faultHeap []faultEvent

func (h faultHeap) Len() int { return len(h) }
func (h faultHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].seq < h[b].seq
}
func (h faultHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *faultHeap) Push(x any)   { *h = append(*h, x.(faultEvent)) }
func (h *faultHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// faultState is the engine's failure side (nil without Options.Faults).
type faultState struct {
	f      *Faults
	rng    *rand.Rand
	events faultHeap
	seq    int
	rate   float64 // failures per nanosecond
	gpus   int
	// perNode: GPUs per node, in node order.
	perNode []int
	cum     []int // cumulative cause counts
	total   int
	models  map[int]*health.Model
	// readings: each modelled node's GPUs as the agent reads them now.
	readings map[int][]health.Reading
	// down: nodes out of service (drained or failed), by node; drainFor
	// the GPU UUID a model drain-node is for ("" for node causes).
	down     map[int]bool
	drainFor map[int]string
	gpuOut   map[gpuRef]bool
	// per job
	saved      []time.Duration // checkpointed progress
	begin      []time.Duration // current attempt's start
	cost       []time.Duration // current attempt's start-up cost
	attempts   []int
	firstStart []time.Duration
	expedite   []bool
	stoppedAt  []time.Duration
	waitSum    time.Duration
	waits      int
	stats      FaultStats
}

func newFaultState(f *Faults, jobs int, perNode []int) *faultState {
	fs := &faultState{f: f, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x5eedfa17)), models: map[int]*health.Model{},
		readings: map[int][]health.Reading{}, down: map[int]bool{}, drainFor: map[int]string{}, gpuOut: map[gpuRef]bool{},
		saved: make([]time.Duration, jobs), begin: make([]time.Duration, jobs), cost: make([]time.Duration, jobs),
		attempts: make([]int, jobs), firstStart: make([]time.Duration, jobs), expedite: make([]bool, jobs),
		stoppedAt: make([]time.Duration, jobs), stats: FaultStats{Injected: map[string]int{}}}
	for _, c := range f.Causes {
		fs.total += c.Count
		fs.cum = append(fs.cum, fs.total)
	}
	for _, n := range perNode {
		fs.gpus += n
	}
	fs.perNode = perNode
	fs.rate = f.PerGPUHour * float64(fs.gpus) / float64(time.Hour) // per nanosecond
	fs.nextFault(0)
	return fs
}

// nextFault draws the cluster's next failure after t: a Poisson process
// over its GPUs, drawn one at a time so that it lasts as long as the run
// (up to Horizon).
func (fs *faultState) nextFault(t time.Duration) {
	if fs.rate <= 0 || fs.total == 0 || fs.gpus == 0 {
		return
	}
	t += time.Duration(fs.rng.ExpFloat64() / fs.rate)
	if h := fs.f.Horizon; h > 0 && t >= h {
		return
	}
	// Everything random about the failure is drawn now, from the failure
	// stream alone, so that every policy meets the same failures at the
	// same times and places, however they change the schedule.
	ev := faultEvent{t: t, kind: evFault, cause: sortSearch(fs.cum, fs.rng.IntN(fs.total)), pick: fs.rng.Uint64()}
	ev.node, ev.gpu = fs.gpuAt(fs.rng.IntN(fs.gpus))
	c := fs.f.Causes[ev.cause]
	mean := fs.f.GPURepair
	if c.Scope == ScopeNodeCrash || c.Scope == ScopeNodeDrain {
		mean = fs.f.NodeRepair
	}
	ev.repair = max(time.Duration(fs.rng.ExpFloat64()*float64(mean)), time.Minute)
	fs.push(ev)
}

// gpuAt locates the cluster's k-th GPU.
func (fs *faultState) gpuAt(k int) (int, int) {
	for ni, n := range fs.perNode {
		if k < n {
			return ni, k
		}
		k -= n
	}
	return 0, 0
}

// sortSearch is the first index whose cumulative count exceeds x.
func sortSearch(cum []int, x int) int {
	i, _ := slices.BinarySearch(cum, x+1)
	return i
}

func (fs *faultState) push(ev faultEvent) {
	fs.seq++
	ev.seq = fs.seq
	heap.Push(&fs.events, ev)
}

func (fs *faultState) next() (time.Duration, bool) {
	if len(fs.events) == 0 {
		return 0, false
	}
	return fs.events[0].t, true
}

// faults handles every fault and repair due at e.now.
func (e *engine) faults() {
	fs := e.flt
	for len(fs.events) > 0 && fs.events[0].t <= e.now {
		ev := heap.Pop(&fs.events).(faultEvent)
		switch ev.kind {
		case evFault:
			e.inject(ev)
			fs.nextFault(ev.t)
		case evRepair:
			e.repair(ev.node, ev.gpu)
		}
	}
}

// inject applies one failure.
func (e *engine) inject(ev faultEvent) {
	fs := e.flt
	c := fs.f.Causes[ev.cause]
	fs.stats.Injected[c.Name]++
	ni, gi := ev.node, ev.gpu
	if fs.down[ni] || c.Scope == ScopeGPU && fs.gpuOut[gpuRef{int32(ni), int32(gi)}] {
		fs.stats.Missed++
		return
	}
	switch c.Scope {
	case ScopeJob:
		i, ok := e.jobOn(gpuRef{int32(ni), int32(gi)})
		if !ok {
			fs.stats.Missed++
			return
		}
		e.interrupt(i, false, false)
	case ScopeNodeCrash, ScopeNodeDrain:
		fs.down[ni] = true
		fs.drainFor[ni] = ""
		fs.stats.NodeDrains++
		e.nodeOut(ni, c.Scope == ScopeNodeDrain, nil)
		fs.push(faultEvent{t: e.now + ev.repair, kind: evRepair, node: ni, gpu: -1})
	case ScopeGPU:
		e.gpuFault(ev, c)
	}
}

// model returns node ni's health model and current readings, starting
// them (one clean sample, as the agent takes at start) on first use.
func (e *engine) model(ni int) (*health.Model, []health.Reading) {
	fs := e.flt
	if m := fs.models[ni]; m != nil {
		return m, fs.readings[ni]
	}
	inv := map[int]string{}
	rs := make([]health.Reading, len(e.nodes[ni].GPUs))
	for g, gp := range e.nodes[ni].GPUs {
		inv[g] = gp.UUID
		rs[g] = health.Reading{Index: g, UUID: gp.UUID, TempC: 55, HasTemp: true, HasECC: true, NVLinkUp: 18, HasNVLink: true}
	}
	m := health.New(fs.f.Triage, health.DefaultLimits(), inv)
	m.Observe(Epoch.Add(e.now-time.Hour), rs)
	fs.models[ni], fs.readings[ni] = m, rs
	return m, rs
}

// gpuFault puts the cause's readings through node ni's health model and
// carries out the findings' actions.
func (e *engine) gpuFault(ev faultEvent, c Cause) {
	fs := e.flt
	ni, gi := ev.node, ev.gpu
	m, rs := e.model(ni)
	uuid := rs[gi].UUID
	var found []health.Finding
	if c.Diag {
		// The background diagnostic of the idle GPU (or a job's failing
		// numerics, then a diagnostic) finds it.
		found = []health.Finding{m.DiagFailed(gi, uuid, "dcgmi diag -r 3 failed (simulated silent data corruption)")}
	} else {
		c.Fault(&rs[gi], rand.New(rand.NewPCG(ev.pick, ev.pick^0x9e3779b97f4a7c15)))
		at := Epoch.Add(e.now)
		if rs[gi].TempC > 55 {
			// Sustained conditions count after Limits.Sustain: the
			// sample before shows it too.
			m.Observe(at.Add(-health.DefaultLimits().Sustain), rs)
		}
		found = m.Observe(at, rs).New
		rs[gi].XIDs = nil // an XID is read once
		rs[gi].TempC = 55 // cooled or resensed only after the repair; the latch holds meanwhile
	}
	action := health.Action("")
	for _, f := range found {
		switch {
		case f.Action == health.DrainNode:
			action = health.DrainNode
		case (f.Action == health.DrainGPU || f.Action == health.DrainSlice) && action == "": // no MIG here: a slice is its GPU
			action = health.DrainGPU
		}
	}
	ref := gpuRef{int32(ni), int32(gi)}
	switch action {
	case health.DrainNode:
		fs.down[ni], fs.drainFor[ni] = true, uuid
		fs.gpuOut[ref] = true
		e.nodes[ni].GPUs[gi].Unhealthy = true
		fs.stats.NodeDrains++
		e.nodeOut(ni, true, &ref)
	case health.DrainGPU:
		fs.gpuOut[ref] = true
		e.nodes[ni].GPUs[gi].Unhealthy = true
		fs.stats.GPUDrains++
		if i, ok := e.jobOn(ref); ok {
			e.interrupt(i, false, true)
		}
	default:
		// Logged only (a site's triage may say so): the job carries on.
		fs.stats.Missed++
		return
	}
	fs.push(faultEvent{t: e.now + ev.repair, kind: evRepair, node: ni, gpu: gi})
}

// nodeOut takes node ni out of service and moves its jobs: a job on the
// failed GPU (failed) crashes; the others checkpoint first when drain
// and the policy say so, else lose their work since the last checkpoint.
func (e *engine) nodeOut(ni int, drain bool, failed *gpuRef) {
	for _, i := range e.jobsOn(ni) {
		onFailed := failed != nil && slices.Contains(e.run[i].gpus, *failed)
		e.interrupt(i, drain && !onFailed && e.flt.f.CheckpointFirst, true)
	}
	e.setState(ni)
}

// repair: the hardware reads clean again. A GPU goes through the model:
// clean samples for ProbeAfter, the probe (it passes: repaired), Readmit;
// a node drained for it comes back with it, as the controller lifts
// gpud's drain on a readmission.
func (e *engine) repair(ni, gi int) {
	fs := e.flt
	if gi >= 0 {
		m, rs := e.model(ni)
		uuid := rs[gi].UUID
		l := health.DefaultLimits()
		m.Observe(Epoch.Add(e.now), rs)
		rep := m.Observe(Epoch.Add(e.now+l.ProbeAfter), rs)
		if !slices.Contains(rep.ProbeDue, uuid) {
			panic(fmt.Sprintf("simulate: the health model does not probe %s after a clean %s", uuid, l.ProbeAfter))
		}
		m.Readmit(uuid)
		delete(fs.gpuOut, gpuRef{int32(ni), int32(gi)})
		e.nodes[ni].GPUs[gi].Unhealthy = false
		fs.stats.Readmitted++
		if fs.drainFor[ni] != uuid {
			return
		}
	} else {
		fs.stats.Readmitted++
	}
	delete(fs.down, ni)
	delete(fs.drainFor, ni)
	e.setState(ni)
}

// jobOn returns the job holding GPU ref.
func (e *engine) jobOn(ref gpuRef) (int, bool) {
	for _, i := range slices.Sorted(maps.Keys(e.run)) {
		if slices.Contains(e.run[i].gpus, ref) {
			return i, true
		}
	}
	return 0, false
}

// jobsOn returns the jobs with a part on node ni, in job order.
func (e *engine) jobsOn(ni int) []int {
	var out []int
	for _, i := range slices.Sorted(maps.Keys(e.run)) {
		if slices.Contains(e.run[i].nodes, ni) {
			out = append(out, i)
		}
	}
	return out
}

// interrupt stops running job i now and queues it again: with ckpt it
// keeps all its progress (a checkpoint-first stop), else what its last
// periodic checkpoint saved. hw marks a hardware requeue (expedited when
// the policy says so).
func (e *engine) interrupt(i int, ckpt, hw bool) {
	fs := e.flt
	f := fs.f
	gpus := e.jobs[i].GPUs()
	ran := e.now - fs.begin[i]
	progress := fs.saved[i] + max(ran-fs.cost[i], 0)
	saved := progress
	if ckpt {
		fs.stats.Overhead += gpus * f.CheckpointCost.Seconds()
		fs.stats.Allocated += gpus * f.CheckpointCost.Seconds()
	} else if f.CheckpointEvery > 0 {
		saved = progress / f.CheckpointEvery * f.CheckpointEvery
	} else {
		saved = 0
	}
	fs.stats.Lost += gpus * (progress - saved).Seconds()
	fs.saved[i] = saved
	fs.stats.Interruptions++
	e.finish(i)
	e.res[i].Started = false
	fs.expedite[i] = hw && f.Expedite
	fs.stoppedAt[i] = e.now
	e.pending = append(e.pending, i)
}

// started notes job i's attempt starting now and returns how long it runs.
func (fs *faultState) started(i int, runtime time.Duration, now time.Duration) time.Duration {
	fs.begin[i] = now
	fs.cost[i] = 0
	if fs.attempts[i] == 0 {
		fs.firstStart[i] = now
	} else {
		fs.cost[i] = fs.f.RestartCost
		fs.waitSum += now - fs.stoppedAt[i]
		fs.waits++
		if fs.expedite[i] {
			fs.stats.Expedited++
		}
	}
	fs.expedite[i] = false
	fs.attempts[i]++
	return fs.cost[i] + runtime - fs.saved[i]
}

// ended books the GPU-seconds of job i's attempt when it ends (any way):
// its start-up is overhead.
func (fs *faultState) ended(gpus float64, i int, now time.Duration) {
	ran := now - fs.begin[i]
	fs.stats.Allocated += gpus * ran.Seconds()
	fs.stats.Overhead += gpus * min(ran, fs.cost[i]).Seconds()
}

// finalStats completes the statistics once the run is over.
func (e *engine) finalStats() *FaultStats {
	fs := e.flt
	s := fs.stats
	var num, den float64
	for i := range e.jobs {
		r := &e.res[i]
		if !r.Started || r.Unfittable {
			continue
		}
		g := e.jobs[i].GPUs()
		s.Useful += g * e.jobs[i].Runtime.Seconds()
		if fs.attempts[i] > 1 {
			s.InterruptedJobs++
			num += g * e.jobs[i].Runtime.Seconds()
			den += g * (r.End - fs.firstStart[i]).Seconds()
		}
	}
	s.EffectiveTime = 1
	if den > 0 {
		s.EffectiveTime = num / den
	}
	if fs.waits > 0 {
		s.RequeueWait = fs.waitSum / time.Duration(fs.waits)
	}
	return &s
}

// CauseNames lists the causes' names in order (for reports).
func CauseNames(cs []Cause) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name + " (" + strconv.Itoa(c.Count) + ")"
	}
	return out
}
