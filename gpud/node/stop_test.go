package node

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

// exitOnStop is the fake runtime whose tasks exit at the moment the agent
// stops watching them, once stopping is set: the window in which a clean
// stop used to leave an exited task (and its containerd-shim) behind.
type exitOnStop struct {
	*fake.Runtime
	stopping atomic.Bool
}

func (r *exitOnStop) Wait(ctx context.Context, id string) (runtime.ExitStatus, error) {
	st, err := r.Runtime.Wait(ctx, id)
	if err != nil && ctx.Err() != nil && r.stopping.Load() {
		r.Runtime.Exit(id, runtime.ExitStatus{Code: 3, ExitedAt: t0})
	}
	return st, err
}

// A task that exits while the agent stops is recorded and deleted by the
// clean stop, not left exited (with its shim) for a next start that may
// never come; its exit reaches the controller at the next start. Before
// the clean-stop pass the container stayed, exited.
func TestCleanStopDeletesExitedTask(t *testing.T) {
	var rt *exitOnStop
	e := newEnv(t, func(e *env) {
		rt = &exitOnStop{Runtime: e.rt}
		e.rtOverride = rt
	})
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	e.fc.Fail(epEvents, true) // the exit must travel through the outbox
	rt.stopping.Store(true)
	e.stop()
	if st, ok := e.rt.Status(cid); ok {
		t.Fatalf("after a clean stop the container is still there (%s); want it recorded and deleted", st)
	}
	rt.stopping.Store(false)
	e.fc.Fail(epEvents, false)
	e.start(t)
	if got := e.waitExited(t, "a7"); got.State != spec.StateFailed || got.ExitCode != 3 {
		t.Errorf("a7 exit after restart = %+v, want FAILED with code 3", got)
	}
}

// StopJobsOnStop: a clean stop ends the running jobs too, SIGTERM first,
// SIGKILL after the kill grace for one that ignores it, and records them
// NODE_FAIL; without it they keep running (TestRestartAgent).
func TestStopJobsOnStop(t *testing.T) {
	e := newEnv(t, func(e *env) {
		e.cfgExtra = func(c *Config) { c.StopJobsOnStop, c.KillGrace = true, 30*time.Second }
		e.rt.SetScript("gpud-8-1-node-1", fake.Script{IgnoreSIGTERM: true})
	})
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, cid)
	e.waitStarted(t, "gpud-8-1-node-1")
	e.fc.Fail(epEvents, true)
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	// Job 7 ends on SIGTERM; job 8 waits for the grace, then SIGKILL.
	waitFor(t, "both SIGTERMed", func() bool {
		return len(e.rt.Signals(cid)) == 1 && len(e.rt.Signals("gpud-8-1-node-1")) == 1
	}, e.on()...)
	if sigs := e.rt.Signals("gpud-8-1-node-1"); len(sigs) != 1 || sigs[0] != syscall.SIGTERM {
		t.Fatalf("job 8 got %v before the grace, want SIGTERM only", sigs)
	}
	// The grace timer is armed after the signals; move the fake clock
	// past it until the agent has stopped.
	deadline := time.After(20 * time.Second)
	for done := false; !done; {
		select {
		case <-stopped:
			done = true
		case <-deadline:
			t.Fatal("agent did not stop after the kill grace")
		case <-time.After(10 * time.Millisecond):
			e.clock.Advance(30 * time.Second)
		}
	}
	for _, id := range []string{cid, "gpud-8-1-node-1"} {
		if _, ok := e.rt.Status(id); ok {
			t.Errorf("%s still exists after a stop with StopJobsOnStop", id)
		}
	}
	if sigs := e.rt.Signals("gpud-8-1-node-1"); len(sigs) != 2 || sigs[1] != syscall.SIGKILL {
		t.Errorf("job 8 got %v, want SIGTERM then SIGKILL", sigs)
	}
	e.cfgExtra = nil
	e.fc.Fail(epEvents, false)
	e.start(t)
	for _, a := range []string{"a7", "a8"} {
		if got := e.waitExited(t, a); got.State != spec.StateNodeFail || got.Reason != stopReason {
			t.Errorf("%s exit = %+v, want NODE_FAIL %q", a, got, stopReason)
		}
	}
}
