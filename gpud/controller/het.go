package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// Heterogeneous jobs (Slurm's hetjobs: sbatch's `:` and `#SBATCH hetjob`).
// Each component is a job of its own, as in Slurm: consecutive ids, the
// first (the leader, component 0) runs the batch script, the others are
// allocations whose nodes hold their share (Interactive) and run what srun
// --het-group sends them. HetJobID, HetOffset and HetSize tie them
// together; the scheduler starts them together or not at all
// (sched.Job.HetJobID), and when one ends the others end with it.

// SubmitHet makes the heterogeneous job whose component 0 is lead and
// whose further components are comps, in one transaction, and returns
// their ids (consecutive, the leader's first): every component is
// validated and checked against policy as a job of its own, and every
// problem is named with its component. key is SubmitKeyed's. lead is
// read, not changed, and must not change until SubmitHet returns: the
// server passes the request it decoded, which a value parameter would copy
// to the heap again (656 bytes a submission) for the owner loop's closure.
func (c *Controller) SubmitHet(ctx context.Context, who Caller, lead *spec.JobSpec, comps []spec.JobSpec, key string) ([]spec.JobID, error) {
	if len(comps) == 0 {
		return c.submitKeyed(ctx, who, lead, key)
	}
	// The structural checks of the whole (an array, each component's
	// fields) first, worded per component.
	if err := spec.ValidateHet(lead, comps); err != nil {
		return nil, err
	}
	specs := make([]spec.JobSpec, 0, 1+len(comps))
	specs = append(specs, *lead)
	for _, comp := range comps {
		comp.Script, comp.Args, comp.Interactive = spec.HetScript, nil, true
		specs = append(specs, comp)
	}
	var ids []spec.JobID
	err := c.call(ctx, func(tx *txn) error {
		ids = nil
		var (
			jobs []*spec.Job
			errs []error
		)
		for k, s := range specs {
			j, err := c.newJob(who, s)
			if err == nil {
				err = c.hetLimits(who, j, k, len(specs))
			}
			if err != nil {
				errs = append(errs, hetErr(k, err))
				continue
			}
			jobs = append(jobs, j)
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		if key != "" {
			if prev := c.st.keys[idemKey{jobs[0].UID, key}]; len(prev) > 0 {
				ids = slices.Clone(prev)
				return nil
			}
		}
		first := c.st.nextID
		for k, j := range jobs {
			c.st.share(j)
			rec := &jobRec{job: *j}
			nj := &rec.job
			nj.ID = c.st.nextID
			c.st.nextID++
			nj.HetJobID, nj.HetOffset, nj.HetSize = first, k, len(jobs)
			if key != "" {
				nj.IdempotencyKey = key
			}
			resolveOutput(nj)
			c.st.addJob(rec)
			tx.saveJob(rec)
			ids = append(ids, nj.ID)
		}
		// Never the incremental path: a component must not start alone
		// (incrementalSubmit), so a full cycle decides the group.
		tx.kick = true
		tx.counter = true
		return nil
	})
	return ids, err
}

// hetLimits runs the submit-time limits of SubmitKeyed on component k of
// n: the whole job counts as one submission (its leader), its components'
// GPUs each as their own.
func (c *Controller) hetLimits(who Caller, j *spec.Job, k, n int) error {
	switch {
	case j.Resources.GPUProfile != "":
		return spec.Errorf(spec.ErrInvalid, "--gpus=%s: MIG slices are not supported in a heterogeneous job component; ask for whole GPUs, or submit the MIG work as a job of its own", j.Resources.GPUProfile)
	case j.Resources.GPUFraction > 0:
		return spec.Errorf(spec.ErrInvalid, "a GPU share (%g of a GPU) is not supported in a heterogeneous job component; ask for whole GPUs", j.Resources.GPUFraction)
	case j.Reservation != "":
		return spec.Errorf(spec.ErrInvalid, "--reservation=%s: heterogeneous jobs do not run in advance reservations in gpud; submit without --reservation", j.Reservation)
	case len(j.Partitions) > 1:
		return spec.Errorf(spec.ErrInvalid, "--partition=%s: a heterogeneous job component takes one partition; name one", j.Partition)
	}
	if err := c.checkAccountLimits(j, 1); err != nil {
		return err
	}
	if k == 0 {
		if err := c.checkUserSubmitLimit(who, j, n); err != nil {
			return err
		}
	}
	if err := c.checkSubmitSize(j, 1); err != nil {
		return err
	}
	return c.checkUserSubmitSize(who, j, 1)
}

// hetErr names component k in each problem of err, keeping its kind.
func hetErr(k int, err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, hetErr(k, e))
		}
		return errors.Join(out...)
	}
	kind := spec.KindOf(err)
	if kind == nil {
		kind = spec.ErrInvalid
	}
	return spec.Errorf(kind, "hetjob component %d: %v", k, err)
}

// hetSiblings are the other components of rec's heterogeneous job that
// the controller still knows, in offset order (none for another job).
func (c *Controller) hetSiblings(rec *jobRec) []*jobRec {
	j := &rec.job
	if j.HetJobID == 0 {
		return nil
	}
	var out []*jobRec
	for k := range j.HetSize {
		id := j.HetJobID + spec.JobID(k)
		if id == j.ID {
			continue
		}
		if s := c.st.jobs[id]; s != nil && s.job.HetJobID == j.HetJobID {
			out = append(out, s)
		}
	}
	return out
}

// endHet ends the components of rec's heterogeneous job that have not
// ended, now that rec has: Slurm's het job ends as a whole (its batch
// script's end ends every component; a cancelled or failed component
// takes the others with it).
func (c *Controller) endHet(tx *txn, rec *jobRec, state spec.JobState, code, sig int) {
	for _, s := range c.hetSiblings(rec) {
		if s.job.State.Terminal() {
			continue
		}
		reason := fmt.Sprintf("heterogeneous job %d+%d ended %s", rec.job.HetJobID, rec.job.HetOffset, state)
		c.finish(tx, s, state, code, sig, reason, c.now())
	}
}

// hetComponents is what a node of one component learns of them all
// (api.Assignment.Het).
func (c *Controller) hetComponents(j *spec.Job) []spec.HetComponent {
	if j.HetJobID == 0 {
		return nil
	}
	out := make([]spec.HetComponent, 0, j.HetSize)
	for k := range j.HetSize {
		s := c.st.jobs[j.HetJobID+spec.JobID(k)]
		if s == nil || s.job.HetJobID != j.HetJobID {
			continue
		}
		hc := spec.HetComponent{Offset: s.job.HetOffset, JobID: s.job.ID, Partition: s.job.Partition, Account: s.job.Account,
			QOS: s.job.QOS, Tasks: s.job.Tasks}
		if a := s.job.Alloc; a != nil {
			hc.AllocID = a.ID
			hc.Nodes = slices.Clone(a.Nodes)
			slices.SortStableFunc(hc.Nodes, func(x, y spec.NodeAlloc) int { return x.Rank - y.Rank })
			if n := c.st.nodes[hc.Nodes[0].Node]; n != nil { // an alloc has a node
				for _, g := range n.inv.GPUs {
					if slices.Contains(hc.Nodes[0].GPUs, g.UUID) {
						hc.GPUIndex = append(hc.GPUIndex, g.Index)
					}
				}
				slices.Sort(hc.GPUIndex)
			}
		}
		out = append(out, hc)
	}
	return out
}
