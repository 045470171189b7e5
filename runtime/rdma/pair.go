package rdma

import "sort"

// Affinity says how close a GPU's paired NICs are.
type Affinity int

// Affinities, best last.
const (
	AffinityNone   Affinity = iota // no active NIC shares switch or NUMA node
	AffinityNUMA                   // same NUMA node
	AffinitySwitch                 // same PCIe switch
)

func (a Affinity) String() string {
	switch a {
	case AffinitySwitch:
		return "switch"
	case AffinityNUMA:
		return "numa"
	}
	return "none"
}

// Pairing is the NICs closest to one GPU.
type Pairing struct {
	GPU      string // PCI bus ID
	NICs     []string
	Affinity Affinity
}

// Closest returns the active NICs nearest gpu: those under its PCIe
// switch, else those on its NUMA node, else none. Names are sorted.
func Closest(gpu Location, nics []NIC) ([]string, Affinity) {
	var sw, numa []string
	for _, n := range nics {
		if !n.Active() {
			continue
		}
		if gpu.Switch != "" && n.Switch == gpu.Switch {
			sw = append(sw, n.Name)
		}
		if gpu.NUMANode >= 0 && n.NUMANode == gpu.NUMANode {
			numa = append(numa, n.Name)
		}
	}
	switch {
	case len(sw) > 0:
		sort.Strings(sw)
		return sw, AffinitySwitch
	case len(numa) > 0:
		sort.Strings(numa)
		return numa, AffinityNUMA
	}
	return nil, AffinityNone
}

// Pair pairs each GPU with its closest NICs, in the GPUs' order.
func Pair(gpus []Location, nics []NIC) []Pairing {
	out := make([]Pairing, len(gpus))
	for i, g := range gpus {
		names, aff := Closest(g, nics)
		out[i] = Pairing{GPU: g.PCIBusID, NICs: names, Affinity: aff}
	}
	return out
}

// ForGPUs returns the union of the closest NICs of gpus, sorted: what a
// job on those GPUs asking for "--rdma" gets (and NCCL_IB_HCA names).
func ForGPUs(gpus []Location, nics []NIC) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range gpus {
		names, _ := Closest(g, nics)
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}
