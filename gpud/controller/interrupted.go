package controller

import (
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// A node marked DOWN for silence may only be cut off: its containers can
// go on running. Its jobs are requeued at once (they may start elsewhere),
// but a run whose every node went silent is kept on the job
// (Job.Interrupted) while the job waits. If those nodes come back with
// the allocation still running (a heartbeat lists it) or report on it (an
// outbox event: a step, its end), before the job started again, the run
// resumes as it was: the same allocation and attempt, its steps, its
// containers untouched. Exactly once holds because the controller decides
// on its owner loop: the job either starts a new attempt (which drops
// Interrupted, and the nodes fence the old containers when they hear of
// it) or resumes the old one, never both. The old run sealed no
// checkpoint meanwhile (its agent fences checkpoints once out of touch,
// node/fence.go), and nothing else ran the job, so its checkpoint
// lineage has one writer.

// interruptible returns what to keep of rec's run if the silence of
// node, about to be marked DOWN, interrupts it: node holds its last live
// part and every other part ended the same way (its node marked DOWN
// for silence in this controller's session). nil otherwise: a run with a
// part on a node that answers is stopped there and cannot resume.
func (c *Controller) interruptible(rec *jobRec, node string) *spec.InterruptedRun {
	j := &rec.job
	if !j.Requeue || j.Alloc == nil || !slices.Equal(rec.liveNodes(), []string{node}) {
		return nil
	}
	switch {
	case j.State == spec.StateRunning && j.StopState == "":
	case j.State == spec.StateCompleting && j.StopState == spec.StateRequeued && j.StopReason == reasonNodeFailRequeue:
		// An earlier node of the run went silent first.
	default:
		return nil // stopping for another reason
	}
	for _, p := range j.Alloc.Nodes {
		if p.Node != node && !slices.Contains(rec.silentParts, p.Node) {
			return nil
		}
	}
	a := *cloneAlloc(j.Alloc)
	for i := range a.Nodes {
		a.Nodes[i].Ended = false
	}
	return &spec.InterruptedRun{Alloc: a, Nodes: slices.Clone(j.Nodes), GPUs: slices.Clone(j.GPUs), StartTime: j.StartTime,
		IdleGPU: j.IdleGPU, LostWork: j.LostWork, Steps: slices.Clone(j.Steps), StepSignals: slices.Clone(j.StepSignals)}
}

// resumeInterrupted puts back the run of allocation allocID that node
// silence interrupted (Job.Interrupted), if the job has not started
// again and every node of the run is up and has it: from (a node whose
// event about it arrived) counts as having it, the others must list it
// in their last heartbeat.
func (c *Controller) resumeInterrupted(tx *txn, allocID, from string) {
	id, ok := c.st.interrupted[allocID]
	if !ok {
		return
	}
	rec := c.st.jobs[id]
	if rec == nil || rec.job.Interrupted == nil || rec.job.Interrupted.Alloc.ID != allocID || rec.job.State != spec.StatePending {
		delete(c.st.interrupted, allocID)
		return
	}
	run := rec.job.Interrupted
	for _, p := range run.Alloc.Nodes {
		n := c.st.nodes[p.Node]
		if n == nil || n.down {
			return
		}
		if p.Node == from {
			continue
		}
		if r := c.heardRec(p.Node).running.Load(); r == nil || !slices.Contains(*r, allocID) {
			return
		}
	}
	j := &rec.job
	a := run.Alloc
	a.Nodes = slices.Clone(a.Nodes)
	j.State, j.Reason = spec.StateRunning, spec.ReasonNone
	j.Alloc = &a
	j.Nodes, j.GPUs, j.StartTime, j.EndTime = run.Nodes, run.GPUs, run.StartTime, spec.Time{}
	j.IdleGPU, j.LostWork, j.Steps, j.StepSignals = run.IdleGPU, run.LostWork, run.Steps, run.StepSignals
	j.ExpectedStart, j.NodeReasons = spec.Time{}, ""
	j.Interrupted = nil
	delete(c.st.interrupted, allocID)
	c.resumedRun(allocID) // endedusage.go
	delete(c.st.pending, j.ID)
	delete(c.sched.waiting, j.ID)
	rec.silentParts = nil
	for _, p := range a.Nodes {
		c.st.nodes[p.Node].allocs[a.ID] = j.ID
		tx.bump[p.Node] = true
	}
	tx.saveJob(rec)
	tx.kick = true
	c.log.Info("job resumed: its nodes came back with its run before it started again", "job_id", j.ID, "alloc_id", a.ID,
		"nodes", j.Nodes, "interrupted_for", c.now().Sub(run.At.Time).Round(1e6))
}

// dropInterrupted forgets rec's interrupted run: the job starts again or
// ended, so its old containers are fenced when their nodes hear of it.
func (c *Controller) dropInterrupted(rec *jobRec) {
	if run := rec.job.Interrupted; run != nil {
		delete(c.st.interrupted, run.Alloc.ID)
		c.droppedRun(run.Alloc.ID) // endedusage.go
		rec.job.Interrupted = nil
	}
	rec.silentParts = nil
}
