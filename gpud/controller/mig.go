package controller

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// addMIG records the MIG slices job id holds on this node.
func (u *usage) addMIG(id spec.JobID, ms []spec.MIGSlice) {
	for _, s := range ms {
		if u.mig == nil {
			u.mig = map[string][]spec.MIGSlice{}
		}
		s.Job = id
		u.mig[s.GPU] = append(u.mig[s.GPU], s)
		u.gpus[s.GPU] = true
	}
}

// migLayout is a MIG GPU's layout: the instances its node reported, each
// marked with the job holding its placement, plus held slices the node
// has not reported (created after it registered), in placement order.
func migLayout(g spec.GPU, held []spec.MIGSlice) []spec.MIGSlice {
	out := make([]spec.MIGSlice, 0, len(g.MIGSlices)+len(held))
	for _, s := range g.MIGSlices {
		s.Job = 0
		out = append(out, s)
	}
	for _, h := range held {
		i := slices.IndexFunc(out, func(s spec.MIGSlice) bool { return s.Placement == h.Placement && s.Profile == h.Profile })
		if i < 0 {
			out = append(out, h)
			continue
		}
		out[i].Job = h.Job
		if out[i].UUID == "" {
			out[i].UUID = h.UUID
		}
	}
	slices.SortFunc(out, func(a, b spec.MIGSlice) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
	return out
}

// schedMIG is the scheduler's view of a MIG GPU; nil for others.
func schedMIG(g spec.GPU, u usage) *sched.MIGGPU {
	if g.MIGMode == "" {
		return nil
	}
	return &sched.MIGGPU{Dynamic: g.MIGMode == spec.MIGDynamic, Profiles: g.MIGProfiles, Slices: migLayout(g, u.mig[g.UUID])}
}

// checkProfile refuses a MIG profile no member node of the partition
// offers, listing those that are offered. With no MIG node registered it
// accepts (nodes may register later).
func checkProfile(members []*nodeRec, r *spec.Resources) error {
	var offered []string
	for _, n := range members {
		for _, g := range n.inv.GPUs {
			if g.MIGMode == "" || r.GPUModel != "" && g.Model != r.GPUModel {
				continue
			}
			for _, p := range g.MIGProfiles {
				if p.Name == r.GPUProfile {
					return nil
				}
				offered = append(offered, p.Name)
			}
		}
	}
	slices.Sort(offered)
	offered = slices.Compact(offered)
	if len(offered) == 0 {
		return spec.Errorf(spec.ErrInvalid, "no node of the partition offers MIG slices (none is in static or dynamic MIG mode); ask for whole GPUs or a fraction")
	}
	return spec.Errorf(spec.ErrInvalid, "no node offers MIG profile %q (offers %s); choose one with --gpus=PROFILE:N", r.GPUProfile, strings.Join(offered, ", "))
}

// wholeCapable reports whether g can ever be handed out whole: a GPU not
// in MIG mode, or a dynamic MIG GPU (whole while its layout is empty).
func wholeCapable(g spec.GPU) bool { return !g.MIGEnabled || g.MIGMode == spec.MIGDynamic }

// activeNICs names the node's usable RDMA NICs.
func activeNICs(inv spec.Inventory) []string {
	var out []string
	for _, n := range inv.NICs {
		if n.Active { // one out of service for a while still counts (submit's "could ever")
			out = append(out, n.Name)
		}
	}
	return out
}

// schedNICs is the scheduler's view of the node's usable NICs.
func schedNICs(inv spec.Inventory) []sched.NIC {
	var out []sched.NIC
	for _, n := range inv.NICs {
		if n.Active && n.Health == "" { // a NIC out of service takes no RDMA job
			out = append(out, sched.NIC{Name: n.Name, NUMANode: n.NUMANode})
		}
	}
	return out
}

// migCreated records the MIG UUIDs a node reports for its part's slices
// (it created them), so the job's GPUs, accounting and gpuq nodes name the
// real instances. It reports whether anything changed.
func (c *Controller) migCreated(rec *jobRec, node string, uuids []string) bool {
	j := &rec.job
	a := cloneAlloc(j.Alloc)
	changed := false
	for i := range a.Nodes {
		p := &a.Nodes[i]
		if p.Node != node || p.Ended || len(p.MIG) != len(uuids) {
			continue
		}
		p.MIG = slices.Clone(p.MIG)
		for k := range p.MIG {
			if p.MIG[k].UUID != uuids[k] {
				p.MIG[k].UUID, changed = uuids[k], true
			}
		}
	}
	if !changed {
		return false
	}
	j.Alloc = a
	j.GPUs = nil
	for _, p := range a.Nodes {
		j.GPUs = append(j.GPUs, p.GPUs...)
		for _, m := range p.MIG {
			if m.UUID != "" {
				j.GPUs = append(j.GPUs, m.UUID)
			}
		}
	}
	return true
}
