package controller

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Prefetch is a pending job's image that a node should pull ahead of the
// job: the scheduler reserved that node for it (backfill) and expects it
// to start at Start. The node pulls with the job user's credentials, as
// the job's own pull would, so the image is in its cache when the job
// comes and the pull overlaps the wait instead of following it.
type Prefetch struct {
	Job      spec.JobID
	Image    string
	UID, GID uint32
	Start    time.Time
}

// prefetchHorizon is how far ahead an expected start makes its nodes
// pull: a reservation days away may move to other nodes many times
// before it comes, and each move would cost a pull and cache room.
const prefetchHorizon = 2 * time.Hour

// prefetchPerNode bounds the images one node is asked to pull ahead:
// the soonest starts first (a node's cache is bounded, and pulls share
// its disk and network with running jobs).
const prefetchPerNode = 4

// notePrefetch keeps, from a full cycle's plan, each node's images to
// pull ahead. Only full cycles have every reservation: incremental ones
// leave the last full cycle's list.
func (c *Controller) notePrefetch(plan sched.Plan, now time.Time) {
	c.noteExpected(plan, now) // expect.go
	var m map[string][]Prefetch
	for _, r := range plan.Reservations {
		rec := c.st.pending[r.JobID]
		if rec == nil || r.Start.After(now.Add(prefetchHorizon)) {
			continue
		}
		j := &rec.job
		if j.Image == "" || j.Image == spec.ImageHost {
			continue
		}
		p := Prefetch{Job: j.ID, Image: j.Image, UID: j.UID, GID: j.GID, Start: r.Start}
		for _, n := range r.Nodes {
			if m == nil {
				m = map[string][]Prefetch{}
			}
			m[n.Node] = append(m[n.Node], p)
		}
	}
	for name, ps := range m {
		slices.SortFunc(ps, func(a, b Prefetch) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Job, b.Job)) })
		// One entry per image and user: the first (soonest) job stands
		// for the others.
		type key struct {
			image string
			uid   uint32
		}
		seen := map[key]bool{}
		ps = slices.DeleteFunc(ps, func(p Prefetch) bool {
			k := key{p.Image, p.UID}
			dup := seen[k]
			seen[k] = true
			return dup
		})
		m[name] = ps[:min(len(ps), prefetchPerNode)]
	}
	c.prefetch.Store(&m)
}

// dropPrefetch forgets the last full cycle's images and expected jobs
// when nothing is pending (no full cycle runs then to replace them: a
// cancelled job would stay listed).
func (c *Controller) dropPrefetch() {
	if m := c.prefetch.Load(); m != nil && len(*m) > 0 {
		c.prefetch.Store(nil)
	}
	if m := c.expect.Load(); m != nil && len(*m) > 0 {
		c.expect.Store(nil)
	}
}

// PrefetchFor returns the images node should pull ahead (see Prefetch);
// safe off the owner loop (heartbeats).
func (c *Controller) PrefetchFor(node string) []Prefetch {
	if m := c.prefetch.Load(); m != nil {
		return (*m)[node]
	}
	return nil
}
