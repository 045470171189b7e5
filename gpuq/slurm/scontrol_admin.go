package slurm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// adminUpdate is scontrol update NodeName=... or PartitionName=...; ok
// false when args update a job.
func (c *Cmd) adminUpdate(ctx context.Context, args []string) (bool, error) {
	for _, w := range args {
		k, _, _ := strings.Cut(w, "=")
		switch strings.ToLower(k) {
		case "nodename":
			return true, c.updateNodes(ctx, args)
		case "partitionname":
			return true, c.updatePartition(ctx, args)
		case "reservationname", "reservation":
			return true, c.updateResv(ctx, args) // scontrol_resv.go
		}
	}
	return false, nil
}

// updateNodes is scontrol update NodeName=LIST State= Reason= Weight=
// Features=: all of it on every node, or nothing.
func (c *Cmd) updateNodes(ctx context.Context, args []string) error {
	var u spec.NodeUpdate
	var problems []error
	for _, w := range args {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			problems = append(problems, invalid("update: %q is not Key=Value; e.g. scontrol update NodeName=gpu-[01-04] State=DRAIN Reason=\"PSU\"", w))
			continue
		}
		switch strings.ToLower(k) {
		case "nodename":
			hs, err := hostlist.Expand(v)
			if err != nil {
				problems = append(problems, invalid("NodeName=%s: %v", v, err))
			}
			u.Nodes = append(u.Nodes, hs...)
		case "state":
			u.State = strings.ToUpper(v)
		case "reason":
			u.Reason = v
		case "weight":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				problems = append(problems, invalid("Weight=%q: give a whole number, 0 or more (lower weights are used first)", v))
			}
			u.Weight = &n
		case "features", "availablefeatures", "activefeatures":
			fs := splitList(v)
			if fs == nil {
				fs = []string{}
			}
			u.Features = &fs
		default:
			problems = append(problems, invalid("update NodeName: %s cannot be changed by gpud; it changes State, Reason, Weight and Features", k))
		}
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	res, err := cl.UpdateNodes(ctx, u)
	if err != nil {
		return fmt.Errorf("update nodes %s: %w", hostlist.Compress(u.Nodes), err)
	}
	c.noteDiffs(res.Differences)
	return nil
}

// updatePartition is scontrol update PartitionName=P State= MaxTime=
// DefaultTime= Default= Nodes=.
func (c *Cmd) updatePartition(ctx context.Context, args []string) error {
	var u spec.PartitionUpdate
	var problems []error
	limit := func(k, v string) *spec.Duration {
		d, err := directive.ParseTime(v)
		if err != nil {
			problems = append(problems, invalid("%s=%s: %v", k, v, err))
			return nil
		}
		if d == directive.Unlimited {
			d = 0
		}
		sd := spec.Duration(d)
		return &sd
	}
	for _, w := range args {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			problems = append(problems, invalid("update: %q is not Key=Value; e.g. scontrol update PartitionName=gpu State=DOWN", w))
			continue
		}
		switch strings.ToLower(k) {
		case "partitionname":
			u.Name = v
		case "state":
			s := strings.ToUpper(v)
			u.State = &s
		case "maxtime":
			u.MaxTime = limit("MaxTime", v)
		case "defaulttime":
			u.DefaultTime = limit("DefaultTime", v)
		case "default":
			switch strings.ToUpper(v) {
			case "YES":
				b := true
				u.Default = &b
			case "NO":
				b := false
				u.Default = &b
			default:
				problems = append(problems, invalid("Default=%s: give YES or NO", v))
			}
		case "nodes":
			ns := []string{}
			if !strings.EqualFold(v, "ALL") && v != "" {
				hs, err := hostlist.Expand(v)
				if err != nil {
					problems = append(problems, invalid("Nodes=%s: %v", v, err))
				}
				ns = hs
			}
			u.Nodes = &ns
		default:
			problems = append(problems, invalid("update PartitionName: %s cannot be changed by gpud; it changes State, MaxTime, DefaultTime, Default and Nodes (other settings are in gpud.toml)", k))
		}
	}
	if u.Name == "" {
		problems = append(problems, invalid("PartitionName= is empty"))
	}
	if len(problems) > 0 {
		return errors.Join(problems...)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	res, err := cl.UpdatePartition(ctx, u)
	if err != nil {
		return fmt.Errorf("update partition %s: %w", u.Name, err)
	}
	c.noteDiffs(res.Differences)
	return nil
}

// noteDiffs says on stderr how the live state now differs from the
// configuration (Slurm prints nothing on success; scripts read stdout).
func (c *Cmd) noteDiffs(diffs []string) {
	for _, d := range diffs {
		fmt.Fprintf(c.Stderr, "%s: note: the live state differs from the configuration: %s\n", c.Name, d)
	}
}

// top is scontrol top JOBID[,JOBID...]: each job goes ahead of its
// owner's other pending jobs of its partition, account and QOS; the first
// listed ends first.
func (c *Cmd) top(ctx context.Context, args []string) error {
	ids := splitList(args...)
	if len(ids) == 0 {
		return invalid("top needs job ids; e.g. scontrol top 42,43")
	}
	sels, err := parseSels(ids)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var errs []error
	for i := len(sels) - 1; i >= 0; i-- {
		if _, err := cl.RefAction(ctx, sels[i].ref, "top", api.JobActionRequest{}); err != nil {
			errs = append(errs, fmt.Errorf("top job %s: %w", sels[i].ref, err))
		}
	}
	return errors.Join(errs...)
}

// waitJob is scontrol wait_job JOBID: it returns once the job runs (its
// nodes hold it), or fails once it ended without running.
func (c *Cmd) waitJob(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return invalid("wait_job needs one job id; e.g. scontrol wait_job 42")
	}
	s, err := parseSel(args[0])
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	for {
		j, err := cl.JobByRef(ctx, s.ref)
		if err != nil {
			return fmt.Errorf("wait_job %s: %w", s.ref, err)
		}
		switch {
		case j.State == spec.StateRunning || j.State == spec.StateSuspended:
			return nil
		case j.State.Terminal():
			return fmt.Errorf("wait_job %s: the job ended %s without becoming ready", s.ref, j.State)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitJobPoll):
		}
	}
}

// notify is scontrol notify JOBID MESSAGE...: the words after the job id
// are the message, which the running batch job gets in its stderr.
func (c *Cmd) notify(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return invalid("notify needs a job id and a message; e.g. scontrol notify 42 'the file system goes read-only at 18:00'")
	}
	s, err := parseSel(args[0])
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if _, err := cl.RefAction(ctx, s.ref, "notify", api.JobActionRequest{Reason: strings.Join(args[1:], " ")}); err != nil {
		return fmt.Errorf("notify job %s: %w", s.ref, err)
	}
	return nil
}

// waitJobPoll is how often wait_job asks (Slurm's scontrol polls too).
const waitJobPoll = 500 * time.Millisecond

// suspend is scontrol suspend|resume JOBID[,JOBID...] (root or an
// operator): the job's processes are frozen on every node, or thawed.
func (c *Cmd) suspend(ctx context.Context, action string, args []string) error {
	ids := splitList(args...)
	if len(ids) == 0 {
		return invalid("%s needs job ids; e.g. scontrol %s 42", action, action)
	}
	sels, err := parseSels(ids)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range sels {
		if _, err := cl.RefAction(ctx, s.ref, action, api.JobActionRequest{}); err != nil {
			errs = append(errs, fmt.Errorf("%s job %s: %w", action, s.ref, err))
		}
	}
	return errors.Join(errs...)
}

// suspendTime is scontrol show job's SuspendTime: when the job was last
// suspended or resumed, None if never.
func suspendTime(j *spec.Job) string {
	if j.SuspendTime.IsZero() {
		return "None"
	}
	return j.SuspendTime.Local().Format(format.TimeLayout)
}

// secsPreSuspend is the run time before the current suspension (0 when
// not suspended), as Slurm shows it.
func secsPreSuspend(j *spec.Job, now time.Time) string {
	if j.State != spec.StateSuspended {
		return "0"
	}
	return strconv.FormatInt(int64(format.Used(j, now)/time.Second), 10)
}
