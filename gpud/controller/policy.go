package controller

import (
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// The policy checks that a submission (newJob) and scontrol update
// (UpdateJob) share, so both refuse the same value with the same
// message. What a job is on its own is spec.JobSpec.Validate's.

// noPartition refuses partition name, which does not exist for who (a
// hidden partition who may not use does not: access.go).
func (c *Controller) noPartition(name string, who Caller) error {
	return spec.Errorf(spec.ErrInvalid, "partition %q does not exist; choose one of: %s", name, strings.Join(c.cfg.visiblePartitionNames(who), ", "))
}

// closedPartition refuses p if it takes no new jobs.
func (c *Controller) closedPartition(p *Partition, who Caller) error {
	if p.State == PartitionDrain || p.State == PartitionInactive {
		return spec.Errorf(spec.ErrRefused, "partition %s is %s and takes no new jobs; choose another of: %s", p.Name, p.State, strings.Join(c.cfg.visiblePartitionNames(who), ", "))
	}
	return nil
}

// overPartitionTime refuses time limit d if it exceeds p's maximum.
func overPartitionTime(p *Partition, d time.Duration) error {
	if p.MaxTime > 0 && d > p.MaxTime {
		return spec.Errorf(spec.ErrInvalid, "--time=%s exceeds partition %s's limit of %s; ask for at most %s", fmtDur(d), p.Name, fmtDur(p.MaxTime), fmtDur(p.MaxTime))
	}
	return nil
}

// noQOS refuses QOS name if it does not exist.
func (c *Controller) noQOS(name string) error {
	if _, ok := c.cfg.qos(name); !ok {
		return spec.Errorf(spec.ErrInvalid, "QOS %q does not exist; choose one of: %s", name, strings.Join(c.cfg.qosNames(), ", "))
	}
	return nil
}

// checkNice refuses a nice outside the policy's range (one outside
// spec's wider bounds is Validate's to report), or a negative one from
// anyone but root.
func checkNice(n int, root bool) error {
	switch {
	case (n < -maxNice || n > maxNice) && n >= -spec.MaxNice && n <= spec.MaxNice:
		return spec.Errorf(spec.ErrInvalid, "--nice=%d is out of range; use -%d..%d", n, maxNice, maxNice)
	case n < 0 && !root:
		return spec.Errorf(spec.ErrPermissionDenied, "--nice=%d: only root may raise a job's priority with a negative nice", n)
	}
	return nil
}
