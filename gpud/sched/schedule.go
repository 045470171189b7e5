package sched

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

// Schedule decides which pending jobs start now and where, which running
// jobs are preempted, when blocked jobs are expected to start, and why
// the others wait.
//
// Pipeline (README.md has the drawing): priority (multifactor with
// fairshare when Config.Priority has weights, else Job.Priority) orders
// the jobs (priority desc, submit time asc, id asc); each job in turn is
// checked for holds, dependencies, QOS/account limits, then placed by its
// partition's Placement (pack by default; placement.go) on a per-node
// time–resource profile, so a job starts now only if it does not overlap
// any reservation made before it.
// A job that cannot start may preempt lower-QOS work; otherwise it gets a
// reservation at its earliest fit (up to BackfillDepth jobs, within
// BackfillWindow). A job with Nodes > 1 is a gang: all nodes or none.
//
// With none of the optional Snapshot fields set this is the plain
// greedy scheduler: running work has no known end, so no reservation
// can be made and a lower job that fits starts even when a higher one
// cannot.
func Schedule(snap *Snapshot, now time.Time, cfg Config) Plan {
	c := newCycle(snap, now, cfg)
	return c.run()
}

// Less orders jobs for scheduling: priority desc, submit time asc, id asc.
func Less(a, b *Job) int {
	if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
		return c
	}
	if c := a.SubmitTime.Compare(b.SubmitTime); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// workNode is a node's remaining capacity during one cycle.
type workNode struct {
	n *Node
	// ok is the mask of GPUs that may be handed out whole.
	ok   uint64
	prof backfill.Profile
	// phys is what is free now ignoring reservations.
	phys backfill.Res
	// reserved is set once a reservation holds part of the node.
	reserved bool
	running  []int // indexes into cycle.running
	// Shared GPUs (fractional jobs): frac[k] is GPU k's free share now
	// (1 when idle, 0 when held whole); fracEnd[k] is when the last
	// fractional job on it is expected to end: the profile holds GPU k
	// whole until then. resvGPUs are the GPUs some reservation holds.
	frac     []float64
	fracEnd  []int64
	resvGPUs uint64
	// nvlink and numa are the masks of GPUs per NVLink group and NUMA
	// node (nil: no topology to respect).
	nvlink, numa []uint64
	// advOn are the advance reservations that hold the node; adv is the
	// cycle's by name (advres.go).
	advOn []*advRes
	adv   map[string]*advRes
}

type runJob struct {
	r        *RunningJob
	qos      *QOS
	end      int64 // offset from now; backfill.Forever if unknown
	parts    []runPart
	gone     bool
	gpuCount int
}

// startRec is what a start or reservation holds, for State to undo.
type startRec struct {
	parts   []runPart
	at, end int64
	// lim is what the start counted against QOS/association limits, for
	// State.End to take back (started jobs only).
	lim limCount
	// partial: it holds MIG slices or a GPU share, which State.End cannot
	// give back (see State.Stale).
	partial bool
	// who is the reserved job in scheduling order (reservations only),
	// so a later start can tell whether it backfills under it.
	who wjob
}

type runPart struct {
	node int
	res  backfill.Res
}

type wjob struct {
	j    *Job
	prio int64
}

// shape is what makes two requests interchangeable for fit memoisation.
type shape struct {
	partition, model, constraint string
	gpus, cpus, nodes, maxNodes  int
	mem                          int64
	memWhole                     bool
	exclusive                    bool
	qos                          string
	fraction                     float64
	rdma                         int
	profile                      string // MIG profile
}

// fitMemo is what a cycle learned about one shape. Within a cycle free
// resources now only shrink and holds only delay, so failures and lower
// bounds stay valid (preemption frees resources only for its preemptor's
// reservation; it resets the reservation bounds of the nodes it frees).
type fitMemo struct {
	// nodes before physCursor do not fit the shape now, reservations aside
	physCursor int
	// placement fails for any duration ≥ failedDur
	failed           bool
	failedDur        int64
	fitting, physFit int
	// preemption fails for any duration ≥ noPreemptDur
	noPreempt    bool
	noPreemptDur int64
	// key[i] is a lower bound on when node i can hold the shape at all
	// (backfill.Forever: never within the window); heap orders the
	// nodes by it, lazily (stale entries are skipped).
	key  []int64
	elig []bool
	heap resvHeap
	// seen and pass cache the static filters per node (eligibleIn): bit
	// i says node i was checked, and whether it passed.
	seen, pass []uint64
	// counts are the node counts per reason for the shape (filters.go),
	// made at cycle.gen countGen.
	counted  bool
	countGen uint64
	counts   []NodeCount
	summary  string
}

type hent struct {
	t    int64
	node int
}

// resvHeap is a binary min-heap of (t, node).
type resvHeap []hent

func (h resvHeap) less(i, j int) bool {
	return h[i].t < h[j].t || (h[i].t == h[j].t && h[i].node < h[j].node)
}

func (h *resvHeap) push(e hent) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *resvHeap) pop() hent {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

type cycle struct {
	snap    *Snapshot
	now     time.Time
	cfg     Config
	nodes   []*workNode
	byName  map[string]int
	running []runJob
	qos     map[string]*QOS
	parts   map[string]*Partition
	share   *fairshare.Report
	horizon int64
	memo    map[shape]*fitMemo
	// lim counts running jobs and GPUs against the QOS and account
	// limits (limits.go).
	lim  limits
	plan Plan
	// priority inputs shared by all jobs; clusterGPUs < 0 until computed
	clusterGPUs float64
	maxTier     int
	maxQOS      int64
	// scratch
	picked []pick
	// victims is the preemption search (preemption.go).
	victims victimSearch
	// queue is the pending jobs in scheduling order
	queue []wjob
	// capAt is the queue index of the first job the start limit held
	// back (MaxStartsPerCycle), len(queue) when it held none back; the
	// jobs from there on were not considered (State.Resume goes on).
	capAt   int
	blocked bool // a job already waits with ReasonResources
	nresv   int  // reservations made (BackfillDepth)
	// off is the current time as an offset from now (State events after
	// the full cycle); 0 in a full cycle.
	off int64
	// track records starts and reservations for State.
	track   bool
	started map[spec.JobID]startRec
	resv    map[spec.JobID]startRec
	// placement state (placement.go, fgd.go), built on first use
	buckets  [][]uint64
	bucketOf []int8
	fgd      []fgdGroup
	shares   []float64
	fgdMemo  map[fgdState]fgdScore
	// holders are the nodes holding each image (image.go).
	holders             map[string][]uint64
	orderBuf, bucketBuf []int
	// mig is the MIG layout (mig.go), built for the first MIG job.
	mig *migCycle
	// unplaced are the jobs whose placement failed since the plan's
	// metrics were last made; gen counts changes to what is free or held
	// (starts, reservations, preemptions, ends), so a shape's node
	// counts are remade only after one (filters.go).
	unplaced []unplaced
	gen      uint64
	// counts are the node counts by shape without QOS (filters.go).
	counts map[shape]countEntry
	// adv are the advance reservations by name (advres.go).
	adv map[string]*advRes
	// het are the pending components of each heterogeneous job in the
	// queue, by leader, built on first use; hetDone the groups decided
	// (het.go). State events reset both.
	het     map[spec.JobID][]*Job
	hetDone map[spec.JobID]bool
}

type pick struct {
	node int
	gpus uint64
	// shared: a fractional job joins a GPU other fractional jobs use.
	shared bool
}

// fracEps absorbs float rounding when shares are summed (0.1+0.2+0.7).
const fracEps = 1e-9

// nodeEnd is a running job's part on node (an index of the cycle's
// nodes) coming back at its expected end.
type nodeEnd struct {
	node int
	at   int64
	res  backfill.Res
}

// deferEnds gives each node's profile its running jobs' ends, in one
// array cut per node: a cycle on 1,000 nodes made thousands of small
// allocations growing each profile one release at a time.
func deferEnds(nodes []*workNode, ends []nodeEnd) {
	if len(ends) == 0 {
		return
	}
	off := make([]int, len(nodes)+1)
	for _, e := range ends {
		off[e.node+1]++
	}
	for i := range nodes {
		off[i+1] += off[i]
	}
	buf, next := backfill.MakeEndings(len(ends)), slices.Clone(off[:len(nodes)])
	for _, e := range ends {
		buf.Set(next[e.node], e.at, e.res)
		next[e.node]++
	}
	for i, w := range nodes {
		if off[i] < off[i+1] {
			w.prof.Defer(buf[off[i]:off[i+1]:off[i+1]])
		}
	}
}

// initNode sets w's GPU masks, shares, free resources and topology from
// its node (w.n, with w.frac and w.fracEnd zero and sized to its first
// 64 GPUs).
func (w *workNode) initNode() {
	n := w.n
	var free uint64
	for k := range len(w.frac) {
		// By pointer: a GPU's record is large, and copying each one
		// was a tenth of a cycle on 1,000 nodes.
		g := &n.GPUs[k]
		if (!g.MIGEnabled || migWholeOK(g)) && g.Profile == "" && !g.Unhealthy {
			w.ok |= 1 << k
			switch {
			case g.Free:
				free |= 1 << k
				w.frac[k] = 1
			case g.FreeFraction > 0 && g.FreeFraction < 1:
				// Partly held by fractional jobs.
				w.frac[k] = g.FreeFraction
				w.fracEnd[k] = backfill.Forever // lowered below from the running jobs
			}
		}
	}
	w.phys = backfill.Res{GPUs: free, CPUs: n.FreeCPUs, MemMiB: n.FreeMemMiB, Allocs: n.Allocs}
	w.topology()
}

func newCycle(snap *Snapshot, now time.Time, cfg Config) *cycle {
	c := cycleFor(snap, now, cfg)
	c.buildNodes()
	c.buildRunning()
	c.finishSetup()
	return c
}

// cycleFor is a cycle's setup before its nodes and running jobs: the
// QOS, partition and limit tables.
func cycleFor(snap *Snapshot, now time.Time, cfg Config) *cycle {
	c := &cycle{snap: snap, now: now, cfg: cfg, horizon: backfill.Forever, memo: map[shape]*fitMemo{}, clusterGPUs: -1}
	if cfg.BackfillWindow > 0 {
		c.horizon = int64(cfg.BackfillWindow)
	}
	if len(snap.QOS) > 0 {
		c.qos = make(map[string]*QOS, len(snap.QOS))
		for i := range snap.QOS {
			c.qos[snap.QOS[i].Name] = &snap.QOS[i]
		}
	}
	c.lim = newLimits(snap.QOS, snap.AccountLimits)
	if len(snap.Partitions) > 0 {
		c.parts = make(map[string]*Partition, len(snap.Partitions))
		for i := range snap.Partitions {
			c.parts[snap.Partitions[i].Name] = &snap.Partitions[i]
		}
	}
	return c
}

// buildNodes makes the cycle's work nodes from the snapshot's, in cycle
// order.
func (c *cycle) buildNodes() {
	snap := c.snap
	c.nodes = make([]*workNode, 0, len(snap.Nodes))
	// One backing array for every node's share state: a cycle runs for
	// every event in the simulator, and per-node slices were most of its
	// allocations.
	total := 0
	for i := range snap.Nodes {
		total += min(len(snap.Nodes[i].GPUs), 64)
	}
	fracs, fracEnds := make([]float64, total), make([]int64, total)
	// Likewise the nodes themselves and their profiles' first steps.
	ws, steps := make([]workNode, len(snap.Nodes)), backfill.MakeBuf(len(snap.Nodes))
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		ng := min(len(n.GPUs), 64)
		w := &ws[i]
		*w = workNode{n: n, frac: fracs[:ng:ng], fracEnd: fracEnds[:ng:ng]}
		fracs, fracEnds = fracs[ng:], fracEnds[ng:]
		w.initNode()
		w.prof = backfill.NewIn(steps, i, w.phys)
		c.nodes = append(c.nodes, w)
	}
	// Weight first (lower first, Slurm's node weight), then name: nodes
	// that fit equally well are used in this order.
	slices.SortFunc(c.nodes, func(a, b *workNode) int {
		return cmp.Or(cmp.Compare(a.n.Weight, b.n.Weight), cmp.Compare(a.n.Name, b.n.Name))
	})
}

// buildRunning resolves the snapshot's running jobs onto the cycle's
// nodes: their parts, the limits they count against and the profiles'
// releases at their expected ends.
func (c *cycle) buildRunning() {
	snap, now := c.snap, c.now
	if len(snap.Running) > 0 {
		c.byName = make(map[string]int, len(c.nodes))
		for i, w := range c.nodes {
			c.byName[w.n.Name] = i
		}
		c.running = make([]runJob, len(snap.Running))
		// A shared GPU returns to the profile when its last fractional
		// job is expected to end.
		shareEnd := map[[2]int]int64{}
		// The running jobs' parts, each node's list of them and their
		// ends (for the profiles, deferEnds) each live in one array: a
		// cycle runs for every event in the simulator, and growing them
		// one append at a time was most of its allocations. A first pass
		// finds each part's node and counts them per node.
		total := 0
		for i := range snap.Running {
			total += len(snap.Running[i].Nodes)
		}
		where, perNode := make([]int32, total), make([]int32, len(c.nodes))
		k := 0
		for i := range snap.Running {
			for j := range snap.Running[i].Nodes {
				a := &snap.Running[i].Nodes[j] // by pointer: a large record
				ni, ok := c.byName[a.Node]
				if !ok || a.Ended {
					ni = -1
				} else {
					perNode[ni]++
				}
				where[k] = int32(ni)
				k++
			}
		}
		onNode := make([]int, total)
		for i, w := range c.nodes {
			n := int(perNode[i])
			w.running, onNode = onNode[:0:n], onNode[n:]
		}
		parts, ends := make([]runPart, 0, total), make([]nodeEnd, 0, total)
		k = 0
		for i := range snap.Running {
			r := &snap.Running[i]
			rj := runJob{r: r, qos: c.qos[r.QOS], end: backfill.Forever}
			if r.TimeLimit > 0 {
				rj.end = max(int64(r.Start.Add(r.TimeLimit).Sub(now)), 1)
			}
			first := len(parts)
			for j := range r.Nodes {
				a := &r.Nodes[j]
				ni := int(where[k])
				k++
				if ni < 0 {
					continue
				}
				w := c.nodes[ni]
				res := backfill.Res{CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}
				// UUIDs are unique on a node and allocations list them in
				// the node's order, so each search starts after the last
				// match: linear in the node's GPUs, not quadratic.
				from, ng := 0, min(len(w.n.GPUs), 64)
				for _, u := range a.GPUs {
					for x := range ng {
						k := (from + x) % ng
						g := &w.n.GPUs[k]
						if g.UUID != u {
							continue
						}
						from = k + 1
						if w.ok&(1<<k) == 0 || g.Free {
							break
						}
						if a.GPUFraction > 0 && a.GPUFraction < 1 {
							// Not in res: ending or preempting one
							// sharer does not free the GPU.
							key := [2]int{ni, k}
							shareEnd[key] = max(shareEnd[key], rj.end)
							rj.gpuCount++
							break
						}
						res.GPUs |= 1 << k
						break
					}
				}
				rj.gpuCount += bits.OnesCount64(res.GPUs)
				parts = append(parts, runPart{node: ni, res: res})
				w.running = append(w.running, i)
				if rj.end < backfill.Forever {
					ends = append(ends, nodeEnd{ni, rj.end, res})
				}
			}
			if len(parts) > first {
				rj.parts = parts[first:len(parts):len(parts)]
			}
			c.running[i] = rj
			c.lim.add(r.QOS, r.User, r.Account, rj.gpuCount)
		}
		deferEnds(c.nodes, ends)
		for key, end := range shareEnd {
			w := c.nodes[key[0]]
			k := key[1]
			w.fracEnd[k] = end
			if end < backfill.Forever {
				w.prof.Release(end, backfill.Res{GPUs: 1 << k})
			}
		}
	}
}

// finishSetup is the setup after the nodes and running jobs: fairshare
// and advance reservations.
func (c *cycle) finishSetup() {
	snap, now, cfg := c.snap, c.now, c.cfg
	if snap.Fairshare != nil {
		c.share = snap.Fairshare
	} else if len(snap.Accounts.Accounts) > 0 && cfg.Priority.Weights.Fairshare != 0 {
		c.share = fairshare.Compute(&snap.Accounts, snap.Usage, now, cfg.Fairshare)
	}
	c.setupAdvRes()
}

// Priorities computes every pending job's multifactor priority and its
// breakdown (gpuq prio), in scheduling order.
func Priorities(snap *Snapshot, now time.Time, cfg Config) []JobPriority {
	c := newCycle(snap, now, cfg)
	out := make([]JobPriority, 0, len(snap.Jobs))
	for _, w := range c.order() {
		out = append(out, JobPriority{JobID: w.j.ID, Result: c.priority(w.j)})
	}
	return out
}

// JobPriority is one job's priority breakdown.
type JobPriority struct {
	JobID spec.JobID
	priority.Result
}

// priority is j's multifactor priority, or Job.Priority when the
// multifactor weights are all zero.
func (c *cycle) priority(j *Job) priority.Result {
	r := c.basePriority(j)
	if j.Expedite {
		r.Total += ExpeditePriority
	}
	return r
}

// ExpeditePriority is added to an expedited job's priority: more than any
// multifactor total or priority a person sets, so it goes first.
const ExpeditePriority = int64(1) << 48

func (c *cycle) basePriority(j *Job) priority.Result {
	if c.cfg.Priority.Weights.Zero() {
		return priority.Result{Total: j.Priority}
	}
	if c.clusterGPUs < 0 {
		c.clusterGPUs = 0
		for _, w := range c.nodes {
			c.clusterGPUs += float64(bits.OnesCount64(w.ok))
		}
		for _, p := range c.snap.Partitions {
			c.maxTier = max(c.maxTier, p.Tier)
		}
		for _, q := range c.snap.QOS {
			c.maxQOS = max(c.maxQOS, q.Priority)
		}
	}
	in := priority.Input{Submit: j.SubmitTime, Nice: j.Nice, ClusterGPUs: c.clusterGPUs, MaxTier: c.maxTier, MaxQOS: c.maxQOS,
		GPUs: float64(max(j.Req.Nodes, 1) * j.Req.GPUsPerNode)}
	if c.share != nil {
		in.Fairshare = c.share.Factor(j.Account, j.User)
	}
	if p := c.parts[j.Partition]; p != nil {
		in.Tier = p.Tier
	}
	if q := c.qos[j.QOS]; q != nil {
		in.QOS = q.Priority
	}
	return priority.Compute(in, c.now, c.cfg.Priority)
}

func (c *cycle) order() []wjob {
	jobs := make([]wjob, len(c.snap.Jobs))
	for i := range c.snap.Jobs {
		j := &c.snap.Jobs[i]
		jobs[i] = wjob{j: j, prio: c.priority(j).Total}
	}
	slices.SortFunc(jobs, queueOrder)
	return jobs
}

func (c *cycle) pending(j *Job, reason, detail string) {
	c.plan.Pending = append(c.plan.Pending, Pending{JobID: j.ID, Reason: reason, Detail: detail})
}

func (c *cycle) run() Plan {
	c.queue = c.order()
	c.unplaced = make([]unplaced, 0, len(c.queue))
	c.capAt = len(c.queue)
	for i, wj := range c.queue {
		if c.capAt == len(c.queue) && c.atCap() {
			c.capAt = i
		}
		c.decide(wj, true)
	}
	c.placementMetrics()
	return c.plan
}

// gate returns why j cannot be considered at all now, if so.
func (c *cycle) gate(j *Job) (string, string) {
	now := c.now.Add(time.Duration(c.off))
	switch {
	case j.Held:
		return spec.ReasonHeld, ""
	case j.Ineligible != "":
		return j.Ineligible, j.IneligibleDetail
	case j.BeginTime.After(now):
		return spec.ReasonBeginTime, "begins at " + j.BeginTime.UTC().Format(time.RFC3339)
	case j.PartitionDown:
		return spec.ReasonPartitionDown, "partition " + j.Partition + " is not up"
	case j.DependencyNeverSatisfied:
		return spec.ReasonDependencyNeverSatisfied, "a dependency can never be satisfied"
	case j.DependencyPending:
		return spec.ReasonDependency, "waiting for dependencies"
	}
	return c.limit(j)
}

func durOf(j *Job) int64 {
	if j.TimeLimit > 0 {
		return int64(j.TimeLimit)
	}
	return backfill.Forever
}

// capDetail is the detail of a job the cycle's start limit held back.
const capDetail = "cycle start limit reached"

// atCap reports whether the plan has as many starts as one cycle may make
// (Config.MaxStartsPerCycle).
func (c *cycle) atCap() bool {
	return c.cfg.MaxStartsPerCycle > 0 && len(c.plan.Starts) >= c.cfg.MaxStartsPerCycle
}

// decide starts, preempts for, reserves for or explains one job.
func (c *cycle) decide(wj wjob, mayPreempt bool) {
	j := wj.j
	if j.HetJobID != 0 {
		c.decideHet(j) // het.go
		return
	}
	if reason, detail := c.gate(j); reason != "" {
		c.pending(j, reason, detail)
		return
	}
	if c.atCap() {
		c.pending(j, spec.ReasonPriority, capDetail)
		return
	}
	if j.Reservation != "" {
		c.decideInResv(j) // advres.go
		return
	}
	dur := durOf(j)
	if j.Req.GPUProfile != "" {
		c.decideMIG(j, dur) // mig.go
		return
	}
	m := c.memoFor(j)
	picks, fitting, physFit := c.placeNow(j, dur, m)
	if picks != nil {
		c.start(j, picks, dur)
		return
	}
	if alt, picks := c.placeAlternative(j, dur); picks != nil {
		c.start(alt, picks, dur)
		return
	}
	if picks, d := c.placeShortened(j, m); picks != nil {
		c.start(j, picks, d)
		return
	}
	c.unplaced = append(c.unplaced, unplaced{j: j, m: m})
	want := max(j.Req.Nodes, 1)
	detail := fmt.Sprintf("needs %s; %d of %d nodes fit now", describe(j.Req), fitting, len(c.nodes))
	if mayPreempt && c.preempt(j, wj.prio, dur) {
		return
	}
	p := Pending{JobID: j.ID, Detail: detail}
	switch {
	case physFit >= want && c.maintBlocks(j, dur):
		p.Reason = spec.ReasonReservedMaint
		p.Detail = fmt.Sprintf("needs %s; %d nodes fit now but its time limit crosses a maintenance reservation", describe(j.Req), physFit)
	case physFit >= want:
		p.Reason = spec.ReasonReservation
		p.Detail = fmt.Sprintf("needs %s; %d nodes fit now but starting would delay a reservation", describe(j.Req), physFit)
	case !c.blocked:
		p.Reason = spec.ReasonResources
		c.blocked = true
	default:
		p.Reason = spec.ReasonPriority
	}
	if c.cfg.BackfillDepth == 0 || c.nresv < c.cfg.BackfillDepth {
		if at, ok := c.reserve(j, dur); ok {
			c.nresv++
			p.ExpectedStart = at
		}
	}
	c.plan.Pending = append(c.plan.Pending, p)
}

// placeShortened is --time-min: where j fits now for the longest time
// in whole minutes from its TimeMin up to (not including) its TimeLimit,
// and that time; nil when it does not fit even for TimeMin. Fitting is
// monotonic in the duration (a shorter hold overlaps less), so a binary
// search finds it.
func (c *cycle) placeShortened(j *Job, m *fitMemo) ([]pick, int64) {
	limit := j.TimeLimit
	if limit == 0 {
		limit = maxShortened // none: search up to a year
	}
	if j.TimeMin <= 0 || limit <= j.TimeMin {
		return nil, 0
	}
	picks, _, _ := c.placeNow(j, int64(j.TimeMin), m)
	if picks == nil {
		return nil, 0
	}
	best, bestDur := slices.Clone(picks), int64(j.TimeMin)
	lo, hi := int64(j.TimeMin/time.Minute), int64(limit/time.Minute) // fits at lo, not at hi
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if p, _, _ := c.placeNow(j, mid*int64(time.Minute), m); p != nil {
			best, bestDur, lo = slices.Clone(p), mid*int64(time.Minute), mid
		} else {
			hi = mid
		}
	}
	return best, bestDur
}

// maxShortened bounds the --time-min search of a job without a limit.
const maxShortened = 366 * 24 * time.Hour

// choices are the ways to place j: j itself, then a copy of j in each of
// its Alternatives that admits its time limit, in the order given.
func (c *cycle) choices(j *Job) []*Job {
	out := []*Job{j}
	for _, p := range j.Alternatives {
		if p == j.Partition {
			continue
		}
		if part := c.parts[p]; part != nil && part.MaxTime > 0 && (j.TimeLimit == 0 || j.TimeLimit > part.MaxTime) {
			continue
		}
		alt := *j
		alt.Partition, alt.Alternatives, alt.alt = p, nil, true
		out = append(out, &alt)
	}
	return out
}

// placeAlternative is Slurm's rule for a job listed in several partitions
// (-p a,b) that cannot start now in its own: it starts in whichever of its
// Alternatives can start it now, the first in the order given. It returns
// the copy of j placed there and where, or nil.
func (c *cycle) placeAlternative(j *Job, dur int64) (*Job, []pick) {
	for _, alt := range c.choices(j)[1:] {
		if picks, _, _ := c.placeNow(alt, dur, c.memoFor(alt)); picks != nil {
			return alt, picks
		}
	}
	return nil, nil
}

func shapeOf(j *Job) (shape, bool) {
	r := &j.Req
	if len(r.NodeList) > 0 || len(r.Exclude) > 0 || j.Reservation != "" {
		return shape{}, false
	}
	return shape{partition: j.Partition, model: r.GPUModel, constraint: r.Constraint, gpus: r.GPUsPerNode, cpus: r.CPUsPerNode,
		nodes: max(r.Nodes, 1), maxNodes: r.MaxNodes, mem: r.MemMiB, memWhole: r.MemWholeNode, exclusive: r.Exclusive, qos: j.QOS, fraction: r.GPUFraction, rdma: r.RDMA,
		profile: r.GPUProfile}, true
}

func (c *cycle) memoFor(j *Job) *fitMemo {
	k, ok := shapeOf(j)
	if !ok {
		return &fitMemo{}
	}
	m := c.memo[k]
	if m == nil {
		m = &fitMemo{}
		c.memo[k] = m
	}
	return m
}

// placeNow finds where j fits for dur from now without overlapping a
// reservation: the first nodes by name (PlaceFirstFit) or the best by the
// partition's placement (placeBest). It returns nil when it does not fit,
// with how many nodes fit and how many would fit ignoring reservations.
func (c *cycle) placeNow(j *Job, dur int64, m *fitMemo) ([]pick, int, int) {
	if m.failed && dur >= m.failedDur {
		return nil, m.fitting, m.physFit
	}
	if pol := c.placement(j); pol != PlaceFirstFit {
		return c.placeBest(j, dur, pol, m)
	}
	need := max(j.Req.Nodes, 1)
	want := wantNodes(j)
	picks := c.picked[:0]
	physFit := 0
	first := -1
	for i := m.physCursor; i < len(c.nodes); i++ {
		w := c.nodes[i]
		if !c.eligibleIn(m, i, j) || !fitsNow(w, j) {
			continue
		}
		if first < 0 {
			first = i
		}
		physFit++
		p, ok := c.fitFor(w, j, dur)
		if !ok {
			continue
		}
		p.node = i
		picks = append(picks, p)
		if len(picks) == want {
			break
		}
	}
	c.picked = picks
	if first >= 0 {
		m.physCursor = first
	} else {
		m.physCursor = len(c.nodes)
	}
	if len(picks) < need {
		if !m.failed || dur < m.failedDur {
			m.failed, m.failedDur = true, dur
		}
		m.fitting, m.physFit = len(picks), physFit
		return nil, len(picks), physFit
	}
	return picks, len(picks), physFit
}

// wantNodes is how many nodes j takes when they fit: the top of its
// range (-N MIN-MAX), else its node count. Backfill reserves and
// preemption frees the bottom (Job.Req.Nodes).
func wantNodes(j *Job) int { return max(j.Req.MaxNodes, j.Req.Nodes, 1) }

// freeNow is what a job starting now for dur may take on w: free now
// (without what victims of this cycle will free) and not held by any
// reservation during [off, off+dur).
func (w *workNode) freeNow(off, dur int64) backfill.Res {
	if !w.reserved {
		return w.phys
	}
	a := w.prof.Avail(off, backfill.Add(off, dur))
	return backfill.Res{GPUs: a.GPUs & w.phys.GPUs, CPUs: min(a.CPUs, w.phys.CPUs), MemMiB: min(a.MemMiB, w.phys.MemMiB),
		Allocs: max(a.Allocs, w.phys.Allocs)}
}

func (c *cycle) alloc(w *workNode, j *Job, g uint64, rank int, free backfill.Res) spec.NodeAlloc {
	a := spec.NodeAlloc{Node: w.n.Name, Rank: rank, CPUs: j.Req.CPUsPerNode, MemMiB: memNeed(w, &j.Req)}
	if isFrac(j) {
		a.GPUFraction = j.Req.GPUFraction
	} else if j.Req.Exclusive {
		a.CPUs, a.MemMiB = free.CPUs, free.MemMiB
	}
	for k := range bits.Len64(g) {
		if g&(1<<k) != 0 {
			a.GPUs = append(a.GPUs, w.n.GPUs[k].UUID)
		}
	}
	a.NICs = pickNICs(w.n, &a, j.Req.RDMA) // rdma.go
	return a
}

// start starts j on picks for dur and returns what it took on each node.
func (c *cycle) start(j *Job, picks []pick, dur int64) []runPart {
	c.gen++
	allocs := make([]spec.NodeAlloc, 0, len(picks))
	var parts []runPart
	for rank, p := range picks {
		w := c.nodes[p.node]
		a := c.alloc(w, j, p.gpus, rank, w.freeNow(c.off, dur))
		res := backfill.Res{GPUs: p.gpus, CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}
		if isFrac(j) {
			c.takeShare(w, j, p, dur)
			res.GPUs = 0 // the GPU is tracked per share, not per job
		}
		w.phys.GPUs &^= res.GPUs
		w.phys.CPUs -= res.CPUs
		w.phys.MemMiB -= res.MemMiB
		w.phys.Allocs++
		w.prof.Hold(c.off, backfill.Add(c.off, dur), res)
		allocs = append(allocs, a)
		parts = append(parts, runPart{node: p.node, res: res})
		c.rebucket(p.node)
	}
	lc := limCount{qos: j.QOS, user: j.User, account: j.Account, gpus: startGPUs(j, picks)}
	if c.track {
		c.started[j.ID] = startRec{parts: parts, at: c.off, end: backfill.Add(c.off, dur), lim: lc, partial: isFrac(j)}
	}
	st := Start{JobID: j.ID, Nodes: allocs, Backfilled: c.reserving(j)}
	if dur < durOf(j) {
		st.TimeLimit = time.Duration(dur) // shortened to fit (--time-min)
	}
	if j.alt {
		st.Partition = j.Partition
	}
	c.plan.Starts = append(c.plan.Starts, st)
	c.lim.add(lc.qos, lc.user, lc.account, lc.gpus)
	return parts
}

// limCount is one start's count against the limits (c.lim).
type limCount struct {
	qos, user, account string
	gpus               int
}

// startGPUs is how many GPUs j started on picks counts against limits.
func startGPUs(j *Job, picks []pick) int {
	if len(picks) > max(j.Req.Nodes, 1) && !isFrac(j) {
		return len(picks) * j.Req.GPUsPerNode // -N MIN-MAX got more than MIN
	}
	return jobGPUs(j)
}

// takeShare books fractional j's share of the GPU in p on w from now. The
// profile holds the GPU whole until the last sharer's expected end.
func (c *cycle) takeShare(w *workNode, j *Job, p pick, dur int64) {
	k := bits.TrailingZeros64(p.gpus)
	end := backfill.Add(c.off, dur)
	bit := backfill.Res{GPUs: p.gpus}
	if !p.shared {
		w.phys.GPUs &^= p.gpus
		w.prof.Hold(c.off, end, bit)
		w.frac[k], w.fracEnd[k] = 1, end
	} else if end > w.fracEnd[k] {
		w.prof.Hold(w.fracEnd[k], end, bit)
		w.fracEnd[k] = end
	}
	w.frac[k] = max(w.frac[k]-j.Req.GPUFraction, 0)
}

// reserve gives j a reservation at its earliest fit within the window.
//
// Each shape keeps a heap of nodes by a lower bound on when they can hold
// it at all; nodes are popped in that order and their true earliest start
// for j's duration computed, until no remaining bound can beat the best.
// Holds only delay, so bounds stay valid across the cycle.
func (c *cycle) reserve(j *Job, dur int64) (time.Time, bool) {
	return c.reserveFrom(j, dur, c.off)
}

// reserveFrom is reserve for a start no earlier than from (≥ c.off).
func (c *cycle) reserveFrom(j *Job, dur, from int64) (time.Time, bool) {
	m := c.memoFor(j)
	fits := func(w *workNode) func(backfill.Res) bool {
		return func(r backfill.Res) bool { _, ok := fitRes(w, j, r); return ok }
	}
	if m.key == nil {
		m.key = make([]int64, len(c.nodes))
		m.elig = make([]bool, len(c.nodes))
		for i, w := range c.nodes {
			m.key[i] = backfill.Forever
			if !c.eligible(w, j) {
				continue
			}
			m.elig[i] = true
			if t, ok := w.prof.Earliest(from, 1, c.horizon, fits(w)); ok {
				m.key[i] = t
				m.heap.push(hent{t, i})
			}
		}
	}
	want := max(j.Req.Nodes, 1)
	type cand struct {
		t    int64
		node int
	}
	var found []cand // popped nodes with their earliest start for dur
	var popped []int
	bound := backfill.Forever // the want-th smallest start found
	for len(m.heap) > 0 {
		top := m.heap[0]
		if m.key[top.node] != top.t {
			m.heap.pop() // stale
			continue
		}
		if top.t >= c.horizon || (len(found) >= want && top.t > bound) {
			break
		}
		m.heap.pop()
		m.key[top.node] = backfill.Forever
		popped = append(popped, top.node)
		w := c.nodes[top.node]
		if t, ok := w.prof.Earliest(max(top.t, from), dur, c.horizon, fits(w)); ok {
			k, _ := slices.BinarySearchFunc(found, cand{t, top.node}, func(a, b cand) int {
				if x := cmp.Compare(a.t, b.t); x != 0 {
					return x
				}
				return cmp.Compare(a.node, b.node)
			})
			found = slices.Insert(found, k, cand{t, top.node})
			if len(found) >= want {
				bound = found[want-1].t
			}
		}
	}
	defer func() {
		// Popped nodes go back with fresh bounds.
		for _, i := range popped {
			w := c.nodes[i]
			if t, ok := w.prof.Earliest(from, 1, c.horizon, fits(w)); ok {
				m.key[i] = t
				m.heap.push(hent{t, i})
			}
		}
	}()
	if len(found) < want {
		return time.Time{}, false
	}
	var at int64
	var chosen []int
	if want == 1 {
		at, chosen = found[0].t, []int{found[0].node}
	} else {
		// A gang starts on all nodes at once: the earliest candidate time
		// at which want of the nodes fit together.
		ok := false
		for k := want - 1; k < len(found) && !ok; k++ {
			if k > want-1 && found[k].t == found[k-1].t {
				continue
			}
			t := found[k].t
			chosen = chosen[:0]
			for _, cd := range found[:k+1] {
				w := c.nodes[cd.node]
				if _, fit := fitRes(w, j, w.prof.Avail(t, backfill.Add(t, dur))); fit {
					chosen = append(chosen, cd.node)
				}
			}
			if len(chosen) >= want {
				slices.Sort(chosen)
				chosen, at, ok = chosen[:want], t, true
			}
		}
		if !ok {
			return time.Time{}, false
		}
	}
	c.hold(j, chosen, at, dur)
	return c.now.Add(time.Duration(at)), true
}

// reserving reports whether a job ordered before j holds a reservation
// now: one made earlier in this cycle (jobs are decided in order, so any)
// or, in an incremental State call, one the last full cycle made for a job
// ahead of j in the queue.
func (c *cycle) reserving(j *Job) bool {
	if len(c.plan.Reservations) > 0 {
		return true
	}
	if len(c.resv) == 0 {
		return false
	}
	me := wjob{j: j, prio: c.priority(j).Total}
	for _, r := range c.resv {
		if r.who.j != nil && r.who.j.ID != j.ID && queueOrder(r.who, me) < 0 {
			return true
		}
	}
	return false
}

// queueOrder is the scheduling order: priority descending, then submit
// time, then job ID.
func queueOrder(a, b wjob) int {
	if x := cmp.Compare(b.prio, a.prio); x != 0 {
		return x
	}
	if x := a.j.SubmitTime.Compare(b.j.SubmitTime); x != 0 {
		return x
	}
	return cmp.Compare(a.j.ID, b.j.ID)
}

// hold commits a reservation of j on nodes from at for dur.
func (c *cycle) hold(j *Job, nodes []int, at, dur int64) {
	c.gen++
	end := backfill.Add(at, dur)
	rv := Reservation{JobID: j.ID, Start: c.now.Add(time.Duration(at))}
	var parts []runPart
	if end < backfill.Forever {
		rv.End = c.now.Add(time.Duration(end))
	}
	for rank, ni := range nodes {
		w := c.nodes[ni]
		free := w.prof.Avail(at, end)
		g, _ := fitRes(w, j, free)
		a := c.alloc(w, j, g, rank, free)
		res := backfill.Res{GPUs: g, CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}
		w.prof.Hold(at, end, res)
		w.reserved = true
		w.resvGPUs |= g
		rv.Nodes = append(rv.Nodes, a)
		parts = append(parts, runPart{node: ni, res: res})
	}
	if c.track {
		c.resv[j.ID] = startRec{parts: parts, at: at, end: end, who: wjob{j: j, prio: c.priority(j).Total}}
	}
	c.plan.Reservations = append(c.plan.Reservations, rv)
}

func describe(r spec.Resources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) with %d CPUs", max(r.Nodes, 1), r.CPUsPerNode)
	if r.MemMiB > 0 {
		fmt.Fprintf(&b, ", %d MiB", r.MemMiB)
	}
	if r.MemWholeNode {
		b.WriteString(", all its memory")
	}
	if r.GPUsPerNode > 0 {
		model := r.GPUModel
		if model == "" {
			model = "gpu"
		}
		fmt.Fprintf(&b, ", %d× %s", r.GPUsPerNode, model)
	} else if r.GPUFraction > 0 {
		model := r.GPUModel
		if model == "" {
			model = "gpu"
		}
		fmt.Fprintf(&b, ", %g of one %s", r.GPUFraction, model)
	}
	if r.Exclusive {
		b.WriteString(", exclusive")
	}
	return b.String()
}
