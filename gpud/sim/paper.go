package sim

import (
	"cmp"
	"fmt"
	"math"
	mrand "math/rand" // the published experiment's generator, for its arrival order
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The FGD paper's experiment as its published simulator runs it (Weng et
// al., "Beware of Fragmentation", USENIX ATC'23; the simulator is
// hkust-adsl/kubernetes-scheduler-simulator). This file is our own model
// of that experiment, written from reading the simulator's behaviour:
//
//   - Cluster: the GPU nodes only (the CPU-only nodes of the all-node list
//     take no part). Each node has CPU (milli-cores), memory (MiB) and GPUs
//     of one model, each GPU divided in 1000 milli-GPUs.
//   - Tasks: every row of the pod list, CPU-only ones too. A task asks for
//     num_gpu GPUs of gpu_milli each (a share when num_gpu is 1 and
//     gpu_milli < 1000), CPU and memory; gpu_spec lists the models it may
//     run on. It fits a node when the node's free CPU and memory cover it,
//     the node's model is allowed, and (share) one GPU has gpu_milli left
//     or (whole) num_gpu GPUs are wholly free.
//   - Arrivals (per seed): the tasks sorted by name, then shuffled by Go's
//     math/rand seeded with the seed (after one draw), then the "tune"
//     step appends tasks drawn at random, with replacement, until their
//     GPU requests would pass 1.3 × the cluster's GPUs. Tasks never leave.
//   - A task that fits nowhere is dropped: its GPU request still counts as
//     arrived, nothing is allocated for it.
//   - Each arrival is scored on every node that fits by one policy (integer
//     scores 0..100, as the Kubernetes scheduling framework keeps them); the
//     best node wins, ties going to the smallest node name; the simulator
//     names the nodes with a random rank in front, drawn per seed.
//   - Metric: after each arrival, arrived = Σ GPU requests of the tasks so
//     far (failed ones included), used = Σ GPU milli allocated. The curve
//     value at k is the mean of used/total over the arrivals whose arrived
//     share rounds to k percent.
//
// It reproduces the paper's six baselines; gpud's own placements run the
// same arrivals, cluster and metric through sched.Schedule (RunSched).

// PaperPolicy is one of the FGD paper's six placement policies.
type PaperPolicy string

// The paper's policies, named as `gpud simulate --fgd --placement` takes them.
const (
	PaperRandom        PaperPolicy = "random"
	PaperDotProd       PaperPolicy = "dotprod"
	PaperGPUClustering PaperPolicy = "gpu-clustering"
	PaperGPUPacking    PaperPolicy = "gpu-packing"
	PaperBestFit       PaperPolicy = "bestfit"
	PaperFGD           PaperPolicy = "fgd"
)

// PaperPolicies lists them in the paper's order.
var PaperPolicies = []PaperPolicy{PaperRandom, PaperDotProd, PaperGPUClustering, PaperGPUPacking, PaperBestFit, PaperFGD}

// PublishedName is the policy's name in the published results file.
func (p PaperPolicy) PublishedName() string {
	switch p {
	case PaperRandom:
		return "01-Random"
	case PaperDotProd:
		return "02-DotProd"
	case PaperGPUClustering:
		return "03-GpuClustering"
	case PaperGPUPacking:
		return "04-GpuPacking"
	case PaperBestFit:
		return "05-BestFit"
	case PaperFGD:
		return "06-FGD"
	}
	return ""
}

// Constants of the published experiment.
const (
	paperTune      = 1.3    // arrivals continue to 130% of the cluster's GPUs
	paperTypical   = 0.95   // FGD's workload: the most common task shapes, 95% of tasks
	paperMaxCPU    = 128000 // normalisers of DotProd and BestFit (milli-cores)
	paperMaxGPU    = 8000   // (milli-GPUs)
	paperMaxScore  = 100
	paperMaxKPoint = 130
)

// pTask is a task in the paper's terms.
type pTask struct {
	name  string
	cpu   int64 // milli-cores
	mem   int64 // MiB
	num   int   // GPUs
	milli int64 // per GPU, 1..1000; 0 for a CPU-only task
	spec  string
	mask  uint64 // allowed models (bit per model id); all ones when spec is ""
}

func (t *pTask) gpuMilli() int64 { return t.milli * int64(t.num) }
func (t *pTask) share() bool     { return t.num == 1 && t.milli < 1000 }

// tag is the task's GPU-clustering class: -1 CPU-only, 0 a share, n n whole GPUs.
func (t *pTask) tag() int {
	switch {
	case t.milli <= 0 || t.num <= 0:
		return -1
	case t.share():
		return 0
	}
	return min(t.num, 8)
}

// pNode is a node's state.
type pNode struct {
	name  string
	model int
	cpu   int64 // free
	mem   int64 // free
	n     int
	left  [8]int64 // free milli per GPU, by device index
	aff   [9]int32 // tasks per GPU-clustering tag (0 share, n n-GPU)
	nAff  int      // tags present
	frag  float64  // FGD fragmentation now (valid when !dirty)
	dirty bool
}

func (n *pNode) gpuLeft() int64 {
	s := int64(0)
	for _, l := range n.left[:n.n] {
		s += l
	}
	return s
}

func (n *pNode) fullyFree() int {
	c := 0
	for _, l := range n.left[:n.n] {
		if l == 1000 {
			c++
		}
	}
	return c
}

// fits is the published filter: CPU, memory, GPU model and GPU room.
func (n *pNode) fits(t *pTask, noMem bool) bool {
	if n.cpu < t.cpu || n.mem < t.mem && !noMem {
		return false
	}
	if t.gpuMilli() <= 0 {
		return true
	}
	if n.n == 0 || t.mask&(1<<n.model) == 0 {
		return false
	}
	if t.num == 1 {
		for _, l := range n.left[:n.n] {
			if l >= t.milli {
				return true
			}
		}
		return false
	}
	return n.fullyFree() >= t.num
}

// fragGroup is FGD's workload with one GPU shape: its tasks' CPU needs
// (ascending) with cumulative weights.
type fragGroup struct {
	milli int64
	num   int
	mask  uint64
	cpu   []int64
	cum   []float64 // cum[i]: weight of tasks with cpu ≤ cpu[i]
	total float64
}

// PaperOptions configure one run of the paper's experiment.
type PaperOptions struct {
	Nodes []NodeSpec
	Seed  uint64
	// MaxK is the last demand point (percent of GPUs) to report; ≤ 0 is 130.
	MaxK int
	// Variant replays some of the experiment's choices differently, to
	// measure what each is worth (docs/simulator.md); zero is the paper's.
	Variant PaperVariant
}

// PaperVariant lists experiment choices that gpud's earlier setup made
// differently from the published one.
type PaperVariant struct {
	// TieBreak: "" (the published seeded node rank), "name" (node name
	// order) or "random" (uniform, as upstream kube-scheduler).
	TieBreak string
	// Arrivals: "" (the published seeded shuffle and tune step) or
	// "reshuffle" (gpud's earlier order: a PCG permutation of the trace,
	// a new one per pass, until the demand is reached).
	Arrivals string
	// Metric: "" (mean over the arrivals whose demand rounds to k) or
	// "first" (the rate when the demand first reaches k).
	Metric string
	// IgnoreMemory leaves memory out of the fit test.
	IgnoreMemory bool
}

// ParseVariant reads KEY=VALUE settings: tie=rank|name|random,
// arrivals=published|reshuffle, metric=window|first, memory=on|off.
func ParseVariant(kvs []string) (PaperVariant, error) {
	var v PaperVariant
	for _, kv := range kvs {
		k, val, _ := strings.Cut(kv, "=")
		switch {
		case k == "tie" && (val == "rank" || val == "name" || val == "random"):
			v.TieBreak = strings.TrimPrefix(val, "rank")
		case k == "arrivals" && (val == "published" || val == "reshuffle"):
			v.Arrivals = strings.TrimPrefix(val, "published")
		case k == "metric" && (val == "window" || val == "first"):
			v.Metric = strings.TrimPrefix(val, "window")
		case k == "memory" && (val == "on" || val == "off"):
			v.IgnoreMemory = val == "off"
		default:
			return v, fmt.Errorf("%q is not tie=rank|name|random, arrivals=published|reshuffle, metric=window|first or memory=on|off", kv)
		}
	}
	return v, nil
}

// PaperResult is one run: Alloc[k] is the allocation rate (percent) at
// arrived GPU demand k percent, NaN where no arrival fell near k.
type PaperResult struct {
	Policy          string
	Seed            uint64
	TotalGPUs       int
	Alloc           []float64
	Arrived, Placed int
	Wall            time.Duration
}

// paperSetup is what the runs of one trace and cluster share.
type paperSetup struct {
	nodes  []pNode
	models []string
	tasks  []pTask // sorted by name
	groups []fragGroup
	total  int64 // cluster milli-GPUs
}

func newPaperSetup(jobs []Job, specs []NodeSpec, cpuNodes bool) (*paperSetup, error) {
	s := &paperSetup{}
	modelID := map[string]int{}
	for _, ns := range specs {
		if ns.GPUs == 0 {
			// The published cluster holds the GPU nodes only.
			if cpuNodes {
				s.nodes = append(s.nodes, pNode{name: ns.Name, cpu: int64(ns.CPUs) * 1000, mem: ns.MemMiB, dirty: true})
			}
			continue
		}
		if ns.GPUs > 8 {
			return nil, fmt.Errorf("node %s has %d GPUs; the FGD experiment models nodes of up to 8", ns.Name, ns.GPUs)
		}
		id, ok := modelID[ns.Model]
		if !ok {
			id = len(s.models)
			if id >= 63 {
				return nil, fmt.Errorf("node list has more than 63 GPU models")
			}
			modelID[ns.Model] = id
			s.models = append(s.models, ns.Model)
		}
		n := pNode{name: ns.Name, model: id, cpu: int64(ns.CPUs) * 1000, mem: ns.MemMiB, n: ns.GPUs, dirty: true}
		for g := range ns.GPUs {
			n.left[g] = 1000
		}
		s.nodes = append(s.nodes, n)
		s.total += int64(ns.GPUs) * 1000
	}
	if s.total == 0 {
		return nil, fmt.Errorf("simulate --fgd: the node list has no GPU nodes")
	}
	for i := range jobs {
		j := &jobs[i]
		t := pTask{name: j.Name, cpu: int64(j.CPUMilli), mem: j.MemMiB, num: j.GPUsPerNode * max(j.Nodes, 1), spec: j.Model, mask: ^uint64(0)}
		switch {
		case j.GPUMilli > 0:
			t.num, t.milli = 1, int64(j.GPUMilli)
		case t.num > 0:
			t.milli = 1000
		}
		if t.spec != "" {
			t.mask = 0
			for m := range strings.SplitSeq(t.spec, "|") {
				if id, ok := modelID[strings.ToLower(m)]; ok { // node lists are read lower-cased
					t.mask |= 1 << id
				}
			}
		}
		s.tasks = append(s.tasks, t)
	}
	slices.SortStableFunc(s.tasks, func(a, b pTask) int { return strings.Compare(a.name, b.name) })
	s.groups = typicalGroups(s.tasks)
	return s, nil
}

// typicalGroups is FGD's target workload: the task shapes (CPU, GPU
// share, GPU count, model list) by popularity, the most common ones that
// together make up 95% of the tasks, their weights renormalised; grouped
// by GPU shape for fast evaluation.
func typicalGroups(tasks []pTask) []fragGroup {
	type shape struct {
		cpu, milli int64
		num        int
		spec       string
	}
	count := map[shape]float64{}
	mask := map[string]uint64{}
	for i := range tasks {
		t := &tasks[i]
		count[shape{t.cpu, t.milli, t.num, t.spec}]++
		mask[t.spec] = t.mask
	}
	type entry struct {
		s shape
		n float64
	}
	var es []entry
	for s, n := range count {
		es = append(es, entry{s, n})
	}
	// Most common first; equal counts in a fixed order (descending shape).
	slices.SortFunc(es, func(a, b entry) int {
		if x := cmp.Compare(b.n, a.n); x != 0 {
			return x
		}
		if x := cmp.Compare(b.s.cpu, a.s.cpu); x != 0 {
			return x
		}
		if x := cmp.Compare(b.s.milli, a.s.milli); x != 0 {
			return x
		}
		if x := cmp.Compare(b.s.num, a.s.num); x != 0 {
			return x
		}
		return strings.Compare(b.s.spec, a.s.spec)
	})
	total := float64(len(tasks))
	cum, cut := 0.0, 0
	for cut < len(es) && cum < paperTypical*total {
		cum += es[cut].n
		cut++
	}
	es = es[:cut]
	type gkey struct {
		milli int64
		num   int
		spec  string
	}
	gi := map[gkey]int{}
	var gs []fragGroup
	type cw struct {
		cpu int64
		w   float64
	}
	parts := map[int][]cw{}
	for _, e := range es {
		k := gkey{e.s.milli, e.s.num, e.s.spec}
		i, ok := gi[k]
		if !ok {
			i = len(gs)
			gi[k] = i
			gs = append(gs, fragGroup{milli: e.s.milli, num: e.s.num, mask: mask[e.s.spec]})
		}
		parts[i] = append(parts[i], cw{e.s.cpu, e.n / cum})
	}
	for i := range gs {
		p := parts[i]
		slices.SortFunc(p, func(a, b cw) int { return cmp.Compare(a.cpu, b.cpu) })
		acc := 0.0
		for _, x := range p {
			acc += x.w
			if n := len(gs[i].cpu); n > 0 && gs[i].cpu[n-1] == x.cpu {
				gs[i].cum[n-1] = acc
				continue
			}
			gs[i].cpu = append(gs[i].cpu, x.cpu)
			gs[i].cum = append(gs[i].cum, acc)
		}
		gs[i].total = acc
	}
	return gs
}

// nodeFrag is FGD's expected fragmentation of a node state, in milli-GPUs:
// for each typical task, all free GPU milli when the task cannot run on
// the node (too little CPU, too few GPUs with room, wrong model, or a
// CPU-only task), else the free milli of the GPUs too small for it.
func (s *paperSetup) nodeFrag(model int, cpu int64, left []int64) float64 {
	idle := int64(0)
	for _, l := range left {
		idle += l
	}
	if idle == 0 {
		return 0
	}
	f := 0.0
	for gi := range s.groups {
		g := &s.groups[gi]
		if g.milli <= 0 || g.mask&(1<<model) == 0 {
			f += g.total * float64(idle)
			continue
		}
		room, small := 0, int64(0)
		for _, l := range left {
			if l >= g.milli {
				room++
			} else {
				small += l
			}
		}
		if room < g.num {
			f += g.total * float64(idle)
			continue
		}
		// weight of the group's tasks whose CPU fits
		k, found := slices.BinarySearch(g.cpu, cpu)
		if found {
			k++
		}
		fit := 0.0
		if k > 0 {
			fit = g.cum[k-1]
		}
		f += fit*float64(small) + (g.total-fit)*float64(idle)
	}
	return f
}

// arrivals returns the published arrival sequence for seed (indexes into
// the name-sorted task list) and the nodes' tie-break ranks: the
// published simulator prefixes each node's name with a random rank drawn
// from the same generator right after the arrivals, and its scheduler
// breaks ties by the smallest name, so by the smallest rank.
func (s *paperSetup) arrivals(seed uint64, v PaperVariant) ([]int, []int) {
	order, r := s.arrivalOrder(seed)
	if v.Arrivals == "reshuffle" {
		order = s.reshuffled(seed)
	}
	byName := make([]int, len(s.nodes))
	for i := range byName {
		byName[i] = i
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(s.nodes[a].name, s.nodes[b].name) })
	rank := make([]int, len(s.nodes))
	for i, p := range r.Perm(len(s.nodes)) {
		rank[byName[i]] = p
	}
	return order, rank
}

// reshuffled is gpud's earlier arrival order: a seeded PCG permutation
// of the tasks, a new one for each pass, until the GPU requests reach
// the tune target.
func (s *paperSetup) reshuffled(seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	target := paperTune * float64(s.total)
	var out []int
	sum := int64(0)
	for float64(sum) < target {
		for _, i := range r.Perm(len(s.tasks)) {
			if float64(sum) >= target {
				break
			}
			out = append(out, i)
			sum += s.tasks[i].gpuMilli()
		}
		if sum == 0 {
			break
		}
	}
	return out
}

func (s *paperSetup) arrivalOrder(seed uint64) ([]int, *mrand.Rand) {
	r := mrand.New(mrand.NewSource(int64(seed)))
	r.Int() // the published simulator logs one draw after seeding
	order := make([]int, len(s.tasks))
	var sum int64
	for i := range order {
		order[i] = i
		sum += s.tasks[i].gpuMilli()
	}
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	target := paperTune * float64(s.total)
	if float64(sum) > target {
		for float64(sum) > target && len(order) > 0 { // tune down: drop tasks at random
			k := r.Intn(len(order))
			sum -= s.tasks[order[k]].gpuMilli()
			order = append(order[:k], order[k+1:]...)
		}
		return order, r
	}
	for {
		k := r.Intn(len(s.tasks))
		t := &s.tasks[k]
		// The published check adds the per-GPU share, the total is
		// then increased by the whole request; kept as published.
		if float64(sum+t.milli) > target {
			break
		}
		sum += t.gpuMilli()
		order = append(order, k)
	}
	return order, r
}

// curve turns per-arrival (arrived, used) milli-GPUs into the published
// per-k allocation rates.
func curve(arrived, used []int64, total int64, maxK int, first bool) []float64 {
	if first {
		out := make([]float64, maxK+1)
		k := 0
		for i := range arrived {
			for k <= maxK && float64(arrived[i]) >= float64(k)/100*float64(total) {
				out[k] = 100 * float64(used[i]) / float64(total)
				k++
			}
		}
		for ; k <= maxK; k++ {
			out[k] = math.NaN()
		}
		return out
	}
	sums := make([]float64, maxK+1)
	ns := make([]int, maxK+1)
	keys := make([]int, len(arrived))
	for i := range arrived {
		k := int(math.RoundToEven(float64(arrived[i]) / float64(total) * 100))
		keys[i] = k
		a := math.Round(float64(used[i])/float64(total)*100*100) / 100
		if k <= maxK {
			sums[k] += a
			ns[k]++
		}
	}
	out := make([]float64, maxK+1)
	for k := range out {
		if ns[k] > 0 {
			out[k] = math.Round(sums[k]/float64(ns[k])*100) / 100
			continue
		}
		// no arrival rounds to k: the published analysis takes those within ±1
		sum, n := 0.0, 0
		for i, kk := range keys {
			if kk >= k-1 && kk <= k+1 {
				sum += math.Round(float64(used[i])/float64(total)*100*100) / 100
				n++
			}
		}
		if n == 0 {
			out[k] = math.NaN()
		} else {
			out[k] = math.Round(sum/float64(n)*100) / 100
		}
	}
	return out
}

// PaperSetup is a prepared trace and cluster, for many runs.
type PaperSetup struct{ s *paperSetup }

// NewPaperSetup prepares jobs and nodes for Run and RunSched; with
// cpuNodes the nodes without GPUs take part too (the paper leaves them out).
func NewPaperSetup(jobs []Job, nodes []NodeSpec, cpuNodes bool) (*PaperSetup, error) {
	s, err := newPaperSetup(jobs, nodes, cpuNodes)
	if err != nil {
		return nil, err
	}
	return &PaperSetup{s}, nil
}

// Run runs one policy for one seed.
func (p *PaperSetup) Run(pol PaperPolicy, opts PaperOptions) (*PaperResult, error) {
	return p.s.run(pol, opts)
}

// TotalGPUs is the GPUs of the experiment's cluster (GPU nodes only).
func (p *PaperSetup) TotalGPUs() int { return int(p.s.total / 1000) }

// Nodes is the number of nodes taking part.
func (p *PaperSetup) Nodes() int { return len(p.s.nodes) }

func (s *paperSetup) run(pol PaperPolicy, opts PaperOptions) (*PaperResult, error) {
	if !slices.Contains(PaperPolicies, pol) {
		return nil, fmt.Errorf("%q is not one of the FGD paper's policies", pol)
	}
	start := time.Now()
	maxK := opts.MaxK
	if maxK <= 0 {
		maxK = paperMaxKPoint
	}
	order, rank := s.arrivals(opts.Seed, opts.Variant)
	r := &paperRun{s: s, pol: pol, nodes: slices.Clone(s.nodes), rank: rank, v: opts.Variant, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed))}
	res := &PaperResult{Policy: string(pol), Seed: opts.Seed, TotalGPUs: int(s.total / 1000)}
	limit := int64(math.Ceil(float64(maxK+1) / 100 * float64(s.total)))
	var arrived, used int64
	var arr, use []int64
	for _, ti := range order {
		t := &s.tasks[ti]
		arrived += t.gpuMilli()
		res.Arrived++
		if r.place(t) {
			res.Placed++
			used += t.gpuMilli()
		}
		arr, use = append(arr, arrived), append(use, used)
		if arrived > limit {
			break
		}
	}
	res.Alloc = curve(arr, use, s.total, maxK, opts.Variant.Metric == "first")
	res.Wall = time.Since(start)
	return res, nil
}

// paperRun is one run's state.
type paperRun struct {
	s     *paperSetup
	pol   PaperPolicy
	nodes []pNode
	rank  []int // tie-break order of the nodes
	v     PaperVariant
	rng   *rand.Rand
	cand  []int
	score []int64
	memo  map[fgdMemoKey]fgdMemoVal
}

type fgdMemoKey struct {
	model int
	cpu   int64
	n     int
	left  [8]int64
}

type fgdMemoVal struct {
	score int64
	gpu   int
}

// place puts t on a node by the policy, or reports that none fits.
func (r *paperRun) place(t *pTask) bool {
	r.cand = r.cand[:0]
	for i := range r.nodes {
		if r.nodes[i].fits(t, r.v.IgnoreMemory) {
			r.cand = append(r.cand, i)
		}
	}
	if len(r.cand) == 0 {
		return false
	}
	if r.pol == PaperFGD {
		if r.memo == nil {
			r.memo = map[fgdMemoKey]fgdMemoVal{}
		}
		clear(r.memo) // scores are per task
	}
	var node, gpu int
	gpu = -1
	switch {
	case len(r.cand) == 1:
		node = r.cand[0] // the framework skips scoring with one feasible node
	case r.pol == PaperRandom:
		node = r.cand[r.rng.IntN(len(r.cand))]
	default:
		node, gpu = r.best(t)
	}
	r.bind(node, gpu, t)
	return true
}

// best scores every candidate and returns the winner, breaking ties at
// random, and for FGD the GPU its score chose.
func (r *paperRun) best(t *pTask) (int, int) {
	r.score = r.score[:0]
	gpus := make([]int, 0, len(r.cand))
	for _, i := range r.cand {
		n := &r.nodes[i]
		var sc int64
		g := -1
		switch r.pol {
		case PaperDotProd:
			sc = dotProdScore(n, t)
		case PaperGPUClustering:
			sc = clusteringScore(n, t)
		case PaperGPUPacking:
			sc = packingScore(n, t)
		case PaperBestFit:
			sc = bestFitScore(n, t)
		case PaperFGD:
			sc, g = r.fgdScore(n, t)
		}
		r.score = append(r.score, sc)
		gpus = append(gpus, g)
	}
	if r.pol == PaperBestFit {
		normalize(r.score)
	}
	// The published simulator's scheduler breaks ties by the smallest
	// node name (its fork of kube-scheduler; upstream picks at random),
	// and the names it gives the nodes start with a seeded random rank.
	top, pick, ties := int64(math.MinInt64), -1, 0
	for k, sc := range r.score {
		if sc > top {
			top, pick, ties = sc, k, 1
			continue
		}
		if sc < top {
			continue
		}
		ties++
		switch r.v.TieBreak {
		case "name":
			if r.nodes[r.cand[k]].name < r.nodes[r.cand[pick]].name {
				pick = k
			}
		case "random":
			if r.rng.IntN(ties) == 0 {
				pick = k
			}
		default:
			if r.rank[r.cand[k]] < r.rank[r.cand[pick]] {
				pick = k
			}
		}
	}
	return r.cand[pick], gpus[pick]
}

// bind books t on node, choosing GPUs as the policy's GPU selection does.
func (r *paperRun) bind(node, gpu int, t *pTask) {
	n := &r.nodes[node]
	n.cpu -= t.cpu
	n.mem -= t.mem
	n.dirty = true
	if tg := t.tag(); tg >= 0 {
		if n.aff[tg] == 0 {
			n.nAff++
		}
		n.aff[tg]++
	}
	if t.gpuMilli() <= 0 {
		return
	}
	if !t.share() { // whole GPUs: the first wholly free ones
		need := t.num
		for k := 0; k < n.n && need > 0; k++ {
			if n.left[k] == 1000 {
				n.left[k] = 0
				need--
			}
		}
		return
	}
	if gpu < 0 || n.left[gpu] < t.milli {
		gpu = -1
		switch r.pol {
		case PaperRandom: // a random GPU with room
			c := 0
			for k := range n.n {
				if n.left[k] >= t.milli {
					c++
					if r.rng.IntN(c) == 0 {
						gpu = k
					}
				}
			}
		case PaperFGD:
			_, gpu = r.fgdScore(n, t)
		default: // best fit: the GPU with least room that holds it
			for k := range n.n {
				if n.left[k] >= t.milli && (gpu < 0 || n.left[k] < n.left[gpu]) {
					gpu = k
				}
			}
		}
	}
	n.left[gpu] -= t.milli
}

// dotProdScore (Tetris): 100 × (1 − ⟨free, request⟩/2), both normalised by
// the largest node (128 cores, 8 GPUs); GPUs merged into one dimension.
func dotProdScore(n *pNode, t *pTask) int64 {
	if n.cpu < t.cpu {
		return 0
	}
	d := float64(n.cpu)/paperMaxCPU*float64(t.cpu)/paperMaxCPU + float64(n.gpuLeft())/paperMaxGPU*float64(t.gpuMilli())/paperMaxGPU
	return int64(paperMaxScore * (1 - d/2))
}

// clusteringScore puts tasks with the same GPU class together: nodes with
// only that class (75–100), with it among others (50–75), idle (25–50),
// others (0–25); within a band, the fuller node scores higher.
func clusteringScore(n *pNode, t *pTask) int64 {
	tg := t.tag()
	if tg < 0 {
		return 0
	}
	used := (paperMaxGPU - n.gpuLeft())
	fill := paperMaxScore / 4 * used / paperMaxGPU
	switch {
	case n.aff[tg] > 0 && n.nAff == 1:
		return fill + paperMaxScore*3/4
	case n.aff[tg] > 0:
		return fill + paperMaxScore*2/4
	case n.nAff == 0:
		return fill + paperMaxScore/4
	}
	return fill
}

// packingScore prefers, in order: a share on a partly used GPU (the less
// room left, the better), free GPUs on a used node, free GPUs on an idle
// node (the fewer GPUs, the better).
func packingScore(n *pNode, t *pTask) int64 {
	if t.gpuMilli() <= 0 {
		return 0
	}
	free := n.fullyFree()
	if free == n.n {
		return max(paperMaxScore/3-int64(free), int64(free))
	}
	idx := make([]int, n.n)
	for k := range idx {
		idx[k] = k
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(n.left[a], n.left[b]) })
	need, wholeUsed := t.num, 0
	var use []int
	for _, k := range idx {
		if need == 0 {
			break
		}
		if t.milli <= n.left[k] {
			need--
			use = append(use, k)
			if n.left[k] == 1000 {
				wholeUsed++
			}
		}
	}
	if need != 0 {
		return 0
	}
	if wholeUsed > 0 {
		return max(paperMaxScore/2-int64(wholeUsed), paperMaxScore/3)
	}
	var pct int64
	for _, k := range use {
		pct += n.left[k] * 100 / 1000
	}
	return max(paperMaxScore-pct/10, paperMaxScore/2)
}

// bestFitScore: 100 × (1 − ½ free CPU after / 128 cores − ½ free GPU after / 8 GPUs).
func bestFitScore(n *pNode, t *pTask) int64 {
	s := float64(n.cpu-t.cpu)/paperMaxCPU*0.5 + float64(n.gpuLeft()-t.gpuMilli())/paperMaxGPU*0.5
	return int64((1 - s) * paperMaxScore)
}

// normalize rescales scores to 0..100 (integer), as BestFit's score
// extension does.
func normalize(sc []int64) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range sc {
		lo, hi = min(lo, s), max(hi, s)
	}
	for i, s := range sc {
		if hi == lo {
			sc[i] = 0
		} else {
			sc[i] = (s - lo) * paperMaxScore / (hi - lo)
		}
	}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// fgdScore is FGD's score of t on n: 100 × sigmoid(fragmentation decrease
// / 1000), and for a share the GPU that gives the best score (the first
// such one).
func (r *paperRun) fgdScore(n *pNode, t *pTask) (int64, int) {
	key := fgdMemoKey{model: n.model, cpu: n.cpu, n: n.n, left: n.left}
	if r.memo != nil {
		if v, ok := r.memo[key]; ok {
			return v.score, v.gpu
		}
	}
	if n.dirty {
		n.frag = r.s.nodeFrag(n.model, n.cpu, n.left[:n.n])
		n.dirty = false
	}
	before := n.frag
	var after [8]int64
	cpu := n.cpu - t.cpu
	score, gpu := int64(0), -1
	switch {
	case t.share():
		for k := range n.n {
			if n.left[k] < t.milli {
				continue
			}
			after = n.left
			after[k] -= t.milli
			sc := int64(sigmoid((before-r.s.nodeFrag(n.model, cpu, after[:n.n]))/1000) * paperMaxScore)
			if gpu < 0 || sc > score {
				score, gpu = sc, k
			}
		}
	default:
		after = n.left
		need := t.num
		if t.gpuMilli() > 0 {
			for need > 0 { // the fullest GPUs that hold the request
				best := -1
				for k := range n.n {
					if after[k] >= t.milli && after[k] == n.left[k] && (best < 0 || after[k] < after[best]) {
						best = k
					}
				}
				if best < 0 {
					break
				}
				after[best] -= t.milli
				need--
			}
		}
		score = int64(sigmoid((before-r.s.nodeFrag(n.model, cpu, after[:n.n]))/1000) * paperMaxScore)
	}
	if r.memo != nil {
		r.memo[key] = fgdMemoVal{score, gpu}
	}
	return score, gpu
}
