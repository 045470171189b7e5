package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// JobUpdate is scontrol update JobId=N: the fields to change, nil for
// those left alone.
type JobUpdate struct {
	TimeLimit *time.Duration
	Partition *string
	QOS       *string
	Nice      *int
	Name      *string
	Comment   *string
}

// fields are the sbatch options (as spec.FieldError names them) that u
// changes.
func (u JobUpdate) fields() []string {
	var fs []string
	for f, set := range map[string]bool{"--time": u.TimeLimit != nil, "--partition": u.Partition != nil, "--qos": u.QOS != nil,
		"--nice": u.Nice != nil, "--job-name": u.Name != nil, "--comment": u.Comment != nil} {
		if set {
			fs = append(fs, f)
		}
	}
	return fs
}

// Validate checks the new values as spec.JobSpec.Validate checks them at
// submit (the server calls it before the controller's policy, which
// checks them again with the job).
func (u JobUpdate) Validate() error {
	var js spec.JobSpec
	if u.TimeLimit != nil {
		js.TimeLimit = spec.Duration(*u.TimeLimit)
	}
	for _, f := range []struct {
		to   *string
		from *string
	}{{&js.Partition, u.Partition}, {&js.QOS, u.QOS}, {&js.Name, u.Name}, {&js.Comment, u.Comment}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	if u.Nice != nil {
		js.Nice = *u.Nice
	}
	return js.ValidateFields(u.fields()...)
}

// UpdateJob changes a job as policy allows, all or nothing:
//   - TimeLimit: the owner may lower it (a running job too); only root or an
//     operator may raise it, never past the partition's maximum.
//   - Partition: a pending job may move to a partition that exists, takes
//     jobs, admits its time limit and has nodes that could hold it.
//   - QOS: root or an operator only, to a QOS that exists (a user could
//     otherwise escape their QOS's limits).
//   - Nice: the owner may set 0 or more; a negative nice needs root.
//   - Name, Comment: the owner, while the job is pending.
func (c *Controller) UpdateJob(ctx context.Context, who Caller, ref spec.JobRef, u JobUpdate) (spec.Job, error) {
	var out spec.Job
	err := c.call(ctx, func(tx *txn) error {
		recs, err := c.resolve(ref, false)
		if err != nil {
			return err
		}
		rec := recs[0]
		j := &rec.job
		privileged := who.Known && who.UID == 0
		if !who.Known || (who.UID != 0 && who.UID != j.UID && !c.cfg.coordinates(who.User, j.Account)) {
			return spec.Errorf(spec.ErrPermissionDenied, "job %d belongs to %s; only its owner, root, an operator or a coordinator of account %s may update it", j.ID, j.User, j.Account)
		}
		pending := j.State == spec.StatePending
		if !pending && (u.Partition != nil || u.QOS != nil || u.Nice != nil || u.Name != nil || u.Comment != nil) {
			return spec.Errorf(spec.ErrConflict, "job %d is %s; only a pending job's Partition, QOS, Nice, JobName and Comment can change", j.ID, j.State)
		}
		if j.State.Terminal() {
			return spec.Errorf(spec.ErrConflict, "job %d already ended (%s)", j.ID, j.State)
		}
		next := j.JobSpec
		var errs []error
		bad := func(err error) { errs = append(errs, err) }
		if u.Partition != nil {
			next.Partition = *u.Partition
			switch p := c.cfg.partition(*u.Partition); {
			case p == nil || !c.cfg.partitionVisible(p, who):
				bad(c.noPartition(*u.Partition, who)) // policy.go, as at submit
			case c.closedPartition(p, who) != nil:
				bad(c.closedPartition(p, who))
			default:
				if err := c.checkSatisfiable(p, &next.Resources); err != nil {
					bad(err)
				}
				next.Partition = p.Name
			}
		}
		if u.TimeLimit != nil {
			d := *u.TimeLimit
			switch {
			case d <= 0:
				bad(spec.Errorf(spec.ErrInvalid, "TimeLimit must be positive"))
			case d > j.TimeLimit.Std() && j.TimeLimit != 0 && !privileged:
				bad(spec.Errorf(spec.ErrInvalid, "TimeLimit=%s is longer than the job's %s; only root or an operator may raise a time limit", fmtDur(d), fmtDur(j.TimeLimit.Std())))
			}
			next.TimeLimit, next.TimeUnlimited = spec.Duration(d), false
		}
		if p := c.cfg.partition(next.Partition); p != nil {
			if next.TimeLimit == 0 {
				next.TimeLimit = spec.Duration(p.MaxTime)
			} else if err := overPartitionTime(p, next.TimeLimit.Std()); err != nil {
				bad(err)
			}
		}
		if u.QOS != nil {
			if err := c.noQOS(*u.QOS); err != nil {
				bad(err)
			} else if !privileged {
				return spec.Errorf(spec.ErrPermissionDenied, "only root or an operator may change a job's QOS")
			}
			next.QOS = *u.QOS
		}
		if u.Nice != nil {
			if err := checkNice(*u.Nice, privileged); errors.Is(err, spec.ErrPermissionDenied) {
				return err
			} else if err != nil {
				bad(err)
			}
			next.Nice = *u.Nice
		}
		if u.Name != nil {
			if *u.Name == "" {
				bad(spec.Errorf(spec.ErrInvalid, "JobName is empty; give the job a name"))
			}
			next.Name = *u.Name
		}
		if u.Comment != nil {
			next.Comment = *u.Comment
		}
		// The new values as a job: what sbatch would have said of them
		// (names, sizes, ranges), with its messages.
		if err := next.ValidateFields(u.fields()...); err != nil {
			bad(err)
		}
		nj := *j
		nj.JobSpec = next
		// Who may run what where (access.go), judged on the job as it
		// would be: a partition, QOS or time limit the job may not have
		// is refused as at submit.
		if len(errs) == 0 {
			groups := c.callerGroups(who, j.UID)
			for _, r := range c.access(&nj, ownerOf(&nj, groups)) {
				bad(r.err)
			}
			if err := c.checkAccountWall(&nj); err != nil {
				bad(err)
			}
			if err := c.checkBudget(&nj); err != nil && u.TimeLimit != nil {
				bad(err)
			}
			if u.QOS != nil && *u.QOS != j.QOS {
				if err := c.checkQOSSubmitLimit(&nj, 1); err != nil {
					bad(err)
				}
			}
		}
		// What the job stores may grow (a longer comment or name): it
		// counts against the same limits as a submission.
		if err := c.checkRecordGrowth(rec, &nj); err != nil {
			bad(err)
		}
		if len(errs) > 0 {
			return fmt.Errorf("update job %d: %w", j.ID, errors.Join(errs...))
		}
		counted := rec.charged != 0
		c.st.uncountActive(rec)
		if next.TimeLimit != j.TimeLimit || next.TimeUnlimited != j.TimeUnlimited {
			// Its nodes enforce the limit (each runner's deadline): they
			// hear of the new one now, not at their next other change, or
			// an extension would end the job TIMEOUT at the old limit.
			c.bumpLive(tx, rec)
		}
		j.JobSpec = next
		if counted {
			c.st.countActive(rec)
		}
		// It passes the rules as it is now.
		delete(c.st.ineligible, j.ID)
		tx.kick = true // priority, partition and limits feed the next cycle
		tx.saveJob(rec)
		out = *j
		out.Alloc = cloneAlloc(out.Alloc)
		return nil
	})
	return out, err
}
