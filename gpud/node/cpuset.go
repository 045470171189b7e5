package node

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/spec"
)

// cpuTopology maps each NUMA node to its CPU ids, read from
// <sysfs>/devices/system/node/node*/cpulist.
type cpuTopology map[int][]int

func readCPUTopology(sysfsRoot string) (cpuTopology, error) {
	dirs, err := filepath.Glob(filepath.Join(sysfsRoot, "devices", "system", "node", "node[0-9]*"))
	if err != nil {
		return nil, err
	}
	topo := cpuTopology{}
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("read CPUs of NUMA node %d: %w", n, err)
		}
		cpus, err := parseCPUList(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, fmt.Errorf("read CPUs of NUMA node %d: %w", n, err)
		}
		topo[n] = cpus
	}
	return topo, nil
}

// parseCPUList parses the kernel's list format ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU number", s, lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("CPU list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// formatCPUList writes sorted ids in the kernel's list format.
func formatCPUList(ids []int) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(ids[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ids[j]))
		}
		i = j + 1
	}
	return b.String()
}

// cpuPins hands out CPU ids to allocations so that GPU jobs run on cores
// of their GPUs' NUMA node and two pinned jobs never share a core. The
// scheduler counts CPUs per node; which cores is the node's business.
type cpuPins struct {
	mu    sync.Mutex
	topo  cpuTopology
	owner map[int]string // cpu → alloc ID
}

// pick pins n CPUs for alloc: free cores of the preferred NUMA nodes
// first, then of the others, lowest ids first. It returns the cpuset and,
// when every core came from the preferred nodes, the memory nodes the
// cores came from; ""
// when the node cannot pin n free cores (the job then runs under its CFS
// quota alone).
func (p *cpuPins) pick(alloc string, n int, prefer []int) (cpus, mems string) {
	if p == nil || n <= 0 || len(p.topo) == 0 {
		return "", ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	got, mems := p.choose(n, prefer, nil)
	if got == nil {
		return "", ""
	}
	for _, c := range got {
		p.owner[c] = alloc
	}
	return formatCPUList(got), mems
}

// peek is the cores pick would give n CPUs preferring NUMA nodes prefer
// once the allocations freeing have ended (an expected job's start waits
// for the jobs on its GPUs); it takes none.
func (p *cpuPins) peek(n int, prefer []int, freeing map[string]bool) (cpus, mems string) {
	if p == nil || n <= 0 || len(p.topo) == 0 {
		return "", ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	got, mems := p.choose(n, prefer, freeing)
	if got == nil {
		return "", ""
	}
	return formatCPUList(got), mems
}

// choose picks n cores (sorted) as pick describes, skipping those owned
// by an allocation not in freeing, or returns nil; p.mu is held.
func (p *cpuPins) choose(n int, prefer []int, freeing map[string]bool) (got []int, mems string) {
	numas := make([]int, 0, len(p.topo))
	for k := range p.topo {
		numas = append(numas, k)
	}
	slices.SortFunc(numas, func(a, b int) int {
		pa, pb := slices.Contains(prefer, a), slices.Contains(prefer, b)
		switch {
		case pa && !pb:
			return -1
		case pb && !pa:
			return 1
		}
		return a - b
	})
	var from []int // the NUMA nodes the cores came from
	onlyPreferred := true
	for _, k := range numas {
		for _, c := range p.topo[k] {
			if len(got) == n {
				break
			}
			if a, taken := p.owner[c]; taken && !freeing[a] {
				continue
			}
			got = append(got, c)
			if !slices.Contains(from, k) {
				from = append(from, k)
			}
			if !slices.Contains(prefer, k) {
				onlyPreferred = false
			}
		}
	}
	if len(got) < n {
		return nil, ""
	}
	slices.Sort(got)
	if onlyPreferred {
		// Only nodes that exist and gave cores: a GPU's NUMA node without
		// CPUs (or unknown to sysfs) cannot be a memory binding.
		slices.Sort(from)
		mems = formatCPUList(from)
	}
	return got, mems
}

// newCPUPins reads the NUMA topology; without one (no sysfs) jobs are not
// pinned.
func newCPUPins(sysfsRoot string, log *slog.Logger) *cpuPins {
	topo, err := readCPUTopology(sysfsRoot)
	if err != nil || len(topo) == 0 {
		log.Warn("no NUMA topology; GPU jobs will not be pinned to cores", "sysfs", sysfsRoot, "err", err)
		return nil
	}
	return &cpuPins{topo: topo, owner: map[int]string{}}
}

// gpuNUMA lists the NUMA nodes of self's GPUs (MIG slices count by their
// parent), from the inventory.
func gpuNUMA(self spec.NodeAlloc, gpus map[string]spec.GPU) []int {
	var out []int
	add := func(u string) {
		if g, ok := gpus[u]; ok && g.NUMANode >= 0 && !slices.Contains(out, g.NUMANode) {
			out = append(out, g.NUMANode)
		}
	}
	for _, u := range self.GPUs {
		add(u)
	}
	for _, m := range self.MIG {
		add(m.GPU)
	}
	return out
}

// release frees alloc's cores.
func (p *cpuPins) release(alloc string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, a := range p.owner {
		if a == alloc {
			delete(p.owner, c)
		}
	}
}
