package controller

import (
	"context"
	"fmt"
	"strings"
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
		var errs []string
		bad := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
		if u.Partition != nil {
			p := c.cfg.partition(*u.Partition)
			switch {
			case p == nil:
				bad("Partition=%s does not exist; choose one of: %s", *u.Partition, strings.Join(c.cfg.partitionNames(), ", "))
			case p.State == PartitionDrain || p.State == PartitionInactive:
				bad("partition %s is %s and takes no new jobs", p.Name, p.State)
			default:
				if err := c.checkSatisfiable(p, &next.Resources); err != nil {
					bad("%v", err)
				}
				next.Partition = p.Name
			}
		}
		if u.TimeLimit != nil {
			d := *u.TimeLimit
			switch {
			case d <= 0:
				bad("TimeLimit must be positive")
			case d > j.TimeLimit.Std() && j.TimeLimit != 0 && !privileged:
				bad("TimeLimit=%s is longer than the job's %s; only root or an operator may raise a time limit", fmtDur(d), fmtDur(j.TimeLimit.Std()))
			}
			next.TimeLimit, next.TimeUnlimited = spec.Duration(d), false
		}
		if p := c.cfg.partition(next.Partition); p != nil && p.MaxTime > 0 && (next.TimeLimit == 0 || next.TimeLimit.Std() > p.MaxTime) {
			if next.TimeLimit == 0 {
				next.TimeLimit = spec.Duration(p.MaxTime)
			} else {
				bad("TimeLimit=%s exceeds partition %s's limit of %s", fmtDur(next.TimeLimit.Std()), p.Name, fmtDur(p.MaxTime))
			}
		}
		if u.QOS != nil {
			if _, ok := c.cfg.qos(*u.QOS); !ok {
				bad("QOS=%s does not exist; choose one of: %s", *u.QOS, strings.Join(c.cfg.qosNames(), ", "))
			} else if !privileged {
				return spec.Errorf(spec.ErrPermissionDenied, "only root or an operator may change a job's QOS")
			}
			next.QOS = *u.QOS
		}
		if u.Nice != nil {
			n := *u.Nice
			switch {
			case n < -maxNice || n > maxNice:
				bad("Nice=%d is out of range; use -%d..%d", n, maxNice, maxNice)
			case n < 0 && !privileged:
				return spec.Errorf(spec.ErrPermissionDenied, "Nice=%d: only root may raise a job's priority with a negative nice", n)
			}
			next.Nice = n
		}
		if u.Name != nil {
			if *u.Name == "" || len(*u.Name) > maxNameLen {
				bad("JobName must be 1-%d characters", maxNameLen)
			}
			next.Name = *u.Name
		}
		if u.Comment != nil {
			next.Comment = *u.Comment
		}
		if len(errs) > 0 {
			return spec.Errorf(spec.ErrInvalid, "update job %d: %s", j.ID, strings.Join(errs, "; "))
		}
		j.JobSpec = next
		tx.kick = true // priority, partition and limits feed the next cycle
		tx.saveJob(rec)
		out = *j
		out.Alloc = cloneAlloc(out.Alloc)
		return nil
	})
	return out, err
}
