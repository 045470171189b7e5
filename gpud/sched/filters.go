package sched

import (
	"cmp"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// Placement is a pipeline, as in the Kubernetes scheduling framework and
// Nomad's AllocMetric: each node goes through the filters below in order,
// and the first that turns it down gives the node's NodeReason; the nodes
// that pass every filter are ranked by the partition's Placement (the
// score: pack, spread, first-fit or fgd; placement.go). A job that does
// not start carries the count of nodes per reason (Plan.Placement), e.g.
// "10 nodes: 6 insufficient free h100 GPUs, 3 constraint ib, 1 drain".
//
// Each filter is declared once, in staticFilters or dynamicFilters: its
// name, what turns a node down, the reason in words and its predicate.
// NodeReason, the pending counts, Explain and the docs' tables (docs/
// architecture.md, README.md; TestFilterDocs checks them and -update
// rewrites them) all come from these lists: a new filter is one entry.
type nodeFilter struct {
	// name is the stage, as the docs' tables name it.
	name string
	// when says what turns a node down, for the docs' tables.
	when string
	// wholeGPUs marks the static filters a MIG job skips: placeMIG
	// places its slices instead (migEligible).
	wholeGPUs bool
	// reason is the reason in words for job j, as gpuq shows it.
	reason func(j *Job) string
	// rejects says whether the stage turns node w down for j. fits is
	// given to the dynamic stages only: whether what is free on w now
	// holds j (fitsNow).
	rejects func(w *workNode, j *Job, fits bool) bool
}

// said is a reason that does not depend on the job.
func said(s string) func(*Job) string { return func(*Job) string { return s } }

// gpusOf is "h100 GPUs" for a job asking for a model, else "GPUs".
func gpusOf(j *Job) string {
	if j.Req.GPUModel != "" {
		return j.Req.GPUModel + " GPUs"
	}
	return "GPUs"
}

// staticFilters ask whether a node could ever hold the job (its state,
// membership, features and capacity), in order.
var staticFilters = [...]nodeFilter{
	{name: "down", when: "the node is DOWN", reason: said("down"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.n.State == spec.NodeDown }},
	{name: "drain", when: "the node is DRAIN", reason: said("drain"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.n.State == spec.NodeDrain }},
	{name: "draining", when: "the node is DRAINING", reason: said("draining"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.n.State == spec.NodeDraining }},
	{name: "unknown", when: "the node is UNKNOWN (not responding)", reason: said("unknown"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.n.State == spec.NodeUnknown }},
	{name: "power", when: "the node is powered down, powering up or powering down (PlanPower may power it up)", reason: said("powered down"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.n.Power != spec.PowerOn }},
	{name: "partition", when: "the node is not in the job's partition", reason: func(j *Job) string { return "not in partition " + j.Partition },
		rejects: func(w *workNode, j *Job, _ bool) bool {
			return j.Partition != "" && !slices.Contains(w.n.Partitions, j.Partition)
		}},
	{name: "nodelist", when: "the node is not in --nodelist", reason: said("not in the requested node list"),
		rejects: func(w *workNode, j *Job, _ bool) bool {
			return len(j.Req.NodeList) > 0 && !slices.Contains(j.Req.NodeList, w.n.Name)
		}},
	{name: "reservation nodes", when: "the job asks for a reservation (not FLEX) that does not hold the node", reason: func(j *Job) string { return "not in reservation " + j.Reservation },
		rejects: func(w *workNode, j *Job, _ bool) bool {
			if j.Reservation == "" {
				return false
			}
			ar := w.adv[j.Reservation]
			return ar == nil || !ar.r.Flex && !slices.Contains(w.advOn, ar)
		}},
	{name: "exclude", when: "the node is in --exclude", reason: said("excluded"),
		rejects: func(w *workNode, j *Job, _ bool) bool { return slices.Contains(j.Req.Exclude, w.n.Name) }},
	{name: "constraint", when: "the node lacks a --constraint feature", reason: func(j *Job) string { return "constraint " + j.Req.Constraint },
		rejects: func(w *workNode, j *Job, _ bool) bool { return !HasFeatures(w.n.Features, j.Req.Constraint) }},
	{name: "rdma", when: "the node has fewer RDMA NICs than --rdma asks", reason: said("too few RDMA NICs"),
		rejects: func(w *workNode, j *Job, _ bool) bool { return !rdmaFits(w.n, &j.Req) }},
	// MIG jobs are placed by placeMIG (mig.go), not by whole GPUs; a node
	// that passed the filters before this one had no room for the slices.
	{name: "mig", when: "the job asks for MIG slices and placeMIG found no room on the node", wholeGPUs: true,
		reason:  func(j *Job) string { return "no room for a " + j.Req.GPUProfile + " MIG job" },
		rejects: func(_ *workNode, j *Job, _ bool) bool { return j.Req.GPUProfile != "" }},
	{name: "cpus", when: "the node has fewer CPUs than --cpus-per-task asks", reason: said("too few CPUs"),
		rejects: func(w *workNode, j *Job, _ bool) bool { return w.n.CPUs < j.Req.CPUsPerNode }},
	{name: "memory", when: "the node has less memory than --mem asks", reason: said("too little memory"),
		rejects: func(w *workNode, j *Job, _ bool) bool { return w.n.MemMiB < j.Req.MemMiB }},
	{name: "gpus", when: "the node has fewer GPUs of the model than asked (none, for a share)", wholeGPUs: true,
		reason: func(j *Job) string { return "too few " + gpusOf(j) },
		rejects: func(w *workNode, j *Job, _ bool) bool {
			if isFrac(j) {
				return modelMask(w, j.Req.GPUModel) == 0
			}
			return bits.OnesCount64(modelMask(w, j.Req.GPUModel)) < j.Req.GPUsPerNode
		}},
}

// dynamicFilters ask whether a node that passed the static ones holds the
// job now, in order; the first four say what is short when it does not
// fit. The reservation test does not depend on the job's time limit
// (jobs of one shape share their counts), so a short job that could
// backfill there still counts the node as held.
var dynamicFilters = [...]nodeFilter{
	{name: "free GPUs", when: "the node's free GPUs of the model are too few", reason: func(j *Job) string { return "insufficient free " + gpusOf(j) },
		rejects: func(w *workNode, j *Job, fits bool) bool {
			return !fits && !isFrac(j) && bits.OnesCount64(w.phys.GPUs&modelMask(w, j.Req.GPUModel)) < j.Req.GPUsPerNode
		}},
	{name: "shared GPU", when: "no GPU of the node has the job's share free", reason: func(j *Job) string {
		return "no shared " + gpusOf(j) + " with " + strconv.FormatFloat(j.Req.GPUFraction, 'g', 3, 64) + " free"
	}, rejects: func(_ *workNode, j *Job, fits bool) bool { return !fits && isFrac(j) }},
	{name: "free CPUs", when: "the node's free CPUs are too few", reason: said("insufficient free CPUs"),
		rejects: func(w *workNode, j *Job, fits bool) bool { return !fits && w.phys.CPUs < j.Req.CPUsPerNode }},
	{name: "free memory", when: "the node's free memory is too little", reason: said("insufficient free memory"),
		rejects: func(w *workNode, j *Job, fits bool) bool { return !fits && w.phys.MemMiB < memNeed(w, &j.Req) }},
	{name: "exclusive", when: "the job is exclusive and the node runs something", reason: said("in use (the job is exclusive)"),
		rejects: func(_ *workNode, _ *Job, fits bool) bool { return !fits }},
	{name: "reservation", when: "the node holds the job now, but a reservation holds the node", reason: said("held for a reservation"),
		rejects: func(w *workNode, _ *Job, _ bool) bool { return w.reserved }},
}

// NodeReason is why a node does not run a job now: NodeFits, or the
// filter that turned it down, numbered in pipeline order (the static
// filters from 1, then the dynamic ones).
type NodeReason uint8

// NodeFits is a node that passes every filter.
const NodeFits NodeReason = 0

// numNodeReasons counts NodeFits and one reason per filter.
const numNodeReasons = 1 + len(staticFilters) + len(dynamicFilters)

// NodeCounts counts nodes per NodeReason for one job.
type NodeCounts [numNodeReasons]int32

// filterOf is the filter that gives reason r (nil for NodeFits).
func (r NodeReason) filterOf() *nodeFilter {
	switch {
	case r == NodeFits || int(r) >= numNodeReasons:
		return nil
	case int(r) <= len(staticFilters):
		return &staticFilters[r-1]
	}
	return &dynamicFilters[int(r)-1-len(staticFilters)]
}

// schedulable reports whether a node in state s passes the four state
// filters (down, drain, draining, unknown).
func schedulable(s spec.NodeState) bool {
	switch s {
	case spec.NodeDown, spec.NodeDrain, spec.NodeDraining, spec.NodeUnknown:
		return false
	}
	return true
}

// filter runs the static filters: whether node w could ever hold j
// (state, partition, lists, features, capacity), and if not, why.
func filter(w *workNode, j *Job) NodeReason {
	for i := range staticFilters {
		if staticFilters[i].rejects(w, j, false) {
			return NodeReason(i + 1)
		}
	}
	return NodeFits
}

// eligible reports whether w passes the static filters for j.
func (c *cycle) eligible(w *workNode, j *Job) bool { return filter(w, j) == NodeFits }

// eligibleIn is eligible for node i, asked once per node of m's shape:
// the static filters read only what a node offers (never what is free)
// and what the shape asks, so the answer holds for the memo's life.
func (c *cycle) eligibleIn(m *fitMemo, i int, j *Job) bool {
	if m.seen == nil {
		m.seen = make([]uint64, (len(c.nodes)+63)/64)
		m.pass = make([]uint64, len(m.seen))
	}
	word, bit := i/64, uint64(1)<<(i%64)
	if m.seen[word]&bit == 0 {
		m.seen[word] |= bit
		if c.eligible(c.nodes[i], j) {
			m.pass[word] |= bit
		}
	}
	return m.pass[word]&bit != 0
}

// migEligible is the static filter for a MIG job: eligible's, without
// the whole-GPU ones (mig, gpus); placeMIG looks at the slices.
func (c *cycle) migEligible(w *workNode, j *Job) bool {
	for i := range staticFilters {
		if f := &staticFilters[i]; !f.wholeGPUs && f.rejects(w, j, false) {
			return false
		}
	}
	return true
}

// fitsNow reports whether what is free on w now holds j, ignoring
// reservations.
func fitsNow(w *workNode, j *Job) bool {
	if isFrac(j) {
		_, ok := fitShared(w, j, w.phys, 0, true)
		return ok
	}
	_, ok := fitRes(w, j, w.phys)
	return ok
}

// nowReason runs the dynamic filters on a node that passed the static
// ones.
func nowReason(w *workNode, j *Job) NodeReason {
	fits := fitsNow(w, j)
	for i := range dynamicFilters {
		if dynamicFilters[i].rejects(w, j, fits) {
			return NodeReason(1 + len(staticFilters) + i)
		}
	}
	return NodeFits
}

// nodeReason is the reason node w does not run j now (NodeFits: it
// could).
func nodeReason(w *workNode, j *Job) NodeReason {
	if r := filter(w, j); r != NodeFits {
		return r
	}
	return nowReason(w, j)
}

// countNodes runs the pipeline over every node for j.
func (c *cycle) countNodes(j *Job) *NodeCounts {
	var n NodeCounts
	for _, w := range c.nodes {
		n[nodeReason(w, j)]++
	}
	return &n
}

// text is reason r in words, for job j.
func (r NodeReason) text(j *Job) string {
	if r == NodeFits {
		return "fits now"
	}
	if f := r.filterOf(); f != nil {
		return f.reason(j)
	}
	return "reason " + strconv.Itoa(int(r))
}

// List is the counts in words for j, most nodes first (then by reason).
func (n *NodeCounts) List(j *Job) []NodeCount {
	var out []NodeCount
	for r, k := range n {
		if k > 0 {
			out = append(out, NodeCount{Reason: NodeReason(r).text(j), Nodes: int(k)})
		}
	}
	slices.SortFunc(out, func(a, b NodeCount) int {
		return cmp.Or(cmp.Compare(b.Nodes, a.Nodes), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// PlacementMetric is why a pending job found no place, node by node
// (Nomad's AllocMetric): the nodes per reason, computed in the cycle
// against what is free once the cycle's starts and reservations are
// made. Nodes is shared by the jobs of one shape: do not modify it.
type PlacementMetric struct {
	JobID spec.JobID
	Nodes []NodeCount
	// Summary is FormatNodeCounts(Nodes).
	Summary string
}

// unplaced is a job whose placement failed in decide, for its metric.
type unplaced struct {
	j *Job
	m *fitMemo
}

// placementMetrics appends to the plan a PlacementMetric for every job
// whose placement failed since the last call. Jobs of one shape share
// one count, made once per change of the cluster's state (c.gen), so a
// full cycle counts each shape once: shapes × nodes, not jobs × nodes.
func (c *cycle) placementMetrics() {
	if len(c.unplaced) == 0 {
		return
	}
	if c.plan.Placement == nil {
		c.plan.Placement = make([]PlacementMetric, 0, len(c.unplaced))
	}
	for _, u := range c.unplaced {
		m := u.m
		if !m.counted || m.countGen != c.gen {
			e := c.nodeCountsFor(u.j)
			m.counted, m.countGen, m.counts, m.summary = true, c.gen, e.list, e.summary
		}
		c.plan.Placement = append(c.plan.Placement, PlacementMetric{JobID: u.j.ID, Nodes: m.counts, Summary: m.summary})
	}
	c.unplaced = c.unplaced[:0]
}

// countEntry is the node counts of a request, made at cycle.gen gen.
type countEntry struct {
	gen     uint64
	list    []NodeCount
	summary string
}

// nodeCountsFor counts the nodes per reason for j. Requests that differ
// only by QOS (no filter reads it; fitMemo keys on it for limits and
// preemption) share one count per c.gen; a job with a node list or
// exclusions is counted alone.
func (c *cycle) nodeCountsFor(j *Job) countEntry {
	k, ok := shapeOf(j)
	if !ok {
		list := c.countNodes(j).List(j)
		return countEntry{gen: c.gen, list: list, summary: FormatNodeCounts(list)}
	}
	k.qos = ""
	if e, ok := c.counts[k]; ok && e.gen == c.gen {
		return e
	}
	list := c.countNodes(j).List(j)
	e := countEntry{gen: c.gen, list: list, summary: FormatNodeCounts(list)}
	if c.counts == nil {
		c.counts = map[shape]countEntry{}
	}
	c.counts[k] = e
	return e
}

// FormatNodeCounts writes counts as "10 nodes: 6 insufficient free h100
// GPUs, 3 constraint ib, 1 drain"; "" for none.
func FormatNodeCounts(counts []NodeCount) string {
	if len(counts) == 0 {
		return ""
	}
	total := 0
	var b strings.Builder
	for i, c := range counts {
		total += c.Nodes
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(c.Nodes))
		b.WriteByte(' ')
		b.WriteString(c.Reason)
	}
	unit := " nodes: "
	if total == 1 {
		unit = " node: "
	}
	return strconv.Itoa(total) + unit + b.String()
}
