package controller

import (
	"context"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Purging ended jobs, as Slurm's MinJobAge: without it every job ever
// submitted stays in the controller's memory and state.db, so a busy
// cluster's controller grows without bound (a 100,000-job burst is ~100
// MB of RSS). An ended job leaves once it is Config.MinJobAge old, its
// record is in accounting (sacct answers for it from then on), no node
// still runs a part of it and no pending job's --dependency names it.

// Purger is a Store that can forget jobs (gpud/store; the HA group,
// through its log).
type Purger interface {
	DeleteJobs(ctx context.Context, ids []spec.JobID) error
}

// purgeBatch bounds one pass: one store transaction (one HA log entry)
// and one owner-loop turn.
const purgeBatch = 5000

// purgeEvery is how often the leader looks for jobs to purge: half of
// min_job_age, between 1 s and 30 s.
func purgeEvery(minJobAge time.Duration) time.Duration {
	return min(max(minJobAge/2, time.Second), 30*time.Second)
}

// purgeLoop purges old ended jobs until ctx ends.
func (c *Controller) purgeLoop(ctx context.Context, chk RecordChecker, p Purger) {
	for {
		var age time.Duration
		if err := c.query(ctx, func() error { age = c.cfg.MinJobAge; return nil }); err != nil {
			return
		}
		t := time.NewTimer(purgeEvery(age))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if n, err := c.purgeOnce(ctx, chk, p); err != nil {
			c.log.Warn("purging ended jobs failed; they stay until the next pass", "err", err)
		} else if n > 0 {
			c.log.Info("ended jobs purged (accounting keeps them)", "jobs", n, "min_job_age", c.cfg.MinJobAge)
		}
	}
}

// purgeOnce purges up to purgeBatch jobs and returns how many. Accounting
// is asked off the owner loop; the store delete and the forgetting run
// on it, after checking each job again.
func (c *Controller) purgeOnce(ctx context.Context, chk RecordChecker, p Purger) (int, error) {
	var cand map[spec.JobID]int // id -> attempt
	if err := c.query(ctx, func() error {
		if !c.following {
			cand = c.purgeCandidates()
		}
		return nil
	}); err != nil || len(cand) == 0 {
		return 0, err
	}
	ids := make([]spec.JobID, 0, len(cand))
	for id := range cand {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	recorded := map[spec.JobID]bool{}
	for chunk := range slices.Chunk(ids, recheckChunk) {
		have, err := chk.RecordedTerminal(ctx, chunk)
		if err != nil {
			return 0, err
		}
		for _, id := range chunk {
			if att, ok := have[id]; ok && att >= cand[id] {
				recorded[id] = true
			}
		}
	}
	n := 0
	err := c.query(ctx, func() error {
		if c.following {
			return nil
		}
		// Again: the state may have moved while accounting was asked.
		now := c.purgeCandidates()
		var gone []spec.JobID
		for _, id := range ids {
			if att, ok := now[id]; ok && att == cand[id] && recorded[id] {
				gone = append(gone, id)
			}
		}
		gone = wholeArrays(c, gone)
		if len(gone) == 0 {
			return nil
		}
		if err := p.DeleteJobs(context.WithoutCancel(ctx), gone); err != nil {
			return err
		}
		c.forgetJobs(gone)
		n = len(gone)
		return nil
	})
	return n, err
}

// purgeCandidates are the ended jobs old enough to purge, with their
// attempt, at most purgeBatch (owner only). An array's tasks are
// candidates only all together, when every task it still has qualifies.
func (c *Controller) purgeCandidates() map[spec.JobID]int {
	age := c.cfg.MinJobAge
	if age <= 0 {
		return nil
	}
	cutoff := c.now().Add(-age)
	needed := c.dependedOn()
	out := map[spec.JobID]int{}
	arrays := map[spec.JobID]bool{} // array id -> every task qualifies so far
	for _, id := range c.st.order {
		rec := c.st.jobs[id]
		if rec == nil {
			continue
		}
		j := &rec.job
		ok := j.State.Terminal() && !j.EndTime.IsZero() && j.EndTime.Before(cutoff) &&
			len(rec.liveNodes()) == 0 && !needed[id] && !needed[j.ArrayJobID]
		if j.ArrayJobID != 0 {
			all, seen := arrays[j.ArrayJobID]
			arrays[j.ArrayJobID] = ok && (all || !seen)
		}
		if ok {
			if len(out) >= purgeBatch {
				break
			}
			out[id] = j.Attempt
		}
	}
	for id := range out {
		if a := c.st.jobs[id].job.ArrayJobID; a != 0 && !arrays[a] {
			delete(out, id)
		}
	}
	return out
}

// wholeArrays drops from ids the tasks of any array not all of whose
// remaining tasks are in ids (a batch may split an array; owner only).
func wholeArrays(c *Controller, ids []spec.JobID) []spec.JobID {
	in := make(map[spec.JobID]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	complete := map[spec.JobID]bool{}
	for _, id := range ids {
		a := c.st.jobs[id].job.ArrayJobID
		if a == 0 {
			continue
		}
		if _, done := complete[a]; done {
			continue
		}
		all := true
		c.depJobs(depRef{ID: a, Task: -1}, func(j *spec.Job) bool {
			all = in[j.ID]
			return all
		})
		complete[a] = all
	}
	return slices.DeleteFunc(ids, func(id spec.JobID) bool {
		a := c.st.jobs[id].job.ArrayJobID
		return a != 0 && !complete[a]
	})
}

// dependedOn is every job id (or array id) a pending job's --dependency
// names (owner only).
func (c *Controller) dependedOn() map[spec.JobID]bool {
	out := map[spec.JobID]bool{}
	for _, rec := range c.st.pending {
		if rec.job.Depend == "" {
			continue
		}
		d := rec.dep
		if d == nil {
			var err error
			if d, err = spec.ParseDependency(rec.job.Depend); err != nil {
				continue
			}
		}
		for _, it := range d.Items {
			for _, r := range it.Refs {
				out[r.ID] = true
			}
		}
	}
	return out
}

// forgetJobs drops purged jobs from memory (owner only).
func (c *Controller) forgetJobs(ids []spec.JobID) {
	gone := make(map[spec.JobID]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
		delete(c.st.jobs, id)
		delete(c.st.waiters, id)
		c.forgetIdle(id)
	}
	c.st.order = slices.DeleteFunc(c.st.order, func(id spec.JobID) bool { return gone[id] })
	for k, jobs := range c.st.keys {
		if slices.ContainsFunc(jobs, func(id spec.JobID) bool { return gone[id] }) {
			delete(c.st.keys, k) // a resend now makes a new job, as after any key's lifetime
		}
	}
}
