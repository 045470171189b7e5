package sched

import (
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// RDMA NICs are shared by the jobs of a node (as Slurm shares them by
// default): the scheduler filters nodes that have enough and names the
// ones a job uses, but does not reserve them.

// NIC is an active RDMA NIC of a node.
type NIC struct {
	Name string
	// NUMANode is -1 when unknown.
	NUMANode int
}

// rdmaFits reports whether node n has the NICs r asks for: at least one
// for RDMAPaired, at least N for N.
func rdmaFits(n *Node, r *spec.Resources) bool {
	switch {
	case r.RDMA == 0:
		return true
	case r.RDMA == spec.RDMAPaired:
		return len(n.NICs) > 0
	}
	return len(n.NICs) >= r.RDMA
}

// pickNICs names the NICs of allocation a: for RDMAPaired the NICs paired
// with its GPUs (MIG slices by their parent), or the node's first NIC when
// none is paired; for N the paired ones first, then those on a paired
// one's NUMA node, then the others, in name order within each group.
func pickNICs(n *Node, a *spec.NodeAlloc, want int) []string {
	if want == 0 || len(n.NICs) == 0 {
		return nil
	}
	has := func(name string) bool { return slices.ContainsFunc(n.NICs, func(x NIC) bool { return x.Name == name }) }
	var paired []string
	add := func(uuid string) {
		for _, g := range n.GPUs {
			if g.UUID != uuid {
				continue
			}
			for _, nic := range g.NICs {
				if !slices.Contains(paired, nic) && has(nic) {
					paired = append(paired, nic)
				}
			}
		}
	}
	for _, u := range a.GPUs {
		add(u)
	}
	for _, m := range a.MIG {
		add(m.GPU)
	}
	slices.Sort(paired)
	if want == spec.RDMAPaired {
		if len(paired) == 0 {
			return []string{n.NICs[0].Name}
		}
		return paired
	}
	near := map[int]bool{}
	for _, x := range n.NICs {
		if slices.Contains(paired, x.Name) && x.NUMANode >= 0 {
			near[x.NUMANode] = true
		}
	}
	out := paired
	if len(out) > want {
		out = out[:want]
	}
	for _, nearFirst := range []bool{true, false} {
		for _, x := range n.NICs {
			if len(out) == want {
				return out
			}
			if near[x.NUMANode] == nearFirst && !slices.Contains(out, x.Name) {
				out = append(out, x.Name)
			}
		}
	}
	return out
}
