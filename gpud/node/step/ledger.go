package step

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Step resources inside an allocation (DESIGN §7 "Allocations and
// steps"), as Slurm ≥ 21.08 books them: a step takes its CPUs and GPUs
// out of what the allocation has free on each of its nodes. By default a
// step gets all the CPUs and all the GPUs of the allocation on its nodes;
// --exact (implied by --exclusive and -c) limits the CPUs to what its
// tasks ask (-c each, 1 without -c), and --gpus-per-task, --gpus-per-node
// and -G limit the GPUs to those asked. Steps that do not fit now wait
// ("Job step creation temporarily disabled, retrying") until a running
// step ends; --overlap steps take nothing and wait for nothing. The
// allocation's first node keeps the ledger, wherever srun runs.

// stepLedger is what the running (non-overlapping) steps of one
// allocation hold, per node. Safe for concurrent use.
type stepLedger struct {
	mu      sync.Mutex
	nodes   map[string]*nodeUse
	changed chan struct{} // closed (and replaced) when a step gives back
}

type nodeUse struct {
	cpus int
	gpus []bool // by index into the node's devices
}

// stepGrant is what one step holds on each node of its layout, in layout
// order: CPUs, and the indices of its GPUs among the node's devices.
type stepGrant struct {
	held bool // false for --overlap: nothing to give back
	cpus []int
	gpus [][]int
}

func newStepLedger() *stepLedger {
	return &stepLedger{nodes: map[string]*nodeUse{}, changed: make(chan struct{})}
}

// stepExact reports whether a step gets only the CPUs its tasks ask for.
func stepExact(req api.StepRequest) bool {
	return req.Exact || req.Exclusive || req.CPUsPerTask > 0
}

// stepGPUs is how many GPUs a step asks for on node i of layout l (with
// n devices there), or -1 for all of them.
func stepGPUs(req api.StepRequest, l layout, i, n int) int {
	switch {
	case req.GPUsPerTask > 0:
		return len(l.tasks[i]) * req.GPUsPerTask
	case req.GPUsPerNode > 0:
		return req.GPUsPerNode
	case req.GPUs > 0:
		g := req.GPUs / len(l.nodes)
		if i < req.GPUs%len(l.nodes) {
			g++
		}
		return g
	}
	return -1
}

// devices is how many GPUs (or MIG slices) a node's part holds.
func devices(n spec.NodeAlloc) int { return len(n.GPUs) + len(n.MIG) }

// take books what the step of layout l asks, if it all fits now.
func (g *stepLedger) take(req api.StepRequest, l layout) (stepGrant, bool) {
	gr := stepGrant{held: !req.Overlap, cpus: make([]int, len(l.nodes)), gpus: make([][]int, len(l.nodes))}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, nd := range l.nodes {
		u := g.use(nd)
		cpus := nd.CPUs
		if stepExact(req) {
			cpus = min(len(l.tasks[i])*max(req.CPUsPerTask, 1), nd.CPUs)
		}
		want := stepGPUs(req, l, i, len(u.gpus))
		if want < 0 {
			want = len(u.gpus)
		}
		gr.cpus[i] = cpus
		gr.gpus[i] = make([]int, 0, want) // empty, not nil: none (nil would mean all)
		if req.Overlap {
			// Shares everything: the first GPUs it asks for, held by none.
			for k := range want {
				gr.gpus[i] = append(gr.gpus[i], k)
			}
			continue
		}
		if u.cpus+cpus > nd.CPUs {
			return stepGrant{}, false
		}
		for k, used := range u.gpus {
			if len(gr.gpus[i]) < want && !used {
				gr.gpus[i] = append(gr.gpus[i], k)
			}
		}
		if len(gr.gpus[i]) < want {
			return stepGrant{}, false
		}
	}
	if gr.held {
		g.mark(l, gr, true)
	}
	return gr, true
}

func (g *stepLedger) use(nd spec.NodeAlloc) *nodeUse {
	u := g.nodes[nd.Node]
	if u == nil {
		u = &nodeUse{gpus: make([]bool, devices(nd))}
		g.nodes[nd.Node] = u
	}
	return u
}

// wait returns a channel closed when a step next gives back.
func (g *stepLedger) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// book marks what a step already running holds (a step re-adopted after
// an agent restart), whether or not it fits beside what is booked.
func (g *stepLedger) book(l layout, gr stepGrant) {
	if !gr.held {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mark(l, gr, true)
}

// mark books (held) or returns a held grant's CPUs and GPUs; g.mu is
// held. A GPU index outside the node's devices (a grant read back from a
// step record) is skipped.
func (g *stepLedger) mark(l layout, gr stepGrant, held bool) {
	for i, nd := range l.nodes {
		u := g.use(nd)
		if held {
			u.cpus += gr.cpus[i]
		} else {
			u.cpus -= gr.cpus[i]
		}
		for _, k := range gr.gpus[i] {
			if k >= 0 && k < len(u.gpus) {
				u.gpus[k] = held
			}
		}
	}
}

// give returns what a step held and wakes the steps waiting.
func (g *stepLedger) give(l layout, gr stepGrant) {
	if !gr.held {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mark(l, gr, false)
	close(g.changed)
	g.changed = make(chan struct{})
}

// ledger is the allocation's step ledger: kept by the steps of its
// first node where that one is in this process, else this node's own
// (owner).
func (al *Alloc) ledger() *stepLedger {
	g := &al.owner().reg
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ledger == nil {
		g.ledger = newStepLedger()
	}
	return g.ledger
}

// taskGPUs is the CUDA_VISIBLE_DEVICES of a node's local task: of the
// node's devices (devs), the step's (idx; all when nil), and of those the
// task's own under --gpus-per-task or --gpu-bind.
func taskGPUs(devs []string, idx []int, req gpuBind, local int) ([]string, error) {
	step := devs
	if idx != nil {
		step = make([]string, 0, len(idx))
		for _, k := range idx {
			if k >= 0 && k < len(devs) { // from a peer: checked, not trusted
				step = append(step, devs[k])
			}
		}
	}
	switch {
	case req.perTask > 0:
		if (local+1)*req.perTask > len(step) {
			return step, nil
		}
		return step[local*req.perTask : (local+1)*req.perTask], nil
	case req.single > 0:
		k := local / req.single
		if k >= len(step) {
			return nil, fmt.Errorf("--gpu-bind=single:%d: local task %d has no GPU (the step has %d on this node)", req.single, local, len(step))
		}
		return step[k : k+1], nil
	case len(req.mapGPU) > 0:
		k := req.mapGPU[local%len(req.mapGPU)]
		if k < 0 || k >= len(step) {
			return nil, fmt.Errorf("--gpu-bind=map_gpu: GPU %d is not one of the step's %d on this node (they are 0-%d)", k, len(step), len(step)-1)
		}
		return step[k : k+1], nil
	case len(req.maskGPU) > 0:
		var mine []string
		for _, k := range req.maskGPU[local%len(req.maskGPU)] {
			if k < len(step) {
				mine = append(mine, step[k])
			}
		}
		if len(mine) == 0 {
			return nil, fmt.Errorf("--gpu-bind=mask_gpu: local task %d's mask names none of the step's %d GPUs on this node (bits 0-%d)", local, len(step), len(step)-1)
		}
		return mine, nil
	}
	return step, nil
}

// gpuBind is how a step's tasks share its GPUs on a node.
type gpuBind struct {
	perTask int     // --gpus-per-task, --gpu-bind=per_task:N
	single  int     // --gpu-bind=single:N: N tasks per GPU
	mapGPU  []int   // --gpu-bind=map_gpu:i,j,...: local task k gets GPU list[k % len]
	maskGPU [][]int // --gpu-bind=mask_gpu:m,n,...: local task k gets the GPUs of mask[k % len]
	// closest keeps each task's GPUs on the NUMA nodes of its CPUs (in
	// the task's launcher, which knows them once bound).
	closest bool
}

// parseGPUBind reads srun's --gpu-bind. Under --gpus-per-task each task
// gets its own GPUs unless the binding says otherwise: none gives every
// task all of the step's GPUs on its node, as Slurm does; closest those
// on its CPUs' NUMA nodes; single:N, map_gpu:LIST and mask_gpu:LIST as
// they say; per_task:N N each.
func parseGPUBind(s string, perTask int) (gpuBind, error) {
	b := gpuBind{perTask: perTask}
	v := s
	for {
		rest, ok := strings.CutPrefix(v, "verbose,")
		if !ok {
			rest, ok = strings.CutPrefix(v, "quiet,")
		}
		if !ok {
			break
		}
		v = rest
	}
	list := func(kind string) ([]string, error) {
		items := strings.Split(strings.TrimPrefix(v, kind+":"), ",")
		var out []string
		for _, it := range items {
			val, rep, hasRep := strings.Cut(it, "*")
			n := 1
			if hasRep {
				var err error
				if n, err = strconv.Atoi(rep); err != nil || n < 1 || n > 4096 {
					return nil, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: %s item %q: the repetition after * is a count from 1 to 4096", s, kind, it)
				}
			}
			for range n {
				out = append(out, val)
			}
		}
		return out, nil
	}
	switch {
	case v == "" || v == "verbose" || v == "quiet":
	case v == "none":
		b.perTask = 0
	case v == "closest":
		b.perTask, b.closest = 0, true
	case strings.HasPrefix(v, "per_task:"):
		n, err := strconv.Atoi(strings.TrimPrefix(v, "per_task:"))
		if err != nil || n < 1 {
			return b, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: per_task:N wants a number of GPUs per task ≥ 1", s)
		}
		b.perTask = n
	case strings.HasPrefix(v, "single:"):
		n, err := strconv.Atoi(strings.TrimPrefix(v, "single:"))
		if err != nil || n < 1 {
			return b, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: single:N wants a number of tasks per GPU ≥ 1", s)
		}
		b.single, b.perTask = n, 0
	case strings.HasPrefix(v, "map_gpu:"):
		items, err := list("map_gpu")
		if err != nil {
			return b, err
		}
		for _, f := range items {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 {
				return b, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: map_gpu wants GPU indices (0,1,...) among the step's GPUs on each node", s)
			}
			b.mapGPU = append(b.mapGPU, n)
		}
		b.perTask = 0
	case strings.HasPrefix(v, "mask_gpu:"):
		items, err := list("mask_gpu")
		if err != nil {
			return b, err
		}
		for _, f := range items {
			m, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(f, "0x"), "0X"), 16, 64)
			if err != nil || m == 0 {
				return b, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: mask_gpu wants non-zero hexadecimal masks of the step's GPUs on each node (0x1,0x2,...)", s)
			}
			var idx []int
			for k := range 64 {
				if m&(1<<k) != 0 {
					idx = append(idx, k)
				}
			}
			b.maskGPU = append(b.maskGPU, idx)
		}
		b.perTask = 0
	default:
		return b, spec.Errorf(spec.ErrInvalid, "--gpu-bind=%s: gpud honours none, closest, single:N, per_task:N, map_gpu:LIST and mask_gpu:LIST (with verbose or quiet before them); use one of those", s)
	}
	return b, nil
}
