package controller

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// fullCyclesOnly has every cycle be a full one, however long the last
// one took. The prefetch and expected lists come from full cycles only
// (incremental ones leave the last full cycle's lists; the periodic full
// cycle renews them within SchedInterval: TestPrefetchWithinAnInterval).
// With the default incMin (25 ms of wall time), a full cycle slowed by
// -race and load made the next submissions incremental, and a test that
// settles once read the blocker's list: TestPrefetchFollowsReservations
// failed so under -race at load ~20; alwaysIncremental fails it each time.
// The same holds for every test whose subject is what a full cycle decides
// (reasons, priority order, QOS limits of a waiting preemptor, the start
// in the submission's own commit): with incMinFullCycle set to 0 (every
// full cycle "slow"), TestNotify, TestPriorityOrderAndReasons,
// TestSubmitStartsInItsCommit, TestWaitingPreemptorKeepsQOSLimits and
// TestStatsAndObserver failed; they pin full cycles too.
func fullCyclesOnly(c *Controller) { c.sched.incMin = 1000 * time.Hour }

// TestPrefetchFollowsReservations: the images of pending jobs that the
// scheduler expects to start on a node within prefetchHorizon are that
// node's to pull ahead, once per image and user, soonest first; the
// node's own root (host) and starts beyond the horizon are not.
func TestPrefetchFollowsReservations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blocker time.Duration // the running job's time limit: when the GPUs free up
		want    []Prefetch
	}{
		{"within the horizon", 30 * time.Minute, []Prefetch{
			{Image: "reg.site/app:1", UID: alice.UID, GID: alice.GID, Start: t0.Add(30 * time.Minute)},
			{Image: "reg.site/app:1", UID: bob.UID, GID: bob.GID, Start: t0.Add(60 * time.Minute)},
		}},
		{"beyond the horizon", prefetchHorizon + time.Hour, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarnessAt(t, newFakeStore(), nil, t0, fullCyclesOnly)
			h.register("n1", 2)
			gpus := func(image string, limit time.Duration) func(*spec.JobSpec) {
				return func(j *spec.JobSpec) {
					j.Resources.GPUsPerNode, j.Image, j.TimeLimit = 2, image, spec.Duration(limit)
				}
			}
			blocker := h.submit(alice, gpus("", tc.blocker))
			if j := h.job(blocker); j.State != spec.StateRunning {
				t.Fatalf("blocker is %s, want RUNNING", j.State)
			}
			h.submit(alice, gpus("reg.site/app:1", 10*time.Minute))
			h.submit(alice, gpus("reg.site/app:1", 10*time.Minute)) // the same image and user: one pull
			h.submit(alice, gpus(spec.ImageHost, 10*time.Minute))
			h.submit(bob, gpus("reg.site/app:1", 10*time.Minute)) // another user: pulls with his credentials
			h.settle()
			got := h.c.PrefetchFor("n1")
			if len(got) != len(tc.want) {
				t.Fatalf("PrefetchFor(n1) = %+v, want %d entries %+v", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				g := got[i]
				if g.Image != w.Image || g.UID != w.UID || g.GID != w.GID || !g.Start.Equal(w.Start) || g.Job == 0 {
					t.Errorf("entry %d = %+v, want %+v", i, g, w)
				}
			}
			if other := h.c.PrefetchFor("n2"); other != nil {
				t.Errorf("PrefetchFor(n2) = %+v for a node nobody reserved", other)
			}
		})
	}
}

// TestPrefetchWithinAnInterval: where events are answered incrementally
// (full cycles are costly), a new pending job reaches its node's prefetch
// list with the periodic full cycle, one SchedInterval later at most.
func TestPrefetchWithinAnInterval(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, alwaysIncremental)
	h.register("n1", 2)
	gpus := func(image string, limit time.Duration) func(*spec.JobSpec) {
		return func(j *spec.JobSpec) {
			j.Resources.GPUsPerNode, j.Image, j.TimeLimit = 2, image, spec.Duration(limit)
		}
	}
	if j := h.job(h.submit(alice, gpus("", 30*time.Minute))); j.State != spec.StateRunning {
		t.Fatalf("blocker is %s, want RUNNING", j.State)
	}
	full := h.fullCycles()
	id := h.submit(alice, gpus("reg.site/app:1", 10*time.Minute))
	h.settle()
	if n := h.fullCycles(); n != full {
		t.Fatalf("%d full cycles after the submission, want %d (answered incrementally)", n, full)
	}
	h.advance(DefaultConfig().SchedInterval)
	h.settle()
	if n := h.fullCycles(); n != full+1 {
		t.Fatalf("%d full cycles one interval later, want %d (the periodic one)", n, full+1)
	}
	got := h.c.PrefetchFor("n1")
	if len(got) != 1 || got[0].Job != id || got[0].Image != "reg.site/app:1" || !got[0].Start.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("PrefetchFor(n1) one interval after the submission = %+v, want job %d's reg.site/app:1 at %v", got, id, t0.Add(30*time.Minute))
	}
}
