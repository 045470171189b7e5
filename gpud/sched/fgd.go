package sched

import (
	"cmp"
	"math/bits"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
)

// Fragmentation gradient descent (PlaceFGD). A node's GPU fragmentation
// for one kind of request is the free GPU capacity that request cannot
// use: all of it when the request does not fit on the node at all (too
// few CPUs, memory or suitable GPUs), else the free shares of the GPUs
// too small for it (for whole-GPU requests: every partly used GPU). The
// expected fragmentation weighs this over the workload's mix; a job goes
// where it increases that the least.

// fgdQuantum is the resolution, in GPUs, at which fragmentation increases
// are compared: smaller differences are noise in the workload estimate, and
// the tie-break (the node with the least free share of its GPUs) decides.
const fgdQuantum = 0.05

// fgdGroup is the workload's requests with one GPU shape, with their
// CPU and memory needs and weights (normalised over the whole mix).
type fgdGroup struct {
	gpus  int
	frac  float64
	model string
	cpus  []int
	mem   []int64
	w     []float64
	total float64
}

// fgdWorkload groups the snapshot's workload (or, without one, the
// pending and running jobs' requests) by GPU shape, once per cycle.
func (c *cycle) fgdWorkload() []fgdGroup {
	if c.fgd != nil {
		return c.fgd
	}
	ds := c.snap.Workload
	if len(ds) == 0 {
		for i := range c.snap.Jobs {
			r := &c.snap.Jobs[i].Req
			ds = append(ds, Demand{GPUs: r.GPUsPerNode, Fraction: r.GPUFraction, CPUs: r.CPUsPerNode, MemMiB: r.MemMiB,
				Model: r.GPUModel, Weight: float64(max(r.Nodes, 1))})
		}
		for i := range c.snap.Running {
			for _, a := range c.snap.Running[i].Nodes {
				d := Demand{GPUs: len(a.GPUs), CPUs: a.CPUs, MemMiB: a.MemMiB, Weight: 1}
				if a.GPUFraction > 0 && a.GPUFraction < 1 {
					d.GPUs, d.Fraction = 1, a.GPUFraction
				}
				ds = append(ds, d)
			}
		}
	}
	type key struct {
		gpus  int
		frac  float64
		model string
	}
	idx := map[key]int{}
	var groups []fgdGroup
	sum := 0.0
	for _, d := range ds {
		if d.Weight <= 0 || (d.GPUs <= 0 && d.Fraction <= 0) {
			continue // only GPU requests feel GPU fragmentation
		}
		k := key{gpus: d.GPUs, model: d.Model}
		if d.Fraction > 0 && d.Fraction < 1 {
			k.gpus, k.frac = 1, d.Fraction
		}
		gi, ok := idx[k]
		if !ok {
			gi = len(groups)
			idx[k] = gi
			groups = append(groups, fgdGroup{gpus: k.gpus, frac: k.frac, model: k.model})
		}
		g := &groups[gi]
		if n := len(g.cpus); n > 0 && g.cpus[n-1] == d.CPUs && g.mem[n-1] == d.MemMiB {
			g.w[n-1] += d.Weight
		} else {
			g.cpus, g.mem, g.w = append(g.cpus, d.CPUs), append(g.mem, d.MemMiB), append(g.w, d.Weight)
		}
		g.total += d.Weight
		sum += d.Weight
	}
	for gi := range groups {
		g := &groups[gi]
		for i := range g.w {
			g.w[i] /= sum
		}
		g.total /= sum
	}
	// Deterministic order (map iteration is not involved, but inputs may
	// come in any order): by shape.
	slices.SortFunc(groups, func(a, b fgdGroup) int {
		if x := cmp.Compare(a.gpus, b.gpus); x != 0 {
			return x
		}
		if x := cmp.Compare(a.frac, b.frac); x != 0 {
			return x
		}
		return cmp.Compare(a.model, b.model)
	})
	if groups == nil {
		groups = []fgdGroup{}
	}
	c.fgd = groups
	return groups
}

// frag is w's expected GPU fragmentation with the given free shares per
// GPU and free CPUs and memory.
func (c *cycle) frag(w *workNode, shares []float64, cpus int, mem int64) float64 {
	idle := 0.0
	for _, s := range shares {
		idle += s
	}
	if idle <= fracEps {
		return 0
	}
	f := 0.0
	for gi := range c.fgd {
		g := &c.fgd[gi]
		fit := 0.0
		for i, cp := range g.cpus {
			if cp <= cpus && g.mem[i] <= mem {
				fit += g.w[i]
			}
		}
		need := g.frac
		if need == 0 {
			need = 1
		}
		usable, lost := 0, 0.0
		for k, s := range shares {
			if s+fracEps >= need && (g.model == "" || modelMatch(g.model, w.n.GPUs[k].Model)) {
				usable++
			} else {
				lost += s
			}
		}
		if usable < g.gpus {
			lost = idle
		}
		f += fit*lost + (g.total-fit)*idle
	}
	return f
}

// fgdState is what a node's fragmentation score depends on, for nodes
// of up to 8 GPUs of one model and no reservation: nodes in equal states
// score equally, so a placement scores each state once.
type fgdState struct {
	model  string
	cpus   int
	mem    int64
	n      int
	shares [8]float64
}

// fgdScore is a state's score for the job being placed: its
// fragmentation increase and, for a share, the free share of the GPU it
// goes on.
type fgdScore struct {
	d, share float64
	shared   bool
}

// fgdStateOf returns w's state, or false when w is not memoisable.
func fgdStateOf(w *workNode, before []float64) (fgdState, bool) {
	n := len(before)
	if n > 8 || w.reserved || n == 0 {
		return fgdState{}, false
	}
	st := fgdState{model: w.n.GPUs[0].Model, cpus: w.phys.CPUs, mem: w.phys.MemMiB, n: n}
	for k := 1; k < n; k++ {
		if w.n.GPUs[k].Model != st.model {
			return fgdState{}, false
		}
	}
	copy(st.shares[:], before)
	slices.Sort(st.shares[:n])
	return st, true
}

// fgdPick scores p, a fit of j on w, by the fragmentation increase; for
// a GPU share it first chooses the GPU that increases it least.
func (c *cycle) fgdPick(w *workNode, j *Job, dur int64, p pick) (pick, float64) {
	c.fgdWorkload()
	n := len(w.frac)
	if cap(c.shares) < 2*n {
		c.shares = make([]float64, 2*n)
	}
	before, after := c.shares[:n], c.shares[n:2*n]
	for k := range n {
		before[k] = w.share(k)
	}
	st, memo := fgdStateOf(w, before)
	if memo {
		if sc, ok := c.fgdMemo[st]; ok {
			if !isFrac(j) {
				return p, sc.d
			}
			for k := range n {
				if before[k] == sc.share && modelMask(w, j.Req.GPUModel)&(1<<k) != 0 {
					return pick{node: p.node, gpus: 1 << k, shared: sc.shared}, sc.d
				}
			}
		}
	}
	p, d := c.fgdScore(w, j, dur, p, before, after)
	if memo {
		k := bits.TrailingZeros64(p.gpus)
		sc := fgdScore{d: d, shared: p.shared}
		if k < n {
			sc.share = before[k]
		}
		c.fgdMemo[st] = sc
	}
	return p, d
}

func (c *cycle) fgdScore(w *workNode, j *Job, dur int64, p pick, before, after []float64) (pick, float64) {
	n := len(before)
	r := &j.Req
	cpus, mem := w.phys.CPUs-r.CPUsPerNode, w.phys.MemMiB-r.MemMiB
	f0 := c.frag(w, before, w.phys.CPUs, w.phys.MemMiB)
	if !isFrac(j) {
		copy(after, before)
		if r.Exclusive {
			clear(after)
			cpus, mem = 0, 0
		}
		for k := range n {
			if p.gpus&(1<<k) != 0 {
				after[k] = 0
			}
		}
		return p, c.frag(w, after, cpus, mem) - f0
	}
	// A share may go on a partly used GPU (when no reservation it would
	// delay holds it) or on a GPU free whole for its duration.
	free := w.freeNow(c.off, dur).GPUs
	end := backfill.Add(c.off, dur)
	mask := modelMask(w, r.GPUModel)
	best, bestD, bestShared := -1, 0.0, false
	for k := range n {
		s := before[k]
		if mask&(1<<k) == 0 || s+fracEps < r.GPUFraction {
			continue
		}
		shared := s < 1
		if shared && w.resvGPUs&(1<<k) != 0 && end > w.fracEnd[k] {
			continue
		}
		if !shared && free&(1<<k) == 0 {
			continue
		}
		copy(after, before)
		after[k] = max(s-r.GPUFraction, 0)
		if d := c.frag(w, after, cpus, mem) - f0; best < 0 || d < bestD-fracEps {
			best, bestD, bestShared = k, d, shared
		}
	}
	if best < 0 {
		return p, 1e18 // unreachable: p fits on w
	}
	return pick{node: p.node, gpus: 1 << best, shared: bestShared}, bestD
}

// Fragmentation is the cluster's expected GPU fragmentation against the
// workload mix (in GPUs: the free capacity the mix's requests cannot use,
// weighted by their shares) and its free GPU capacity; the FGD metric.
func Fragmentation(nodes []Node, workload []Demand) (frag, free float64) {
	c := newCycle(&Snapshot{Nodes: nodes, Workload: workload}, time.Time{}, Config{})
	c.fgdWorkload()
	for _, w := range c.nodes {
		shares := make([]float64, len(w.frac))
		for k := range shares {
			shares[k] = w.share(k)
			free += shares[k]
		}
		frag += c.frag(w, shares, w.phys.CPUs, w.phys.MemMiB)
	}
	return frag, free
}
