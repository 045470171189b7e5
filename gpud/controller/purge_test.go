package controller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func (s *fakeStore) DeleteJobs(_ context.Context, ids []spec.JobID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.jobs, id)
	}
	return nil
}

func (s *fakeStore) has(id spec.JobID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.jobs[id]
	return ok
}

// recordedSet is accounting as a RecordChecker: job id -> attempt.
type recordedSet struct {
	mu sync.Mutex
	m  map[spec.JobID]int
}

func (r *recordedSet) RecordedTerminal(_ context.Context, ids []spec.JobID) (map[spec.JobID]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[spec.JobID]int{}
	for _, id := range ids {
		if a, ok := r.m[id]; ok {
			out[id] = a
		}
	}
	return out, nil
}

// TestPurgeEndedJobs: an ended job leaves memory and the store once it
// is min_job_age old and accounting holds it, not before; a job a pending
// job depends on, one accounting lacks, and an array with a task still
// running stay; a dependency on a purged job is refused, saying why and
// where its outcome is.
func TestPurgeEndedJobs(t *testing.T) {
	s := newFakeStore()
	h := newHarness(t, s, func(c *Config) { c.MinJobAge = 5 * time.Minute })
	h.register("n1", 8)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }
	old, needed, unrecorded := h.submit(alice, gpu), h.submit(alice, gpu), h.submit(alice, gpu)
	arr := h.submit(alice, func(j *spec.JobSpec) { gpu(j); j.Array = "0-1" })
	for _, id := range []spec.JobID{old, needed, unrecorded, arr} {
		h.exit("n1", h.job(id), spec.StateCompleted, 0)
	}
	if j := h.job(arr + 1); j.State != spec.StateRunning {
		t.Fatalf("array task 1: %s; want RUNNING", j.State)
	}
	waiter := h.submit(alice, func(j *spec.JobSpec) { j.Depend = "afterany:" + itoa(needed); j.Hold = true })
	rec := &recordedSet{m: map[spec.JobID]int{}}
	for _, id := range []spec.JobID{old, needed, arr, arr + 1} {
		rec.m[id] = h.job(id).Attempt
	}
	ctx := context.Background()

	if n, err := h.c.purgeOnce(ctx, rec, s); n != 0 || err != nil {
		t.Fatalf("purge of jobs younger than min_job_age: %d, %v; want none", n, err)
	}
	h.advance(6 * time.Minute)
	if n, err := h.c.purgeOnce(ctx, rec, s); n != 1 || err != nil {
		t.Fatalf("purge: %d, %v; want 1 (only job %d)", n, err, old)
	}
	if _, err := h.c.Job(ctx, old); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("purged job %d: %v; want not found", old, err)
	}
	if s.has(old) {
		t.Errorf("purged job %d is still in the store", old)
	}
	for id, why := range map[spec.JobID]string{needed: "a pending job depends on it", unrecorded: "accounting lacks it",
		arr: "its array has a running task", arr + 1: "running", waiter: "pending"} {
		if _, err := h.c.Job(ctx, id); err != nil || !s.has(id) {
			t.Errorf("job %d (%s) was purged: %v", id, why, err)
		}
	}
	_, err := h.c.Submit(ctx, alice, spec.JobSpec{Name: "late", Script: "#!/bin/sh\n", WorkDir: "/tmp", Depend: "afterok:" + itoa(old)})
	if err == nil || !strings.Contains(err.Error(), "sacct -j "+itoa(old)) {
		t.Errorf("a dependency on purged job %d: %v; want refused, naming sacct", old, err)
	}

	// The array's last task ends: both tasks go together.
	h.exit("n1", h.job(arr+1), spec.StateCompleted, 0)
	h.advance(6 * time.Minute)
	if n, err := h.c.purgeOnce(ctx, rec, s); n != 2 || err != nil {
		t.Fatalf("purge after the array ended: %d, %v; want its 2 tasks", n, err)
	}
	if _, err := h.c.Job(ctx, arr); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("array %d after purge: %v; want not found", arr, err)
	}
	// Listing still works over what is left.
	jobs, err := h.c.ListJobs(ctx, JobFilter{All: true})
	if err != nil || len(jobs) != 3 {
		t.Errorf("jobs after purges: %d, %v; want 3 (needed, unrecorded, waiter)", len(jobs), err)
	}
}
