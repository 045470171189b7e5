package controller

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

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
			h := newHarness(t, newFakeStore(), nil)
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
