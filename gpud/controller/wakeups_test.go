package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// pollAfter starts node's assignments long poll at generation gen (a
// minute's wait) and waits until the controller holds it.
func pollAfter(t *testing.T, h *harness, node string, gen uint64) <-chan pollResult {
	t.Helper()
	got := make(chan pollResult, 1)
	go func() {
		g, as, err := h.c.Assignments(context.Background(), root, node, gen, time.Minute)
		got <- pollResult{g, as, err}
	}()
	waitPollers(t, h, node, 1)
	return got
}

type pollResult struct {
	gen uint64
	as  []Assignment
	err error
}

// woken waits (up to 10 s) for the poll's answer; what names the change
// that should have answered it.
func woken(t *testing.T, got <-chan pollResult, what string) pollResult {
	t.Helper()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("%s: poll: %v", what, a.err)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the node's waiting assignments poll was not answered (its wake-up was lost)", what)
	}
	return pollResult{}
}

// genOf is node's assignments generation now.
func genOf(t *testing.T, h *harness, node string) uint64 {
	t.Helper()
	gen, _, err := h.c.Assignments(context.Background(), root, node, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

func allocOf(as []Assignment, id spec.JobID) *Assignment {
	for i := range as {
		if as[i].Job.ID == id {
			return &as[i]
		}
	}
	return nil
}

// TestEveryActionableChangeWakesThePoll: each change of a node's
// assignments that its agent acts on answers the node's waiting long
// poll, with the change in the answer: a stop (cancel, requeue), a
// checkpoint before a stop (drain), a signal, a suspend, a notify
// message, a step signal and a running job's new time limit. A new allocation:
// TestCommitAnswersWaitingPoll; a gang peer's failure:
// TestGangPeerFailureWakesThePeer; a reload's start gate:
// TestStartGateReloadWakesThePoll. (The other things a node is told come elsewhere: revocation
// lists wake the poll in gpud/server, TestRevocationsReachNodes; a new
// controller identity answers at once, its generation differing,
// TestRestartKeepsStopIntentAndGeneration; prefetch and prepare hints ride
// on heartbeat answers.)
func TestEveryActionableChangeWakesThePoll(t *testing.T) {
	ctx := context.Background()
	running := func(t *testing.T, h *harness, mod func(*spec.JobSpec)) spec.Job {
		t.Helper()
		id := h.submit(alice, func(js *spec.JobSpec) {
			js.Resources.GPUsPerNode = 1
			if mod != nil {
				mod(js)
			}
		})
		j := h.job(id)
		if j.State != spec.StateRunning {
			t.Fatalf("job %d is %s, want RUNNING", id, j.State)
		}
		return j
	}
	for _, tc := range []struct {
		name string
		// act changes n1's assignments (j runs there) and returns what its
		// answer must show.
		mod   func(*spec.JobSpec)
		act   func(t *testing.T, h *harness, j spec.Job) func(a *Assignment) bool
		reach func(*Config)
	}{
		{name: "cancel", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			if _, err := h.c.JobAction(ctx, alice, j.ID, ActionCancel, ""); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return a.Stop && a.StopState == spec.StateCancelled }
		}},
		{name: "requeue", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			if _, err := h.c.JobAction(ctx, alice, j.ID, ActionRequeue, ""); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return a.Stop && a.StopState == spec.StateRequeued }
		}},
		{name: "checkpoint before the stop (drain)", mod: func(js *spec.JobSpec) { js.Requeue, js.Ckpt = true, spec.Duration(time.Hour) },
			act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
				if _, err := h.c.NodeAction(ctx, root, "n1", ActionDrain, "maintenance"); err != nil {
					t.Fatal(err)
				}
				return func(a *Assignment) bool { return a.Stop && a.Checkpoint }
			}},
		{name: "signal", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			if _, err := h.c.JobAction(ctx, alice, j.ID, ActionSignal, "USR1"); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return a.Signal != "" && a.SignalSeq > 0 }
		}},
		{name: "suspend", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			if _, err := h.c.JobAction(ctx, root, j.ID, ActionSuspend, ""); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return a.Job.State == spec.StateSuspended }
		}},
		{name: "notify", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			if _, err := h.c.JobAction(ctx, alice, j.ID, ActionNotify, "the file system goes read-only at 18:00"); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return len(a.Job.Notices) == 1 }
		}},
		{name: "step signal", act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
			// The step's start, as its node reports it, wakes nothing
			// (the node started it); the signal does.
			step := &spec.Step{ID: "0", Name: "train", State: spec.StateRunning, Nodes: []string{"n1"}, NTasks: 1}
			if _, err := h.c.NodeEvents(ctx, root, "n1", []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: j.ID, Kind: EventStepStarted, Step: step}}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.c.StepAction(ctx, alice, spec.JobRef{ID: j.ID}, "0", "USR2"); err != nil {
				t.Fatal(err)
			}
			return func(a *Assignment) bool { return len(a.Job.StepSignals) == 1 }
		}},
		{name: "time limit", mod: func(js *spec.JobSpec) { js.TimeLimit = spec.Duration(time.Hour) },
			act: func(t *testing.T, h *harness, j spec.Job) func(*Assignment) bool {
				// The node enforces the limit (its runner's deadline): an
				// extension it did not hear of would end the job TIMEOUT
				// at the old one (scontrol update TimeLimit=...).
				d := 3 * time.Hour
				if _, err := h.c.UpdateJob(ctx, root, spec.JobRef{ID: j.ID}, JobUpdate{TimeLimit: &d}); err != nil {
					t.Fatal(err)
				}
				return func(a *Assignment) bool { return a.Job.TimeLimit.Std() == d }
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newFakeStore(), tc.reach)
			h.register("n1", 2)
			j := running(t, h, tc.mod)
			got := pollAfter(t, h, "n1", genOf(t, h, "n1"))
			want := tc.act(t, h, j)
			a := woken(t, got, tc.name)
			if asg := allocOf(a.as, j.ID); asg == nil || !want(asg) {
				t.Fatalf("%s: answered with %+v, without the change", tc.name, asg)
			}
		})
	}
}

// TestStartGateReloadWakesThePoll: a reload that changes a partition's
// start gate tells its nodes (the gate applies to the jobs they start
// next).
func TestStartGateReloadWakesThePoll(t *testing.T) {
	next := DefaultConfig()
	next.Partitions = []Partition{{Name: "gpu", Default: true, StartGate: StartGateOff}}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.Partitions = []Partition{{Name: "gpu", Default: true}} }, t0,
		WithReload(func() (Config, error) { return next, nil }))
	h.register("n1", 2)
	id := h.submit(alice, func(js *spec.JobSpec) { js.Resources.GPUsPerNode = 1 })
	if j := h.job(id); j.State != spec.StateRunning {
		t.Fatalf("job %d is %s, want RUNNING", id, j.State)
	}
	got := pollAfter(t, h, "n1", genOf(t, h, "n1"))
	if _, err := h.c.Reconfigure(context.Background(), root); err != nil {
		t.Fatal(err)
	}
	a := woken(t, got, "start gate reload")
	if asg := allocOf(a.as, id); asg == nil || asg.Gate != StartGateOff {
		t.Fatalf("start gate reload: answered with %+v, want gate %q", asg, StartGateOff)
	}
}

// TestGangPeerFailureWakesThePeer: a gang part failing on node a stops the
// job's part on node b: b's waiting poll is answered with the stop.
func TestGangPeerFailureWakesThePeer(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("a", 1)
	h.register("b", 1)
	id := h.submit(alice, func(js *spec.JobSpec) { js.Resources.Nodes = 2; js.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	if j.State != spec.StateRunning {
		t.Fatalf("gang = %s", j.State)
	}
	got := pollAfter(t, h, "b", genOf(t, h, "b"))
	h.exit("a", j, spec.StateFailed, 2)
	a := woken(t, got, "gang peer failure")
	if asg := allocOf(a.as, id); asg == nil || !asg.Stop {
		t.Fatalf("gang peer failure: b answered with %+v, want its part stopped", asg)
	}
}

// TestOwnExitWakesNothing: a node's own report of its part's exit does
// not answer its waiting poll (its agent has nothing to do about it: the
// runner is gone, the allocation only leaves the list), and the node's
// next change answers with the shorter list. A part the controller ends
// without the node's report (the node went silent) does bump it.
func TestOwnExitWakesNothing(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	first := h.submit(alice, func(js *spec.JobSpec) { js.Resources.GPUsPerNode = 1 })
	j := h.job(first)
	gen := genOf(t, h, "n1")
	got := pollAfter(t, h, "n1", gen)
	h.exit("n1", j, spec.StateCompleted, 0)
	if g := genOf(t, h, "n1"); g != gen {
		t.Fatalf("the node's own exit report moved its generation %d → %d (a wake-up it does not act on)", gen, g)
	}
	if n := pollersOf(t, h, "n1"); n != 1 {
		t.Fatalf("%d polls waiting on n1 after its own exit report, want the one still waiting", n)
	}
	if s := h.job(first).State; s != spec.StateCompleted {
		t.Fatalf("job %d is %s after its exit, want COMPLETED", first, s)
	}
	second := h.submit(alice, func(js *spec.JobSpec) { js.Resources.GPUsPerNode = 1 })
	h.settle()
	a := woken(t, got, "the next placement after an exit")
	if len(a.as) != 1 || a.as[0].Job.ID != second || a.gen != gen+1 {
		ids := []spec.JobID{}
		for _, x := range a.as {
			ids = append(ids, x.Job.ID)
		}
		t.Fatalf("answered gen %d with jobs %v, want gen %d with job %d only (the exited one gone)", a.gen, ids, gen+1, second)
	}

	// The controller ends n1's part itself (n1 went silent past the node
	// timeout: NODE_FAIL): n1 is told.
	got = pollAfter(t, h, "n1", a.gen)
	h.advance(DefaultConfig().NodeTimeout + time.Second)
	woken(t, got, "n1's part ended by the controller (node silent)")
	if s := h.job(second).State; s != spec.StateNodeFail {
		t.Fatalf("job %d is %s after its node went silent, want NODE_FAIL", second, s)
	}
}
