// Package cpubind computes the CPUs a job step's task is bound to, as
// Slurm's task/affinity plugin does for srun's --cpu-bind, --hint and the
// second and third levels of --distribution, from the CPUs the task may
// use (its allocation's cpuset) and the node's topology (sysfs). It also
// parses those options and writes Slurm's --cpu-bind=verbose line.
//
// It is a leaf (stdlib only): srun parses the options with it and
// gpud/launch, in the job's container, binds each task with it.
package cpubind

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Bind types of --cpu-bind.
const (
	None     = "none"
	Threads  = "threads"
	Cores    = "cores"
	Sockets  = "sockets"
	Ldoms    = "ldoms"
	Rank     = "rank"
	RankLdom = "rank_ldom"
	MapCPU   = "map_cpu"
	MaskCPU  = "mask_cpu"
	MapLdom  = "map_ldom"
	MaskLdom = "mask_ldom"
)

// Bind is a parsed --cpu-bind.
type Bind struct {
	Verbose bool
	// Type is one of the bind types, or "" when only verbosity was given
	// (no binding, as none).
	Type string
	// List is map_cpu's or map_ldom's IDs, or mask_cpu's or mask_ldom's
	// masks as ID sets, one per local task (reused in turn).
	List [][]int
}

// ParseBind reads --cpu-bind (or SLURM_CPU_BIND): [{quiet|verbose},]TYPE
// with Slurm's spellings (q, v, no, map_cpu:0*4,3*4, mask_cpu:0xf,...).
func ParseBind(s string) (Bind, error) {
	var b Bind
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			continue
		}
		name, list, hasList := strings.Cut(item, ":")
		switch name {
		case "q", "quiet":
			b.Verbose = false
			continue
		case "v", "verbose":
			b.Verbose = true
			continue
		case "no", "none":
			name = None
		case "threads", "cores", "sockets", "ldoms", "rank", "rank_ldom":
		case MapCPU, MaskCPU, MapLdom, MaskLdom:
			if !hasList || list == "" {
				return b, fmt.Errorf("--cpu-bind=%s: %s wants a list (%s:0,1 or %s:0x1,0x2)", s, name, name, name)
			}
		case "help":
			return b, fmt.Errorf("--cpu-bind: gpud binds with quiet, verbose, none, threads, cores, sockets, ldoms, rank, rank_ldom, map_cpu:LIST, mask_cpu:LIST, map_ldom:LIST, mask_ldom:LIST")
		default:
			if b.Type == MapCPU || b.Type == MaskCPU || b.Type == MapLdom || b.Type == MaskLdom {
				// The list goes on after a comma: map_cpu:0,1,2.
				list, name = item, b.Type
				break
			}
			return b, fmt.Errorf("--cpu-bind=%s: unknown type %q; use none, threads, cores, sockets, ldoms, rank, rank_ldom, map_cpu:LIST, mask_cpu:LIST, map_ldom:LIST or mask_ldom:LIST (with quiet or verbose before it)", s, item)
		}
		if b.Type != "" && b.Type != name {
			return b, fmt.Errorf("--cpu-bind=%s: give one binding type, not %s and %s", s, b.Type, name)
		}
		b.Type = name
		if list != "" {
			ids, err := parseList(name, list)
			if err != nil {
				return b, fmt.Errorf("--cpu-bind=%s: %w", s, err)
			}
			b.List = append(b.List, ids...)
		}
	}
	return b, nil
}

// parseList reads one item of a map or mask list ("3", "3*4", "0xf",
// "f*2").
func parseList(typ, item string) ([][]int, error) {
	v, rep, hasRep := strings.Cut(item, "*")
	n := 1
	if hasRep {
		var err error
		if n, err = strconv.Atoi(rep); err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("%s item %q: the repetition after * is a count from 1 to 4096", typ, item)
		}
	}
	var ids []int
	switch typ {
	case MapCPU, MapLdom:
		base := 10
		if strings.HasPrefix(v, "0x") || strings.HasPrefix(v, "0X") {
			v, base = v[2:], 16
		}
		id, err := strconv.ParseUint(v, base, 16)
		if err != nil {
			return nil, fmt.Errorf("%s item %q: not a CPU or domain number", typ, item)
		}
		ids = []int{int(id)}
	default: // masks, always hexadecimal
		v = strings.TrimPrefix(strings.TrimPrefix(v, "0x"), "0X")
		m, ok := new(big.Int).SetString(v, 16)
		if !ok || m.Sign() == 0 || m.BitLen() > 65536 {
			return nil, fmt.Errorf("%s item %q: not a non-zero hexadecimal mask", typ, item)
		}
		for i := range m.BitLen() {
			if m.Bit(i) == 1 {
				ids = append(ids, i)
			}
		}
	}
	out := make([][]int, n)
	for i := range out {
		out[i] = ids
	}
	return out, nil
}

// Hints of --hint.
const (
	ComputeBound  = "compute_bound"
	MemoryBound   = "memory_bound"
	Multithread   = "multithread"
	NoMultithread = "nomultithread"
)

// ParseHint reads --hint (or SLURM_HINT).
func ParseHint(s string) (string, error) {
	switch s {
	case ComputeBound, MemoryBound, Multithread, NoMultithread:
		return s, nil
	}
	return "", fmt.Errorf("--hint=%s: use compute_bound, memory_bound, multithread or nomultithread", s)
}

// Dist is a parsed --distribution.
type Dist struct {
	// Nodes lays tasks over nodes: block (default), cyclic or plane
	// (Plane tasks at a time).
	Nodes string
	Plane int
	// Sockets and Cores hand the node's CPUs to its tasks: block,
	// cyclic or fcyclic over sockets (default cyclic), and over the cores
	// (threads) of a socket (default: as Sockets).
	Sockets string
	Cores   string
}

// ParseDist reads --distribution (or SLURM_DISTRIBUTION):
// {*|block|cyclic|plane=N}[:{*|block|cyclic|fcyclic}[:{*|block|cyclic|fcyclic}]][,{Pack|NoPack}].
// planeSize is SLURM_DIST_PLANESIZE (0: none), for "plane" without =N.
func ParseDist(s string, planeSize int) (Dist, error) {
	d := Dist{Nodes: "block", Sockets: "cyclic"}
	if s == "" {
		d.Cores = d.Sockets
		return d, nil
	}
	body, pack, _ := strings.Cut(s, ",")
	if pack != "" && pack != "Pack" && pack != "NoPack" {
		return d, fmt.Errorf("--distribution=%s: after the comma comes Pack or NoPack, not %q", s, pack)
	}
	levels := strings.Split(body, ":")
	if len(levels) > 3 {
		return d, fmt.Errorf("--distribution=%s: at most three levels (nodes:sockets:cores)", s)
	}
	switch n := levels[0]; {
	case n == "*" || n == "block" || n == "":
	case n == "cyclic":
		d.Nodes = "cyclic"
	case n == "plane" || strings.HasPrefix(n, "plane="):
		d.Nodes = "plane"
		d.Plane = planeSize
		if v, ok := strings.CutPrefix(n, "plane="); ok {
			p, err := strconv.Atoi(v)
			if err != nil {
				return d, fmt.Errorf("--distribution=%s: plane=N wants a plane size, not %q", s, v)
			}
			d.Plane = p
		}
		if d.Plane < 1 {
			return d, fmt.Errorf("--distribution=%s: plane needs a size (plane=N, or SLURM_DIST_PLANESIZE)", s)
		}
		if len(levels) > 1 {
			return d, fmt.Errorf("--distribution=%s: plane takes no socket or core level", s)
		}
	case n == "arbitrary":
		return d, fmt.Errorf("--distribution=%s: arbitrary (SLURM_HOSTFILE) is not supported by gpud; use -w with --distribution=block, or cyclic", s)
	default:
		return d, fmt.Errorf("--distribution=%s: the node level is block, cyclic, plane=N or *, not %q", s, n)
	}
	for i, lv := range levels[1:] {
		switch lv {
		case "*", "":
			continue
		case "block", "cyclic", "fcyclic":
		default:
			return d, fmt.Errorf("--distribution=%s: the %s level is block, cyclic, fcyclic or *, not %q", s, []string{"socket", "core"}[i], lv)
		}
		if i == 0 {
			d.Sockets = lv
		} else {
			d.Cores = lv
		}
	}
	if d.Cores == "" {
		d.Cores = d.Sockets
	}
	return d, nil
}

// Format is the hex mask of cpus as Slurm prints it (no leading zeros,
// "0" for none).
func Format(cpus []int) string {
	m := new(big.Int)
	for _, c := range cpus {
		m.SetBit(m, c, 1)
	}
	return m.Text(16)
}

// List is cpus as a CPU list ("0-3,8"), as /proc/self/status's
// Cpus_allowed_list writes it.
func List(cpus []int) string {
	c := slices.Sorted(slices.Values(cpus))
	c = slices.Compact(c)
	var parts []string
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", c[i], c[j]))
		} else {
			parts = append(parts, strconv.Itoa(c[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseList reads a CPU list ("0-3,8", sysfs's and Cpus_allowed_list's
// form).
func ParseList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if f == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b-a > 65536 {
			return nil, fmt.Errorf("CPU list %q: bad item %q", s, f)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}
