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
// Static filters (filter): whether the node could ever hold the job.
//
//	state        node DOWN, DRAIN, DRAINING or UNKNOWN  → down, drain, draining, unknown
//	partition    node not in the job's partition        → not in partition P
//	nodelist     node not in --nodelist                 → not in the requested node list
//	exclude      node in --exclude                      → excluded
//	constraint   node lacks a --constraint feature      → constraint F
//	rdma         too few RDMA NICs for --rdma           → too few RDMA NICs
//	mig          MIG jobs are placed by placeMIG        → no room for a 3g.40gb MIG job
//	cpus         fewer CPUs than --cpus-per-task        → too few CPUs
//	memory       less memory than --mem                 → too little memory
//	gpus         fewer GPUs of the model than asked     → too few h100 GPUs
//
// Dynamic filters (nowReason): whether it holds the job now.
//
//	free GPUs    GPUs of the model taken                → insufficient free h100 GPUs
//	shared GPU   no GPU with the share free             → no shared GPUs with 0.5 free
//	free CPUs    CPUs taken                             → insufficient free CPUs
//	free memory  memory taken                           → insufficient free memory
//	exclusive    the node runs something                → in use (the job is exclusive)
//	reservation  free, but a reservation holds the node → held for a reservation
//	(passes)                                            → fits now
type NodeReason uint8

// Node reasons, in pipeline order.
const (
	NodeFits NodeReason = iota
	NodeDown
	NodeDrain
	NodeDraining
	NodeNotResponding
	NodeNotInPartition
	NodeNotListed
	NodeExcluded
	NodeConstraint
	NodeTooFewNICs
	NodeMIG
	NodeTooFewCPUs
	NodeTooLittleMem
	NodeTooFewGPUs
	NodeBusyGPUs
	NodeNoSharedGPU
	NodeBusyCPUs
	NodeBusyMem
	NodeInUse
	NodeReserved
	numNodeReasons
)

// NodeCounts counts nodes per NodeReason for one job.
type NodeCounts [numNodeReasons]int32

// stateReason is the state filter.
func stateReason(s spec.NodeState) NodeReason {
	switch s {
	case spec.NodeDown:
		return NodeDown
	case spec.NodeDrain:
		return NodeDrain
	case spec.NodeDraining:
		return NodeDraining
	case spec.NodeUnknown:
		return NodeNotResponding
	}
	return NodeFits
}

// filter runs the static filters: whether node w could ever hold j
// (state, partition, lists, features, capacity), and if not, why.
func filter(w *workNode, j *Job) NodeReason {
	r := &j.Req
	n := w.n
	if s := stateReason(n.State); s != NodeFits {
		return s
	}
	switch {
	case j.Partition != "" && !slices.Contains(n.Partitions, j.Partition):
		return NodeNotInPartition
	case len(r.NodeList) > 0 && !slices.Contains(r.NodeList, n.Name):
		return NodeNotListed
	case slices.Contains(r.Exclude, n.Name):
		return NodeExcluded
	case !HasFeatures(n.Features, r.Constraint):
		return NodeConstraint
	case !rdmaFits(n, r):
		return NodeTooFewNICs
	case r.GPUProfile != "":
		// MIG jobs are placed by placeMIG (mig.go), not here.
		return NodeMIG
	case n.CPUs < r.CPUsPerNode:
		return NodeTooFewCPUs
	case n.MemMiB < r.MemMiB:
		return NodeTooLittleMem
	}
	if isFrac(j) {
		if modelMask(w, r.GPUModel) == 0 {
			return NodeTooFewGPUs
		}
	} else if bits.OnesCount64(modelMask(w, r.GPUModel)) < r.GPUsPerNode {
		return NodeTooFewGPUs
	}
	return NodeFits
}

// eligible reports whether w passes the static filters for j.
func (c *cycle) eligible(w *workNode, j *Job) bool { return filter(w, j) == NodeFits }

// nowReason runs the dynamic filters on a node that passed the static
// ones: whether what is free on w now holds j, and if it does, whether a
// reservation holds the node. The reservation test does not depend on
// the job's time limit (jobs of one shape share their counts), so a
// short job that could backfill there still counts the node as held.
func nowReason(w *workNode, j *Job) NodeReason {
	r := &j.Req
	free := w.phys
	if isFrac(j) {
		if _, ok := fitShared(w, j, free, 0, true); ok {
			return fitsOrReserved(w)
		}
	} else if _, ok := fitRes(w, j, free); ok {
		return fitsOrReserved(w)
	}
	switch {
	case !isFrac(j) && bits.OnesCount64(free.GPUs&modelMask(w, r.GPUModel)) < r.GPUsPerNode:
		return NodeBusyGPUs
	case isFrac(j):
		return NodeNoSharedGPU
	case free.CPUs < r.CPUsPerNode:
		return NodeBusyCPUs
	case free.MemMiB < memNeed(w, r):
		return NodeBusyMem
	}
	return NodeInUse
}

func fitsOrReserved(w *workNode) NodeReason {
	if w.reserved {
		return NodeReserved
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
	gpus := "GPUs"
	if j.Req.GPUModel != "" {
		gpus = j.Req.GPUModel + " GPUs"
	}
	switch r {
	case NodeFits:
		return "fits now"
	case NodeDown:
		return "down"
	case NodeDrain:
		return "drain"
	case NodeDraining:
		return "draining"
	case NodeNotResponding:
		return "unknown"
	case NodeNotInPartition:
		return "not in partition " + j.Partition
	case NodeNotListed:
		return "not in the requested node list"
	case NodeExcluded:
		return "excluded"
	case NodeConstraint:
		return "constraint " + j.Req.Constraint
	case NodeTooFewNICs:
		return "too few RDMA NICs"
	case NodeMIG:
		// The node passed the static filters; placeMIG found no room.
		return "no room for a " + j.Req.GPUProfile + " MIG job"
	case NodeTooFewCPUs:
		return "too few CPUs"
	case NodeTooLittleMem:
		return "too little memory"
	case NodeTooFewGPUs:
		return "too few " + gpus
	case NodeBusyGPUs:
		return "insufficient free " + gpus
	case NodeNoSharedGPU:
		return "no shared " + gpus + " with " + strconv.FormatFloat(j.Req.GPUFraction, 'g', 3, 64) + " free"
	case NodeBusyCPUs:
		return "insufficient free CPUs"
	case NodeBusyMem:
		return "insufficient free memory"
	case NodeInUse:
		return "in use (the job is exclusive)"
	case NodeReserved:
		return "held for a reservation"
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
