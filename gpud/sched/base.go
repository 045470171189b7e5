package sched

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// Base keeps, between cycles, the part of a cycle's setup that follows
// the nodes and the running jobs alone: each node's GPU masks, shares,
// free resources and topology, the nodes' cycle order, and which node
// and devices each running job's parts are. A caller that runs a cycle
// after every event — the simulator's twin, a cycle per submission or
// end over a month of a 1,000-node cluster's accounting — then does not
// rebuild every node and resolve every running job's devices by name at
// every cycle: a cycle made from a Base copies the nodes, remakes only
// what the caller touched, and reads the running jobs' parts as
// resolved when they started. Its decisions are a full cycle's on the
// same snapshot (TestBaseSameAsSnapshot).
//
// The caller owns the nodes (the slice given to NewBase, never
// reallocated; a change of the node set needs a new Base) and tells the
// Base what changed: Touch after changing a node's free resources or
// GPUs, Start after a job starts and End after one ends. A running
// job's record (RunningJob) must not change while it runs. A cycle's
// setup arrays are the Base's, reused by the next cycle: a State made
// from a Base is good until the next is made from it (the simulator
// keeps none). A Base is not safe for concurrent use.
type Base struct {
	nodes []Node
	// tmpl are the work nodes in cycle order, without profiles or
	// running lists; their frac and fracEnd are cut from fracs and
	// fracEnds at fracAt (each cycle copies them).
	tmpl     []workNode
	fracs    []float64
	fracEnds []int64
	fracAt   []int
	// pos is each node's (by its index in nodes) cycle position.
	pos    []int
	byName map[string]int
	// dirty are the cycle positions touched since the last cycle.
	dirty   []int
	touched []bool
	// ids, parts, runParts and ends are the running jobs, in the
	// caller's order. runParts are the parts as a cycle has them (node
	// and resources), kept between cycles: a cycle sets only their GPUs,
	// and only where they changed.
	ids      []spec.JobID
	parts    [][]basePart
	runParts [][]runPart
	ends     []baseEnd
	// perNode and endsPerNode count the parts on each node (by cycle
	// position), of all running jobs and of those with a time limit;
	// nparts and nends are their sums.
	perNode, endsPerNode []int
	nparts, nends        int
	// buf are the last cycle's arrays, reused by the next: a State made
	// from the Base is good until the next one is made.
	buf baseBufs
}

// endScratch are the releases of a Base's cycle, one array cut per node
// (deferEnds's layout): off[p] is where node p's start, next[p] where its
// next goes.
type endScratch struct {
	off, next []int
	buf       backfill.Endings
}

// baseBufs are a cycle's setup arrays (buildNodes, buildRunning).
type baseBufs struct {
	ws       []workNode
	nodes    []*workNode
	fracs    []float64
	fracEnds []int64
	steps    backfill.Buf
	running  []runJob
	onNode   []int
	endings  endScratch
}

// basePart is one node's part of a running job, resolved (parts on a
// node the cluster does not have, or that ended, are left out, as a
// cycle leaves them out).
type basePart struct {
	// gpus are the node's GPUs (of its first 64) the part names.
	gpus uint64
	// frac: a fractional share (0 < GPUFraction < 1).
	frac bool
}

// baseEnd is a running job's expected end in nanoseconds; ok: it may
// be used (unixNanos), else the cycle computes it as buildRunning does.
// limited: the job has a time limit (else no end is expected).
type baseEnd struct {
	ns          int64
	ok, limited bool
}

// NewBase keeps nodes (the caller's: every cycle made from the Base
// reads them, and the snapshot given to NewStateFrom must carry this
// very slice).
func NewBase(nodes []Node) *Base {
	b := &Base{nodes: nodes, pos: make([]int, len(nodes)), byName: make(map[string]int, len(nodes)),
		touched: make([]bool, len(nodes)), perNode: make([]int, len(nodes)), endsPerNode: make([]int, len(nodes))}
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	// The cycle's order (buildNodes): weight, then name.
	slices.SortFunc(order, func(x, y int) int {
		a, b := &nodes[x], &nodes[y]
		return cmp.Or(cmp.Compare(a.Weight, b.Weight), cmp.Compare(a.Name, b.Name))
	})
	total := 0
	b.fracAt = make([]int, len(nodes))
	for p, i := range order {
		b.pos[i] = p
		b.fracAt[p] = total
		total += min(len(nodes[i].GPUs), 64)
	}
	b.fracs, b.fracEnds = make([]float64, total), make([]int64, total)
	b.tmpl = make([]workNode, len(nodes))
	for p, i := range order {
		b.tmpl[p].n = &nodes[i]
		b.byName[nodes[i].Name] = p
		b.fill(p)
	}
	return b
}

// fill remakes the work node at cycle position p from its node.
func (b *Base) fill(p int) {
	w := &b.tmpl[p]
	ng, at := min(len(w.n.GPUs), 64), b.fracAt[p]
	fr, fe := b.fracs[at:at+ng:at+ng], b.fracEnds[at:at+ng:at+ng]
	clear(fr)
	clear(fe)
	*w = workNode{n: w.n, frac: fr, fracEnd: fe}
	w.initNode()
}

// Touch tells the Base that node i (its index in the nodes given to
// NewBase) changed.
func (b *Base) Touch(i int) {
	if p := b.pos[i]; !b.touched[p] {
		b.touched[p] = true
		b.dirty = append(b.dirty, p)
	}
}

// Start appends a running job (it must come last in the snapshot's
// Running, as the caller appends it there). Its nodes should be touched
// first or after: either way before the next cycle.
func (b *Base) Start(r *RunningJob) {
	ps, rps := make([]basePart, 0, len(r.Nodes)), make([]runPart, 0, len(r.Nodes))
	for j := range r.Nodes {
		a := &r.Nodes[j]
		p, ok := b.byName[a.Node]
		if !ok || a.Ended {
			continue
		}
		n := b.tmpl[p].n
		var m uint64
		// As buildRunning: each UUID's search starts after the last match.
		from, ng := 0, min(len(n.GPUs), 64)
		for _, u := range a.GPUs {
			for x := range ng {
				k := (from + x) % ng
				if n.GPUs[k].UUID != u {
					continue
				}
				from = k + 1
				m |= 1 << k
				break
			}
		}
		ps = append(ps, basePart{gpus: m, frac: a.GPUFraction > 0 && a.GPUFraction < 1})
		rps = append(rps, runPart{node: p, res: backfill.Res{CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}})
	}
	e := baseEnd{limited: r.TimeLimit > 0}
	if e.limited {
		e.ns, e.ok = unixNanos(r.Start.Add(r.TimeLimit))
	}
	b.count(rps, e.limited, 1)
	b.ids = append(b.ids, r.ID)
	b.parts = append(b.parts, ps)
	b.runParts = append(b.runParts, rps)
	b.ends = append(b.ends, e)
}

// count adds (sign 1) or takes away (-1) a running job's parts from the
// counts per node.
func (b *Base) count(ps []runPart, limited bool, sign int) {
	for _, p := range ps {
		b.perNode[p.node] += sign
		b.nparts += sign
		if limited {
			b.endsPerNode[p.node] += sign
			b.nends += sign
		}
	}
}

// End removes running job i (its index in the snapshot's Running) the
// way the caller does: the last running job takes its place.
func (b *Base) End(i int) {
	b.count(b.runParts[i], b.ends[i].limited, -1)
	last := len(b.ids) - 1
	b.ids[i], b.parts[i], b.runParts[i], b.ends[i] = b.ids[last], b.parts[last], b.runParts[last], b.ends[last]
	b.ids, b.parts, b.runParts, b.ends = b.ids[:last], b.parts[:last], b.runParts[:last], b.ends[:last]
}

// NewStateFrom is NewState for a snapshot whose nodes are b's and whose
// running jobs are those b was given, in the same order. It panics when
// they are not: a cycle on a Base that does not match its snapshot
// would decide on resources that are not there.
func NewStateFrom(b *Base, snap *Snapshot, now time.Time, cfg Config) (*State, Plan) {
	if len(snap.Nodes) != len(b.nodes) || len(b.nodes) > 0 && &snap.Nodes[0] != &b.nodes[0] || len(snap.Running) != len(b.ids) {
		panic(fmt.Sprintf("sched: NewStateFrom: the snapshot (%d nodes, %d running) is not the Base's (%d nodes, %d running)",
			len(snap.Nodes), len(snap.Running), len(b.nodes), len(b.ids)))
	}
	c := cycleFor(snap, now, cfg)
	b.nodesInto(c)
	b.runningInto(c)
	c.finishSetup()
	return newState(c)
}

// nodesInto gives c its work nodes: the templates, the touched ones
// remade, each with its own shares and a fresh profile.
func (b *Base) nodesInto(c *cycle) {
	for _, p := range b.dirty {
		b.fill(p)
		b.touched[p] = false
	}
	b.dirty = b.dirty[:0]
	bf := &b.buf
	bf.ws = append(bf.ws[:0], b.tmpl...)
	bf.fracs, bf.fracEnds = append(bf.fracs[:0], b.fracs...), append(bf.fracEnds[:0], b.fracEnds...)
	if len(bf.steps) < len(b.tmpl) {
		bf.steps = backfill.MakeBuf(len(b.tmpl))
	}
	if cap(bf.nodes) < len(b.tmpl) {
		bf.nodes = make([]*workNode, len(b.tmpl))
	}
	ws, fracs, fracEnds, steps := bf.ws, bf.fracs, bf.fracEnds, bf.steps
	c.nodes = bf.nodes[:len(ws)]
	for p := range ws {
		w := &ws[p]
		ng, at := len(w.frac), b.fracAt[p]
		w.frac, w.fracEnd = fracs[at:at+ng:at+ng], fracEnds[at:at+ng:at+ng]
		w.prof = backfill.NewIn(steps, p, w.phys)
		c.nodes[p] = w
	}
	c.byName = b.byName
}

// runningInto is buildRunning with the parts resolved at their starts,
// the counts per node kept and the expected ends in nanoseconds: one
// pass over the running jobs, writing each node's running list and
// releases in place.
func (b *Base) runningInto(c *cycle) {
	snap, now := c.snap, c.now
	if len(snap.Running) == 0 {
		return
	}
	bf := &b.buf
	bf.running = slices.Grow(bf.running[:0], len(snap.Running))[:len(snap.Running)]
	c.running = bf.running
	shareEnd := map[[2]int]int64{}
	bf.onNode = slices.Grow(bf.onNode[:0], b.nparts)[:b.nparts]
	onNode := bf.onNode
	sc := &bf.endings
	sc.off = slices.Grow(sc.off[:0], len(c.nodes))[:len(c.nodes)]
	sc.next = slices.Grow(sc.next[:0], len(c.nodes))[:len(c.nodes)]
	if cap(sc.buf) < b.nends {
		sc.buf = backfill.MakeEndings(b.nends + b.nends/4)
	}
	at, next, buf := sc.off, sc.next, sc.buf[:b.nends]
	k := 0
	for p, w := range c.nodes {
		n := b.perNode[p]
		w.running, onNode = onNode[:0:n], onNode[n:]
		at[p], next[p] = k, k
		k += b.endsPerNode[p]
	}
	nowNs, nowOK := unixNanos(now)
	var lastQ string
	var lastQOS *QOS
	for i := range snap.Running {
		r := &snap.Running[i]
		if r.ID != b.ids[i] {
			panic(fmt.Sprintf("sched: NewStateFrom: running job %d of the snapshot is %d, the Base's is %d", i, r.ID, b.ids[i]))
		}
		if i == 0 || r.QOS != lastQ {
			lastQ, lastQOS = r.QOS, c.qos[r.QOS]
		}
		rj := runJob{r: r, qos: lastQOS, end: backfill.Forever}
		if r.TimeLimit > 0 {
			if e := b.ends[i]; e.ok && nowOK {
				rj.end = max(e.ns-nowNs, 1) // as Sub: both wall clocks, no overflow
			} else {
				rj.end = max(int64(r.Start.Add(r.TimeLimit).Sub(now)), 1)
			}
		}
		rps := b.runParts[i]
		for k, bp := range b.parts[i] {
			part := &rps[k]
			ni := part.node
			w := c.nodes[ni]
			// Whole-GPU capable and not free now (buildRunning's test).
			held, gpus := bp.gpus&w.ok&^w.phys.GPUs, uint64(0)
			if bp.frac {
				// Not in res: ending or preempting one sharer does not
				// free the GPU.
				for m := held; m != 0; m &= m - 1 {
					key := [2]int{ni, bits.TrailingZeros64(m)}
					shareEnd[key] = max(shareEnd[key], rj.end)
					rj.gpuCount++
				}
			} else {
				gpus = held
			}
			if part.res.GPUs != gpus {
				part.res.GPUs = gpus // written only when it changed: most never do
			}
			rj.gpuCount += bits.OnesCount64(gpus)
			w.running = append(w.running, i)
			if rj.end < backfill.Forever {
				buf.Set(next[ni], rj.end, part.res)
				next[ni]++
			}
		}
		if len(rps) > 0 {
			rj.parts = rps[:len(rps):len(rps)]
		}
		c.running[i] = rj
		c.lim.add(r.QOS, r.User, r.Account, rj.gpuCount)
	}
	for p, w := range c.nodes {
		if at[p] < next[p] {
			w.prof.Defer(buf[at[p]:next[p]:next[p]])
		}
	}
	for key, end := range shareEnd {
		w := c.nodes[key[0]]
		k := key[1]
		w.fracEnd[k] = end
		if end < backfill.Forever {
			w.prof.Release(end, backfill.Res{GPUs: 1 << k})
		}
	}
}

// Wall clocks from 1900 to 2150 are within int64 nanoseconds of each
// other (292 years): their difference in nanoseconds is Sub's.
var (
	nanosFrom = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	nanosTo   = time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC)
)

// unixNanos is t in nanoseconds and whether a difference of two such
// is t.Sub's: t has no monotonic reading (Sub would read that) and lies
// between 1900 and 2150.
func unixNanos(t time.Time) (int64, bool) {
	if t != t.Round(0) || t.Before(nanosFrom) || !t.Before(nanosTo) {
		return 0, false
	}
	return t.UnixNano(), true
}
