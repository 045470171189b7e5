package sched

import (
	"cmp"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// NodeCount is how many nodes turned a pending job down for one reason.
type NodeCount struct {
	Reason string
	Nodes  int
}

// Explain says why each node of snap does not hold pending job j now,
// as counts per reason, most first: the placement filter's reasons
// (state, partition, node lists, constraint, capacity), then what is in
// use now ("insufficient free h100 GPUs"), and "fits now" for nodes that
// could take it (the job waits for priority or a reservation). It is
// computed on demand for one job, outside the cycle. MIG jobs get nil.
func Explain(snap *Snapshot, j Job, now time.Time) []NodeCount {
	if j.Req.GPUProfile != "" {
		return nil
	}
	c := newCycle(snap, now, Config{})
	counts := map[string]int{}
	for _, w := range c.nodes {
		counts[explainNode(w, &j)]++
	}
	out := make([]NodeCount, 0, len(counts))
	for r, n := range counts {
		out = append(out, NodeCount{Reason: r, Nodes: n})
	}
	slices.SortFunc(out, func(a, b NodeCount) int {
		return cmp.Or(cmp.Compare(b.Nodes, a.Nodes), cmp.Compare(a.Reason, b.Reason))
	})
	return out
}

// explainNode is the reason node w does not hold j now.
func explainNode(w *workNode, j *Job) string {
	r := &j.Req
	gpus := "GPUs"
	if r.GPUModel != "" {
		gpus = r.GPUModel + " GPUs"
	}
	switch filter(w, j) {
	case filterState:
		return strings.ToLower(string(w.n.State))
	case filterPartition:
		return "not in partition " + j.Partition
	case filterNodeList:
		return "not in the requested node list"
	case filterExclude:
		return "excluded"
	case filterConstraint:
		return "constraint " + r.Constraint
	case filterRDMA:
		return "too few RDMA NICs"
	case filterMIG:
		return "MIG"
	case filterCPUs:
		return "too few CPUs"
	case filterMem:
		return "too little memory"
	case filterGPUs:
		return "too few " + gpus
	}
	free := w.phys
	if isFrac(j) {
		if _, ok := fitShared(w, j, free, 0, true); ok {
			return "fits now"
		}
	} else if _, ok := fitRes(w, j, free); ok {
		return "fits now"
	}
	switch {
	case !isFrac(j) && bits.OnesCount64(free.GPUs&modelMask(w, r.GPUModel)) < r.GPUsPerNode:
		return "insufficient free " + gpus
	case isFrac(j):
		return "no shared " + gpus + " with " + strconv.FormatFloat(r.GPUFraction, 'g', 3, 64) + " free"
	case free.CPUs < r.CPUsPerNode:
		return "insufficient free CPUs"
	case free.MemMiB < memNeed(w, r):
		return "insufficient free memory"
	}
	return "in use (the job is exclusive)"
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
