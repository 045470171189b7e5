package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/fake"
)

// pausingRuntime is the fake runtime with the cgroup freezer
// (runtime.Pauser): it records what it froze and thawed.
type pausingRuntime struct {
	*fake.Runtime
	mu    sync.Mutex
	calls []string
}

func (p *pausingRuntime) Pause(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "pause "+id)
	return nil
}

func (p *pausingRuntime) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "resume "+id)
	return nil
}

func (p *pausingRuntime) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// timingTaken waits until alloc's runner goroutine has taken the timing
// last sent to it (it applies a timing as it takes it, before it waits
// on its deadline again).
func timingTaken(t *testing.T, e *env, alloc string) {
	t.Helper()
	waitFor(t, "runner of "+alloc+" takes its timing", func() bool {
		e.agent.mu.Lock()
		r := e.agent.runners[alloc]
		e.agent.mu.Unlock()
		return r != nil && len(r.timingC()) == 0
	}, e.on()...)
}

// setAt sets the assignments as the controller's answers carry them at
// now (its clock) and waits until the agent reconciled them.
func (e *env) setAt(t *testing.T, now time.Time, asgs ...api.Assignment) {
	t.Helper()
	e.fc.mu.Lock()
	e.fc.now = now
	e.fc.mu.Unlock()
	e.setAndWait(t, asgs...)
}

// TestTimeLimitChangedWhileRunning: a running job's new time limit
// (scontrol update TimeLimit=...) reaches its runner at once, extended or
// shortened, though the lines that repeat its timing are no longer sent
// to the runner (suspendTo). The lines come late by a few milliseconds,
// as answers do: the job's start stays where its first line put it, so
// its deadline is the limit from that start exactly (translated again
// at each line, it moved by each line's delay: localStarts).
func TestTimeLimitChangedWhileRunning(t *testing.T) {
	tests := []struct {
		name  string
		limit time.Duration // set 10 minutes in
		term  time.Duration // when SIGTERM comes, from the start
	}{
		{"extended", 2 * time.Hour, 2 * time.Hour},
		{"shortened", 30 * time.Minute, 30 * time.Minute},
		{"shortened below the time it has run", 5 * time.Minute, 10 * time.Minute},
		{"unchanged", time.Hour, time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(e *env) { e.fc.now = t0 })
			a := asg(7, e.home) // started at t0 with an hour
			e.setAt(t, t0, a)
			e.waitStarted(t, cid)
			waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
			e.clock.Advance(10 * time.Minute)
			// Lines that change nothing of the job, each 50 ms late.
			for range 3 {
				e.setAt(t, e.clock.Now().Add(-50*time.Millisecond), a)
			}
			a.Job.TimeLimit = spec.Duration(tc.limit)
			e.setAt(t, e.clock.Now().Add(-20*time.Millisecond), a)
			switch {
			case tc.limit == time.Hour:
				e.setAt(t, e.clock.Now().Add(-20*time.Millisecond), a) // one more line: any timing sent is taken
				timingTaken(t, e, a.Alloc.ID)
			case tc.term == 10*time.Minute:
				waitFor(t, "SIGTERM at once", func() bool { return len(e.rt.Signals(cid)) == 1 }, e.on()...)
				return
			default:
				waitFor(t, "the deadline timer armed again", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
			}
			e.clock.Advance(tc.term - 10*time.Minute - time.Millisecond)
			if got := e.rt.Signals(cid); len(got) != 0 {
				t.Fatalf("signals a millisecond before %s: %v", tc.term, got)
			}
			e.clock.Advance(time.Millisecond)
			waitFor(t, "SIGTERM at "+tc.term.String(), func() bool { return len(e.rt.Signals(cid)) == 1 }, e.on()...)
		})
	}
}

// TestSuspendStopsTheTimeLimit: a SUSPENDED job's container is frozen and
// its time limit stops; resumed, it is thawed and its limit, extended by
// the controller by the time suspended, runs again from the start.
// Each of the lines before, between and after changes nothing else.
func TestSuspendStopsTheTimeLimit(t *testing.T) {
	var prt *pausingRuntime
	e := newEnv(t, func(e *env) {
		e.fc.now = t0
		prt = &pausingRuntime{Runtime: e.rt}
		e.rtOverride = prt
	})
	a := asg(7, e.home) // started at t0 with an hour
	e.setAt(t, t0, a)
	e.waitStarted(t, cid)
	waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(10 * time.Minute)
	a.Job.State = spec.StateSuspended
	e.setAt(t, e.clock.Now(), a)
	e.setAt(t, e.clock.Now(), a)
	if got := prt.Calls(); !slices.Equal(got, []string{"pause " + cid}) {
		t.Fatalf("runtime calls %v; want the container paused once", got)
	}
	timingTaken(t, e, a.Alloc.ID)
	e.clock.Advance(2 * time.Hour) // past the hour: the timer was stopped
	e.setAt(t, e.clock.Now(), a)
	if got := e.rt.Signals(cid); len(got) != 0 {
		t.Fatalf("signals while suspended past the limit: %v", got)
	}
	// Resumed at 2h10m: the limit extended by the 2 hours suspended.
	a.Job.State, a.Job.TimeLimit = spec.StateRunning, spec.Duration(3*time.Hour)
	e.setAt(t, e.clock.Now(), a)
	if got := prt.Calls(); !slices.Equal(got, []string{"pause " + cid, "resume " + cid}) {
		t.Fatalf("runtime calls %v; want the container paused and resumed", got)
	}
	waitFor(t, "the deadline timer armed again", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.setAt(t, e.clock.Now(), a)
	e.clock.Advance(50*time.Minute - time.Second)
	if got := e.rt.Signals(cid); len(got) != 0 {
		t.Fatalf("signals a second before the extended limit: %v", got)
	}
	e.clock.Advance(time.Second)
	waitFor(t, "SIGTERM at the extended limit", func() bool { return len(e.rt.Signals(cid)) == 1 }, e.on()...)
}
