package controller

import (
	"context"
	"time"
)

// Group commit over a slow store. The owner loop commits each batch of
// requests in one Store.Apply, and a batch is whatever was queued when
// the last commit ended. Where a commit is expensive and slow (an HA
// group's: a Raft entry each member appends, fsyncs and applies), most of
// its cost is per commit, not per request, and clients that are between
// two requests when a batch starts miss it: 8 clients made batches of
// about 4. WithGroupCommit makes the owner wait a little for them: when
// a batch is smaller than the largest of the last few, it waits for more
// requests up to half the last commit's duration (at most max). A lone
// client never waits (its batches are never smaller than the recent
// largest), and a burst that ends costs each later batch at most that
// wait, for gatherWindow batches.

// gatherWindow is how many recent batches set the size worth waiting for.
const gatherWindow = 8

type gatherState struct {
	max time.Duration
	// took is how long the last commit took (commit).
	took time.Duration
	// recent are the sizes of the last gatherWindow batches.
	recent [gatherWindow]int
	next   int
}

// WithGroupCommit lets the owner loop wait up to max (and half the last
// commit's duration) for more requests to join a batch that is smaller
// than recent ones (see gatherState). For a store whose commit costs far
// more than its requests' work: gpud/ha's group (a Raft entry), and since
// session 16 the single controller too (gpud/daemon, 3 ms), whose commit
// is one SQLite transaction and its fsync: with the runtime's hand-offs
// around the fsync, each commit costs more than its few requests' work
// in a live burst (docs/fleet.md, "Session 16 — ctlsub"; session 11's
// try at load 4-10 could not tell it from the noise).
func WithGroupCommit(max time.Duration) Option {
	return func(c *Controller) { c.gather.max = max }
}

// gatherMore adds to batch the requests that arrive within the wait.
func (c *Controller) gatherMore(ctx context.Context, batch []*op) []*op {
	g := &c.gather
	want := 0
	for _, n := range g.recent {
		want = max(want, n)
	}
	if wait := min(g.max, g.took/2); len(batch) < want && wait > 0 {
		t := time.NewTimer(wait)
	gather:
		for len(batch) < want && len(batch) < cap(c.ops) {
			select {
			case o := <-c.ops:
				batch = append(batch, o)
			case <-t.C:
				break gather
			case <-ctx.Done():
				break gather
			}
		}
		t.Stop()
	}
	g.recent[g.next] = len(batch)
	g.next = (g.next + 1) % gatherWindow
	return batch
}
