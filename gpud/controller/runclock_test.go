package controller

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/wallclock"
)

// A step of the controller's wall clock while a job runs does not move
// the start it sends the job's nodes (they measure the time limit from
// it against the controller's clock as it answers): the run time is
// measured on the monotonic clock from when this process first saw the
// stamped start.
func TestRunClockIgnoresWallSteps(t *testing.T) {
	var r runClock
	now := time.Now()
	stamped := now.Add(-10 * time.Minute).Round(0) // stored: no monotonic reading
	if got := r.start("1.1", stamped, now); !got.Equal(stamped) {
		t.Fatalf("first sight: start %s; want the stamped %s", got, stamped)
	}
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		now := wallclock.Stepped(time.Now(), step)
		got := r.start("1.1", stamped, now)
		if ran := now.Round(0).Sub(got); ran < 10*time.Minute || ran > 10*time.Minute+5*time.Second {
			t.Errorf("clock stepped %s: the job has run %s by the start sent; want about 10m (the step must not count)", step, ran)
		}
	}
	// A new stamp (the job's start as its node reported it) is read anew.
	now = time.Now()
	restamped := now.Add(-time.Minute).Round(0)
	if got := r.start("1.1", restamped, now); now.Round(0).Sub(got) > time.Minute+5*time.Second {
		t.Errorf("restamped a minute ago: ran %s; want about 1m", now.Round(0).Sub(got))
	}
	r.prune(func(string) bool { return false })
	if len(r.m) != 0 {
		t.Errorf("prune kept %d", len(r.m))
	}
}

// A test's fake clock has no monotonic reading: the stamped start is sent
// as it is (what the controller's tests with fake clocks expect).
func TestRunClockFakeClock(t *testing.T) {
	var r runClock
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	stamped := base.Add(-time.Hour)
	for _, now := range []time.Time{base, base.Add(time.Hour), base.Add(-2 * time.Hour)} {
		if got := r.start("2.1", stamped, now); !got.Equal(stamped) {
			t.Errorf("now %s: start %s; want %s", now, got, stamped)
		}
	}
}
