package controller

import "github.com/gpud/gpud/gpud/spec"

// The parsed --dependency is spec's (spec.ParseDependency, the one
// parser, which JobSpec.Validate runs at submit too).
type (
	dependency = spec.Dependency
	depItem    = spec.DepItem
	depRef     = spec.DepRef
	depKind    = spec.DepKind
)

const (
	depAfter      = spec.DepAfter
	depAfterAny   = spec.DepAfterAny
	depAfterOK    = spec.DepAfterOK
	depAfterNotOK = spec.DepAfterNotOK
	depSingleton  = spec.DepSingleton
)

// depResult is a dependency's state in one cycle.
type depResult int

const (
	depSatisfied depResult = iota
	depWaiting
	depNever
)

// depJobs calls f with each job r stands for (every task of an array,
// named by its array job id) until f returns false; it reports whether
// r names any job at all.
func (c *Controller) depJobs(r depRef, f func(*spec.Job) bool) bool {
	first := c.st.jobs[r.ID]
	if first == nil {
		return false
	}
	if first.job.ArrayJobID != r.ID {
		if r.Task >= 0 {
			return false
		}
		f(&first.job)
		return true
	}
	// Array tasks have consecutive ids from the array job id, indices
	// ascending.
	found := false
	for id := r.ID; ; id++ {
		rec := c.st.jobs[id]
		if rec == nil || rec.job.ArrayJobID != r.ID {
			break
		}
		if r.Task >= 0 && rec.job.ArrayTaskID != r.Task {
			continue
		}
		found = true
		if !f(&rec.job) {
			break
		}
	}
	return found
}

// checkDepend refuses a dependency on a job that does not exist.
func (c *Controller) checkDepend(who Caller, s string, d *dependency) error {
	// A job who may not see ([privacy] jobs, a hidden partition) is one
	// that does not exist, so that dependencies tell no one of others' jobs.
	v := Viewer{who: who, cfg: &c.cfg}
	for _, it := range d.Items {
		for _, r := range it.Refs {
			seen := false
			if !c.depJobs(r, func(j *spec.Job) bool { seen = v.Job(j); return !seen }) || !seen {
				if r.ID < c.st.nextID && c.cfg.MinJobAge > 0 {
					// Slurm refuses it too ("Job dependency problem").
					return spec.Errorf(spec.ErrInvalid, "--dependency=%s: job %s is not held by the controller: it never existed, or it ended more than min_job_age (%s) ago and was purged (sacct -j %d shows how it ended); a dependency can name only a pending, running or recently ended job", s, r, c.cfg.MinJobAge, r.ID)
				}
				return spec.Errorf(spec.ErrInvalid, "--dependency=%s: job %s does not exist; check the id with gpuq", s, r)
			}
		}
	}
	return nil
}

// depOne is the state of one dependency type on one job.
func depOne(kind depKind, j *spec.Job) depResult {
	switch kind {
	case depAfter:
		if j.Attempt > 0 || !j.StartTime.IsZero() || j.State.Terminal() {
			return depSatisfied
		}
	case depAfterAny:
		if j.State.Terminal() {
			return depSatisfied
		}
	case depAfterOK:
		if j.State == spec.StateCompleted {
			return depSatisfied
		}
		if j.State.Terminal() {
			return depNever
		}
	case depAfterNotOK:
		if j.State == spec.StateCompleted {
			return depNever
		}
		if j.State.Terminal() {
			return depSatisfied
		}
	}
	return depWaiting
}

// singletonIndex answers whether a singleton job must wait: another job
// of the same user and name holds resources, or waits with a lower id.
type singletonIndex struct {
	active     map[string]bool
	minPending map[string]spec.JobID
}

func singletonKey(j *spec.Job) string { return j.User + "\x00" + j.Name }

func (c *Controller) newSingletonIndex(active []spec.JobID) *singletonIndex {
	x := &singletonIndex{active: map[string]bool{}, minPending: map[string]spec.JobID{}}
	for _, id := range active {
		if rec := c.st.jobs[id]; rec != nil {
			x.active[singletonKey(&rec.job)] = true
		}
	}
	for id, rec := range c.st.pending {
		k := singletonKey(&rec.job)
		if m, ok := x.minPending[k]; !ok || id < m {
			x.minPending[k] = id
		}
	}
	return x
}

// evalDepend is the state of rec's dependency now. single is built on
// first need.
func (c *Controller) evalDepend(rec *jobRec, single func() *singletonIndex) depResult {
	if rec.dep == nil {
		d, err := spec.ParseDependency(rec.job.Depend)
		if err != nil {
			return depNever
		}
		rec.dep = d
	}
	d := rec.dep
	res := depSatisfied
	if d.Any {
		res = depNever
	}
	for _, it := range d.Items {
		r := c.evalItem(&rec.job, it, single)
		if d.Any {
			if r == depSatisfied {
				return depSatisfied
			}
			if r == depWaiting {
				res = depWaiting
			}
		} else {
			if r == depNever {
				return depNever
			}
			if r == depWaiting {
				res = depWaiting
			}
		}
	}
	return res
}

// evalItem: every job an item names must satisfy it.
func (c *Controller) evalItem(j *spec.Job, it depItem, single func() *singletonIndex) depResult {
	if it.Kind == depSingleton {
		x := single()
		k := singletonKey(j)
		if m, ok := x.minPending[k]; x.active[k] || ok && m < j.ID {
			return depWaiting
		}
		return depSatisfied
	}
	res := depSatisfied
	for _, r := range it.Refs {
		found := c.depJobs(r, func(dj *spec.Job) bool {
			switch depOne(it.Kind, dj) {
			case depNever:
				res = depNever
				return false
			case depWaiting:
				res = depWaiting
			}
			return true
		})
		if !found && (it.Kind == depAfterOK || it.Kind == depAfterNotOK) {
			// The job is gone: its outcome can no longer be known.
			return depNever
		}
		if res == depNever {
			return depNever
		}
	}
	return res
}
