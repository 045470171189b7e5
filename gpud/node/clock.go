package node

import (
	"time"

	"github.com/gpud/gpud/gpud/wallclock"
)

// Clock is the time source for job time: alloc deadlines, kill grace and
// event timestamps. Tests inject a fake so time limits need no real
// waiting. Network pacing (heartbeats, retry backoff, step tickets) uses
// real time: it changes how soon, never what, the agent does.
type Clock interface {
	Now() time.Time
	// After fires once d has passed on this clock (at once if d <= 0).
	After(d time.Duration) <-chan time.Time
}

// realClock is job time in a running agent: the wall clock, which an
// end-to-end test may step (wallclock). Its times keep the monotonic
// reading, so a deadline measured within the process does not move with
// a step; a time from the controller is translated to it first
// (localStarts).
type realClock struct{}

func (realClock) Now() time.Time                         { return wallclock.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// netClock is network pacing's clock: time.Now, never stepped by a test.
type netClock struct{}

func (netClock) Now() time.Time                         { return time.Now() }
func (netClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
