package controller

import (
	"context"
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// CancelFilter selects the jobs CancelJobs ends: a JobFilter narrowed by
// job names and QOS.
type CancelFilter struct {
	JobFilter
	Names []string
	QOS   []string
}

func (f *CancelFilter) empty() bool {
	return len(f.IDs) == 0 && len(f.Users) == 0 && len(f.Accounts) == 0 && len(f.Partitions) == 0 &&
		len(f.States) == 0 && len(f.Names) == 0 && len(f.QOS) == 0
}

// CancelJobs cancels every job f matches that who may cancel, in one
// transaction (one commit however many jobs: scancel -u alice over 10,000
// pending jobs is one call). Jobs of others and jobs already ending are
// skipped and counted. A filter with no criterion is refused: it would
// cancel every job the caller may touch.
func (c *Controller) CancelJobs(ctx context.Context, who Caller, f CancelFilter, reason string) (cancelled []spec.JobID, skipped int, err error) {
	if f.empty() {
		return nil, 0, spec.Errorf(spec.ErrInvalid, "cancelling by filter needs a criterion (user, state, name, partition, account, QOS or ids); none was given")
	}
	err = c.call(ctx, func(tx *txn) error {
		cancelled, skipped = nil, 0
		visit := func(rec *jobRec) {
			j := &rec.job
			if !f.match(j) || len(f.Names) > 0 && !slices.Contains(f.Names, j.Name) || len(f.QOS) > 0 && !slices.Contains(f.QOS, j.QOS) {
				return
			}
			if j.State.Terminal() || j.State == spec.StateCompleting {
				skipped++
				return
			}
			if err := c.act(tx, who, rec, ActionCancel, reason); err != nil {
				skipped++
				return
			}
			cancelled = append(cancelled, j.ID)
		}
		if len(f.IDs) > 0 {
			ids := slices.Clone(f.IDs)
			slices.Sort(ids)
			for _, id := range slices.Compact(ids) {
				if rec := c.st.jobs[id]; rec != nil {
					visit(rec)
				}
			}
			return nil
		}
		for _, id := range slices.Clone(c.st.order) {
			if rec := c.st.jobs[id]; rec != nil {
				visit(rec)
			}
		}
		return nil
	})
	return cancelled, skipped, err
}
