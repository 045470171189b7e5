package node

import (
	"context"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Suspend and resume (scontrol suspend/resume): the controller marks the
// job SUSPENDED and every node of the job freezes the job's container
// (the cgroup freezer, runtime.Pauser), its step tasks with it; resume
// thaws it. The time limit does not run while the job is frozen: the
// controller extends it by the time spent suspended, and the runner arms
// its deadline again from the limit each assignments answer carries.

// runTiming is what the runner goroutine's time limit follows: whether
// the job is frozen, and the deadline its current limit gives (zero:
// none).
type runTiming struct {
	frozen   bool
	deadline time.Time
}

// timingC is the runner's timing channel (one pending update, the last).
func (r *runner) timingC() chan runTiming {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timing == nil {
		r.timing = make(chan runTiming, 1)
	}
	return r.timing
}

// suspendTo freezes the container when asg says the job is SUSPENDED and
// thaws it otherwise (a stop thaws first, so the job gets its signals),
// then hands the runner goroutine the deadline asg's time limit gives
// from start (the allocation's start on this node's clock, localStarts),
// when that timing is not the one the goroutine has: every assignments
// line reaches every runner, and most change nothing in its timing (a
// send wakes the runner's goroutine). A failed freeze or thaw is retried
// by the next assignments answer. Called by reconcile alone.
func (r *runner) suspendTo(ctx context.Context, asg *api.Assignment, start time.Time) {
	want := asg.Job.State == spec.StateSuspended && !asg.Stop
	r.mu.Lock()
	was := r.frozen
	r.mu.Unlock()
	if want != was {
		log := r.log()
		p, ok := r.d.rt.(runtime.Pauser)
		if !ok {
			log.Warn("this node's runtime cannot freeze a job; it keeps running while SUSPENDED")
			return
		}
		op, what := p.Pause, "job suspended: its container is frozen"
		if !want {
			op, what = p.Resume, "job resumed: its container is thawed"
		}
		if err := op(ctx, r.id); err != nil {
			log.Warn("freeze or thaw the job's container; retried on the next assignments answer", "suspend", want, "err", err)
			return
		}
		r.mu.Lock()
		r.frozen = want
		r.mu.Unlock()
		log.Info(what)
	}
	t := runTiming{frozen: want}
	if tl := asg.Job.TimeLimit.Std(); tl > 0 && !start.IsZero() {
		t.deadline = start.Add(tl)
	}
	if !r.timingSent && !r.adopted {
		// Nothing sent yet: the goroutine has the timing it was made
		// with (r.deadline, which only retime writes, on a timing sent).
		// A re-adopted container's deadline came from its label: it is
		// sent the assignment's at once.
		r.timingSent, r.sentTiming = true, runTiming{deadline: r.deadline}
	}
	if r.timingSent && t.frozen == r.sentTiming.frozen && t.deadline.Equal(r.sentTiming.deadline) {
		return
	}
	r.timingSent, r.sentTiming = true, t
	c := r.timingC()
	select {
	case <-c: // replaced by the newer
	default:
	}
	c <- t
}

// retime applies t to the runner goroutine's deadline: none while the job
// is frozen, else the limit's, armed again when it moved (a resume
// extended it, scontrol update changed it) or the job was just thawed.
func (r *runner) retime(t runTiming, sm *stopMachine, ck *checkpointMachine, frozen *bool) {
	if sm.stopping() {
		return
	}
	switch {
	case t.frozen:
		sm.deadlineC = nil
	case t.deadline.IsZero():
	case *frozen || !t.deadline.Equal(r.deadline):
		r.deadline = t.deadline
		sm.deadlineC = r.d.clock.After(r.stopAt(t.deadline).Sub(r.d.clock.Now()))
		ck.arm(r.checkpointPlan(), r.deadline)
	}
	*frozen = t.frozen
}
