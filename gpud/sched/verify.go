package sched

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// Verify checks a Plan against its Snapshot: every started job is pending
// in the snapshot and starts once, on exactly Nodes distinct schedulable
// nodes, no GPU is handed out twice or while already allocated, and no
// node goes over its CPUs or memory. Tests run it after every cycle; it
// returns every violation found.
func Verify(snap *Snapshot, plan Plan) error {
	nodes := map[string]*Node{}
	for i := range snap.Nodes {
		nodes[snap.Nodes[i].Name] = &snap.Nodes[i]
	}
	jobs := map[spec.JobID]*Job{}
	for i := range snap.Jobs {
		jobs[snap.Jobs[i].ID] = &snap.Jobs[i]
	}
	usedCPU := map[string]int{}
	usedMem := map[string]int64{}
	gpuTaken := map[string]spec.JobID{}
	// shared is the used share of GPUs held by fractional jobs only.
	shared := map[string]float64{}
	for _, n := range snap.Nodes {
		for _, g := range n.GPUs {
			switch {
			case g.Free:
			case g.FreeFraction > 0 && g.FreeFraction < 1 && !g.MIGEnabled && g.Profile == "":
				shared[g.UUID] = 1 - g.FreeFraction
			default:
				gpuTaken[g.UUID] = 0
			}
		}
	}
	mv := newMIGVerifier(snap)
	seen := map[spec.JobID]bool{}
	var errs []error
	for _, s := range plan.Starts {
		j, ok := jobs[s.JobID]
		if !ok {
			errs = append(errs, fmt.Errorf("job %d started but not pending in the snapshot", s.JobID))
			continue
		}
		if seen[s.JobID] {
			errs = append(errs, fmt.Errorf("job %d started twice", s.JobID))
		}
		seen[s.JobID] = true
		if len(s.Nodes) < max(j.Req.Nodes, 1) || len(s.Nodes) > wantNodes(j) {
			errs = append(errs, fmt.Errorf("job %d wants %d to %d nodes, got %d", j.ID, j.Req.Nodes, wantNodes(j), len(s.Nodes)))
		}
		// Every node is in the partition the job starts in: its own, or
		// one of its Alternatives named by the Start.
		part := j.Partition
		if s.Partition != "" {
			if !slices.Contains(j.Alternatives, s.Partition) {
				errs = append(errs, fmt.Errorf("job %d started in partition %s, not one of its own (%s, %v)", j.ID, s.Partition, j.Partition, j.Alternatives))
			}
			part = s.Partition
		}
		var names []string
		for _, a := range s.Nodes {
			n, ok := nodes[a.Node]
			if !ok {
				errs = append(errs, fmt.Errorf("job %d placed on unknown node %s", j.ID, a.Node))
				continue
			}
			if !schedulable(n.State) {
				errs = append(errs, fmt.Errorf("job %d placed on %s node %s", j.ID, n.State, n.Name))
			}
			if part != "" && !slices.Contains(n.Partitions, part) {
				errs = append(errs, fmt.Errorf("job %d placed on node %s, which is not in partition %s", j.ID, n.Name, part))
			}
			if slices.Contains(names, a.Node) {
				errs = append(errs, fmt.Errorf("job %d placed twice on node %s", j.ID, a.Node))
			}
			names = append(names, a.Node)
			if j.Req.GPUProfile == "" && len(a.GPUs) < j.Req.GPUsPerNode {
				errs = append(errs, fmt.Errorf("job %d got %d GPUs on %s, wants %d", j.ID, len(a.GPUs), a.Node, j.Req.GPUsPerNode))
			}
			usedCPU[a.Node] += a.CPUs
			usedMem[a.Node] += a.MemMiB
			if j.Req.GPUProfile != "" || len(a.MIG) > 0 {
				errs = append(errs, mv.check(j, n, a, gpuTaken)...) // mig.go
				continue
			}
			if f := a.GPUFraction; f != 0 || isFrac(j) {
				if f != j.Req.GPUFraction || len(a.GPUs) != 1 {
					errs = append(errs, fmt.Errorf("job %d wants %g of one GPU on %s, got %g of %d", j.ID, j.Req.GPUFraction, a.Node, f, len(a.GPUs)))
					continue
				}
				u := a.GPUs[0]
				i := slices.IndexFunc(n.GPUs, func(g GPU) bool { return g.UUID == u })
				switch {
				case i < 0:
					errs = append(errs, fmt.Errorf("GPU %s given to job %d is not on node %s", u, j.ID, a.Node))
				case n.GPUs[i].MIGEnabled || n.GPUs[i].Profile != "":
					errs = append(errs, fmt.Errorf("job %d got a share of MIG GPU %s", j.ID, u))
				}
				if prev, taken := gpuTaken[u]; taken {
					errs = append(errs, fmt.Errorf("GPU %s shared with job %d is held whole (by job %d; 0 = before the cycle)", u, j.ID, prev))
				}
				if shared[u]+f > 1+fracEps {
					errs = append(errs, fmt.Errorf("GPU %s over-shared: job %d's %g on top of %g", u, j.ID, f, shared[u]))
				}
				shared[u] += f
				continue
			}
			for _, u := range a.GPUs {
				if prev, taken := gpuTaken[u]; taken {
					errs = append(errs, fmt.Errorf("GPU %s given to job %d is already held (by job %d; 0 = before the cycle)", u, j.ID, prev))
				} else if mv.sliced[u] {
					errs = append(errs, fmt.Errorf("GPU %s given whole to job %d carries MIG slices", u, j.ID))
				} else if shared[u] > 0 {
					errs = append(errs, fmt.Errorf("GPU %s given whole to job %d is shared by fractional jobs", u, j.ID))
				}
				gpuTaken[u] = j.ID
				if !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return g.UUID == u }) {
					errs = append(errs, fmt.Errorf("GPU %s given to job %d is not on node %s", u, j.ID, a.Node))
				}
			}
		}
	}
	for name, cpus := range usedCPU {
		n := nodes[name]
		if n == nil {
			continue
		}
		if cpus > n.FreeCPUs {
			errs = append(errs, fmt.Errorf("node %s over CPU capacity: %d planned, %d free", name, cpus, n.FreeCPUs))
		}
		if usedMem[name] > n.FreeMemMiB {
			errs = append(errs, fmt.Errorf("node %s over memory capacity: %d MiB planned, %d MiB free", name, usedMem[name], n.FreeMemMiB))
		}
	}
	for _, p := range plan.Pending {
		if seen[p.JobID] {
			errs = append(errs, fmt.Errorf("job %d both started and pending", p.JobID))
		}
		if p.Reason == "" {
			errs = append(errs, fmt.Errorf("job %d pending without a reason", p.JobID))
		}
		seen[p.JobID] = true
	}
	for id := range jobs {
		if !seen[id] {
			errs = append(errs, fmt.Errorf("job %d neither started nor pending", id))
		}
	}
	return errors.Join(errs...)
}

// VerifyPlan is Verify plus time and policy: with the running jobs' expected
// ends, the starts (held for their time limits) and then the reservations
// must fit on every node at every moment, so no start delays a
// reservation and no reservation overlaps another; every gang start or
// reservation has all its nodes; every preemption stops a running job of a
// QOS the preemptor's QOS lists, with lower QOS priority and lower job
// priority, that has run at least PreemptMinRuntime.
func VerifyPlan(snap *Snapshot, now time.Time, cfg Config, plan Plan) error {
	errs := []error{Verify(snap, plan)}
	c := newCycle(&Snapshot{Nodes: snap.Nodes, QOS: snap.QOS, Partitions: snap.Partitions,
		Accounts: snap.Accounts, Usage: snap.Usage, Fairshare: snap.Fairshare}, now, cfg)
	jobs := map[spec.JobID]*Job{}
	for i := range snap.Jobs {
		jobs[snap.Jobs[i].ID] = &snap.Jobs[i]
	}
	running := map[spec.JobID]*RunningJob{}
	for i := range snap.Running {
		running[snap.Running[i].ID] = &snap.Running[i]
	}
	qos := map[string]*QOS{}
	for i := range snap.QOS {
		qos[snap.QOS[i].Name] = &snap.QOS[i]
	}
	victims := map[spec.JobID]bool{}
	for _, p := range plan.Preemptions {
		victims[p.Victim] = true
		v, j := running[p.Victim], jobs[p.Preemptor]
		if v == nil || j == nil {
			errs = append(errs, fmt.Errorf("preemption %d by %d: victim not running or preemptor not pending", p.Victim, p.Preemptor))
			continue
		}
		pq, vq := qos[j.QOS], qos[v.QOS]
		switch {
		case j.AwaitingVictims:
			errs = append(errs, fmt.Errorf("job %d preempts job %d while it awaits the jobs it preempted before", j.ID, v.ID))
		case pq == nil || vq == nil || !slices.Contains(pq.Preempt, vq.Name):
			errs = append(errs, fmt.Errorf("job %d (QOS %q) may not preempt job %d (QOS %q)", j.ID, j.QOS, v.ID, v.QOS))
		case vq.Priority >= pq.Priority:
			errs = append(errs, fmt.Errorf("job %d preempts job %d of a higher or equal QOS", j.ID, v.ID))
		case v.Priority >= c.priority(j).Total:
			errs = append(errs, fmt.Errorf("job %d preempts job %d of higher or equal priority", j.ID, v.ID))
		case now.Sub(v.Start) < cfg.PreemptMinRuntime:
			errs = append(errs, fmt.Errorf("job %d preempted before its minimum run time", v.ID))
		}
	}
	byName := map[string]*workNode{}
	uuid := map[string]map[string]int{}
	for _, w := range c.nodes {
		byName[w.n.Name] = w
		m := map[string]int{}
		for k, g := range w.n.GPUs {
			m[g.UUID] = k
		}
		uuid[w.n.Name] = m
	}
	resOf := func(a spec.NodeAlloc) backfill.Res {
		r := backfill.Res{CPUs: a.CPUs, MemMiB: a.MemMiB, Allocs: 1}
		for _, u := range a.GPUs {
			if k, ok := uuid[a.Node][u]; ok && k < 64 {
				r.GPUs |= 1 << k
			}
		}
		return r
	}
	// A shared GPU comes back when its last sharer ends (victim or not).
	shareEnd := map[*workNode]map[uint64]int64{}
	for i := range snap.Running {
		r := &snap.Running[i]
		for _, a := range r.Nodes {
			w := byName[a.Node]
			if w == nil || a.Ended {
				continue
			}
			res := resOf(a)
			res.GPUs &= w.ok
			end := backfill.Forever
			switch {
			case victims[r.ID]:
				end = 0
			case r.TimeLimit > 0:
				end = max(int64(r.Start.Add(r.TimeLimit).Sub(now)), 1)
			}
			if a.GPUFraction > 0 && a.GPUFraction < 1 {
				if shareEnd[w] == nil {
					shareEnd[w] = map[uint64]int64{}
				}
				if res.GPUs != 0 {
					if e, ok := shareEnd[w][res.GPUs]; !ok || end > e {
						shareEnd[w][res.GPUs] = end
					}
				}
				res.GPUs = 0
			}
			if end < backfill.Forever {
				w.prof.Release(end, res)
			}
		}
	}
	for w, m := range shareEnd {
		for g, end := range m {
			if end < backfill.Forever {
				w.prof.Release(end, backfill.Res{GPUs: g})
			}
		}
	}
	// sharedGPU: GPU bits already held for fractional starts of this plan
	// or shared before it; a further share (checked by Verify) holds them
	// on for its own duration without a new availability check.
	sharedGPU := map[*workNode]uint64{}
	for _, w := range c.nodes {
		for k, g := range w.n.GPUs {
			if k < 64 && !g.Free && g.FreeFraction > 0 && g.FreeFraction < 1 {
				sharedGPU[w] |= 1 << k
			}
		}
	}
	take := func(what string, id spec.JobID, a spec.NodeAlloc, from, to int64) {
		w := byName[a.Node]
		if w == nil {
			return
		}
		res := resOf(a)
		free := w.prof.Avail(from, to)
		if what == "start" && a.GPUFraction > 0 && a.GPUFraction < 1 {
			if sharedGPU[w]&res.GPUs != 0 {
				free.GPUs |= res.GPUs // the GPU's share was checked by Verify
			}
			sharedGPU[w] |= res.GPUs
		}
		if free.GPUs&res.GPUs != res.GPUs || free.CPUs < res.CPUs || free.MemMiB < res.MemMiB {
			errs = append(errs, fmt.Errorf("%s of job %d on %s at +%s overlaps earlier starts or reservations",
				what, id, a.Node, time.Duration(from)))
		}
		w.prof.Hold(from, to, res)
	}
	for _, s := range plan.Starts {
		dur := backfill.Forever
		if j := jobs[s.JobID]; j != nil && j.TimeLimit > 0 {
			dur = int64(j.TimeLimit)
		}
		if s.TimeLimit > 0 {
			dur = int64(s.TimeLimit) // --time-min shortened it
		}
		for _, a := range s.Nodes {
			take("start", s.JobID, a, 0, dur)
		}
	}
	for _, r := range plan.Reservations {
		j := jobs[r.JobID]
		if j == nil {
			errs = append(errs, fmt.Errorf("reservation for job %d, which is not pending", r.JobID))
			continue
		}
		if len(r.Nodes) != max(j.Req.Nodes, 1) {
			errs = append(errs, fmt.Errorf("reservation of job %d has %d nodes, wants %d", j.ID, len(r.Nodes), j.Req.Nodes))
		}
		from := int64(r.Start.Sub(now))
		if from < 0 {
			errs = append(errs, fmt.Errorf("reservation of job %d starts in the past", j.ID))
		}
		to := backfill.Forever
		if !r.End.IsZero() {
			to = int64(r.End.Sub(now))
		}
		for _, a := range r.Nodes {
			take("reservation", r.JobID, a, from, to)
		}
	}
	return errors.Join(errs...)
}
