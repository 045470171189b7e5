package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestExpectedFollowsReservations: a node is told the single-node batch
// jobs the scheduler reserved it for within prefetchHorizon, soonest
// first and at most expectPerNode, each with its planned part there (the
// GPUs the reservation holds) and without its script and environment;
// interactive allocations, other nodes and starts beyond the horizon are
// not listed.
func TestExpectedFollowsReservations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blocker time.Duration
		want    int
	}{
		{"within the horizon", 30 * time.Minute, expectPerNode},
		{"beyond the horizon", prefetchHorizon + time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Full cycles only, as in TestPrefetchFollowsReservations
			// (the list is a full cycle's).
			h := newHarnessAt(t, newFakeStore(), nil, t0, fullCyclesOnly)
			h.register("n1", 2)
			if h.c.ExpectedFor("n1") != nil { // a node asks: cycles note them from now on
				t.Fatal("expected jobs before any was submitted")
			}
			gpus := func(limit time.Duration, more func(*spec.JobSpec)) func(*spec.JobSpec) {
				return func(j *spec.JobSpec) {
					j.Resources.GPUsPerNode, j.TimeLimit = 2, spec.Duration(limit)
					j.Script, j.Env = "#!/bin/sh\necho secret\n", []string{"TOKEN=secret"}
					if more != nil {
						more(j)
					}
				}
			}
			blocker := h.submit(alice, gpus(tc.blocker, nil))
			if j := h.job(blocker); j.State != spec.StateRunning {
				t.Fatalf("blocker is %s, want RUNNING", j.State)
			}
			h.submit(alice, gpus(10*time.Minute, func(j *spec.JobSpec) { j.Interactive = true }))
			first := h.submit(bob, gpus(10*time.Minute, nil))
			second := h.submit(alice, gpus(10*time.Minute, nil))
			h.submit(alice, gpus(10*time.Minute, nil)) // third: beyond expectPerNode
			h.settle()
			got := h.c.ExpectedFor("n1")
			if len(got) != tc.want {
				t.Fatalf("ExpectedFor(n1) = %d entries %+v, want %d", len(got), got, tc.want)
			}
			for i, want := range []spec.JobID{first, second}[:tc.want] {
				e := got[i]
				if e.Job.ID != want || e.Node.Node != "n1" || len(e.Node.GPUs) != 2 || e.Job.Script != "" || e.Job.Env != nil || e.Start.IsZero() {
					t.Errorf("entry %d = job %d on %s, GPUs %v, script %q, env %v, start %v; want job %d on n1 with 2 GPUs and no script or environment",
						i, e.Job.ID, e.Node.Node, e.Node.GPUs, e.Job.Script, e.Job.Env, e.Start, want)
				}
				if i > 0 && got[i].Start.Before(got[i-1].Start) {
					t.Errorf("entries not soonest first: %v before %v", got[i-1].Start, got[i].Start)
				}
			}
			if j := h.job(first); j.Script == "" || len(j.Env) == 0 {
				t.Errorf("the pending job itself lost its script or environment: %q %v", j.Script, j.Env)
			}
			if other := h.c.ExpectedFor("n2"); other != nil {
				t.Errorf("ExpectedFor(n2) = %+v for a node nobody reserved", other)
			}
			// Nothing pending: nothing expected (no full cycle runs to
			// replace the list).
			for _, who := range []Caller{alice, bob} {
				if _, _, err := h.c.CancelJobs(context.Background(), who, CancelFilter{JobFilter: JobFilter{States: []spec.JobState{spec.StatePending}}}, ""); err != nil {
					t.Fatal(err)
				}
			}
			h.settle()
			if got := h.c.ExpectedFor("n1"); got != nil {
				t.Errorf("ExpectedFor(n1) = %+v after the pending jobs were cancelled, want none", got)
			}
		})
	}
}
