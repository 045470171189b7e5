package spec

import (
	"strconv"
	"strings"
)

// JobRef names a job the way users write it: "42" is job 42, and "42_7" is
// task 7 of array 42 (Slurm's syntax). A bare array id stands for every
// task of the array in actions (scancel 42 cancels the whole array), while
// "42_0" is the first task alone even though its job id is 42 too.
type JobRef struct {
	ID JobID
	// Task is the array task index when IsTask is set.
	Task   int
	IsTask bool
}

// ParseJobRef parses "ID" or "ARRAYID_TASK".
func ParseJobRef(s string) (JobRef, error) {
	s = strings.TrimSpace(s)
	head, task, isTask := strings.Cut(s, "_")
	n, err := strconv.ParseUint(head, 10, 64)
	if err != nil || n == 0 {
		return JobRef{}, Errorf(ErrInvalid, "%q is not a job id; write a positive whole number (42) or an array task (42_7)", s)
	}
	r := JobRef{ID: JobID(n), IsTask: isTask}
	if isTask {
		t, err := strconv.Atoi(task)
		if err != nil || t < 0 {
			return JobRef{}, Errorf(ErrInvalid, "%q: array task %q is not a whole number ≥ 0; write ARRAYID_TASK, e.g. 42_7", s, task)
		}
		r.Task = t
	}
	return r, nil
}

func (r JobRef) String() string {
	s := strconv.FormatUint(uint64(r.ID), 10)
	if r.IsTask {
		s += "_" + strconv.Itoa(r.Task)
	}
	return s
}
