package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// FGD mode: the allocation-rate experiment of Weng et al., "Beware of
// Fragmentation" (USENIX ATC'23) on the Alibaba openb trace. Tasks arrive
// in a seeded random order and never leave; each is placed when it
// arrives or is dropped, until the GPU demand that has arrived reaches
// the target share of the cluster's GPUs. The metric is the allocation
// rate (allocated GPUs / all GPUs) as a function of arrived demand.
//
// With no departures and no time limits a Schedule cycle that holds the
// whole arrival sequence as pending jobs in arrival order decides each job
// exactly as a cycle per arrival would (a job that does not fit now never
// fits later, so no reservation forms and nothing waits for anything), so
// RunFGD makes one Schedule call per run; TestFGDBatchEqualsSequential
// checks the equivalence.

// FGDOptions configure one FGD run.
type FGDOptions struct {
	Nodes     []NodeSpec
	Placement sched.Placement
	Seed      uint64
	// Demand is the arrived GPU demand to stop at, in percent of the
	// cluster's GPUs (100 when 0).
	Demand int
}

// FGDResult is one FGD run.
type FGDResult struct {
	Placement sched.Placement
	Seed      uint64
	TotalGPUs int
	// Alloc[k] is the allocation rate in percent when the arrived GPU
	// demand first reached k percent of the cluster, k = 0..Demand.
	Alloc []float64
	// Arrived and Placed count tasks; Frag is the expected GPU
	// fragmentation at the end, in percent of the cluster's GPUs.
	Arrived, Placed int
	Frag            float64
	Wall            time.Duration
}

// Arrivals is the FGD arrival sequence: the trace's tasks in a seeded
// random order, the trace repeated (each pass shuffled anew) until the
// tasks' GPU demand reaches demand percent of total GPUs.
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

// RunFGD runs the FGD experiment once: jobs (the trace) in the order of
// Arrivals, placed by sched.Schedule under opts.Placement.
func RunFGD(jobs []Job, opts FGDOptions) (*FGDResult, error) {
	if len(opts.Nodes) == 0 {
		return nil, fmt.Errorf("simulate: the cluster has no nodes")
	}
	demand := opts.Demand
	if demand <= 0 {
		demand = 100
	}
	start := time.Now()
	total := TotalGPUs(opts.Nodes)
	if total == 0 {
		return nil, fmt.Errorf("simulate --fgd: the cluster has no GPUs")
	}
	arr := Arrivals(jobs, total, demand, opts.Seed)
	nodes := fgdNodes(opts.Nodes)
	snap := &sched.Snapshot{Nodes: nodes, Workload: Workload(jobs, true), Jobs: make([]sched.Job, len(arr))}
	for i := range arr {
		snap.Jobs[i] = sched.Job{ID: spec.JobID(i + 1), SubmitTime: Epoch.Add(time.Duration(i)), Req: request(&arr[i], true)}
	}
	plan := sched.Schedule(snap, Epoch.Add(time.Duration(len(arr))), sched.Config{Placement: opts.Placement})
	placed := make([]bool, len(arr))
	byNode := map[string]int{}
	for i := range nodes {
		byNode[nodes[i].Name] = i
	}
	for _, s := range plan.Starts {
		placed[s.JobID-1] = true
		for _, a := range s.Nodes {
			applyAlloc(&nodes[byNode[a.Node]], a)
		}
	}
	res := &FGDResult{Placement: opts.Placement, Seed: opts.Seed, TotalGPUs: total, Arrived: len(arr), Placed: len(plan.Starts)}
	var arrived, alloc float64
	res.Alloc = append(res.Alloc, 0) // nothing has arrived yet
	next := 1
	for i := range arr {
		g := arr[i].GPUs()
		arrived += g
		if placed[i] {
			alloc += g
		}
		for next <= demand && float64(next) <= 100*arrived/float64(total)+1e-9 {
			res.Alloc = append(res.Alloc, 100*alloc/float64(total))
			next++
		}
	}
	for next <= demand { // the trace ran out of GPU tasks
		res.Alloc = append(res.Alloc, math.NaN())
		next++
	}
	frag, _ := sched.Fragmentation(nodes, snap.Workload)
	res.Frag = 100 * frag / float64(total)
	res.Wall = time.Since(start)
	return res, nil
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
