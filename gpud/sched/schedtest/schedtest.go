// Package schedtest runs the scheduler core over simulated time: a Harness
// holds nodes, jobs, usage and a fake clock; Cycle builds a Snapshot, calls
// sched.Schedule, checks the invariants (sched.VerifyPlan) and applies the
// Plan; Advance moves the clock and finishes the jobs that are due. No
// goroutines, no real clock: multi-cycle scenarios run in milliseconds.
package schedtest

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/preempt"
	"github.com/gpud/gpud/gpud/spec"
)

// TB is the part of testing.TB the harness uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// T0 is the harness's default start time.
var T0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// Harness is a simulated cluster.
type Harness struct {
	t   TB
	Now time.Time
	Cfg sched.Config
	// Nodes are capacities; their Free fields are computed each cycle.
	Nodes      []sched.Node
	QOS        []sched.QOS
	Partitions []sched.Partition
	Accounts   fairshare.Tree
	// Usage holds finished jobs' usage (running ones are added per cycle).
	Usage []fairshare.Usage

	pending  map[spec.JobID]*sched.Job
	running  map[spec.JobID]*Running
	runtime  map[spec.JobID]time.Duration
	attempts map[spec.JobID]int
	// State records each job's last outcome.
	Reasons   map[spec.JobID]sched.Pending
	Finished  []spec.JobID
	Cancelled []spec.JobID
	Preempted []sched.Preemption
	Plans     []sched.Plan
	cycles    int
}

// Running is a job holding resources in the harness.
type Running struct {
	sched.RunningJob
	Job sched.Job
	// Ends is when the job finishes by itself (start + run time).
	Ends time.Time
}

// New returns an empty harness at T0.
func New(t TB, nodes ...sched.Node) *Harness {
	return &Harness{t: t, Now: T0, Nodes: nodes,
		pending: map[spec.JobID]*sched.Job{}, running: map[spec.JobID]*Running{}, runtime: map[spec.JobID]time.Duration{},
		attempts: map[spec.JobID]int{}, Reasons: map[spec.JobID]sched.Pending{}}
}

// Submit queues j (SubmitTime defaults to now); it runs for its time limit
// (forever without one) unless SubmitRuns says otherwise.
func (h *Harness) Submit(jobs ...sched.Job) {
	for _, j := range jobs {
		if j.SubmitTime.IsZero() {
			j.SubmitTime = h.Now
		}
		h.pending[j.ID] = &j
	}
}

// SubmitRuns queues j to run for d (which may be shorter than its limit).
func (h *Harness) SubmitRuns(j sched.Job, d time.Duration) {
	h.runtime[j.ID] = d
	h.Submit(j)
}

// Pending returns the pending job ids, sorted.
func (h *Harness) Pending() []spec.JobID { return sortedKeys(h.pending) }

// RunningIDs returns the running job ids, sorted.
func (h *Harness) RunningIDs() []spec.JobID { return sortedKeys(h.running) }

// IsRunning reports whether id is running.
func (h *Harness) IsRunning(id spec.JobID) bool { return h.running[id] != nil }

// Job returns the running job id, or nil.
func (h *Harness) Job(id spec.JobID) *Running { return h.running[id] }

// Attempts is how many times id has started.
func (h *Harness) Attempts(id spec.JobID) int { return h.attempts[id] }

func sortedKeys[V any](m map[spec.JobID]V) []spec.JobID {
	ids := make([]spec.JobID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Snapshot builds the scheduler's view of the harness now.
func (h *Harness) Snapshot() *sched.Snapshot {
	h.cycles++
	snap := &sched.Snapshot{ID: uint64(h.cycles), QOS: h.QOS, Partitions: h.Partitions, Accounts: h.Accounts,
		Usage: slices.Clone(h.Usage)}
	type used struct {
		cpus, allocs int
		mem          int64
		gpus         map[string]bool
		frac         map[string]float64 // shares held by fractional jobs
	}
	use := map[string]*used{}
	for _, id := range h.RunningIDs() {
		r := h.running[id]
		snap.Running = append(snap.Running, r.RunningJob)
		for _, a := range r.Nodes {
			u := use[a.Node]
			if u == nil {
				u = &used{gpus: map[string]bool{}, frac: map[string]float64{}}
				use[a.Node] = u
			}
			u.cpus += a.CPUs
			u.mem += a.MemMiB
			u.allocs++
			for _, g := range a.GPUs {
				if a.GPUFraction > 0 && a.GPUFraction < 1 {
					u.frac[g] += a.GPUFraction
				} else {
					u.gpus[g] = true
				}
			}
		}
		snap.Usage = append(snap.Usage, h.usageOf(r, time.Time{}))
	}
	for _, n := range h.Nodes {
		n.GPUs = slices.Clone(n.GPUs)
		n.FreeCPUs, n.FreeMemMiB = n.CPUs, n.MemMiB
		if u := use[n.Name]; u != nil {
			n.FreeCPUs -= u.cpus
			n.FreeMemMiB -= u.mem
			n.Allocs = u.allocs
			for i := range n.GPUs {
				g := &n.GPUs[i]
				g.Free = !u.gpus[g.UUID] && u.frac[g.UUID] == 0
				switch {
				case u.gpus[g.UUID]:
					g.FreeFraction = 0
				default:
					g.FreeFraction = max(1-u.frac[g.UUID], 0)
				}
			}
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	for _, id := range h.Pending() {
		snap.Jobs = append(snap.Jobs, *h.pending[id])
	}
	return snap
}

func (h *Harness) usageOf(r *Running, end time.Time) fairshare.Usage {
	u := fairshare.Usage{Account: r.Account, User: r.User, Start: r.Start, End: end}
	for _, a := range r.Nodes {
		u.GPUs += float64(len(a.GPUs))
		u.CPUs += a.CPUs
		u.MemMiB += a.MemMiB
	}
	u.Model = r.Job.Req.GPUModel
	return u
}

// Cycle runs one scheduling cycle, checks the invariants and applies the
// plan: preemptions (requeue/checkpoint → pending again with the same id and
// submit time; cancel → gone), then starts.
func (h *Harness) Cycle() sched.Plan {
	h.t.Helper()
	snap := h.Snapshot()
	plan := sched.Schedule(snap, h.Now, h.Cfg)
	if err := sched.VerifyPlan(snap, h.Now, h.Cfg, plan); err != nil {
		h.t.Fatalf("cycle %d at %s: invariants: %v", snap.ID, h.Now.Format(time.TimeOnly), err)
	}
	for _, p := range plan.Preemptions {
		r := h.running[p.Victim]
		if r == nil {
			h.t.Fatalf("preempted job %d is not running", p.Victim)
		}
		delete(h.running, p.Victim)
		h.Usage = append(h.Usage, h.usageOf(r, h.Now))
		h.Preempted = append(h.Preempted, p)
		if p.Mode == preempt.ModeCancel {
			h.Cancelled = append(h.Cancelled, p.Victim)
			continue
		}
		j := r.Job
		h.pending[j.ID] = &j
	}
	for _, s := range plan.Starts {
		j := h.pending[s.JobID]
		if j == nil {
			h.t.Fatalf("started job %d is not pending", s.JobID)
		}
		prio := h.priorityOf(snap, s.JobID)
		delete(h.pending, s.JobID)
		delete(h.Reasons, s.JobID)
		h.attempts[j.ID]++
		run := h.runtime[j.ID]
		if run == 0 {
			run = j.TimeLimit
		}
		if s.Partition != "" {
			j.Partition = s.Partition // started in one of its -p a,b alternatives
		}
		r := &Running{Job: *j, RunningJob: sched.RunningJob{ID: j.ID, Nodes: s.Nodes, Start: h.Now, TimeLimit: j.TimeLimit,
			Priority: prio, QOS: j.QOS, Account: j.Account, User: j.User, Partition: j.Partition}}
		if run > 0 {
			r.Ends = h.Now.Add(run)
		}
		h.running[j.ID] = r
	}
	for _, p := range plan.Pending {
		h.Reasons[p.JobID] = p
	}
	h.Plans = append(h.Plans, plan)
	return plan
}

func (h *Harness) priorityOf(snap *sched.Snapshot, id spec.JobID) int64 {
	for _, p := range sched.Priorities(&sched.Snapshot{Nodes: snap.Nodes, Jobs: []sched.Job{*h.pending[id]}, QOS: snap.QOS,
		Partitions: snap.Partitions, Accounts: snap.Accounts, Usage: snap.Usage}, h.Now, h.Cfg) {
		return p.Total
	}
	return 0
}

// Advance moves the clock by d, finishing every job due by then (in end
// order); it does not run cycles.
func (h *Harness) Advance(d time.Duration) {
	h.Now = h.Now.Add(d)
	var due []*Running
	for _, r := range h.running {
		if !r.Ends.IsZero() && !r.Ends.After(h.Now) {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *Running) int {
		if c := a.Ends.Compare(b.Ends); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, r := range due {
		delete(h.running, r.ID)
		h.Usage = append(h.Usage, h.usageOf(r, r.Ends))
		h.Finished = append(h.Finished, r.ID)
	}
}

// Run alternates Cycle and Advance(step) until nothing is pending or
// running, or limit cycles passed; it returns the cycles run.
func (h *Harness) Run(step time.Duration, limit int) int {
	h.t.Helper()
	for i := range limit {
		if len(h.pending) == 0 && len(h.running) == 0 {
			return i
		}
		h.Cycle()
		h.Advance(step)
	}
	return limit
}

// Reason is id's last pending reason ("" when not pending).
func (h *Harness) Reason(id spec.JobID) string { return h.Reasons[id].Reason }

// ExpectedStart is id's last expected start (zero when unknown).
func (h *Harness) ExpectedStart(id spec.JobID) time.Time { return h.Reasons[id].ExpectedStart }

// JobBuilder builds a sched.Job.
type JobBuilder struct{ j sched.Job }

// MakeJob starts a 1-node, 1-CPU job with no GPUs.
func MakeJob(id spec.JobID) *JobBuilder {
	return &JobBuilder{j: sched.Job{ID: id, Req: spec.Resources{Nodes: 1, CPUsPerNode: 1}}}
}

// The setters below set the field they name and return b.

func (b *JobBuilder) GPUs(n int) *JobBuilder             { b.j.Req.GPUsPerNode = n; return b }
func (b *JobBuilder) Fraction(f float64) *JobBuilder     { b.j.Req.GPUFraction = f; return b }
func (b *JobBuilder) Model(m string) *JobBuilder         { b.j.Req.GPUModel = m; return b }
func (b *JobBuilder) CPUs(n int) *JobBuilder             { b.j.Req.CPUsPerNode = n; return b }
func (b *JobBuilder) Mem(mib int64) *JobBuilder          { b.j.Req.MemMiB = mib; return b }
func (b *JobBuilder) Nodes(n int) *JobBuilder            { b.j.Req.Nodes = n; return b }
func (b *JobBuilder) Exclusive() *JobBuilder             { b.j.Req.Exclusive = true; return b }
func (b *JobBuilder) Time(d time.Duration) *JobBuilder   { b.j.TimeLimit = d; return b }
func (b *JobBuilder) QOS(q string) *JobBuilder           { b.j.QOS = q; return b }
func (b *JobBuilder) Account(a, user string) *JobBuilder { b.j.Account, b.j.User = a, user; return b }
func (b *JobBuilder) Priority(p int64) *JobBuilder       { b.j.Priority = p; return b }
func (b *JobBuilder) Partition(p string) *JobBuilder     { b.j.Partition = p; return b }

// Alternatives are the job's further partitions (sbatch -p a,b).
func (b *JobBuilder) Alternatives(p ...string) *JobBuilder { b.j.Alternatives = p; return b }
func (b *JobBuilder) Submit(t time.Time) *JobBuilder       { b.j.SubmitTime = t; return b }
func (b *JobBuilder) Nice(n int) *JobBuilder               { b.j.Nice = n; return b }
func (b *JobBuilder) Held() *JobBuilder                    { b.j.Held = true; return b }
func (b *JobBuilder) Begin(t time.Time) *JobBuilder        { b.j.BeginTime = t; return b }
func (b *JobBuilder) DependencyPending() *JobBuilder       { b.j.DependencyPending = true; return b }
func (b *JobBuilder) DependencyNeverSatisfied() *JobBuilder {
	b.j.DependencyNeverSatisfied = true
	return b
}

// Obj returns the job.
func (b *JobBuilder) Obj() sched.Job { return b.j }

// NodeBuilder builds a sched.Node (capacity; the harness computes Free).
type NodeBuilder struct {
	n     sched.Node
	model string
}

// MakeNode starts an idle 64-CPU, 512 GiB node in partition "batch".
func MakeNode(name string) *NodeBuilder {
	return &NodeBuilder{n: sched.Node{Name: name, State: spec.NodeIdle, Partitions: []string{"batch"}, CPUs: 64, FreeCPUs: 64,
		MemMiB: 512 << 10, FreeMemMiB: 512 << 10}, model: "h100"}
}

// GPUs adds n whole GPUs of the current model (h100 unless Model was set).
func (b *NodeBuilder) GPUs(n int) *NodeBuilder {
	base := len(b.n.GPUs)
	for i := range n {
		b.n.GPUs = append(b.n.GPUs, sched.GPU{UUID: fmt.Sprintf("GPU-%s-%d", b.n.Name, base+i), Model: b.model, Free: true, FreeFraction: 1})
	}
	return b
}
func (b *NodeBuilder) Model(m string) *NodeBuilder { b.model = m; return b }
func (b *NodeBuilder) CPUs(n int) *NodeBuilder {
	b.n.CPUs, b.n.FreeCPUs = n, n
	return b
}
func (b *NodeBuilder) Mem(mib int64) *NodeBuilder {
	b.n.MemMiB, b.n.FreeMemMiB = mib, mib
	return b
}
func (b *NodeBuilder) State(s spec.NodeState) *NodeBuilder { b.n.State = s; return b }
func (b *NodeBuilder) Features(f ...string) *NodeBuilder   { b.n.Features = f; return b }
func (b *NodeBuilder) Partitions(p ...string) *NodeBuilder { b.n.Partitions = p; return b }

// Obj returns the node.
func (b *NodeBuilder) Obj() sched.Node { return b.n }
