package controller

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Observer is told of events worth counting for monitoring (gpud/metrics
// implements it with Prometheus counters). Its methods are called on the
// owner goroutine, after the change is committed or while applying it, so
// they must be cheap and must not block or call back into the Controller.
type Observer interface {
	// CycleDone reports one scheduling cycle's wall-clock duration.
	CycleDone(d time.Duration)
	// JobStarted reports an attempt of a job in partition starting.
	JobStarted(partition string)
	// JobEnded reports a job reaching a terminal state.
	JobEnded(partition string, state spec.JobState)
	// JobRequeued reports an attempt ending with the job going back to
	// PENDING (requeue, preemption, node failure); reason is the job's.
	JobRequeued(partition, reason string)
	// JobPreempted reports the scheduler stopping a running job of
	// partition for a higher-priority one (mode: requeue, cancel or
	// checkpoint, as the QOS says).
	JobPreempted(partition, mode string)
	// JobBackfilled reports a start the scheduler made while a
	// higher-priority job held a reservation (a backfill start).
	JobBackfilled(partition string)
	// JobIdle reports a running job flagged by the idle-GPU policy, with
	// the policy's action (flag, hook or cancel).
	JobIdle(partition, action string)
}

// GPUObserver is an Observer that also counts GPU health events (gpud's
// metrics do): kind is a spec.GPUEvent kind, code and class its triage.
type GPUObserver interface {
	GPUEvent(node, kind, code, class string)
}

// gpuEventSeen tells the observer of a GPU health event, if it counts them.
func (c *Controller) gpuEventSeen(node string, ev spec.GPUEvent) {
	if o, ok := c.obs.(GPUObserver); ok {
		o.GPUEvent(node, ev.Kind, ev.Code, ev.Class)
	}
}

// WithObserver sets who is told of cycles, starts, ends and requeues.
func WithObserver(o Observer) Option { return func(c *Controller) { c.obs = o } }

// nopObserver is the default Observer.
type nopObserver struct{}

func (nopObserver) CycleDone(time.Duration)         {}
func (nopObserver) JobStarted(string)               {}
func (nopObserver) JobEnded(string, spec.JobState)  {}
func (nopObserver) JobRequeued(partition, _ string) {}
func (nopObserver) JobPreempted(string, string)     {}
func (nopObserver) JobBackfilled(string)            {}
func (nopObserver) JobIdle(string, string)          {}

// Stats is a point-in-time count of the controller's live state, for
// monitoring. Ended jobs are not in it (Observer.JobEnded counts them): a
// gauge over the whole history would grow without bound and cost a walk
// over every job the controller remembers.
type Stats struct {
	// Jobs counts active jobs (pending, running, completing) by state
	// and partition.
	Jobs []JobCount
	// Pending counts pending jobs by reason (Priority, Resources, ...).
	Pending []ReasonCount
	// Nodes counts nodes by the state gpuq nodes shows.
	Nodes []NodeCount
	// GPUs counts whole GPUs by model: present on up or down nodes, and
	// held by a live allocation.
	GPUs []GPUCount
	// Fairshare is each user's fairshare factor per account, in Fair Tree
	// order, at most MaxFairshareSeries; FairshareDropped counts the rest.
	Fairshare        []FairshareFactor
	FairshareDropped int
}

// FairshareFactor is one user's Fair Tree factor in [0,1] in an account.
type FairshareFactor struct {
	Account, User string
	Factor        float64
}

// JobCount is one cell of Stats.Jobs.
type JobCount struct {
	State     spec.JobState
	Partition string
	N         int
}

// ReasonCount is one cell of Stats.Pending.
type ReasonCount struct {
	Reason string
	N      int
}

// NodeCount is one cell of Stats.Nodes.
type NodeCount struct {
	State spec.NodeState
	N     int
}

// GPUCount is one cell of Stats.GPUs.
type GPUCount struct {
	Model            string
	Total, Allocated int
	// Out counts GPUs out of service (health marks).
	Out int
}

// Stats counts the live state in one query on the owner. The walk costs
// O(pending jobs + nodes + live allocations), never the job history:
// pending jobs have their own index and running ones are found through
// the nodes' allocations. Cells are sorted, so output is stable.
func (c *Controller) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := c.query(ctx, func() error {
		type jk struct {
			state spec.JobState
			part  string
		}
		jobs := map[jk]int{}
		reasons := map[string]int{}
		for _, rec := range c.st.pending {
			jobs[jk{rec.job.State, rec.job.Partition}]++
			reasons[orDefault(rec.job.Reason, "None")]++
		}
		seen := map[spec.JobID]bool{}
		nodes := map[spec.NodeState]int{}
		type gc struct{ total, alloc, out int }
		gpus := map[string]*gc{}
		for _, n := range c.st.nodes {
			u := c.st.usage(n)
			nodes[n.displayState(u)]++
			for _, id := range u.jobs {
				if rec := c.st.jobs[id]; rec != nil && !seen[id] && !rec.job.State.Terminal() && rec.job.State != spec.StatePending {
					seen[id] = true
					jobs[jk{rec.job.State, rec.job.Partition}]++
				}
			}
			for _, g := range n.inv.GPUs {
				m := gpus[g.Model]
				if m == nil {
					m = &gc{}
					gpus[g.Model] = m
				}
				m.total++
				if u.gpus[g.UUID] {
					m.alloc++
				}
				if unhealthy(g) {
					m.out++
				}
			}
		}
		for k, n := range jobs {
			s.Jobs = append(s.Jobs, JobCount{State: k.state, Partition: k.part, N: n})
		}
		slices.SortFunc(s.Jobs, func(a, b JobCount) int {
			return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Partition, b.Partition))
		})
		for r, n := range reasons {
			s.Pending = append(s.Pending, ReasonCount{Reason: r, N: n})
		}
		slices.SortFunc(s.Pending, func(a, b ReasonCount) int { return cmp.Compare(a.Reason, b.Reason) })
		for st, n := range nodes {
			s.Nodes = append(s.Nodes, NodeCount{State: st, N: n})
		}
		slices.SortFunc(s.Nodes, func(a, b NodeCount) int { return cmp.Compare(a.State, b.State) })
		for m, g := range gpus {
			s.GPUs = append(s.GPUs, GPUCount{Model: m, Total: g.total, Allocated: g.alloc, Out: g.out})
		}
		slices.SortFunc(s.GPUs, func(a, b GPUCount) int { return cmp.Compare(a.Model, b.Model) })
		s.Fairshare, s.FairshareDropped = c.fairshareFactors()
		return nil
	})
	return s, err
}

// MaxFairshareSeries bounds Stats.Fairshare, so a site with many users
// cannot blow up the metrics' cardinality; the rows past it are counted
// in Stats.FairshareDropped.
const MaxFairshareSeries = 1000

// fairshareFactors lists the users' fairshare factors in Fair Tree order
// (the order gpuq share shows), at most MaxFairshareSeries of them.
func (c *Controller) fairshareFactors() ([]FairshareFactor, int) {
	rep := c.fairshareReport(c.now())
	var out []FairshareFactor
	dropped := 0
	for _, r := range rep.Rows {
		if r.User == "" {
			continue
		}
		if len(out) == MaxFairshareSeries {
			dropped++
			continue
		}
		out = append(out, FairshareFactor{Account: r.Account, User: r.User, Factor: r.Factor})
	}
	return out, dropped
}
