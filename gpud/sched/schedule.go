package sched

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Schedule decides which pending jobs start now and where, and why the
// others wait.
//
// This first version is first-fit: jobs in (priority desc, submit time asc,
// id asc) order each take the first nodes (by name) that fit, with whole
// GPUs of the requested model, CPUs and memory. A job with Nodes > 1 is a
// gang: it gets that many distinct nodes or none. There are no
// reservations, so a lower job that fits starts even when a higher one
// cannot; the first job that does not fit waits with ReasonResources and
// later ones that do not fit with ReasonPriority.
func Schedule(snap *Snapshot, now time.Time, cfg Config) Plan {
	nodes := make([]*workNode, 0, len(snap.Nodes))
	for i := range snap.Nodes {
		nodes = append(nodes, newWorkNode(&snap.Nodes[i]))
	}
	slices.SortFunc(nodes, func(a, b *workNode) int { return cmp.Compare(a.n.Name, b.n.Name) })

	jobs := make([]*Job, 0, len(snap.Jobs))
	for i := range snap.Jobs {
		jobs = append(jobs, &snap.Jobs[i])
	}
	slices.SortFunc(jobs, Less)

	var plan Plan
	blocked := false
	for _, j := range jobs {
		switch {
		case j.Held:
			plan.Pending = append(plan.Pending, Pending{JobID: j.ID, Reason: spec.ReasonHeld})
			continue
		case j.BeginTime.After(now):
			plan.Pending = append(plan.Pending, Pending{JobID: j.ID, Reason: spec.ReasonBeginTime,
				Detail: "begins at " + j.BeginTime.UTC().Format(time.RFC3339)})
			continue
		case j.PartitionDown:
			plan.Pending = append(plan.Pending, Pending{JobID: j.ID, Reason: spec.ReasonPartitionDown,
				Detail: "partition " + j.Partition + " is not up"})
			continue
		case cfg.MaxStartsPerCycle > 0 && len(plan.Starts) >= cfg.MaxStartsPerCycle:
			plan.Pending = append(plan.Pending, Pending{JobID: j.ID, Reason: spec.ReasonPriority,
				Detail: "cycle start limit reached"})
			continue
		}
		allocs, fitting := place(nodes, j)
		if allocs == nil {
			reason := spec.ReasonPriority
			if !blocked {
				reason = spec.ReasonResources
				blocked = true
			}
			plan.Pending = append(plan.Pending, Pending{JobID: j.ID, Reason: reason,
				Detail: fmt.Sprintf("needs %s; %d of %d nodes fit now", describe(j.Req), fitting, len(nodes))})
			continue
		}
		plan.Starts = append(plan.Starts, Start{JobID: j.ID, Nodes: allocs})
	}
	return plan
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
	n        *Node
	freeCPUs int
	freeMem  int64
	gpuFree  []bool
	allocs   int
}

func newWorkNode(n *Node) *workNode {
	w := &workNode{n: n, freeCPUs: n.FreeCPUs, freeMem: n.FreeMemMiB, allocs: n.Allocs, gpuFree: make([]bool, len(n.GPUs))}
	for i, g := range n.GPUs {
		w.gpuFree[i] = g.Free && !g.MIGEnabled && g.Profile == "" && !g.Unhealthy
	}
	return w
}

func schedulable(s spec.NodeState) bool {
	switch s {
	case spec.NodeDown, spec.NodeDrain, spec.NodeDraining, spec.NodeUnknown:
		return false
	}
	return true
}

// place finds the job's nodes, commits them on the work nodes and returns
// the allocation, or nil and how many nodes could take one part.
func place(nodes []*workNode, j *Job) ([]spec.NodeAlloc, int) {
	want := max(j.Req.Nodes, 1)
	var picked []*workNode
	var gpus [][]int
	for _, w := range nodes {
		g, ok := fits(w, j)
		if !ok {
			continue
		}
		picked = append(picked, w)
		gpus = append(gpus, g)
	}
	if len(picked) < want {
		return nil, len(picked)
	}
	allocs := make([]spec.NodeAlloc, 0, want)
	for rank, w := range picked[:want] {
		a := spec.NodeAlloc{Node: w.n.Name, Rank: rank, CPUs: j.Req.CPUsPerNode, MemMiB: j.Req.MemMiB}
		if j.Req.Exclusive {
			a.CPUs, a.MemMiB = w.freeCPUs, w.freeMem
			for i, free := range w.gpuFree {
				if free {
					gpus[rank] = appendUnique(gpus[rank], i)
				}
			}
		}
		for _, i := range gpus[rank] {
			w.gpuFree[i] = false
			a.GPUs = append(a.GPUs, w.n.GPUs[i].UUID)
		}
		w.freeCPUs -= a.CPUs
		w.freeMem -= a.MemMiB
		w.allocs++
		allocs = append(allocs, a)
	}
	return allocs, len(picked)
}

func appendUnique(s []int, v int) []int {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// fits reports whether one part of j fits on w now, and which GPUs
// (indexes into w.n.GPUs) it would take.
func fits(w *workNode, j *Job) ([]int, bool) {
	r := &j.Req
	n := w.n
	if !schedulable(n.State) {
		return nil, false
	}
	if j.Partition != "" && !slices.Contains(n.Partitions, j.Partition) {
		return nil, false
	}
	if len(r.NodeList) > 0 && !slices.Contains(r.NodeList, n.Name) {
		return nil, false
	}
	if slices.Contains(r.Exclude, n.Name) {
		return nil, false
	}
	if !HasFeatures(n.Features, r.Constraint) {
		return nil, false
	}
	if r.Exclusive && w.allocs > 0 {
		return nil, false
	}
	if r.GPUProfile != "" || r.GPUFraction > 0 {
		// MIG slices and shared GPUs need the MIG-aware scheduler.
		return nil, false
	}
	if w.freeCPUs < r.CPUsPerNode || w.freeMem < r.MemMiB {
		return nil, false
	}
	var picked []int
	for i, free := range w.gpuFree {
		if len(picked) == r.GPUsPerNode {
			break
		}
		if free && (r.GPUModel == "" || n.GPUs[i].Model == r.GPUModel) {
			picked = append(picked, i)
		}
	}
	if len(picked) < r.GPUsPerNode {
		return nil, false
	}
	return picked, true
}

// HasFeatures reports whether features satisfy constraint, a list of
// feature names joined by "&" (empty matches every node).
func HasFeatures(features []string, constraint string) bool {
	if constraint == "" {
		return true
	}
	for f := range strings.SplitSeq(constraint, "&") {
		if !slices.Contains(features, strings.TrimSpace(f)) {
			return false
		}
	}
	return true
}

func describe(r spec.Resources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) with %d CPUs", max(r.Nodes, 1), r.CPUsPerNode)
	if r.MemMiB > 0 {
		fmt.Fprintf(&b, ", %d MiB", r.MemMiB)
	}
	if r.GPUsPerNode > 0 {
		model := r.GPUModel
		if model == "" {
			model = "gpu"
		}
		fmt.Fprintf(&b, ", %d× %s", r.GPUsPerNode, model)
	}
	if r.Exclusive {
		b.WriteString(", exclusive")
	}
	return b.String()
}
