package controller

import (
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// ActionTop is scontrol top: the job goes ahead of its owner's other
// pending jobs of the same partition, account and QOS.
const ActionTop = "top"

// top raises pending job rec's priority to one above the highest of its
// owner's other pending jobs with the same partition, account and QOS,
// through its nice value (one point of priority per unit, whatever the
// weights). As in Slurm, it reorders a user's own jobs: the job ends one
// point above the owner's best queued job, so it passes another user's
// job only where that job's priority ties with the owner's best (and the
// submission order decided).
func (c *Controller) top(tx *txn, rec *jobRec) error {
	j := &rec.job
	if j.State != spec.StatePending {
		return spec.Errorf(spec.ErrConflict, "job %d is %s; only pending jobs can be moved to the top", j.ID, j.State)
	}
	var best int64
	found := false
	for _, o := range c.st.pending {
		oj := &o.job
		if oj.ID == j.ID || oj.UID != j.UID || oj.Partition != j.Partition || oj.Account != j.Account || oj.QOS != j.QOS {
			continue
		}
		if !found || oj.Priority > best {
			best, found = oj.Priority, true
		}
	}
	if !found || j.Priority > best {
		return nil // already first
	}
	d := best - j.Priority + 1
	j.Nice -= int(d)
	j.Priority += d
	tx.kick = true
	return nil
}

// Job actions of scontrol suspend and resume (root or an operator).
const (
	ActionSuspend   = "suspend"
	ActionResumeJob = "resume"
)

// suspend suspends a running job (suspend true) or resumes a suspended
// one. Every node of the job freezes its cgroup (gpud/node: the
// runtime's pause), so its processes stop where they are and keep their
// memory and GPUs. As in Slurm, the time limit does not run while the job
// is suspended: resume extends it by the time spent suspended.
func (c *Controller) suspend(tx *txn, who Caller, rec *jobRec, suspend bool) error {
	j := &rec.job
	action := ActionResumeJob
	if suspend {
		action = ActionSuspend
	}
	if !who.root() {
		return spec.Errorf(spec.ErrPermissionDenied, "Access/permission denied: %s of job %d needs root or an operator", action, j.ID)
	}
	now := c.now()
	switch {
	case j.State == spec.StatePending:
		return spec.Errorf(spec.ErrConflict, "Job is pending execution: job %d has not started; hold it instead (scontrol hold %d)", j.ID, j.ID)
	case j.State.Terminal() || j.StopState != "" || j.State == spec.StateCompleting:
		return spec.Errorf(spec.ErrConflict, "Job/step already completing or completed: job %d is %s", j.ID, j.State)
	case suspend && j.State == spec.StateSuspended:
		return spec.Errorf(spec.ErrConflict, "Job already suspended: job %d", j.ID)
	case !suspend && j.State != spec.StateSuspended:
		return spec.Errorf(spec.ErrConflict, "Job is not suspended: job %d is %s", j.ID, j.State)
	case suspend:
		j.State, j.SuspendTime = spec.StateSuspended, spec.NewTime(now)
	default:
		// Whole seconds, as the store keeps limits; rounded up so the
		// job never loses run time to the rounding.
		d := (max(now.Sub(j.SuspendTime.Time), 0) + time.Second - 1).Truncate(time.Second)
		j.State, j.SuspendTime = spec.StateRunning, spec.NewTime(now)
		j.Suspended += spec.Duration(d)
		if j.TimeLimit > 0 {
			j.TimeLimit += spec.Duration(d)
		}
	}
	c.log.Info("job "+pastTense(action), "job_id", j.ID, "by", orDefault(who.User, "root"))
	c.bumpLive(tx, rec)
	tx.kick = true // its expected end moved
	return nil
}

// ActionNotify is scontrol notify: a message to a running batch job.
const ActionNotify = "notify"

// notify queues msg for rec's batch node, which appends it to the job's
// stderr (gpud/node: runnernotify.go), as Slurm's scontrol notify sends
// it to the batch job's slurmstepd. The job's owner, root, an operator or
// a coordinator of its account may (mayAct). Errors in Slurm's words.
func (c *Controller) notify(tx *txn, who Caller, rec *jobRec, msg string) error {
	j := &rec.job
	switch {
	case msg == "":
		return spec.Errorf(spec.ErrInvalid, "notify needs a message; e.g. scontrol notify %d 'the file system goes read-only at 18:00'", j.ID)
	case j.State.Terminal() || j.StopState != "" || j.State == spec.StateCompleting:
		return spec.Errorf(spec.ErrConflict, "Job/step already completing or completed: job %d is %s", j.ID, j.State)
	case j.State == spec.StatePending || j.Alloc == nil:
		return spec.Errorf(spec.ErrConflict, "Requested operation is presently disabled: job %d is %s; a message reaches a running job only", j.ID, j.State)
	case j.Interactive:
		return spec.Errorf(spec.ErrInvalid, "job %d is an srun or salloc allocation; gpud delivers notify messages to a batch job's stderr only", j.ID)
	}
	j.NoticeSeq++
	n := spec.JobNotice{AllocID: j.Alloc.ID, Seq: j.NoticeSeq, Message: msg, By: orDefault(who.User, strconv.FormatUint(uint64(who.UID), 10))}
	// A new slice each time: the published view shares the old one.
	keep := j.Notices[max(len(j.Notices)-(spec.MaxNotices-1), 0):]
	j.Notices = append(slices.Clone(keep), n)
	c.log.Info("job notified", "job_id", j.ID, "notice_seq", n.Seq, "by", n.By)
	c.bumpLive(tx, rec)
	return nil
}
