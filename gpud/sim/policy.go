package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Order is how the simulator sets sched.Job.Priority; Schedule itself
// sorts by (priority desc, submit asc, id asc).
type Order int

// Orders.
const (
	// OrderFCFS gives every job priority 0: submit order.
	OrderFCFS Order = iota
	// OrderSJF is an oracle: shorter true run time first (a bound, not a
	// policy a real scheduler can run).
	OrderSJF
	// OrderPriority uses Policy.Priority (the controller's rule).
	OrderPriority
)

// Backfill is what happens behind a job that does not fit.
type Backfill int

// Backfill modes.
const (
	// BackfillNone is strict FCFS: no job starts after the first one in
	// Schedule's order that does not fit. The driver keeps the Plan's
	// starts up to that job (a filter on the Plan, not a scheduler).
	BackfillNone Backfill = iota
	// BackfillSched applies the whole Plan (preemptions first, then
	// starts) and gives Schedule the running jobs and every job's time
	// limit (the estimate), so production backfill (sched.Config's
	// BackfillDepth and BackfillWindow) and preemption take effect.
	BackfillSched
	// BackfillEASY is the simulator's EASY baseline: strict FCFS up to the
	// first blocked job (the head); the head is reserved the earliest time
	// it fits as running jobs end at their estimated ends (found by asking
	// Schedule about the head alone); then later jobs start if Schedule
	// places them without the head's reserved GPUs, or if they end (by
	// estimate) before the reservation. Every placement is Schedule's.
	BackfillEASY
)

// Policy is one scheduling configuration to compare.
type Policy struct {
	Name     string
	Order    Order
	Backfill Backfill
	// Config is passed to every Schedule call.
	Config sched.Config
	// Priority is OrderPriority's job priority at virtual time now; nil
	// gives every job 0.
	Priority func(j *Job, now time.Duration) int64
	// QOS and Partitions are the tables every snapshot carries, and
	// JobQOS and JobPartition the QOS and partition of every trace job
	// (all nodes are in it): with the controller's (controller.SchedPolicy)
	// its QOS limits, tiers and placement apply as they would there.
	QOS                  []sched.QOS
	Partitions           []sched.Partition
	JobQOS, JobPartition string
}

// Policies lists the named policies of Named.
var Policies = []string{"fcfs", "fcfs-easy", "fcfs-conservative", "sjf-easy", "sched", "fcfs-easy-sim", "sjf-easy-sim", "sjf"}

// Named returns a named policy. Production backfill (sched.Schedule with
// the running jobs and time limits in the snapshot): fcfs-easy
// (BackfillDepth 1: only the first blocked job gets a reservation),
// fcfs-conservative (every blocked job does), sjf-easy (oracle order, depth
// 1) and sched (alias multifactor: cfg as given, the configured policy).
// Strict FCFS (fcfs, sjf) filters the Plan at the first blocked job. The
// simulator's own EASY baseline, to cross-check production backfill:
// fcfs-easy-sim, sjf-easy-sim.
func Named(name string, cfg sched.Config, prio func(*Job, time.Duration) int64) (Policy, error) {
	p := Policy{Name: name, Config: cfg}
	plain := sched.Config{MaxStartsPerCycle: cfg.MaxStartsPerCycle}
	switch name {
	case "fcfs-easy", "fcfs-conservative", "sjf-easy":
		p.Config, p.Backfill = plain, BackfillSched
		if name != "fcfs-conservative" {
			p.Config.BackfillDepth = 1
		}
		if name == "sjf-easy" {
			p.Order = OrderSJF
		}
	case "fcfs":
		p.Config = plain
	case "fcfs-easy-sim":
		p.Config, p.Backfill = plain, BackfillEASY
	case "sjf":
		p.Config, p.Order = plain, OrderSJF
	case "sjf-easy-sim":
		p.Config, p.Order, p.Backfill = plain, OrderSJF, BackfillEASY
	case "sched", "multifactor":
		p.Order, p.Backfill, p.Priority = OrderPriority, BackfillSched, prio
	default:
		return p, fmt.Errorf("unknown policy %q (use %s)", name, strings.Join(Policies, ", "))
	}
	return p, nil
}

func (p *Policy) priority(j *Job, now, _ time.Duration) int64 {
	switch p.Order {
	case OrderSJF:
		return -int64(j.Runtime / time.Millisecond)
	case OrderPriority:
		if p.Priority != nil {
			return p.Priority(j, now)
		}
	}
	return 0
}

// Estimate is what the scheduler is told about a job's run time.
type Estimate struct {
	Mode   string
	Factor float64
	// Limit means the estimate is a time limit: jobs are killed at it.
	Limit bool
}

// ParseEstimate reads --runtime-estimate: exact (the true run time),
// trace (the trace's user estimate where it has one, else the true run
// time; not enforced), user (the same, but enforced as a time limit, as on
// the traced machine), or xN (N × the true run time, e.g. x2).
func ParseEstimate(s string) (Estimate, error) {
	switch s {
	case "", "exact":
		return Estimate{Mode: "exact"}, nil
	case "trace":
		return Estimate{Mode: "trace"}, nil
	case "user":
		return Estimate{Mode: "user", Limit: true}, nil
	}
	if f, err := strconv.ParseFloat(strings.TrimPrefix(s, "x"), 64); err == nil && strings.HasPrefix(s, "x") && f > 0 {
		return Estimate{Mode: s, Factor: f}, nil
	}
	return Estimate{}, fmt.Errorf("runtime estimate %q: use exact, trace, user or xN (for example x2)", s)
}

// Of is j's estimate.
func (e Estimate) Of(j *Job) time.Duration {
	switch e.Mode {
	case "trace", "user":
		if j.Estimate > 0 {
			return j.Estimate
		}
	case "exact", "":
	default:
		return time.Duration(float64(j.Runtime) * e.Factor)
	}
	return j.Runtime
}

// cycle runs one scheduling cycle under the policy.
func (e *engine) cycle() {
	jobs := e.pendingJobs()
	switch e.opts.Policy.Backfill {
	case BackfillSched:
		for {
			plan := e.call(nil, jobs)
			if e.opts.OnPlan != nil {
				e.opts.OnPlan(e.now, plan)
			}
			e.preempt(plan)
			started := map[int]bool{}
			for _, s := range plan.Starts {
				e.apply(s)
				started[int(s.JobID)-1] = true
			}
			e.removePending(started)
			// A cycle that reaches MaxStartsPerCycle is followed at once by
			// the next, as in the controller.
			if most := e.opts.Policy.Config.MaxStartsPerCycle; most <= 0 || len(plan.Starts) < most || len(e.pending) == 0 {
				break
			}
			jobs = e.pendingJobs()
		}
	case BackfillNone:
		started := map[int]bool{}
		e.strict(jobs, started)
		e.removePending(started)
	case BackfillEASY:
		started := map[int]bool{}
		head := e.strict(jobs, started)
		if head >= 0 {
			e.backfill(jobs[head], jobs[head+1:], started)
		}
		e.removePending(started)
	}
}

// strict starts jobs in Schedule's order up to the first that does not
// fit and returns its index in jobs (-1 if all started). It hands Schedule
// the queue in chunks, so a long blocked queue costs one small call: the
// starts Schedule makes before the first blocked job do not depend on the
// jobs after it.
func (e *engine) strict(jobs []sched.Job, started map[int]bool) int {
	chunk := 16
	for off := 0; off < len(jobs); off += chunk {
		part := jobs[off:min(off+chunk, len(jobs))]
		plan := e.call(nil, part)
		byID := make(map[spec.JobID]int, len(plan.Starts))
		for k, s := range plan.Starts {
			byID[s.JobID] = k
		}
		for k := range part {
			s, ok := byID[part[k].ID]
			if !ok {
				return off + k
			}
			e.apply(plan.Starts[s])
			started[int(part[k].ID)-1] = true
		}
		chunk *= 2
	}
	return -1
}

type easyCache struct {
	valid    bool
	version  uint64
	head     spec.JobID
	ok       bool
	shadow   time.Duration
	reserved []gpuRef
}

// backfill is the EASY baseline behind a blocked head.
func (e *engine) backfill(head sched.Job, rest []sched.Job, started map[int]bool) {
	var cands []sched.Job
	for _, j := range rest {
		if !started[int(j.ID)-1] {
			cands = append(cands, j)
		}
	}
	if len(cands) == 0 {
		return
	}
	shadow, reserved, ok := e.reservation(head)
	if !ok {
		// The head fits nowhere even when everything running ends: nothing
		// to protect.
		for _, s := range e.call(nil, cands).Starts {
			e.apply(s)
			started[int(s.JobID)-1] = true
		}
		return
	}
	// Pass 1: anything Schedule places outside the head's reserved GPUs.
	nodes := slices.Clone(e.nodes)
	copied := map[int32]bool{}
	for _, g := range reserved {
		if !copied[g.node] {
			nodes[g.node].GPUs = slices.Clone(nodes[g.node].GPUs)
			copied[g.node] = true
		}
		nodes[g.node].GPUs[g.gpu].Free = false
	}
	for _, s := range e.call(nodes, cands).Starts {
		e.apply(s)
		started[int(s.JobID)-1] = true
	}
	// Pass 2: jobs that end (by estimate) before the reservation may use
	// anything free, reserved GPUs included.
	var short []sched.Job
	for _, j := range cands {
		i := int(j.ID) - 1
		if !started[i] && e.now+e.estimate(i) <= max(shadow, e.now) {
			short = append(short, j)
		}
	}
	if len(short) == 0 {
		return
	}
	for _, s := range e.call(nil, short).Starts {
		e.apply(s)
		started[int(s.JobID)-1] = true
	}
}

// reservation finds when the head fits if running jobs end at their
// estimated ends, and on which GPUs, by binary search over how many of
// them (in order of estimated end) have ended; each probe is a Schedule
// call with the head alone on the nodes that could matter (those with a
// free GPU now or one freed by the probe).
func (e *engine) reservation(head sched.Job) (time.Duration, []gpuRef, bool) {
	c := &e.easy
	if c.valid && c.version == e.version && c.head == head.ID {
		return c.shadow, c.reserved, c.ok
	}
	runs := make([]*running, 0, len(e.run))
	for _, r := range e.run {
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b *running) int {
		if c := cmp.Compare(a.estEnd, b.estEnd); c != 0 {
			return c
		}
		return cmp.Compare(a.job, b.job)
	})
	probe := func(k int) *sched.Start {
		touched := map[int]*sched.Node{}
		get := func(ni int) *sched.Node {
			if n, ok := touched[ni]; ok {
				return n
			}
			n := e.nodes[ni]
			n.GPUs = slices.Clone(n.GPUs)
			touched[ni] = &n
			return &n
		}
		for _, r := range runs[:k] {
			for x, ni := range r.nodes {
				n := get(ni)
				n.FreeCPUs += r.cpus[x]
				n.FreeMemMiB += r.mem[x]
				n.Allocs--
			}
			for _, g := range r.gpus {
				get(int(g.node)).GPUs[g.gpu].Free = true
			}
		}
		var nodes []sched.Node
		for ni := range e.nodes {
			if n, ok := touched[ni]; ok {
				nodes = append(nodes, *n)
			} else if e.busy[ni] < len(e.nodes[ni].GPUs) || head.Req.GPUsPerNode == 0 {
				nodes = append(nodes, e.nodes[ni])
			}
		}
		plan := e.call(nodes, []sched.Job{head})
		if len(plan.Starts) == 0 {
			return nil
		}
		return &plan.Starts[0]
	}
	*c = easyCache{valid: true, version: e.version, head: head.ID}
	k, found := smallest(len(runs), func(k int) bool { return probe(k) != nil })
	if !found {
		return 0, nil, false
	}
	s := probe(k)
	c.ok = true
	if k > 0 {
		c.shadow = runs[k-1].estEnd
	}
	for _, na := range s.Nodes {
		for _, u := range na.GPUs {
			c.reserved = append(c.reserved, e.gpuIx[u])
		}
	}
	return c.shadow, c.reserved, true
}

// smallest finds the smallest k in [0, n] with ok(k), given ok is monotone.
func smallest(n int, ok func(int) bool) (int, bool) {
	if !ok(n) {
		return 0, false
	}
	lo, hi := 0, n
	for lo < hi {
		mid := (lo + hi) / 2
		if ok(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

// preempt applies the plan's preemptions: a victim stops now, goes back
// to the queue and later restarts from the beginning (checkpoint modes are
// treated like requeue: the trace has no checkpoint cost model).
func (e *engine) preempt(plan sched.Plan) {
	for _, p := range plan.Preemptions {
		i := int(p.Victim) - 1
		if _, ok := e.run[i]; !ok {
			continue
		}
		e.finish(i)
		e.res[i].Started, e.res[i].Killed = false, false
		e.pending = append(e.pending, i)
		e.preemptions++
	}
}
