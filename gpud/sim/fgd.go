package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Helpers of the FGD experiment's batch equivalence (paper_sched.go runs
// the experiment): with no departures and no time limits, a Schedule cycle
// that holds the whole arrival sequence as pending jobs in arrival order
// decides each job exactly as a cycle per arrival would (a job that does
// not fit now never fits later, so no reservation forms and nothing waits
// for anything); TestFGDBatchEqualsSequential checks it with these.

// Arrivals is gpud's earlier FGD arrival sequence (PaperVariant
// "reshuffle"): the trace's tasks in a seeded random order, the trace
// repeated (each pass shuffled anew) until the tasks' GPU demand reaches
// demand percent of total GPUs.
func Arrivals(jobs []Job, totalGPUs, demand int, seed uint64) []Job {
	var out []Job
	if len(jobs) == 0 {
		return nil
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	target := float64(totalGPUs) * float64(demand) / 100
	sum := 0.0
	for sum < target {
		perm := r.Perm(len(jobs))
		gained := false
		for _, i := range perm {
			if sum >= target {
				break
			}
			out = append(out, jobs[i])
			sum += jobs[i].GPUs()
			gained = gained || jobs[i].GPUs() > 0
		}
		if !gained {
			return out // no task asks for a GPU: the demand never grows
		}
	}
	return out
}

// Workload is the trace's mix of requests for sched's fgd placement (the
// FGD paper's target workload: the whole trace, popularity by count).
func Workload(jobs []Job, milliCPU bool) []sched.Demand {
	type key struct {
		gpus, cpus int
		frac       float64
		mem        int64
		model      string
	}
	n := map[key]int{}
	var order []key
	for i := range jobs {
		r := request(&jobs[i], milliCPU)
		k := key{gpus: r.GPUsPerNode, cpus: r.CPUsPerNode, frac: r.GPUFraction, mem: r.MemMiB, model: r.GPUModel}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k] += max(r.Nodes, 1)
	}
	out := make([]sched.Demand, 0, len(order))
	for _, k := range order {
		out = append(out, sched.Demand{GPUs: k.gpus, Fraction: k.frac, CPUs: k.cpus, MemMiB: k.mem, Model: k.model, Weight: float64(n[k])})
	}
	return out
}

// request is j's per-node request as the controller normalises it; with
// milliCPU, CPUs are counted in thousandths of a core (nodes too), as the
// openb trace gives them.
func request(j *Job, milliCPU bool) spec.Resources {
	r := spec.Resources{Nodes: max(j.Nodes, 1), CPUsPerNode: max(1, (j.CPUMilli+999)/1000), MemMiB: j.MemMiB,
		GPUsPerNode: j.GPUsPerNode, GPUModel: j.Model}
	if milliCPU {
		r.CPUsPerNode = max(1, j.CPUMilli)
	}
	if j.GPUMilli > 0 {
		r.GPUsPerNode, r.GPUFraction = 0, float64(j.GPUMilli)/1000
	}
	return r
}

// fgdNodes are the cluster's nodes, idle, with CPUs in thousandths.
func fgdNodes(specs []NodeSpec) []sched.Node {
	nodes := make([]sched.Node, len(specs))
	for i, ns := range specs {
		n := sched.Node{Name: ns.Name, State: spec.NodeIdle, CPUs: ns.CPUs * 1000, FreeCPUs: ns.CPUs * 1000, MemMiB: ns.MemMiB, FreeMemMiB: ns.MemMiB}
		for g := range ns.GPUs {
			n.GPUs = append(n.GPUs, sched.GPU{UUID: fmt.Sprintf("%s-gpu%d", ns.Name, g), Model: ns.Model, Free: true, FreeFraction: 1})
		}
		nodes[i] = n
	}
	return nodes
}

// applyAlloc books a start's part on its node as the controller reports
// it: a whole GPU is no longer Free; a share lowers FreeFraction.
func applyAlloc(n *sched.Node, a spec.NodeAlloc) {
	n.FreeCPUs -= a.CPUs
	n.FreeMemMiB -= a.MemMiB
	n.Allocs++
	n.State = spec.NodeMixed
	for _, u := range a.GPUs {
		for k := range n.GPUs {
			g := &n.GPUs[k]
			if g.UUID != u {
				continue
			}
			g.Free = false
			if a.GPUFraction > 0 && a.GPUFraction < 1 {
				g.FreeFraction = max(g.FreeFraction-a.GPUFraction, 0)
			} else {
				g.FreeFraction = 0
			}
		}
	}
}
