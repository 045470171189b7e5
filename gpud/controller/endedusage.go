package controller

import (
	"cmp"
	"slices"

	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/spec"
)

// endedUsage is, for a controller without a usage feed (no accounting to
// read), the billed and decayed usage of the attempts that ended, per
// (account, user), kept as each attempt ends (noteEnded, from finish and
// requeue: every attempt, the ones a requeue or a preemption threw away
// included)
// instead of recomputed from every job remembered at every cycle. It is
// what the feed's totals are to a controller with accounting: a cycle's
// fairshare adds only the jobs running now, so its cost follows the
// running jobs, not the jobs that ever ended (walking and sorting those
// was 70% of a 3,000-job fidelity run's CPU, docs/simulator.md), and it
// bills every attempt, as the feed, gpuq report and gpud simulate do.
//
// What it keeps across a restart is what the rest of a controller
// without accounting keeps: the jobs in its state store. A restarted (or
// reloaded, or newly leading) controller rebuilds it from every ended job
// the store holds, by its last attempt, the only one the store has; the
// earlier attempts of requeued jobs, billed here when they ended, are
// forgotten then, as are jobs purged from the store (purging needs
// accounting, which a production controller reads through the feed).
// Accounting is what keeps every attempt; without it, the state store is
// the history. The same rebuild follows a change of the billing policy
// (half-life, model weights), whose sums cannot be converted.
//
// Owner only.
type endedUsage struct {
	// past is nil until built: after New or load, at the first report
	// or ended attempt.
	past map[[2]string]*fairshare.Past
	cfg  fairshare.Config
	// sorted is past in (account, user) order, nil after a change.
	sorted []fairshare.Past
	// kept are the runs node silence interrupted (Job.Interrupted) whose
	// attempt, ended by the requeue, is billed in past: a run that
	// resumes is the same attempt, billed again when it ends, so its
	// billing up to the interruption is taken back (resumedRun).
	kept map[string]fairshare.Usage
}

// endedPast is the usage of the ended attempts, in (account, user)
// order, decayed to various times (fairshare.ComputeWithPast decays each
// to the report's now): built from the remembered jobs when not yet
// built or when the billing policy changed.
func (c *Controller) endedPast() []fairshare.Past {
	e := &c.endedUse
	cfg := c.fairshareConfig()
	if e.past == nil || !sameBilling(e.cfg, cfg) {
		e.past, e.cfg, e.sorted = map[[2]string]*fairshare.Past{}, cfg, nil
		var done []*spec.Job
		for _, rec := range c.st.jobs {
			if rec.job.State.Terminal() {
				done = append(done, &rec.job)
			}
		}
		// In the order they ended, as commits bill them (the sums do
		// not depend on the map's order).
		slices.SortFunc(done, func(a, b *spec.Job) int {
			return cmp.Or(a.EndTime.Compare(b.EndTime.Time), cmp.Compare(a.ID, b.ID))
		})
		for _, j := range done {
			c.billEnded(j)
		}
	}
	if e.sorted == nil {
		e.sorted = make([]fairshare.Past, 0, len(e.past))
		for _, p := range e.past {
			e.sorted = append(e.sorted, *p)
		}
		slices.SortFunc(e.sorted, func(a, b fairshare.Past) int {
			return cmp.Or(cmp.Compare(a.Account, b.Account), cmp.Compare(a.User, b.User))
		})
	}
	return e.sorted
}

// noteEnded bills an attempt that ended (j as it goes into txn.ended:
// a terminal job, or a requeue's record of the attempt it ended): into
// the ended usage the controller keeps without a feed, or with one into
// batchEnded until the commit hands it to the recorder. At once, not at
// the commit: a cycle the same batch runs before its commit
// (cycleInBatch) must see it, or whether it did would depend on that
// cycle's wall-clock pacing. A commit that fails reloads the state,
// and with it this usage (load).
func (c *Controller) noteEnded(j *spec.Job) {
	if c.feed != nil {
		// The feed reads it from accounting; until its batch commits
		// (and hands it to the recorder: unfed), fairshare bills it
		// from here.
		if u, ok := endedAttemptUsage(j); ok {
			c.batchEnded = append(c.batchEnded, u)
		}
		return
	}
	if c.endedUse.past == nil || !sameBilling(c.endedUse.cfg, c.fairshareConfig()) {
		// Built from the jobs the controller holds: j among them when
		// it ended terminal.
		c.endedPast()
		if j.State.Terminal() {
			return
		}
	}
	c.billEnded(j)
}

// billEnded adds j's ended attempt (its allocation, StartTime and
// EndTime: a terminal job, or the record of an attempt a requeue ended)
// to the ended usage. GPUs count as for the jobs running now
// (fairshareUsage): the model the node reported for the device.
func (c *Controller) billEnded(j *spec.Job) {
	e := &c.endedUse
	u, ok := endedAttemptUsage(j)
	if !ok {
		return
	}
	for _, n := range j.Alloc.Nodes {
		if m := c.gpuModel(n.Node, n.GPUs); m != "" {
			u.Model = m
		}
	}
	k := [2]string{u.Account, u.User}
	p := e.past[k]
	if p == nil {
		p = &fairshare.Past{Account: u.Account, User: u.User, At: u.End}
		e.past[k] = p
	}
	// Billed at the later of the two: an end before p.At is billed
	// decayed to p.At (Past.Add), one after it moves p there first.
	if u.End.After(p.At) {
		p.DecayTo(u.End, &e.cfg)
	}
	p.Add(&u, &e.cfg)
	e.sorted = nil
}

// endedAttemptUsage is the usage of the ended attempt j records (a
// terminal job, or a requeue's record of the attempt it ended: the job
// PENDING again, its EndTime the attempt's end); false when it bills
// nothing.
func endedAttemptUsage(j *spec.Job) (fairshare.Usage, bool) {
	u, ok := attemptUsage(j)
	if !ok {
		return u, false
	}
	if u.End.IsZero() {
		u.End = j.EndTime.Time
	}
	return u, !u.End.IsZero()
}

// keptRun notes that the run of j, interrupted by node silence and kept
// (Job.Interrupted), was billed when its requeue ended the attempt.
func (c *Controller) keptRun(j *spec.Job) {
	e := &c.endedUse
	run := j.Interrupted
	if c.feed != nil || e.past == nil || run == nil {
		return
	}
	u, ok := attemptUsage(&spec.Job{JobSpec: j.JobSpec, User: j.User, StartTime: run.StartTime, Alloc: &run.Alloc})
	if !ok {
		return
	}
	u.End = run.At.Time
	for _, n := range run.Alloc.Nodes {
		if m := c.gpuModel(n.Node, n.GPUs); m != "" {
			u.Model = m
		}
	}
	if e.kept == nil {
		e.kept = map[string]fairshare.Usage{}
	}
	e.kept[run.Alloc.ID] = u
}

// resumedRun takes back the billing of an interrupted run that resumes
// (its attempt goes on, and is billed from its start when it ends);
// droppedRun forgets it when the job starts again or ends instead.
func (c *Controller) resumedRun(allocID string) {
	e := &c.endedUse
	u, ok := e.kept[allocID]
	if !ok {
		return
	}
	delete(e.kept, allocID)
	p := e.past[[2]string{u.Account, u.User}]
	if p == nil {
		return
	}
	r, d := e.cfg.Billed(&u, p.At)
	p.Raw, p.Decayed = max(p.Raw-r, 0), max(p.Decayed-d, 0)
	e.sorted = nil
}

func (c *Controller) droppedRun(allocID string) { delete(c.endedUse.kept, allocID) }
