package node

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/wallclock"
)

// steppedClock is the real clock stepped by an offset the test sets.
type steppedClock struct{ off atomic.Int64 }

func (c *steppedClock) Now() time.Time {
	return wallclock.Stepped(time.Now(), time.Duration(c.off.Load()))
}
func (c *steppedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// A start translated to this node's clock keeps the monotonic reading:
// a deadline taken from it and armed after a step of the node's clock
// (a gang start waits for the other nodes first) is as far off as it was.
// Found by the chaos suite's clock fault: a 2-node job assigned while the
// node's clock was an hour back started after it was stepped forward
// again and timed out at once.
func TestLocalStartsOutliveAStep(t *testing.T) {
	c := &steppedClock{}
	c.off.Store(int64(-time.Hour))
	a := &Agent{runnerDeps: runnerDeps{clock: c, log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	ctl := time.Now().Add(time.Hour).Round(0) // the controller's clock, an hour ahead
	resp := api.AssignmentsResponse{Now: ctl, Assignments: []api.Assignment{{Alloc: spec.Alloc{StartTime: spec.NewTime(ctl.Add(-time.Minute))}}}}
	deadline := a.localStarts(&resp)[0].Add(30 * time.Minute)
	c.off.Store(0) // the node's clock stepped an hour forward
	if left := deadline.Sub(c.Now()); left < 29*time.Minute-5*time.Second || left > 29*time.Minute {
		t.Errorf("after the step, %s left of a 30-minute limit a minute in; want about 29m", left)
	}
}
