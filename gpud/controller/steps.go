package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Job steps (DESIGN §7 "Allocations and steps"). The batch step is the
// controller's own record (it starts with rank 0's part and ends with
// the job); numbered steps are reported by the node agent that serves
// them, through its outbox (EventStepStarted, EventStepEnded), so a
// controller restart loses none. The job keeps its current attempt's
// steps, running and the newest ended; every ended step goes to
// accounting (StepRecorder) and again with the job's final record.

// maxKeptSteps bounds the ended steps a job keeps in controller state
// (a job running srun in a loop); accounting has them all.
const maxKeptSteps = 256

// maxStepSignals bounds the step signal requests a job remembers.
const maxStepSignals = 16

// StepRecorder is implemented by a Recorder that keeps job steps
// (accounting's steps table): ended steps reach it as they end, not only
// with their job's final record.
type StepRecorder interface {
	RecordSteps(ctx context.Context, steps []spec.JobSteps) error
}

// stepEvent applies a node's report of a step it serves.
func (c *Controller) stepEvent(tx *txn, rec *jobRec, node string, ev NodeEvent) {
	j := &rec.job
	if ev.Step == nil || ev.Step.ID == "" || ev.Step.ID == spec.StepBatch {
		c.log.Warn("step event without a numbered step refused", "node", node, "job_id", j.ID, "kind", ev.Kind)
		return
	}
	if !slices.ContainsFunc(j.Alloc.Nodes, func(p spec.NodeAlloc) bool { return p.Node == node }) {
		c.log.Warn("step event for a job not allocated to this node refused", "node", node, "job_id", j.ID)
		return
	}
	s := *ev.Step
	s.Nodes = slices.Clone(s.Nodes)
	i := slices.IndexFunc(j.Steps, func(x spec.Step) bool { return x.ID == s.ID })
	switch ev.Kind {
	case EventStepStarted:
		if i >= 0 || j.State.Terminal() {
			return // a re-sent start, its end came first, or its job ended (its end follows)
		}
		s.State, s.EndTime = spec.StateRunning, spec.Time{}
		j.Steps = append(j.Steps, s)
	case EventStepEnded:
		if s.Running() {
			s.State = spec.StateCompleted
		}
		if i >= 0 {
			j.Steps = slices.Clone(j.Steps) // shared with the published view (endSteps)
			j.Steps[i] = s
		} else {
			j.Steps = append(j.Steps, s)
		}
		tx.steps = append(tx.steps, spec.JobSteps{JobID: j.ID, Attempt: j.Alloc.Attempt, Steps: []spec.Step{s}})
		c.log.Info("step ended", "job_id", j.ID, "step", s.ID, "state", s.State, "exit_code", s.ExitCode)
	}
	j.Steps = trimSteps(j.Steps)
	tx.saveJob(rec)
}

// trimSteps drops the oldest ended steps beyond maxKeptSteps.
func trimSteps(steps []spec.Step) []spec.Step {
	over := len(steps) - maxKeptSteps
	if over <= 0 {
		return steps
	}
	out := steps[:0:0]
	for _, s := range steps {
		if over > 0 && !s.Running() && s.ID != spec.StepBatch {
			over--
			continue
		}
		out = append(out, s)
	}
	return out
}

// batchStarted records the batch step when rank 0's part starts.
func batchStarted(j *spec.Job, part spec.NodeAlloc, at time.Time) {
	if slices.ContainsFunc(j.Steps, func(s spec.Step) bool { return s.ID == spec.StepBatch }) {
		return
	}
	j.Steps = append([]spec.Step{{
		ID: spec.StepBatch, Name: spec.StepBatch, State: spec.StateRunning, StartTime: spec.NewTime(at),
		Nodes: []string{part.Node}, NTasks: 1, CPUs: part.CPUs, GPUs: len(part.GPUs) + len(part.MIG),
	}}, j.Steps...)
}

// endSteps ends the steps still running when their job ends (or is
// requeued): the batch step with the job's state and exit code, the
// others as Slurm shows steps killed with their job.
func endSteps(j *spec.Job, state spec.JobState, code, sig int, at time.Time) {
	if !slices.ContainsFunc(j.Steps, func(s spec.Step) bool { return s.Running() }) {
		return
	}
	// The steps are shared with the job's published view (newView copies
	// the job, not its steps), which readers off the owner loop encode
	// (GET /jobs/ID): changed in a copy, never in place (-race saw a job
	// read as it ended, gpud/server ident_test.go).
	j.Steps = slices.Clone(j.Steps)
	for i := range j.Steps {
		s := &j.Steps[i]
		if !s.Running() {
			continue
		}
		s.EndTime = spec.NewTime(at)
		if s.ID == spec.StepBatch {
			s.State, s.ExitCode, s.Signal = state, code, sig
			continue
		}
		switch state {
		case spec.StateTimeout, spec.StateNodeFail, spec.StatePreempted, spec.StateOutOfMemory:
			s.State = state
		default:
			s.State = spec.StateCancelled
		}
		s.Reason = fmt.Sprintf("job ended %s", state)
	}
}

// StepAction signals or (sig empty) cancels one running step of a job on
// behalf of who: gpuq cancel N.S, scancel [--signal SIG] N.S. The node
// that serves the step carries it out: a cancel sends SIGTERM and, after
// the node's kill grace, SIGKILL, as Slurm's KillWait.
func (c *Controller) StepAction(ctx context.Context, who Caller, ref spec.JobRef, step, sig string) (spec.Job, error) {
	var out spec.Job
	err := c.call(ctx, func(tx *txn) error {
		recs, err := c.resolve(ref, false)
		if err != nil {
			return err
		}
		rec := recs[0]
		j := &rec.job
		if err := c.mayAct(who, j, ActionCancel); err != nil {
			return err
		}
		if step == spec.StepBatch {
			return spec.Errorf(spec.ErrInvalid, "%s.batch is the job's batch script; to end it cancel the job (scancel %s), to signal it use scancel -b --signal", ref, ref)
		}
		n, err := strconv.Atoi(step)
		if err != nil || n < 0 {
			return spec.Errorf(spec.ErrInvalid, "%q is not a step of job %s; steps are numbered 0, 1, ... (gpuq show %s lists them)", step, ref, ref)
		}
		if j.State != spec.StateRunning || j.Alloc == nil {
			return spec.Errorf(spec.ErrConflict, "job %s is %s; only a running job's steps can be cancelled or signalled", ref, j.State)
		}
		k := slices.IndexFunc(j.Steps, func(s spec.Step) bool { return s.ID == step })
		switch {
		case k < 0:
			return spec.Errorf(spec.ErrNotFound, "job %s has no step %d (yet); gpuq show %s lists its running steps", ref, n, ref)
		case !j.Steps[k].Running():
			return spec.Errorf(spec.ErrConflict, "step %s.%d already ended (%s)", ref, n, j.Steps[k].State)
		}
		req := spec.StepSignal{AllocID: j.Alloc.ID, Step: n, By: orDefault(who.User, strconv.FormatUint(uint64(who.UID), 10))}
		if sig != "" {
			if req.Signal, err = canonicalSignal(sig); err != nil {
				return err
			}
		} else {
			req.Cancel = true
		}
		j.StepSignalSeq++
		req.Seq = j.StepSignalSeq
		j.StepSignals = append(j.StepSignals, req)
		if over := len(j.StepSignals) - maxStepSignals; over > 0 {
			// A new array: the published view of the job (and out) share
			// this one, and deleting in place moved what their readers
			// read.
			j.StepSignals = slices.Clone(j.StepSignals[over:])
		}
		c.bumpLive(tx, rec)
		tx.saveJob(rec)
		c.log.Info("step "+map[bool]string{true: "cancel", false: "signal"}[req.Cancel]+" requested", "job_id", j.ID, "step", n, "signal", req.Signal, "by", req.By)
		out = *j
		return nil
	})
	return out, err
}

// enqueueSteps hands ended steps to a StepRecorder, off the owner loop.
func (c *Controller) enqueueSteps(steps []spec.JobSteps) {
	if len(steps) == 0 {
		return
	}
	if _, ok := c.recorder.(StepRecorder); !ok {
		return
	}
	c.recMu.Lock()
	c.stepQueue = append(c.stepQueue, steps...)
	if over := len(c.stepQueue) - maxRecordQueue; over > 0 {
		c.log.Error("accounting recorder is behind; dropping ended steps from its queue (their jobs' final records still carry the newest)", "dropped", over)
		c.stepQueue = slices.Clone(c.stepQueue[over:])
	}
	c.recMu.Unlock()
	select {
	case c.recWake <- struct{}{}:
	default:
	}
}

// flushSteps hands queued steps to the recorder; a failed batch goes back
// to the front of the queue.
func (c *Controller) flushSteps(ctx context.Context) bool {
	c.recMu.Lock()
	batch := c.stepQueue
	c.stepQueue = nil
	c.recMu.Unlock()
	if len(batch) == 0 {
		return true
	}
	if err := c.recorder.(StepRecorder).RecordSteps(ctx, batch); err != nil {
		c.log.Warn("recording ended steps failed; will retry", "steps", len(batch), "err", err)
		c.recMu.Lock()
		c.stepQueue = append(batch, c.stepQueue...)
		c.recMu.Unlock()
		return false
	}
	return true
}
