package controller

import (
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// depKind is a dependency type, as sbatch names it.
type depKind string

const (
	depAfter      depKind = "after"
	depAfterAny   depKind = "afterany"
	depAfterOK    depKind = "afterok"
	depAfterNotOK depKind = "afternotok"
	depSingleton  depKind = "singleton"
)

// depRef is one job a dependency names: a plain job, a whole array (the
// array job id) or one task of an array (ID_TASK, task >= 0).
type depRef struct {
	id   spec.JobID
	task int
}

type depItem struct {
	kind depKind
	refs []depRef
}

// dependency is a parsed --dependency: items joined by "," (all must
// hold) or "?" (any may).
type dependency struct {
	any   bool
	items []depItem
}

// depResult is a dependency's state in one cycle.
type depResult int

const (
	depSatisfied depResult = iota
	depWaiting
	depNever
)

const depForms = "use TYPE:JOBID[:JOBID...] items joined by , (all) or ? (any), TYPE one of after, afterany, afterok, afternotok; or singleton"

// parseDepend parses a --dependency spec.
func parseDepend(s string) (*dependency, error) {
	d := &dependency{}
	sep := ","
	if strings.Contains(s, "?") {
		if strings.Contains(s, ",") {
			return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s mixes , (all) and ? (any); use one of them", s)
		}
		sep, d.any = "?", true
	}
	for item := range strings.SplitSeq(s, sep) {
		kind, rest, _ := strings.Cut(item, ":")
		it := depItem{kind: depKind(kind)}
		switch it.kind {
		case depSingleton:
			if rest != "" || strings.Contains(item, ":") {
				return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: singleton takes no job ids; %s", s, depForms)
			}
			d.items = append(d.items, it)
			continue
		case depAfter, depAfterAny, depAfterOK, depAfterNotOK:
		case "aftercorr", "afterburstbuffer":
			return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: %s is not supported by gpud; %s", s, kind, depForms)
		default:
			return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: %q is not a dependency; %s", s, item, depForms)
		}
		if rest == "" {
			return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: %s names no job; %s", s, kind, depForms)
		}
		for ref := range strings.SplitSeq(rest, ":") {
			if strings.Contains(ref, "+") {
				return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: delays (+MINUTES) are not supported by gpud; use --begin on the job instead", s)
			}
			idS, taskS, hasTask := strings.Cut(ref, "_")
			id, err := strconv.ParseUint(idS, 10, 64)
			r := depRef{id: spec.JobID(id), task: -1}
			if hasTask && err == nil {
				r.task, err = strconv.Atoi(taskS)
				if err == nil && r.task < 0 {
					err = strconv.ErrRange
				}
			}
			if err != nil || id == 0 {
				return nil, spec.Errorf(spec.ErrInvalid, "--dependency=%s: %q is not a job id (N, or N_TASK for one array task); %s", s, ref, depForms)
			}
			it.refs = append(it.refs, r)
		}
		d.items = append(d.items, it)
	}
	return d, nil
}

// depJobs calls f with each job r stands for (every task of an array,
// named by its array job id) until f returns false; it reports whether
// r names any job at all.
func (c *Controller) depJobs(r depRef, f func(*spec.Job) bool) bool {
	first := c.st.jobs[r.id]
	if first == nil {
		return false
	}
	if first.job.ArrayJobID != r.id {
		if r.task >= 0 {
			return false
		}
		f(&first.job)
		return true
	}
	// Array tasks have consecutive ids from the array job id, indices
	// ascending.
	found := false
	for id := r.id; ; id++ {
		rec := c.st.jobs[id]
		if rec == nil || rec.job.ArrayJobID != r.id {
			break
		}
		if r.task >= 0 && rec.job.ArrayTaskID != r.task {
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
func (c *Controller) checkDepend(s string, d *dependency) error {
	for _, it := range d.items {
		for _, r := range it.refs {
			if !c.depJobs(r, func(*spec.Job) bool { return false }) {
				name := strconv.FormatUint(uint64(r.id), 10)
				if r.task >= 0 {
					name += "_" + strconv.Itoa(r.task)
				}
				return spec.Errorf(spec.ErrInvalid, "--dependency=%s: job %s does not exist; check the id with gpuq", s, name)
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
		d, err := parseDepend(rec.job.Depend)
		if err != nil {
			return depNever
		}
		rec.dep = d
	}
	d := rec.dep
	res := depSatisfied
	if d.any {
		res = depNever
	}
	for _, it := range d.items {
		r := c.evalItem(&rec.job, it, single)
		if d.any {
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
	if it.kind == depSingleton {
		x := single()
		k := singletonKey(j)
		if m, ok := x.minPending[k]; x.active[k] || ok && m < j.ID {
			return depWaiting
		}
		return depSatisfied
	}
	res := depSatisfied
	for _, r := range it.refs {
		found := c.depJobs(r, func(dj *spec.Job) bool {
			switch depOne(it.kind, dj) {
			case depNever:
				res = depNever
				return false
			case depWaiting:
				res = depWaiting
			}
			return true
		})
		if !found && (it.kind == depAfterOK || it.kind == depAfterNotOK) {
			// The job is gone: its outcome can no longer be known.
			return depNever
		}
		if res == depNever {
			return depNever
		}
	}
	return res
}
