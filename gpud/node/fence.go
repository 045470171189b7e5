package node

import (
	"fmt"
	"time"
)

// Self-fencing (split brain). A node cut off from the controller keeps
// running its jobs: the controller cannot reach it to stop them, and a
// short partition should not cost them their work. But once the node has
// been silent for the controller's node_timeout, the controller marks it
// DOWN and requeues its requeueable jobs elsewhere, from their last
// checkpoint; if the cut-off node went on sealing checkpoints, one job's
// checkpoint lineage would have two writers. So an agent that has not
// had a heartbeat (or registration) answered for longer than a fraction
// of node_timeout stops asking its jobs for checkpoints and seals none.
//
// Measured in real time (Agent.opts.net; tests inject a clock) from when it sent the last heartbeat the
// controller answered: the controller heard it no earlier, so it cannot
// have timed the node out before that send plus node_timeout. The agent
// fences at 90 % of that, leaving the rest for clock rate differences.
//
// Contact coming back does not lift the fence at once: the controller
// may have requeued the job just before it heard the node again. The
// allocations that ran while the agent was fenced seal again only once
// an assignments answer requested after contact returned still lists
// them; the others are stopped by that answer (reconcile's fence).
//
// The jobs themselves are not stopped or paused (Slurm's slurmd does not
// either): when contact returns, the controller's answer stops those that
// were requeued, and the others go on as if nothing happened.

// fenceState is guarded by Agent.fenceMu.
type fenceState struct {
	// contact is when the agent sent the last registration or heartbeat
	// the controller answered (zero: none yet).
	contact time.Time
	// timeout is the controller's node_timeout as last answered (0: not
	// said; 3 heartbeat intervals, the controller's default, are assumed).
	timeout time.Duration
	// cutAt is when the agent last found itself out of touch (zero:
	// never); rejoined is when a heartbeat was first answered after it.
	cutAt, rejoined time.Time
	// refused counts checkpoints refused; logged says the current fence
	// (cut off, or back in touch and waiting for an answer) is logged.
	refused int
	logged  bool
	// hbSent is when the last heartbeat the controller answered was
	// sent: from its answer on the controller knows which allocations
	// run here (the heartbeat lists them).
	hbSent time.Time
	// deferred says an assignments answer did not list a running
	// allocation but could not fence it yet (mayFence).
	deferred bool
}

// fenceAfter is how long without an answered heartbeat fences the node.
func (a *Agent) fenceAfter() time.Duration {
	t := a.fence.timeout
	if t <= 0 {
		t = 3 * a.cfg.HeartbeatInterval
	}
	return t - t/10
}

// heartbeatTimeout bounds one heartbeat request: a request hung on a
// dead connection must not hold up the next one until the controller's
// node_timeout has passed. Half of node_timeout (at least one interval,
// less than node_timeout): long enough that a heartbeat slowed by a busy
// controller still arrives and counts (a 1,000-node loadtest with a
// timeout of one interval, 5 s of a 15 s node_timeout, cut slow
// heartbeats that would have arrived, and 381 jobs ended NODE_FAIL), short
// enough for a retry to arrive before node_timeout.
func (a *Agent) heartbeatTimeout(interval time.Duration) time.Duration {
	a.fenceMu.Lock()
	t := a.fence.timeout
	a.fenceMu.Unlock()
	if t <= 0 {
		return interval
	}
	if d := max(interval, t/2); d < t {
		return d
	}
	return t / 2
}

// contactOK notes that the controller answered a registration or
// heartbeat the agent sent at sent, saying node_timeout is timeout (0:
// not said).
func (a *Agent) contactOK(sent time.Time, timeout time.Duration) {
	now := a.opts.net.Now()
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := &a.fence
	if !f.contact.IsZero() && now.Sub(f.contact) > a.fenceAfter() {
		a.cutOffLocked(now) // out of touch until this answer
	}
	if !f.cutAt.IsZero() && f.rejoined.Before(f.cutAt) {
		f.rejoined = now
		f.logged = false
		a.log.Info("controller answers again; allocations that ran while the node was out of touch seal checkpoints again once an assignments answer still lists them")
	}
	if sent.After(f.contact) {
		f.contact = sent
	}
	if timeout > 0 {
		f.timeout = timeout
	}
}

// cutOffLocked records that the agent is (or was) out of touch at now:
// every allocation it runs may have been requeued elsewhere. Callers
// hold fenceMu.
func (a *Agent) cutOffLocked(now time.Time) {
	a.fence.cutAt = now
	a.mu.Lock()
	for _, r := range a.runners {
		r.ckptFenced = true
	}
	a.mu.Unlock()
}

// mayCheckpoint says why r may not checkpoint now (ask its job for one,
// or seal one), or nil when it may.
func (a *Agent) mayCheckpoint(r *runner) error {
	now := a.opts.net.Now()
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := &a.fence
	limit := a.fenceAfter()
	var err error
	switch {
	case f.contact.IsZero():
		err = fmt.Errorf("node %s has not reached the controller yet; no checkpoint until it has", a.cfg.Name)
	case now.Sub(f.contact) > limit:
		if f.cutAt.IsZero() || !f.rejoined.Before(f.cutAt) {
			f.logged = false // a new cut: say so
		}
		a.cutOffLocked(now)
		err = fmt.Errorf("node %s has had no heartbeat answered for %s (the controller's node_timeout is %s, so its jobs may have been requeued elsewhere); no checkpoint is sealed until it is back in touch",
			a.cfg.Name, now.Sub(f.contact).Round(time.Millisecond), (limit + limit/9).Round(time.Millisecond))
	default:
		a.mu.Lock()
		fenced := r.ckptFenced
		a.mu.Unlock()
		if fenced {
			err = fmt.Errorf("allocation %s ran while node %s was out of touch with the controller; no checkpoint until an assignments answer shows it is still assigned here", r.allocID, a.cfg.Name)
		}
	}
	if err != nil {
		f.refused++
		if !f.logged {
			f.logged = true
			a.log.Warn("checkpoints fenced", "reason", err.Error())
		}
	}
	return err
}

// confirmAssigned lifts the fence of the allocations in ids (those an
// assignments answer lists) if that answer was requested at sent, after
// contact came back; an older answer may predate the controller's
// decision to requeue them.
func (a *Agent) confirmAssigned(sent time.Time, ids map[string]bool) {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := &a.fence
	if f.cutAt.IsZero() || f.rejoined.Before(f.cutAt) || !sent.After(f.rejoined) {
		return
	}
	if now := a.opts.net.Now(); now.Sub(f.contact) > a.fenceAfter() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.runners {
		if r.ckptFenced && ids[id] {
			r.ckptFenced = false
			a.log.Info("allocation still assigned here after the node was out of touch; it checkpoints again", "alloc_id", id, "job_id", r.jobID)
		}
	}
}

// Fencing containers (reconcile) waits for the controller to have heard
// what runs here. A node marked DOWN for silence comes back with its
// containers running; its jobs were requeued, but a job that has not
// started elsewhere resumes on the node's containers once the controller
// hears the node's heartbeat listing them (gpud/controller,
// interrupted.go). The assignments long poll may answer before that
// heartbeat arrived, not listing the job: fencing then would kill the run
// the heartbeat was about to resume. So an answer fences only if a
// heartbeat was answered before its poll was sent (the controller applied
// the heartbeat before it answered the poll) and that heartbeat was sent
// less than fenceAfter before the answer arrived (so the controller
// cannot have marked the node DOWN between the two). Otherwise fencing
// waits, and the next heartbeat answer has the assignments asked again
// at once (repoll).

// heartbeatAnswered notes the controller's answer to a heartbeat sent at
// sent; it reports whether a fence was deferred (ask the assignments
// again now).
func (a *Agent) heartbeatAnswered(sent time.Time) bool {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := &a.fence
	if sent.After(f.hbSent) {
		f.hbSent = sent
	}
	d := f.deferred
	f.deferred = false
	return d
}

// rejoinedSince reports whether the node came back after a cut (a
// heartbeat answered after it) later than sent.
func (a *Agent) rejoinedSince(sent time.Time) bool {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := &a.fence
	return !f.cutAt.IsZero() && !f.rejoined.Before(f.cutAt) && f.rejoined.After(sent)
}

// lastHeartbeat is when the last heartbeat the controller answered was
// sent (zero: none yet): an assignments poll notes it as it is sent.
func (a *Agent) lastHeartbeat() time.Time {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	return a.fence.hbSent
}

// mayFence reports whether an assignments answer that arrived at
// received, to a poll sent when the last answered heartbeat had been sent
// at hb, may fence the allocations it does not list; when not, the fence
// is noted as deferred.
func (a *Agent) mayFence(hb, received time.Time) bool {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	ok := !hb.IsZero() && received.Sub(hb) <= a.fenceAfter()
	if !ok {
		a.fence.deferred = true
	}
	return ok
}
