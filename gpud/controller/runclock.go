package controller

import (
	"sync"
	"time"
)

// How long a job has run is measured on this process's monotonic clock,
// not by subtracting its stamped start (a wall time, from the disk, the
// wire or another member) from the wall clock now: a step of the
// controller's wall clock while jobs run would move every running job's
// deadline by the step (an hour forward: every job with a limit under an
// hour timed out at once on its nodes; back: an hour more). The stamp is
// read once, when this process first needs it (its start, a restart, a
// new leader): that reading is as good as the wall clock then, and from
// then on the run time follows the monotonic clock.

// runClock keeps, per stamped start, when it was on this process's
// monotonic clock. Safe for concurrent use (assignments are built off
// the owner loop).
type runClock struct {
	mu sync.Mutex
	m  map[string]runAnchor
}

type runAnchor struct {
	stamped time.Time // the start as stored
	mono    time.Time // the same instant, as a reading of this process's clock
}

// start is the start stamped (under key: an allocation's or a job's) as
// a time of now's wall clock: now less how long it has run on the
// monotonic clock since this process first saw it. Without a monotonic
// reading (a test's fake clock) it is stamped itself.
func (r *runClock) start(key string, stamped, now time.Time) time.Time {
	if stamped.IsZero() {
		return stamped
	}
	r.mu.Lock()
	a, ok := r.m[key]
	if !ok || !a.stamped.Equal(stamped) {
		a = runAnchor{stamped: stamped, mono: now.Add(-max(now.Sub(stamped), 0))}
		if r.m == nil {
			r.m = map[string]runAnchor{}
		}
		r.m[key] = a
	}
	r.mu.Unlock()
	if now == now.Round(0) {
		return stamped // no monotonic reading: nothing to measure by
	}
	return now.Add(-now.Sub(a.mono)).Round(0)
}

// prune forgets the starts keep does not want (allocations no longer
// running).
func (r *runClock) prune(keep func(key string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m {
		if !keep(k) {
			delete(r.m, k)
		}
	}
}
