package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
)

// JobFilter selects jobs (the fields of api.JobFilter). Zero fields match
// everything; with no States and not All, pending and active jobs match.
type JobFilter struct {
	IDs        []spec.JobID
	Users      []string
	Accounts   []string
	Partitions []string
	States     []spec.JobState
	All        bool
}

func (f *JobFilter) match(j *spec.Job) bool {
	if len(f.Users) > 0 && !slices.Contains(f.Users, j.User) {
		return false
	}
	if len(f.Accounts) > 0 && !slices.Contains(f.Accounts, j.Account) {
		return false
	}
	if len(f.Partitions) > 0 && !slices.Contains(f.Partitions, j.Partition) &&
		// A pending job of -p a,b is in each of its partitions until it
		// starts in one (squeue -p b and scancel -p b find it, as Slurm's).
		!(j.State == spec.StatePending && slices.ContainsFunc(j.Partitions, func(p string) bool { return slices.Contains(f.Partitions, p) })) {
		return false
	}
	switch {
	case len(f.States) > 0:
		return slices.Contains(f.States, j.State)
	case f.All || len(f.IDs) > 0:
		return true
	}
	return !j.State.Terminal()
}

// ListJobs returns the published views of matching jobs, by id. The owner
// only collects pointers; encoding happens in the caller.
func (c *Controller) ListJobs(ctx context.Context, f JobFilter) ([]*JobView, error) {
	var out []*JobView
	err := c.query(ctx, func() error {
		out = c.listJobs(f)
		return nil
	})
	return out, err
}

// listJobs is ListJobs on the owner. A job submitted earlier in the same
// batch has no view yet (published at the commit): it is not listed, as
// it is not committed. (The chaos suite's squeue met one, under the
// group commit of an HA leader, as a nil view.)
func (c *Controller) listJobs(f JobFilter) []*JobView {
	if len(f.IDs) > 0 {
		var out []*JobView
		ids := slices.Clone(f.IDs)
		slices.Sort(ids)
		for _, id := range slices.Compact(ids) {
			if rec := c.st.jobs[id]; rec != nil && rec.view != nil && f.match(&rec.view.job) {
				out = append(out, rec.view)
			}
		}
		return out
	}
	out := make([]*JobView, 0, len(c.st.pending)+64)
	for _, id := range c.st.order {
		if rec := c.st.jobs[id]; rec != nil && rec.view != nil && f.match(&rec.view.job) {
			out = append(out, rec.view)
		}
	}
	return out
}

// query runs a read-only fn on the owner. It rides the same queue (and
// group commit) as writes, so a reader never sees an uncommitted job.
func (c *Controller) query(ctx context.Context, fn func() error) error {
	return c.call(ctx, func(*txn) error { return fn() })
}

// Job returns one job.
func (c *Controller) Job(ctx context.Context, id spec.JobID) (spec.Job, error) {
	return c.JobByRef(ctx, spec.JobRef{ID: id})
}

// JobByRef is Job for "42" or an array task "42_7".
func (c *Controller) JobByRef(ctx context.Context, ref spec.JobRef) (spec.Job, error) {
	var j spec.Job
	err := c.query(ctx, func() error {
		recs, err := c.resolve(ref, false)
		if err != nil {
			return err
		}
		if recs[0].view == nil {
			return notFoundJob(recs[0].job.ID) // submitted in this batch: not committed yet
		}
		j = recs[0].view.job
		if j.State == spec.StatePending && j.NodeReasons == "" {
			// Not placed in a cycle yet (or held back before placement):
			// the same count, made now for this job.
			j.NodeReasons = c.nodeReasons(&j)
		}
		return nil
	})
	return j, err
}

func notFoundJob(id spec.JobID) error {
	return spec.Errorf(spec.ErrNotFound, "job %d not found; gpuq --all lists the jobs the controller knows", id)
}

// WaitJob returns the job once it is terminal, or as it is when timeout
// passes or ctx ends (ctx's error is then returned).
func (c *Controller) WaitJob(ctx context.Context, id spec.JobID, timeout time.Duration) (spec.Job, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		var j spec.Job
		var ch chan struct{}
		err := c.query(ctx, func() error {
			rec := c.st.jobs[id]
			if rec == nil || rec.view == nil {
				return notFoundJob(id)
			}
			j = rec.view.job
			if !j.State.Terminal() {
				ch = make(chan struct{})
				c.st.waiters[id] = append(c.st.waiters[id], ch)
			}
			return nil
		})
		if err != nil || ch == nil {
			return j, err
		}
		select {
		case <-ch:
		case <-timer.C:
			return c.Job(ctx, id)
		case <-ctx.Done():
			return j, ctx.Err()
		case <-c.stopped:
			return j, spec.Errorf(spec.ErrUnavailable, "the gpud controller stopped; retry when it is back")
		}
	}
}

// Job actions.
const (
	ActionCancel  = "cancel"
	ActionHold    = "hold"
	ActionRelease = "release"
	ActionRequeue = "requeue"
	// ActionSignal sends a signal (its reason argument) to a running
	// job's processes on every node: scancel --signal.
	ActionSignal = "signal"
	// ActionComplete ends an interactive allocation (srun or salloc from
	// outside a job) with its client's exit status: Complete.
	ActionComplete = "complete"
)

// JobAction cancels, holds, releases or requeues a job on behalf of who.
// Non-root callers may act on their own jobs only. The id of an array (its
// first task's id) acts on every task of the array, like scancel; tasks
// the action does not apply to (already ended, not pending) are skipped,
// and it fails only when it applied to none.
func (c *Controller) JobAction(ctx context.Context, who Caller, id spec.JobID, action, reason string) (spec.Job, error) {
	return c.RefAction(ctx, who, spec.JobRef{ID: id}, action, reason)
}

// RefAction is JobAction on a job as users name it: "42" or "42_7".
func (c *Controller) RefAction(ctx context.Context, who Caller, ref spec.JobRef, action, reason string) (spec.Job, error) {
	var out spec.Job
	err := c.call(ctx, func(tx *txn) error {
		recs, err := c.resolve(ref, true)
		if err != nil {
			return err
		}
		var errs []error
		for _, rec := range recs {
			if err := c.act(tx, who, rec, action, reason); err != nil {
				if len(recs) == 1 || spec.KindOf(err) != spec.ErrConflict {
					return err
				}
				errs = append(errs, err)
			}
		}
		if len(errs) == len(recs) {
			return spec.Errorf(spec.ErrConflict, "no task of array %d could be %s: %v", ref.ID, pastTense(action), errs[0])
		}
		out = recs[0].job
		out.Alloc = cloneAlloc(out.Alloc)
		return nil
	})
	return out, err
}

// Complete ends job id, an interactive allocation made by srun or salloc
// from outside a job, as its client saw the work in it end: COMPLETED
// when code and sig are 0, else FAILED with them, as Slurm's srun and
// salloc end theirs (slurm_complete_job with the step's or the command's
// status) rather than cancelling it. Its nodes are told to stop, and give
// back the resources when they report. A pending allocation is cancelled.
func (c *Controller) Complete(ctx context.Context, who Caller, id spec.JobID, code, sig int, reason string) (spec.Job, error) {
	var out spec.Job
	err := c.call(ctx, func(tx *txn) error {
		rec := c.st.jobs[id]
		if rec == nil {
			return notFoundJob(id)
		}
		j := &rec.job
		if err := c.mayAct(who, j, ActionComplete); err != nil {
			return err
		}
		if !j.Interactive {
			return spec.Errorf(spec.ErrInvalid, "job %d is a batch job; only an allocation made by srun or salloc is completed by its client (end a batch job with scancel %d)", id, id)
		}
		if code < 0 || code > 255 || sig < 0 || sig > 64 {
			return spec.Errorf(spec.ErrInvalid, "exit code %d, signal %d: an exit code is 0-255 and a signal 0-64", code, sig)
		}
		if reason == "" {
			reason = fmt.Sprintf("completed by %s", orDefault(who.User, fmt.Sprint(who.UID)))
		}
		switch {
		case j.State.Terminal():
			return spec.Errorf(spec.ErrConflict, "job %d already ended (%s)", id, j.State)
		case j.State == spec.StatePending:
			delete(c.st.pending, id)
			c.finish(tx, rec, spec.StateCancelled, 0, 0, reason, c.now())
		default:
			state := spec.StateCompleted
			if code != 0 || sig != 0 {
				state = spec.StateFailed
				reason = "NonZeroExitCode"
			}
			c.finish(tx, rec, state, code, sig, reason, c.now())
		}
		out = *j
		out.Alloc = cloneAlloc(out.Alloc)
		return nil
	})
	return out, err
}

// resolve finds what ref names: one job, one array task, or (with whole
// set and a bare array id) every task of the array still known.
func (c *Controller) resolve(ref spec.JobRef, whole bool) ([]*jobRec, error) {
	head := c.st.jobs[ref.ID]
	if head == nil {
		return nil, notFoundJob(ref.ID)
	}
	isArray := head.job.ArrayJobID == ref.ID
	if !ref.IsTask && !(whole && isArray) {
		return []*jobRec{head}, nil
	}
	if !isArray {
		return nil, spec.Errorf(spec.ErrNotFound, "job %d is not a job array, so %s names no task; use %d", ref.ID, ref, ref.ID)
	}
	// Tasks have consecutive ids from the array's id (submit allocates them
	// together); a task purged from memory leaves a hole, not an end.
	tasks, _, err := parseArray(head.job.Array)
	if err != nil {
		return nil, err
	}
	var recs []*jobRec
	for k := range tasks {
		rec := c.st.jobs[ref.ID+spec.JobID(k)]
		if rec == nil || rec.job.ArrayJobID != ref.ID {
			continue
		}
		if ref.IsTask && rec.job.ArrayTaskID == ref.Task {
			return []*jobRec{rec}, nil
		}
		recs = append(recs, rec)
	}
	if ref.IsTask {
		return nil, spec.Errorf(spec.ErrNotFound, "array %d has no task %d (its tasks: %s)", ref.ID, ref.Task, head.job.Array)
	}
	return recs, nil
}

// MayAct says whether who may act on the jobs ref names (their owner,
// root, or a coordinator of their account); the server asks before it
// reads a request's body, so a stranger's request costs no body read.
// RefAction checks again.
func (c *Controller) MayAct(ctx context.Context, who Caller, ref spec.JobRef, action string) error {
	return c.query(ctx, func() error {
		recs, err := c.resolve(ref, true)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if err := c.mayAct(who, &rec.job, action); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *Controller) mayAct(who Caller, j *spec.Job, action string) error {
	if !who.Known || (who.UID != 0 && who.UID != j.UID && !c.cfg.coordinates(who.User, j.Account)) {
		return spec.Errorf(spec.ErrPermissionDenied, "job %d belongs to %s (uid %d); only its owner, root, an operator or a coordinator of account %s may %s it", j.ID, j.User, j.UID, j.Account, action)
	}
	return nil
}

// act applies action to one job.
func (c *Controller) act(tx *txn, who Caller, rec *jobRec, action, reason string) error {
	j := &rec.job
	id := j.ID
	if err := c.mayAct(who, j, action); err != nil {
		return err
	}
	if action == ActionSignal {
		// reason is SIG, or TARGET:SIG (spec.SignalSteps, SignalBatch,
		// SignalFull: scancel without -b/-f, -b, -f).
		target, name, hasTarget := strings.Cut(reason, ":")
		if !hasTarget {
			target, name = "", reason
		} else if target != spec.SignalSteps && target != spec.SignalBatch && target != spec.SignalFull {
			return spec.Errorf(spec.ErrInvalid, "signal target %q: use %s, %s or %s", target, spec.SignalSteps, spec.SignalBatch, spec.SignalFull)
		}
		sig, err := canonicalSignal(name)
		if err != nil {
			return err
		}
		if j.State != spec.StateRunning || j.Alloc == nil {
			return spec.Errorf(spec.ErrConflict, "job %d is %s; only running jobs can be signalled (cancel it without --signal)", id, j.State)
		}
		j.SignalAlloc, j.SignalName, j.SignalTarget = j.Alloc.ID, sig, target
		j.SignalSeq++
		c.bumpLive(tx, rec)
		tx.saveJob(rec)
		return nil
	}
	if action == ActionNotify {
		if err := c.notify(tx, who, rec, reason); err != nil { // jobadmin.go
			return err
		}
		tx.saveJob(rec)
		return nil
	}
	if reason == "" {
		reason = fmt.Sprintf("%s by %s", pastTense(action), orDefault(who.User, fmt.Sprint(who.UID)))
	}
	now := c.now()
	switch action {
	case ActionCancel:
		switch {
		case j.State.Terminal():
			return spec.Errorf(spec.ErrConflict, "job %d already ended (%s)", id, j.State)
		case j.State == spec.StatePending:
			delete(c.st.pending, id)
			c.finish(tx, rec, spec.StateCancelled, 0, 0, reason, now)
		case len(rec.liveNodes()) == 0:
			c.finish(tx, rec, spec.StateCancelled, 0, 0, reason, now)
		default:
			j.State = spec.StateCompleting
			j.StopState, j.StopReason, j.Reason = spec.StateCancelled, reason, reason
			j.StopCheckpoint = false // a cancel does not wait for one
			c.bumpLive(tx, rec)
		}
		// A heterogeneous job is cancelled whole, whichever component
		// was named (het.go); those already ending are left to end.
		for _, s := range c.hetSiblings(rec) {
			if !s.job.State.Terminal() && s.job.State != spec.StateCompleting {
				_ = c.act(tx, who, s, ActionCancel, reason)
			}
		}
	case ActionHold:
		if j.State != spec.StatePending {
			return spec.Errorf(spec.ErrConflict, "job %d is %s; only pending jobs can be held", id, j.State)
		}
		j.Hold, j.Reason = true, spec.ReasonHeld
		tx.kick = true // the last full cycle's queue still has it unheld
	case ActionRelease:
		if j.State != spec.StatePending {
			return spec.Errorf(spec.ErrConflict, "job %d is %s; only pending jobs can be released", id, j.State)
		}
		if j.Hold {
			j.Hold, j.Reason = false, spec.ReasonNone
			tx.kick = true
		}
	case ActionRequeue:
		if j.State != spec.StateRunning && !(j.State == spec.StateCompleting && j.StopState == spec.StateRequeued) {
			return spec.Errorf(spec.ErrConflict, "job %d is %s; only running jobs can be requeued", id, j.State)
		}
		// A requeue puts the job back in the queue: it must be one the
		// job may enter now (access.go), or it would only wait there.
		if err := c.reentryErr(j, ownerOf(j, c.callerGroups(who, j.UID))); err != nil {
			return fmt.Errorf("requeue job %d: it may no longer run as it is (%w); let it run to its end, or cancel it", id, err)
		}
		c.stopToRequeue(tx, rec, reason)
	case ActionTop:
		if err := c.top(tx, rec); err != nil { // jobadmin.go
			return err
		}
	case ActionSuspend, ActionResumeJob:
		if err := c.suspend(tx, who, rec, action == ActionSuspend); err != nil { // jobadmin.go
			return err
		}
	default:
		return spec.Errorf(spec.ErrInvalid, "unknown job action %q; use cancel, hold, release, requeue, top, suspend, resume, notify or cancel with a signal", action)
	}
	tx.saveJob(rec)
	return nil
}

// stopToRequeue has a running job's nodes stop it so that it is queued
// again (at once if no part is live).
func (c *Controller) stopToRequeue(tx *txn, rec *jobRec, reason string) {
	j := &rec.job
	if len(rec.liveNodes()) == 0 {
		c.requeue(tx, rec, reason)
		return
	}
	j.State = spec.StateCompleting
	j.StopState, j.StopReason, j.Reason = spec.StateRequeued, reason, reason
	// A job that checkpoints is asked to do so first, so the next
	// attempt resumes from now, not from the last interval.
	j.StopCheckpoint = checkpoints(j)
	c.bumpLive(tx, rec)
}

// checkpoints reports whether job j takes part in the checkpoint protocol:
// it asked for periodic checkpoints or named its checkpoint signal.
func checkpoints(j *spec.Job) bool { return j.Ckpt > 0 || j.JobSpec.Signal != "" }

func pastTense(action string) string {
	switch action {
	case ActionCancel:
		return "cancelled"
	case ActionHold:
		return "held"
	case ActionRelease:
		return "released"
	case ActionRequeue:
		return "requeued"
	case ActionSignal:
		return "signalled"
	case ActionComplete:
		return "completed"
	case ActionSuspend:
		return "suspended"
	case ActionResumeJob:
		return "resumed"
	case ActionTop:
		return "moved to the top"
	case ActionNotify:
		return "notified"
	}
	return action
}

// bumpLive wakes the long-polls of every node still running rec.
func (c *Controller) bumpLive(tx *txn, rec *jobRec) {
	for _, n := range rec.liveNodes() {
		tx.bump[n] = true
	}
}

// finish ends a job in a terminal state. Parts still live on nodes keep
// their resources (and are told to stop) until those nodes report.
func (c *Controller) finish(tx *txn, rec *jobRec, state spec.JobState, code, sig int, reason string, at time.Time) {
	j := &rec.job
	j.State, j.ExitCode, j.Signal = state, code, sig
	j.EndTime = spec.NewTime(at)
	endSteps(j, state, code, sig, at) // steps.go
	if reason == "" {
		reason = string(state)
	}
	j.Reason = reason
	if len(rec.liveNodes()) > 0 {
		if j.StopState == "" || j.StopState == spec.StateRequeued {
			j.StopState = spec.StateCancelled
			j.StopReason = fmt.Sprintf("job ended %s: %s", state, reason)
			j.StopCheckpoint = false
		}
		c.bumpLive(tx, rec)
	} else {
		j.StopState, j.StopReason, j.StopCheckpoint = "", "", false
	}
	delete(c.st.pending, j.ID)
	delete(c.st.ineligible, j.ID)
	c.st.uncountActive(rec)
	c.forgetIdle(j.ID)
	c.dropInterrupted(rec)
	tx.saveJob(rec)
	c.endJobCopy(tx, j)
	c.noteEnded(j) // endedusage.go
	if j.Alloc != nil && len(rec.liveNodes()) == 0 {
		tx.freed = append(tx.freed, j.ID) // its resources are back
	} else {
		tx.kick = true
	}
	c.obs.JobEnded(j.Partition, state)
	c.log.Info("job ended", "job_id", j.ID, "state", state, "exit_code", code, "reason", reason)
	c.endHet(tx, rec, state, code, sig) // het.go
}

// requeue puts a job whose parts have all ended back in the queue with
// the same id and submit time; its next start gets a new alloc id.
func (c *Controller) requeue(tx *txn, rec *jobRec, reason string) {
	j := &rec.job
	// Lost work: what the attempt computed after its newest checkpoint.
	from := j.StartTime.Time
	if lc := j.LastCheckpoint; j.Alloc != nil && lc.Attempt == j.Alloc.Attempt && lc.Time.After(from) {
		from = lc.Time.Time
	}
	j.LostWork = 0
	if now := c.now(); !from.IsZero() && now.After(from) {
		j.LostWork = spec.Duration(now.Sub(from))
	}
	j.State, j.Reason = spec.StatePending, reason
	endSteps(j, spec.StateRequeued, 0, 0, c.now()) // steps.go
	if j.Alloc != nil && !j.StartTime.IsZero() {
		// The ended attempt is billed now: the job's next record carries
		// only its next attempt's allocation. The record keeps this
		// attempt's allocation and times, ended now, in state PENDING.
		ended := *j
		ended.Alloc = cloneAlloc(j.Alloc)
		ended.EndTime = spec.NewTime(c.now())
		ended.StopState, ended.StopReason, ended.StopCheckpoint = "", "", false
		c.endJobCopy(tx, &ended)
		c.noteEnded(&ended) // endedusage.go
	}
	j.StopState, j.StopReason, j.StopCheckpoint = "", "", false
	j.ExitCode, j.Signal = 0, 0
	j.StartTime, j.EndTime = spec.Time{}, spec.Time{}
	j.Nodes, j.GPUs, j.Alloc = nil, nil, nil
	j.IdleGPU = ""
	j.Steps, j.StepSignals = nil, nil // the next attempt numbers its steps from 0
	rec.silentParts = nil
	c.forgetIdle(j.ID)
	c.st.pending[j.ID] = rec
	c.st.countActive(rec)
	// Back in the queue: a job that may no longer run where it is (its
	// partition's rules changed while it ran) waits saying why.
	c.markAccess(j.ID, rec)
	tx.saveJob(rec)
	tx.kick = true
	c.obs.JobRequeued(j.Partition, reason)
	c.log.Info("job requeued", "job_id", j.ID, "reason", reason)
}

// reasonNodeFailRequeue is the reason of a job requeued because a node of
// its run failed or went silent.
const reasonNodeFailRequeue = "NodeFail requeue"

// exitInfo is how one part of an allocation ended.
type exitInfo struct {
	state    spec.JobState
	code     int
	signal   int
	reason   string
	at       time.Time
	nodeFail bool
	// reported: the node itself reported the part's exit (its exited
	// event), so it need not be told that the part left its assignments.
	reported bool
}

// partEnded records that rec's part on node ended and decides the job's
// fate: a gang ends at its first failure (peers are stopped), completes
// when every part completed, and requeues once every part has stopped.
func (c *Controller) partEnded(tx *txn, rec *jobRec, node string, ev exitInfo) {
	j := &rec.job
	a := cloneAlloc(j.Alloc)
	batch := false // the node that ran the batch script (rank 0)
	for i := range a.Nodes {
		if a.Nodes[i].Node == node {
			a.Nodes[i].Ended = true
			batch = a.Nodes[i].Rank == 0
		}
	}
	j.Alloc = a
	if n := c.st.nodes[node]; n != nil {
		delete(n.allocs, a.ID)
	}
	if !ev.reported {
		// A part the node did not end itself (NODE_FAIL of a silent
		// node): its agent is told by its next answer. One the node
		// reported wakes nothing: the node acts on nothing in that answer
		// (its runner is gone, the allocation only leaves the list), and
		// a wake-up per exit was two fifths of the assignments answers in
		// a live burst (docs/fleet.md, "Session 17 — watch"); the next
		// change of the node carries the shorter list.
		tx.bump[node] = true
	}
	tx.saveJob(rec)
	live := len(rec.liveNodes())

	if j.State.Terminal() && live == 0 {
		tx.freed = append(tx.freed, j.ID) // its last part gave its resources back
		return
	}
	if live > 0 || j.State.Terminal() || j.State == spec.StatePending {
		// A gang part ended while others run: what it freed is the
		// full cycle's to place. (finish and requeue decide otherwise.)
		tx.kick = true
	}
	if j.State.Terminal() || j.State == spec.StatePending {
		return
	}
	if ev.state == "" {
		ev.state = spec.StateCompleted
		if ev.code != 0 || ev.signal != 0 {
			ev.state = spec.StateFailed
		}
	}
	// A node may report NODE_FAIL itself (a job the runtime killed while
	// the agent was down): like a silent node, it requeues if allowed.
	nodeFail := ev.nodeFail || ev.state == spec.StateNodeFail
	requeue := j.StopState == spec.StateRequeued || j.StopState == spec.StatePreempted ||
		ev.state == spec.StateRequeued || ev.state == spec.StatePreempted || (nodeFail && j.Requeue)
	switch {
	case requeue:
		reason := j.StopReason
		switch {
		case nodeFail:
			reason = reasonNodeFailRequeue
			if j.StopState == "" { // once per failure, not per node of a gang
				c.hardwareRequeue(rec)
			}
		case reason == "":
			reason = orDefault(ev.reason, "requeued")
		}
		if live == 0 {
			c.requeue(tx, rec, reason)
			return
		}
		j.State = spec.StateCompleting
		if j.StopState == "" {
			j.StopState, j.StopReason = spec.StateRequeued, reason
		}
		j.Reason = reason
		c.bumpLive(tx, rec)
	case ev.state != spec.StateCompleted || live == 0 || batch:
		// The batch script (rank 0) ending ends the job: the other
		// nodes only hold the allocation for its steps (DESIGN §7).
		state := ev.state
		if !state.Terminal() {
			state = spec.StateFailed
		}
		reason := ev.reason
		if reason == "" && live > 0 || reason == "" && len(a.Nodes) > 1 {
			reason = fmt.Sprintf("%s on node %s", state, node)
		}
		c.finish(tx, rec, state, ev.code, ev.signal, reason, ev.at)
	}
}

// canonicalSignal accepts USR1, SIGUSR1 or 1-64 and returns the name the
// node agent takes (USR1, or the number of a signal without a name).
func canonicalSignal(s string) (string, error) {
	sig, err := signame.Parse(strings.TrimSpace(s))
	if err != nil {
		return "", spec.Errorf(spec.ErrInvalid, "%q is not a signal; use a name like USR1 or SIGTERM, or a number 1-64", s)
	}
	return signame.Name(sig), nil
}
