package cpubind

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// CPU is one logical CPU (hardware thread) of a node.
type CPU struct {
	ID     int
	Core   int // the core's ID within its socket (sysfs core_id)
	Socket int // physical package
	Node   int // NUMA node (the socket where sysfs has no NUMA nodes)
}

// Topology is a node's CPUs.
type Topology []CPU

// ReadTopology reads the CPUs of the node whose sysfs is at root
// ("/sys"): each online CPU's socket and core, and the NUMA nodes.
func ReadTopology(root string) (Topology, error) {
	cpuDir := filepath.Join(root, "devices/system/cpu")
	online, err := os.ReadFile(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, fmt.Errorf("read the node's CPUs: %w", err)
	}
	ids, err := ParseList(string(online))
	if err != nil {
		return nil, err
	}
	numa := map[int]int{}
	nodes, _ := filepath.Glob(filepath.Join(root, "devices/system/node/node[0-9]*"))
	for _, nd := range nodes {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(nd), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(nd, "cpulist"))
		if err != nil {
			continue
		}
		cpus, err := ParseList(string(b))
		if err != nil {
			continue
		}
		for _, c := range cpus {
			numa[c] = n
		}
	}
	readInt := func(cpu int, name string) int {
		b, err := os.ReadFile(filepath.Join(cpuDir, "cpu"+strconv.Itoa(cpu), "topology", name))
		if err != nil {
			return -1
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return -1
		}
		return v
	}
	t := make(Topology, 0, len(ids))
	for _, id := range ids {
		c := CPU{ID: id, Core: readInt(id, "core_id"), Socket: max(readInt(id, "physical_package_id"), 0)}
		if c.Core < 0 {
			c.Core = id // no topology: every CPU a core of its own
		}
		if n, ok := numa[id]; ok {
			c.Node = n
		} else {
			c.Node = c.Socket
		}
		t = append(t, c)
	}
	return t, nil
}

// Task is the task to bind, among the node's tasks of its step.
type Task struct {
	Local       int // its index among the node's tasks
	NLocal      int // the node's tasks
	CPUsPerTask int // -c (0 counts as 1)
}

// Mask is the CPUs the task is bound to: of allowed (the allocation's
// CPUs on the node), as b and hint say, with the CPUs handed out over
// sockets and cores as d says. A bind of none (or none given, without a
// hint) binds nothing: it returns allowed. Tasks that need more than the
// node has share CPUs, round robin, as Slurm's overcommit does.
func Mask(topo Topology, allowed []int, b Bind, hint string, d Dist, t Task) ([]int, error) {
	cpus := topo.only(allowed)
	if len(cpus) == 0 {
		return nil, errors.New("no CPU of the node is allowed to the task")
	}
	typ, onePerCore := b.Type, false
	switch hint {
	case ComputeBound, NoMultithread:
		onePerCore = true
		if typ == "" {
			typ = Cores
		}
	case MemoryBound:
		onePerCore = true
		if typ == "" {
			typ = Cores
		}
		// One core of each socket at a time: tasks spread over sockets.
		d.Sockets, d.Cores = "fcyclic", "cyclic"
	case Multithread:
		if typ == "" {
			typ = Threads
		}
	}
	pick := func(list [][]int) []int { return list[t.Local%len(list)] }
	switch typ {
	case "", None:
		return ids(cpus), nil
	case MapCPU, MaskCPU:
		want := pick(b.List)
		got := ids(cpus.only(want))
		if len(got) == 0 {
			return nil, fmt.Errorf("--cpu-bind=%s: local task %d gets CPU(s) %s, none of them the job's on this node (%s)", typ, t.Local, List(want), List(ids(cpus)))
		}
		return got, nil
	case MapLdom, MaskLdom:
		want := pick(b.List)
		got := ids(cpus.where(func(c CPU) bool { return slices.Contains(want, c.Node) }))
		if len(got) == 0 {
			return nil, fmt.Errorf("--cpu-bind=%s: local task %d gets NUMA domain(s) %s, where the job has no CPU on this node", typ, t.Local, List(want))
		}
		return got, nil
	case RankLdom:
		doms := cpus.nodes()
		dom := doms[t.Local%len(doms)]
		return ids(cpus.where(func(c CPU) bool { return c.Node == dom })), nil
	}
	// The automatic bindings: the task's share of the CPUs, by
	// distribution, widened to its bind unit.
	unitThreads := typ == Threads
	if typ == Rank {
		d.Sockets, d.Cores = "block", "block"
	}
	slots := cpus.slots(unitThreads, onePerCore, d)
	per := max(t.CPUsPerTask, 1)
	if !unitThreads {
		// A core holds its allowed threads (one under onePerCore): a task
		// asking for c CPUs gets the cores that hold them.
		tpc := len(slots[0][0])
		per = (per + tpc - 1) / tpc
	}
	mine := assign(slots, per, t.Local, d.Sockets)
	var got []int
	for _, s := range mine {
		got = append(got, s...)
	}
	switch typ {
	case Sockets:
		socks := cpus.byID(got).sockets()
		got = ids(cpus.where(func(c CPU) bool { return slices.Contains(socks, c.Socket) }))
	case Ldoms:
		doms := cpus.byID(got).nodes()
		got = ids(cpus.where(func(c CPU) bool { return slices.Contains(doms, c.Node) }))
	}
	slices.Sort(got)
	return slices.Compact(got), nil
}

// slots are the node's CPUs as units to hand out, per socket (in socket
// order): cores (their threads, or only the first with onePerCore) or,
// with threads, single threads ordered by d.Cores (block: a core's
// threads together; cyclic, fcyclic: every core's first thread, then
// their second).
func (t Topology) slots(threads, onePerCore bool, d Dist) [][][]int {
	var out [][][]int
	for _, s := range t.sockets() {
		var cores [][]int
		for _, core := range t.where(func(c CPU) bool { return c.Socket == s }).cores() {
			th := ids(t.where(func(c CPU) bool { return c.Socket == s && c.Core == core }))
			if onePerCore {
				th = th[:1]
			}
			cores = append(cores, th)
		}
		var slots [][]int
		switch {
		case !threads:
			slots = cores
		case d.Cores == "block":
			for _, th := range cores {
				for _, c := range th {
					slots = append(slots, []int{c})
				}
			}
		default:
			for k := 0; ; k++ {
				added := false
				for _, th := range cores {
					if k < len(th) {
						slots = append(slots, []int{th[k]})
						added = true
					}
				}
				if !added {
					break
				}
			}
		}
		out = append(out, slots)
	}
	return out
}

// assign hands per slots to each task in turn up to task local, over the
// sockets by dist (block: socket after socket; cyclic: a task's slots
// from one socket, the next task from the next socket; fcyclic: each
// slot from the next socket), wrapping round when the slots run out,
// and returns task local's.
func assign(sockets [][][]int, per, local int, dist string) [][]int {
	var flat [][]int
	for _, s := range sockets {
		flat = append(flat, s...)
	}
	next := make([]int, len(sockets)) // the next free slot of each socket
	take := func(s int) []int {
		sl := sockets[s][next[s]%len(sockets[s])]
		next[s]++
		return sl
	}
	sock := 0
	var mine [][]int
	for task := 0; task <= local; task++ {
		var got [][]int
		switch dist {
		case "block":
			for j := range per {
				got = append(got, flat[(task*per+j)%len(flat)])
			}
		case "fcyclic":
			for range per {
				got = append(got, take(sock))
				sock = (sock + 1) % len(sockets)
			}
		default: // cyclic
			// All of a task's slots from its socket while it has room,
			// then from a socket that has.
			s := task % len(sockets)
			for range per {
				if next[s] >= len(sockets[s]) {
					if o := withRoom(sockets, next); o >= 0 {
						s = o
					}
				}
				got = append(got, take(s))
			}
		}
		mine = got
	}
	return mine
}

// withRoom is the first socket with a slot not yet handed out, or -1.
func withRoom(sockets [][][]int, next []int) int {
	for s := range sockets {
		if next[s] < len(sockets[s]) {
			return s
		}
	}
	return -1
}

func (t Topology) only(allowed []int) Topology {
	return t.where(func(c CPU) bool { return slices.Contains(allowed, c.ID) })
}

func (t Topology) byID(cpus []int) Topology { return t.only(cpus) }

func (t Topology) where(f func(CPU) bool) Topology {
	var out Topology
	for _, c := range t {
		if f(c) {
			out = append(out, c)
		}
	}
	return out
}

func (t Topology) sockets() []int { return t.distinct(func(c CPU) int { return c.Socket }) }
func (t Topology) nodes() []int   { return t.distinct(func(c CPU) int { return c.Node }) }
func (t Topology) cores() []int   { return t.distinct(func(c CPU) int { return c.Core }) }

func (t Topology) distinct(f func(CPU) int) []int {
	var out []int
	for _, c := range t {
		out = append(out, f(c))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func ids(t Topology) []int {
	out := make([]int, len(t))
	for i, c := range t {
		out[i] = c.ID
	}
	slices.Sort(out)
	return out
}

// Verbose is Slurm's --cpu-bind=verbose line for a task (global ID gid,
// local ID lid, process pid) on node host bound to cpus (nil: not bound).
func Verbose(b Bind, hint string, host string, gid, lid, pid int, cpus []int) string {
	units, kind, action := "", "MASK", " set"
	typ := b.Type
	if typ == "" {
		switch hint {
		case ComputeBound, MemoryBound, NoMultithread:
			typ = Cores
		case Multithread:
			typ = Threads
		}
	}
	switch typ {
	case None:
		units, kind, action = "", "NONE", ""
	case "":
		units, kind, action = "", "NULL", ""
	case Threads, Cores, Sockets, Ldoms:
		units = "-" + typ
	case Rank:
		kind = "RANK"
	case RankLdom:
		kind = "LDRANK"
	case MapCPU:
		kind = "MAP "
	case MapLdom:
		kind = "LDMAP "
	case MaskLdom:
		kind = "LDMASK"
	}
	return fmt.Sprintf("cpu-bind%s=%s - %s, task %2d %2d [%d]: mask 0x%s%s\n", units, kind, host, gid, lid, pid, Format(cpus), action)
}

// NodesOf is the NUMA nodes of cpus.
func (t Topology) NodesOf(cpus []int) []int { return t.only(cpus).nodes() }
