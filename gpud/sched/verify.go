package sched

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// Verify checks a Plan against its Snapshot: every started job is pending
// in the snapshot and starts once, on exactly Nodes distinct schedulable
// nodes, no GPU is handed out twice or while already allocated, and no
// node goes over its CPUs or memory. Tests run it after every cycle; it
// returns every violation found.
func Verify(snap *Snapshot, plan Plan) error {
	nodes := map[string]*Node{}
	for i := range snap.Nodes {
		nodes[snap.Nodes[i].Name] = &snap.Nodes[i]
	}
	jobs := map[spec.JobID]*Job{}
	for i := range snap.Jobs {
		jobs[snap.Jobs[i].ID] = &snap.Jobs[i]
	}
	usedCPU := map[string]int{}
	usedMem := map[string]int64{}
	gpuTaken := map[string]spec.JobID{}
	for _, n := range snap.Nodes {
		for _, g := range n.GPUs {
			if !g.Free {
				gpuTaken[g.UUID] = 0
			}
		}
	}
	seen := map[spec.JobID]bool{}
	var errs []error
	for _, s := range plan.Starts {
		j, ok := jobs[s.JobID]
		if !ok {
			errs = append(errs, fmt.Errorf("job %d started but not pending in the snapshot", s.JobID))
			continue
		}
		if seen[s.JobID] {
			errs = append(errs, fmt.Errorf("job %d started twice", s.JobID))
		}
		seen[s.JobID] = true
		if len(s.Nodes) != max(j.Req.Nodes, 1) {
			errs = append(errs, fmt.Errorf("job %d wants %d nodes, got %d", j.ID, j.Req.Nodes, len(s.Nodes)))
		}
		var names []string
		for _, a := range s.Nodes {
			n, ok := nodes[a.Node]
			if !ok {
				errs = append(errs, fmt.Errorf("job %d placed on unknown node %s", j.ID, a.Node))
				continue
			}
			if !schedulable(n.State) {
				errs = append(errs, fmt.Errorf("job %d placed on %s node %s", j.ID, n.State, n.Name))
			}
			if slices.Contains(names, a.Node) {
				errs = append(errs, fmt.Errorf("job %d placed twice on node %s", j.ID, a.Node))
			}
			names = append(names, a.Node)
			if len(a.GPUs) < j.Req.GPUsPerNode {
				errs = append(errs, fmt.Errorf("job %d got %d GPUs on %s, wants %d", j.ID, len(a.GPUs), a.Node, j.Req.GPUsPerNode))
			}
			usedCPU[a.Node] += a.CPUs
			usedMem[a.Node] += a.MemMiB
			for _, u := range a.GPUs {
				if prev, taken := gpuTaken[u]; taken {
					errs = append(errs, fmt.Errorf("GPU %s given to job %d is already held (by job %d; 0 = before the cycle)", u, j.ID, prev))
				}
				gpuTaken[u] = j.ID
				if !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return g.UUID == u }) {
					errs = append(errs, fmt.Errorf("GPU %s given to job %d is not on node %s", u, j.ID, a.Node))
				}
			}
		}
	}
	for name, cpus := range usedCPU {
		n := nodes[name]
		if n == nil {
			continue
		}
		if cpus > n.FreeCPUs {
			errs = append(errs, fmt.Errorf("node %s over CPU capacity: %d planned, %d free", name, cpus, n.FreeCPUs))
		}
		if usedMem[name] > n.FreeMemMiB {
			errs = append(errs, fmt.Errorf("node %s over memory capacity: %d MiB planned, %d MiB free", name, usedMem[name], n.FreeMemMiB))
		}
	}
	for _, p := range plan.Pending {
		if seen[p.JobID] {
			errs = append(errs, fmt.Errorf("job %d both started and pending", p.JobID))
		}
		if p.Reason == "" {
			errs = append(errs, fmt.Errorf("job %d pending without a reason", p.JobID))
		}
		seen[p.JobID] = true
	}
	for id := range jobs {
		if !seen[id] {
			errs = append(errs, fmt.Errorf("job %d neither started nor pending", id))
		}
	}
	return errors.Join(errs...)
}
