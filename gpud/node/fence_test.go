package node

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// withNetClock injects the clock of the agent's contact with the
// controller (the self-fence).
func withNetClock(c Clock) Option { return func(o *options) { o.net = c } }

// fenceEnv starts an agent whose controller says node_timeout is 30 s,
// with a fake network clock, running job 7 (checkpoints every 10 min,
// rank 0 so this node seals).
func fenceEnv(t *testing.T) (*env, *fakeClock, string, string) {
	t.Helper()
	net := newFakeClock()
	e := newEnv(t, func(e *env) {
		e.fc.nodeTimeout = 30 * time.Second
		e.opts = append(e.opts, withNetClock(net))
	})
	cid := ContainerID(7, 1, "node-1")
	e.fc.Set(ckptAsg(7, e.home, 10*time.Minute, 1))
	e.waitStarted(t, cid)
	waitFor(t, "interval timer", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	waitFor(t, "a heartbeat answered", func() bool { return len(e.fc.Heartbeats()) > 0 }, e.on()...)
	return e, net, cid, filepath.Join(e.dir, "checkpoints", "7", "staging")
}

// refusals counts the checkpoints the agent's fence refused.
func refusals(a *Agent) int {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	return a.fence.refused
}

// rejoined reports whether a heartbeat sent now (on the network clock,
// which the test holds still) was answered after the agent had found
// itself cut off.
func rejoined(a *Agent, net *fakeClock) bool {
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	f := a.fence
	return f.contact.Equal(net.Now()) && !f.cutAt.IsZero() && !f.rejoined.Before(f.cutAt)
}

func sealedDirs(t *testing.T, e *env) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(e.dir, "checkpoints", "7", "ckpt-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// cutOff plays a partition: heartbeats fail, and 28 s pass on the network
// clock (over 90 % of the 30 s node_timeout). The job then finishes a
// checkpoint on its own and its interval comes: the agent neither seals
// it nor signals the job.
func cutOff(t *testing.T, e *env, net *fakeClock, cid, staging string) {
	t.Helper()
	e.fc.Fail(epHeartbeat, true)
	// A heartbeat answered before the cut is done with once the next
	// one has been refused (one heartbeat at a time).
	n := e.fc.Calls(epHeartbeat)
	waitFor(t, "a heartbeat refused", func() bool { return e.fc.Calls(epHeartbeat) > n }, e.on()...)
	net.Advance(28 * time.Second)
	writeCheckpoint(t, staging, "1")
	e.clock.Advance(10 * time.Minute)
	waitFor(t, "checkpoint refused", func() bool { return refusals(e.agent) > 0 }, e.on()...)
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGUSR1); n != 0 {
		t.Errorf("job signalled for a checkpoint %d times while the node was cut off; want none", n)
	}
	if n := len(checkpointEvents(e.eventsOf("a7"))); n != 0 || len(sealedDirs(t, e)) != 0 {
		t.Fatalf("cut off for 28 s of a 30 s node_timeout: %d checkpoints recorded, sealed %v; want none (split brain)", n, sealedDirs(t, e))
	}
}

// TestCutOffAgentSealsNothingAfterRequeue: a node cut off from the
// controller for longer than (90 % of) node_timeout seals no checkpoint
// of its running job, which the controller may have requeued elsewhere.
// Contact coming back does not lift that: until an assignments answer
// requested after contact returned lists the allocation, it still seals
// nothing, and here that answer does not list it (requeued), so the job
// is stopped without a checkpoint. Before the fence, the agent sealed
// ckpt-00000001 while cut off: two writers of one lineage.
func TestCutOffAgentSealsNothingAfterRequeue(t *testing.T) {
	e, net, cid, staging := fenceEnv(t)
	cutOff(t, e, net, cid, staging)

	// Contact returns; the job finishes another checkpoint at once.
	e.fc.Fail(epHeartbeat, false)
	waitFor(t, "heartbeat answered again", func() bool { return rejoined(e.agent, net) }, e.on()...)
	net.Advance(time.Second)
	writeCheckpoint(t, staging, "2")
	before := refusals(e.agent)
	e.clock.Advance(10 * time.Minute)
	waitFor(t, "checkpoint refused after contact returned", func() bool { return refusals(e.agent) > before }, e.on()...)
	if n := len(checkpointEvents(e.eventsOf("a7"))); n != 0 || len(sealedDirs(t, e)) != 0 {
		t.Fatalf("after contact returned, before any answer: %d checkpoints recorded, sealed %v; want none", n, sealedDirs(t, e))
	}
	// The controller requeued the job while the node was silent.
	e.setAndWait(t)
	ev := e.waitExited(t, "a7")
	if ev.State != spec.StateCancelled {
		t.Errorf("exit = %s (%s), want CANCELLED (fenced)", ev.State, ev.Reason)
	}
	if n := len(checkpointEvents(e.eventsOf("a7"))); n != 0 || len(sealedDirs(t, e)) != 0 {
		t.Errorf("requeued elsewhere: %d checkpoints recorded, sealed %v; want none", n, sealedDirs(t, e))
	}
	if _, ok := e.rt.Status(cid); ok {
		if st, _ := e.rt.Status(cid); st == "running" {
			t.Errorf("container still running after the answer that no longer lists it")
		}
	}
}

// TestCutOffAgentSealsAgainWhenStillAssigned: when the controller had not
// timed the node out (the answer after contact returned still lists the
// allocation), the job checkpoints again.
func TestCutOffAgentSealsAgainWhenStillAssigned(t *testing.T) {
	e, net, cid, staging := fenceEnv(t)
	cutOff(t, e, net, cid, staging)
	e.fc.Fail(epHeartbeat, false)
	waitFor(t, "heartbeat answered again", func() bool { return rejoined(e.agent, net) }, e.on()...)
	net.Advance(time.Second)
	// An answer to a poll sent after contact returned lists it. (The
	// poll in flight was sent before: its answer does not count; the
	// second Set answers the poll sent after it.)
	e.setAndWait(t, ckptAsg(7, e.home, 10*time.Minute, 1))
	e.setAndWait(t, ckptAsg(7, e.home, 10*time.Minute, 1))
	waitFor(t, "fence lifted", func() bool {
		e.agent.mu.Lock()
		defer e.agent.mu.Unlock()
		r := e.agent.runners["a7"]
		return r != nil && !r.ckptFenced
	}, e.on()...)
	if err := os.Remove(filepath.Join(staging, ".done")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	e.clock.Advance(10 * time.Minute)
	// Signal sent; its deadline, the next interval and the .done poll
	// wait (advancing before the poll's timer exists fires nothing).
	waitFor(t, "checkpoint signal", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 && e.clock.Waiters() == 3
	}, e.on()...)
	writeCheckpoint(t, staging, "3")
	e.clock.Advance(checkpointPoll)
	waitFor(t, "checkpoint sealed", func() bool { return len(checkpointEvents(e.eventsOf("a7"))) == 1 }, e.on()...)
	got, err := os.ReadFile(filepath.Join(e.dir, "checkpoints", "7", "ckpt-00000001", "counter"))
	if err != nil || string(got) != "3" {
		t.Errorf("sealed counter = %q, %v; want 3 (the one after the fence lifted)", got, err)
	}
}

// TestReturningAgentFencesOnlyOnceHeard: a node cut off for longer than
// node_timeout comes back. The controller had requeued its job, and an
// assignments answer that comes before the node's heartbeat does not list
// it; the agent must not fence on it: the heartbeat, which lists the
// running allocation, makes the controller resume the run (the job had
// not started elsewhere), and the answer asked after it lists it again.
// Before, the first answer fenced the container the controller was about
// to resume (issue 25 B: every running job lost to a leader's cut).
func TestReturningAgentFencesOnlyOnceHeard(t *testing.T) {
	e, net, cid, staging := fenceEnv(t)
	cutOff(t, e, net, cid, staging)
	// The controller answers polls again, still without the heartbeat.
	e.setAndWait(t)
	if st, _ := e.rt.Status(cid); st != "running" {
		t.Fatalf("container %s before any heartbeat answer after the cut; want running (not fenced)", st)
	}
	if ev := e.eventsOf("a7"); len(ev) > 0 && ev[len(ev)-1].Kind == "exited" {
		t.Fatalf("a7 exited (%s) on an answer that preceded the node's heartbeat", ev[len(ev)-1].Reason)
	}
	// The heartbeat gets through; the controller resumed the run.
	e.fc.Set(ckptAsg(7, e.home, 10*time.Minute, 1))
	e.fc.Fail(epHeartbeat, false)
	waitFor(t, "heartbeat answered again", func() bool { return rejoined(e.agent, net) }, e.on()...)
	net.Advance(time.Second)
	e.setAndWait(t, ckptAsg(7, e.home, 10*time.Minute, 1))
	if st, _ := e.rt.Status(cid); st != "running" {
		t.Fatalf("container %s after the controller resumed it; want running", st)
	}
	// Had it not resumed it, the next answer fences: with the heartbeat
	// heard, an answer without the allocation means it is gone.
	e.setAndWait(t)
	ev := e.waitExited(t, "a7")
	if ev.State != spec.StateCancelled {
		t.Errorf("exit = %s (%s), want CANCELLED (fenced)", ev.State, ev.Reason)
	}
}
