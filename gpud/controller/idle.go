package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// UsageSeen is what the idle-GPU policy needs of one usage sample a node
// sent for an allocation: the attempt, the interval and how busy its
// busiest GPU was.
type UsageSeen struct {
	JobID      spec.JobID
	Attempt    int
	Start, End time.Time
	// GPUs is how many GPUs the readings cover; 0 is no reading (a CPU
	// job, or NVML failed), which neither starts nor ends an idle run.
	GPUs       int
	GPUUtilMax float64
}

// IdleEvent is one run of an idle_hook program for a job whose GPUs sat
// idle.
type IdleEvent struct {
	Hook                  []string
	JobID                 spec.JobID
	User, Account, Reason string
}

// idleHookTimeout bounds one idle_hook run.
const idleHookTimeout = 30 * time.Second

// idleHookQueue is how many hook runs may wait; more are dropped with a
// warning (a hook is a notification, not state).
const idleHookQueue = 256

// WithIdleHook sets how idle_hook programs are run (gpud main execs them).
// run is called from a goroutine of the controller, one event at a time,
// never from the owner loop, with a context that ends after 30 s.
// Without it, idle_hook is not run (flag and cancel still apply).
func WithIdleHook(run func(ctx context.Context, ev IdleEvent) error) Option {
	return func(c *Controller) { c.runHook = run }
}

// idleJob is the owner's in-memory view of one running attempt's GPU
// idleness, one run per node of its allocation. It is not persisted: a
// restarted controller starts counting again, which only delays a flag.
type idleJob struct {
	attempt int
	nodes   map[string]*idleRun
	hooked  bool
}

// idleRun is one node's current stretch of low samples: lowSince is the
// start of the first low sample in a row (zero when the last was busy),
// lastEnd the end of the newest sample seen (older or repeated ones, which
// a node re-sends after a lost acknowledgement, are ignored).
type idleRun struct {
	lowSince, lastEnd time.Time
}

// ObserveUsage hands the owner the usage samples node sent (the server
// calls it after storing them), for the idle-GPU policy: jobs idle for
// their policy's time are flagged, hooked or cancelled in the same commit.
func (c *Controller) ObserveUsage(ctx context.Context, node string, samples []UsageSeen) error {
	if len(samples) == 0 {
		return nil
	}
	return c.call(ctx, func(tx *txn) error {
		for _, s := range samples {
			c.observeUsage(tx, node, s)
		}
		return nil
	})
}

func (c *Controller) observeUsage(tx *txn, node string, s UsageSeen) {
	rec := c.st.jobs[s.JobID]
	if rec == nil || rec.job.State != spec.StateRunning || rec.job.Attempt != s.Attempt || s.GPUs == 0 {
		return
	}
	j := &rec.job
	if !slices.Contains(rec.liveNodes(), node) {
		return // only a node running the job speaks for it
	}
	pol := c.cfg.idlePolicy(j.Partition, j.QOS)
	if pol.Action == "" {
		// No policy (or a reload removed it): nothing to track or show.
		delete(c.st.idle, j.ID)
		if j.IdleGPU != "" {
			j.IdleGPU = ""
			tx.saveJob(rec)
		}
		return
	}
	ij := c.st.idle[j.ID]
	if ij == nil || ij.attempt != s.Attempt {
		ij = &idleJob{attempt: s.Attempt, nodes: map[string]*idleRun{}}
		c.st.idle[j.ID] = ij
	}
	run := ij.nodes[node]
	if run == nil {
		run = &idleRun{}
		ij.nodes[node] = run
	}
	if !s.End.After(run.lastEnd) {
		return
	}
	run.lastEnd = s.End
	if s.GPUUtilMax < pol.GPUUtil {
		if run.lowSince.IsZero() {
			run.lowSince = s.Start
		}
	} else {
		run.lowSince = time.Time{}
	}

	// The job is idle from when its last node went low to its least
	// recent sample: every live node must be low.
	var since, until time.Time
	idle := true
	for _, n := range rec.liveNodes() {
		r := ij.nodes[n]
		if r == nil || r.lowSince.IsZero() {
			idle = false
			break
		}
		if r.lowSince.After(since) {
			since = r.lowSince
		}
		if until.IsZero() || r.lastEnd.Before(until) {
			until = r.lastEnd
		}
	}
	if !idle {
		if j.IdleGPU != "" {
			j.IdleGPU = ""
			tx.saveJob(rec)
			c.log.Info("job GPUs busy again", "job_id", j.ID)
		}
		return
	}
	if until.Sub(since) < pol.After {
		return
	}
	desc := idleDesc(pol)
	reason := "idle GPUs: " + desc
	if j.IdleGPU == "" {
		j.IdleGPU = desc
		tx.saveJob(rec)
		c.obs.JobIdle(j.Partition, pol.Action)
		c.log.Info("job GPUs idle", "job_id", j.ID, "partition", j.Partition, "account", j.Account,
			"action", pol.Action, "since", since)
	}
	if len(pol.Hook) > 0 && !ij.hooked {
		ij.hooked = true
		tx.hooks = append(tx.hooks, IdleEvent{Hook: pol.Hook, JobID: j.ID, User: j.User, Account: j.Account, Reason: reason})
	}
	if pol.Action == IdleCancel {
		if err := c.act(tx, Caller{Known: true, User: "gpud"}, rec, ActionCancel, reason); err != nil {
			c.log.Warn("cancel idle job", "job_id", j.ID, "err", err)
		}
	}
}

// idleDesc is what a flagged job shows, "below 5% for 30 min"; a
// cancelled job's reason is "idle GPUs: " and that.
func idleDesc(p IdlePolicy) string {
	d := p.After.String()
	if p.After%time.Minute == 0 {
		d = strconv.FormatInt(int64(p.After/time.Minute), 10) + " min"
	}
	return fmt.Sprintf("below %s%% for %s", strconv.FormatFloat(p.GPUUtil, 'g', -1, 64), d)
}

// forgetIdle drops a job's idle tracking when its attempt ends.
func (c *Controller) forgetIdle(id spec.JobID) { delete(c.st.idle, id) }

// queueHooks hands committed hook runs to the hook goroutine.
func (c *Controller) queueHooks(evs []IdleEvent) {
	if c.runHook == nil {
		return
	}
	for _, ev := range evs {
		select {
		case c.hookQueue <- ev:
		default:
			c.log.Warn("idle hook queue full; hook not run", "job_id", ev.JobID)
		}
	}
}

// hookLoop runs queued idle hooks one at a time until ctx ends.
func (c *Controller) hookLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-c.hookQueue:
			hctx, cancel := context.WithTimeout(ctx, idleHookTimeout)
			err := c.runHook(hctx, ev)
			cancel()
			if err != nil {
				c.log.Warn("idle hook failed", "job_id", ev.JobID, "hook", ev.Hook[0], "err", err)
			} else {
				c.log.Info("idle hook ran", "job_id", ev.JobID, "hook", ev.Hook[0])
			}
		}
	}
}
