package controller

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// fakePower records the program runs and answers with fail.
type fakePower struct {
	mu   sync.Mutex
	runs []PowerRun
	fail error
	ran  chan PowerRun
}

func (f *fakePower) run(_ context.Context, r PowerRun) error {
	f.mu.Lock()
	f.runs = append(f.runs, r)
	err := f.fail
	f.mu.Unlock()
	f.ran <- r
	return err
}

func (f *fakePower) next(t *testing.T) PowerRun {
	t.Helper()
	select {
	case r := <-f.ran:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no power program ran")
		return PowerRun{}
	}
}

func powerCfg(c *Config) {
	c.Power = PowerConfig{ResumeProgram: []string{"/site/resume"}, SuspendProgram: []string{"/site/suspend", "-v"},
		SuspendTime: 10 * time.Minute, ResumeTimeout: time.Minute, SuspendTimeout: 30 * time.Second,
		ExcNodes: []string{"n1"}}
	for _, name := range []string{"c1", "c2"} {
		c.Power.Nodes = append(c.Power.Nodes, CloudNode{Name: name, CPUs: 8, MemMiB: 1000, GPUs: 8, GPUModel: "h100"})
	}
}

func waitPower(t *testing.T, h *harness, name string, want spec.PowerState) spec.Node {
	t.Helper()
	for range 200 {
		if n := nodeNamed(t, h.c, name); n.Power == want {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	n := nodeNamed(t, h.c, name)
	t.Fatalf("node %s power %q, want %q", name, n.Power, want)
	return n
}

// A job that only a declared (CLOUD) node can hold powers it up through
// the resume program with Slurm's hostlist argument, waits PENDING, and
// starts when the node registers; idle past suspend_time the node is
// powered down through the suspend program; the exempt node never is. A
// restarted controller keeps the power states.
func TestPowerUpRunAndSuspend(t *testing.T) {
	store := newFakeStore()
	fp := &fakePower{ran: make(chan PowerRun, 16)}
	h := newHarnessAt(t, store, powerCfg, t0, WithPowerProgram(fp.run))
	h.register("n1", 1)
	if n := nodeNamed(t, h.c, "c1"); n.Power != spec.PoweredDown || n.State != spec.NodeIdle || len(n.GPUs) != 8 {
		t.Fatalf("declared node c1: power %q state %s gpus %d, want POWERED_DOWN IDLE 8", n.Power, n.State, len(n.GPUs))
	}
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 8 })
	if j := h.job(id); j.State != spec.StatePending {
		t.Fatalf("job %s before any power-up, want PENDING", j.State)
	}
	h.advance(time.Second)
	r := fp.next(t)
	if r.Action != "resume" || r.Nodes != "c1" || r.Program[0] != "/site/resume" {
		t.Fatalf("resume run %+v, want /site/resume c1", r)
	}
	waitPower(t, h, "c1", spec.PoweringUp)
	if n := nodeNamed(t, h.c, "c2"); n.Power != spec.PoweredDown {
		t.Errorf("c2 powered %q for a one-node job", n.Power)
	}
	// Silence is not judged while powering up; the job still waits.
	h.advance(40 * time.Second)
	if j := h.job(id); j.State != spec.StatePending {
		t.Fatalf("job %s while its node powers up, want PENDING", j.State)
	}
	h.register("c1", 8)
	if n := nodeNamed(t, h.c, "c1"); n.Power != spec.PowerOn {
		t.Fatalf("c1 registered but power %q", n.Power)
	}
	if j := h.job(id); j.State != spec.StateRunning || j.Alloc.Nodes[0].Node != "c1" {
		t.Fatalf("job %s on %v after c1 came up, want RUNNING on c1", j.State, j.Alloc)
	}
	h.exit("c1", h.job(id), spec.StateCompleted, 0)

	// Idle for suspend_time: c1 powers down (n1 is exempt).
	for range 11 * 6 {
		for _, name := range []string{"n1", "c1"} {
			if err := h.c.Heartbeat(context.Background(), root, name, nil); err != nil {
				t.Fatal(err)
			}
		}
		h.advance(10 * time.Second)
	}
	r = fp.next(t)
	if r.Action != "suspend" || r.Nodes != "c1" || r.Program[1] != "-v" {
		t.Fatalf("suspend run %+v, want /site/suspend -v c1", r)
	}
	if n := nodeNamed(t, h.c, "n1"); n.Power != spec.PowerOn {
		t.Errorf("exempt n1 power %q", n.Power)
	}
	h.advance(31 * time.Second)
	waitPower(t, h, "c1", spec.PoweredDown)

	// Durable: a new controller on the same store keeps it.
	h.stop()
	h2 := newHarnessAt(t, store, powerCfg, h.clock(), WithPowerProgram(fp.run))
	if n := nodeNamed(t, h2.c, "c1"); n.Power != spec.PoweredDown || n.State != spec.NodeIdle {
		t.Fatalf("after restart c1: power %q state %s", n.Power, n.State)
	}
}

// A failing resume program marks the node DOWN (down~) at once and the
// job is planned again: on the other declared node. A node that never
// registers is marked DOWN at resume_timeout. scontrol's RESUME brings a
// down~ node back to idle~; POWER_UP powers it up.
func TestPowerResumeFailure(t *testing.T) {
	store := newFakeStore()
	fp := &fakePower{ran: make(chan PowerRun, 16), fail: errors.New("exit status 3")}
	h := newHarnessAt(t, store, powerCfg, t0, WithPowerProgram(fp.run))
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 8 })
	h.advance(time.Second)
	if r := fp.next(t); r.Nodes != "c1" {
		t.Fatalf("first resume %+v, want c1", r)
	}
	n := waitDown(t, h, "c1")
	if n.Power != spec.PoweredDown || n.Reason == "" {
		t.Fatalf("c1 after a failed resume: power %q reason %q", n.Power, n.Reason)
	}
	fp.mu.Lock()
	fp.fail = nil
	fp.mu.Unlock()
	h.advance(time.Second)
	if r := fp.next(t); r.Nodes != "c2" {
		t.Fatalf("second resume %+v, want c2 (c1 is down)", r)
	}
	// c2 never registers: resume_timeout marks it DOWN; the job waits,
	// not stuck on a node: nothing is allocated.
	h.advance(61 * time.Second)
	waitDown(t, h, "c2")
	if j := h.job(id); j.State != spec.StatePending || j.Alloc != nil {
		t.Fatalf("job %s alloc %v after both resumes failed, want PENDING with none", j.State, j.Alloc)
	}
	// The admin resumes c1 (idle~ again) and it is powered up for the job.
	if _, err := h.c.UpdateNodes(context.Background(), root, spec.NodeUpdate{Nodes: []string{"c1"}, State: "RESUME"}); err != nil {
		t.Fatal(err)
	}
	if n := nodeNamed(t, h.c, "c1"); n.State != spec.NodeIdle || n.Power != spec.PoweredDown {
		t.Fatalf("c1 after RESUME: %s power %q, want IDLE POWERED_DOWN", n.State, n.Power)
	}
	h.advance(time.Second)
	if r := fp.next(t); r.Nodes != "c1" {
		t.Fatalf("resume after RESUME %+v, want c1", r)
	}
	h.register("c1", 8)
	if j := h.job(id); j.State != spec.StateRunning {
		t.Fatalf("job %s after c1 registered, want RUNNING", j.State)
	}
	// POWER_DOWN of a busy node is refused; POWER_UP of a down~ one works.
	if _, err := h.c.UpdateNodes(context.Background(), root, spec.NodeUpdate{Nodes: []string{"c1"}, State: "POWER_DOWN"}); !errors.Is(err, spec.ErrConflict) {
		t.Errorf("POWER_DOWN of a busy node: %v, want a conflict", err)
	}
	if _, err := h.c.UpdateNodes(context.Background(), root, spec.NodeUpdate{Nodes: []string{"c2"}, State: "POWER_UP"}); err != nil {
		t.Fatal(err)
	}
	if r := fp.next(t); r.Nodes != "c2" {
		t.Fatalf("POWER_UP ran %+v", r)
	}
	if n := nodeNamed(t, h.c, "c2"); n.State == spec.NodeDown || n.Power != spec.PoweringUp {
		t.Fatalf("c2 after POWER_UP: %s %q", n.State, n.Power)
	}
}

func waitDown(t *testing.T, h *harness, name string) spec.Node {
	t.Helper()
	for range 500 {
		if n := nodeNamed(t, h.c, name); n.State == spec.NodeDown {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("node %s not DOWN", name)
	return spec.Node{}
}
