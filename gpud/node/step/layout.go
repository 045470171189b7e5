package step

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/cpubind"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// layout is where a step's tasks run: per node (in step order) the
// global task IDs.
type layout struct {
	nodes []spec.NodeAlloc
	tasks [][]int
}

// TasksPerNode is SLURM_TASKS_PER_NODE of a job whose nt tasks (at most
// perNode on a node, 0: no limit) are laid out over the allocation's
// nodes in blocks, as sbatch sets it; false when they do not fit.
func TasksPerNode(alloc []spec.NodeAlloc, nt, perNode int) (string, bool) {
	l, err := stepLayout(alloc, api.StepRequest{NTasks: nt, NTasksPerNode: perNode})
	if err != nil {
		return "", false
	}
	return tasksPerNode(l), true
}

// stepLayout lays a step out in blocks over the allocation's nodes, as
// Slurm's default distribution does, and checks it fits.
func stepLayout(alloc []spec.NodeAlloc, req api.StepRequest) (layout, error) {
	nodes := slices.Clone(alloc)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Rank < nodes[j].Rank })
	have := fmt.Sprintf("the allocation has %d node(s): %s", len(nodes), describeAlloc(nodes))
	if req.NTasks < 0 || req.Nodes < 0 || req.NTasksPerNode < 0 || req.CPUsPerTask < 0 || req.GPUsPerTask < 0 || req.GPUs < 0 || req.GPUsPerNode < 0 {
		return layout{}, spec.Errorf(spec.ErrInvalid, "negative task, node, CPU or GPU count")
	}
	nn := req.Nodes
	if nn > len(nodes) {
		return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d nodes but %s", nn, have)
	}
	if req.NodeList != "" {
		// -w: these nodes of the allocation, first (in rank order), and
		// all of them.
		want, err := hostlist.Expand(req.NodeList)
		if err != nil {
			return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist=%s: %v", req.NodeList, err)
		}
		for _, w := range want {
			if !slices.ContainsFunc(nodes, func(n spec.NodeAlloc) bool { return n.Node == w }) {
				return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist: node %s is not in the job's allocation; %s", w, have)
			}
		}
		sort.SliceStable(nodes, func(i, j int) bool {
			return slices.Contains(want, nodes[i].Node) && !slices.Contains(want, nodes[j].Node)
		})
		if nn == 0 {
			nn = len(slices.Compact(slices.Sorted(slices.Values(want))))
		} else if nn < len(want) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist names %d nodes but -N asks for %d", len(want), nn)
		}
		if req.NTasks > 0 && req.NTasks < nn {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d tasks on the %d nodes of --nodelist=%s; each node needs at least one task", req.NTasks, nn, req.NodeList)
		}
	}
	nt := req.NTasks
	switch {
	case nn == 0 && nt > 0 && req.NTasksPerNode == 0:
		nn = min(nt, len(nodes))
	case nn == 0 && nt > 0:
		nn = min((nt+req.NTasksPerNode-1)/req.NTasksPerNode, len(nodes))
	case nn == 0:
		nn = len(nodes)
	}
	if nt == 0 {
		nt = nn * max(req.NTasksPerNode, 1)
	}
	if nt < nn {
		return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d tasks on %d nodes; each node needs at least one task", nt, nn)
	}
	dist, err := cpubind.ParseDist(req.Distribution, 0)
	if err != nil {
		return layout{}, spec.Errorf(spec.ErrInvalid, "%v", err)
	}
	l := layout{nodes: nodes[:nn], tasks: distribute(nt, nn, dist)}
	for nn > 1 && len(l.tasks[nn-1]) == 0 { // a plane wider than the tasks
		nn--
		l.nodes, l.tasks = l.nodes[:nn], l.tasks[:nn]
	}
	for i := range nn {
		n := len(l.tasks[i])
		if req.NTasksPerNode > 0 && n > req.NTasksPerNode {
			return layout{}, spec.Errorf(spec.ErrInvalid, "%d tasks do not fit on %d nodes at --ntasks-per-node=%d", nt, nn, req.NTasksPerNode)
		}
		nd := nodes[i]
		if c := req.CPUsPerTask; c > 0 && n*c > nd.CPUs {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step needs %d CPUs on node %s (%d tasks x %d) but %s", n*c, nd.Node, n, c, have)
		}
		if g := req.GPUsPerTask; g > 0 && n*g > devices(nd) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step needs %d GPUs on node %s (%d tasks x %d) but %s", n*g, nd.Node, n, g, have)
		}
		if g := req.GPUsPerNode; g > devices(nd) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d GPUs per node but %s", g, have)
		}
	}
	if g := req.GPUs; g > 0 {
		for i, nd := range l.nodes {
			if want := stepGPUs(req, l, i, devices(nd)); want > devices(nd) {
				return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d GPUs (%d on node %s) but %s", g, want, nd.Node, have)
			}
		}
	}
	return l, nil
}

// distribute lays nt tasks over nn nodes (each gets some): block
// (consecutive tasks share a node; the counts as even as they go, the
// first nodes one more), cyclic (the same counts, tasks dealt round
// robin) or plane (blocks of dist.Plane tasks dealt round robin).
func distribute(nt, nn int, dist cpubind.Dist) [][]int {
	tasks := make([][]int, nn)
	if dist.Nodes == "plane" {
		for t := 0; t < nt; {
			for i := 0; i < nn && t < nt; i++ {
				for k := 0; k < dist.Plane && t < nt; k++ {
					tasks[i] = append(tasks[i], t)
					t++
				}
			}
		}
		return tasks
	}
	count := make([]int, nn)
	for i := range nn {
		count[i] = nt / nn
		if i < nt%nn {
			count[i]++
		}
	}
	if dist.Nodes == "cyclic" {
		for t := 0; t < nt; {
			for i := 0; i < nn && t < nt; i++ {
				if len(tasks[i]) < count[i] {
					tasks[i] = append(tasks[i], t)
					t++
				}
			}
		}
		return tasks
	}
	next := 0
	for i, c := range count {
		for range c {
			tasks[i] = append(tasks[i], next)
			next++
		}
	}
	return tasks
}

// blocked reports whether the layout is in blocks: node i runs the next
// len(tasks[i]) tasks.
func (l layout) blocked() bool {
	next := 0
	for _, ts := range l.tasks {
		for _, t := range ts {
			if t != next {
				return false
			}
			next++
		}
	}
	return true
}

// taskNodes is each task's node index.
func (l layout) taskNodes() []int {
	out := make([]int, l.ntasks())
	for i, ts := range l.tasks {
		for _, t := range ts {
			out[t] = i
		}
	}
	return out
}

func describeAlloc(nodes []spec.NodeAlloc) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%d CPUs, %d GPUs)", n.Node, n.CPUs, devices(n))
	}
	return strings.Join(parts, ", ")
}

// tasksPerNode is Slurm's SLURM_TASKS_PER_NODE form: "2(x3),1".
func tasksPerNode(l layout) string {
	counts := make([]int, len(l.tasks))
	for i, t := range l.tasks {
		counts[i] = len(t)
	}
	return Counts(counts)
}

// Counts is a count per node in Slurm's compressed form
// (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE): "2(x3),1".
func Counts(counts []int) string {
	var parts []string
	for i := 0; i < len(counts); {
		j := i
		for j < len(counts) && counts[j] == counts[i] {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d(x%d)", counts[i], j-i))
		} else {
			parts = append(parts, strconv.Itoa(counts[i]))
		}
		i = j
	}
	return strings.Join(parts, ",")
}

// names are the layout's node names, in step order.
func (l layout) names() []string {
	names := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		names[i] = n.Node
	}
	return names
}

// ntasks counts the layout's tasks.
func (l layout) ntasks() int {
	nt := 0
	for _, t := range l.tasks {
		nt += len(t)
	}
	return nt
}
