package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// RunSched runs the paper's experiment (the same arrivals per seed, the
// same GPU-node cluster, CPU and memory accounting and metric as Run) with
// every placement decided by the production scheduler, sched.Schedule,
// under placement pl.
//
// The arrivals never leave and carry no time limits, so one Schedule
// cycle holding them all as pending jobs in arrival order decides each
// exactly as a cycle per arrival would: a job that does not fit when its
// turn comes never fits later, so no reservation forms and no job waits
// for another (TestFGDBatchEqualsSequential checks this equivalence).
func (p *PaperSetup) RunSched(pl sched.Placement, opts PaperOptions) (*PaperResult, error) {
	s := p.s
	start := time.Now()
	maxK := opts.MaxK
	if maxK <= 0 {
		maxK = paperMaxKPoint
	}
	order, _ := s.arrivals(opts.Seed, opts.Variant)
	limit := int64(float64(maxK+1) / 100 * float64(s.total))
	var sum int64
	for i, ti := range order {
		sum += s.tasks[ti].gpuMilli()
		if sum > limit {
			order = order[:i+1]
			break
		}
	}
	nodes := make([]sched.Node, len(s.nodes))
	for i, pn := range s.nodes {
		n := sched.Node{Name: fmt.Sprintf("n%05d", i), State: spec.NodeIdle, CPUs: int(pn.cpu), FreeCPUs: int(pn.cpu), MemMiB: pn.mem, FreeMemMiB: pn.mem}
		for g := range pn.n {
			n.GPUs = append(n.GPUs, sched.GPU{UUID: fmt.Sprintf("n%05d-gpu%d", i, g), Model: s.models[pn.model], Free: true, FreeFraction: 1})
		}
		nodes[i] = n
	}
	snap := &sched.Snapshot{Nodes: nodes, Workload: s.workload(), Jobs: make([]sched.Job, len(order))}
	for i, ti := range order {
		snap.Jobs[i] = sched.Job{ID: spec.JobID(i + 1), SubmitTime: Epoch.Add(time.Duration(i)), Req: s.tasks[ti].request()}
	}
	plan := sched.Schedule(snap, Epoch.Add(time.Duration(len(order))), sched.Config{Placement: pl})
	placed := make([]bool, len(order))
	for _, st := range plan.Starts {
		placed[st.JobID-1] = true
	}
	res := &PaperResult{Policy: "sched:" + string(pl), Seed: opts.Seed, TotalGPUs: int(s.total / 1000), Arrived: len(order), Placed: len(plan.Starts)}
	arr, use := make([]int64, len(order)), make([]int64, len(order))
	var arrived, used int64
	for i, ti := range order {
		g := s.tasks[ti].gpuMilli()
		arrived += g
		if placed[i] {
			used += g
		}
		arr[i], use[i] = arrived, used
	}
	res.Alloc = curve(arr, use, s.total, maxK, opts.Variant.Metric == "first")
	res.Wall = time.Since(start)
	return res, nil
}

// request is t as the controller would normalise it (CPUs in thousandths
// of a core, as the cluster's nodes are given here).
func (t *pTask) request() spec.Resources {
	r := spec.Resources{Nodes: 1, CPUsPerNode: max(1, int(t.cpu)), MemMiB: t.mem, GPUModel: strings.ToLower(t.spec)}
	switch {
	case t.share():
		r.GPUFraction = float64(t.milli) / 1000
	case t.num > 0:
		r.GPUsPerNode = t.num
	}
	return r
}

// workload is the trace's mix of requests for sched's fgd placement: the
// whole trace, by count (gpud's own choice; the paper's FGD keeps the
// most common shapes that make up 95% of the tasks).
func (s *paperSetup) workload() []sched.Demand {
	type key struct {
		gpus, cpus int
		frac       float64
		mem        int64
		model      string
	}
	n := map[key]int{}
	var order []key
	for i := range s.tasks {
		r := s.tasks[i].request()
		k := key{gpus: r.GPUsPerNode, cpus: r.CPUsPerNode, frac: r.GPUFraction, mem: r.MemMiB, model: r.GPUModel}
		if n[k] == 0 {
			order = append(order, k)
		}
		n[k]++
	}
	out := make([]sched.Demand, 0, len(order))
	for _, k := range order {
		out = append(out, sched.Demand{GPUs: k.gpus, Fraction: k.frac, CPUs: k.cpus, MemMiB: k.mem, Model: k.model, Weight: float64(n[k])})
	}
	return out
}
