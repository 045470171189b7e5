package node

import "time"

// Clock is the time source for job time: alloc deadlines, kill grace and
// event timestamps. Tests inject a fake so time limits need no real
// waiting. Network pacing (heartbeats, retry backoff) uses real time: it
// changes how soon, never what, the agent does.
type Clock interface {
	Now() time.Time
	// After fires once d has passed on this clock (at once if d <= 0).
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
