package node

import (
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// fakeStopJob is a runner for the stop machine: the first reason wins,
// as in runner.stop; kills and remembered reasons are recorded.
type fakeStopJob struct {
	state     spec.JobState
	why       string
	ckptFirst bool
	stopC     chan struct{}
	kills     []syscall.Signal
	marked    []spec.JobState
}

func newFakeStopJob() *fakeStopJob { return &fakeStopJob{stopC: make(chan struct{})} }

// request is a stop request from outside (runner.stopAfter).
func (j *fakeStopJob) request(state spec.JobState, why string, ckptFirst bool) {
	if j.state == "" {
		j.state, j.why, j.ckptFirst = state, why, ckptFirst
		close(j.stopC)
	}
}

func (j *fakeStopJob) stop(state spec.JobState, why string) {
	if j.state == "" {
		j.state, j.why = state, why
		close(j.stopC)
	}
}
func (j *fakeStopJob) ending() (spec.JobState, string) { return j.state, j.why }
func (j *fakeStopJob) checkpointFirst() bool           { return j.ckptFirst }
func (j *fakeStopJob) kill(sig syscall.Signal)         { j.kills = append(j.kills, sig) }
func (j *fakeStopJob) markStopping(state spec.JobState, _ string) {
	j.marked = append(j.marked, state)
}

const testGrace = 10 * time.Second

func newTestStopMachine(deadline time.Time, plan *ckptPlan) (*stopMachine, *fakeStopJob, *fakeCkptJob, *checkpointMachine, *fakeClock) {
	clock := newFakeClock()
	job, cj := newFakeStopJob(), &fakeCkptJob{}
	ck := newCheckpointMachine(clock, time.Minute, discardLog(), cj)
	m := newStopMachine(clock, testGrace, discardLog(), job, ck, job.stopC, deadline)
	ck.arm(plan, deadline)
	return m, job, cj, ck, clock
}

// A stop: SIGTERM, the kill grace, SIGKILL, one more grace, then stuck;
// a later reason (the time limit) repeats SIGTERM but does not restart
// a grace that runs, and after stuck starts over.
func TestStopMachineTermKillStuck(t *testing.T) {
	m, job, _, _, clock := newTestStopMachine(t0.Add(time.Hour), nil)
	job.request(spec.StateCancelled, "scancel", false)
	if !fired(m.stopC) {
		t.Fatal("stop request not seen")
	}
	m.onStop()
	if !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) || m.phase != stopTerm || m.stopC != nil {
		t.Fatalf("after the stop: kills %v, phase %v; want SIGTERM, %v", job.kills, m.phase, stopTerm)
	}
	if !slices.Equal(job.marked, []spec.JobState{spec.StateCancelled}) {
		t.Errorf("remembered %v, want CANCELLED", job.marked)
	}
	clock.Advance(testGrace - time.Second)
	if fired(m.graceC) {
		t.Fatal("grace ended early")
	}
	// The time limit during the grace: SIGTERM again, the same grace.
	waiters := clock.Waiters()
	m.onDeadline("time limit")
	if clock.Waiters() != waiters || m.phase != stopTerm {
		t.Fatalf("a second reason: %d timers (want %d: no new grace), phase %v", clock.Waiters(), waiters, m.phase)
	}
	if st, _ := job.ending(); st != spec.StateCancelled {
		t.Errorf("reason %s after the time limit; the first (CANCELLED) wins", st)
	}
	clock.Advance(time.Second)
	if !fired(m.graceC) {
		t.Fatal("grace did not end")
	}
	m.onGrace()
	if !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGKILL}) || m.phase != stopKill {
		t.Fatalf("after the grace: kills %v, phase %v; want SIGKILL last, %v", job.kills, m.phase, stopKill)
	}
	m.terminate(spec.StateCancelled, "again") // while waiting after SIGKILL: no new grace
	if m.graceC != nil {
		t.Fatal("a reason after SIGKILL restarted the grace")
	}
	clock.Advance(testGrace)
	if !fired(m.stuckC) {
		t.Fatal("no timer after SIGKILL")
	}
	m.onStuck()
	if m.phase != stopStuck {
		t.Fatalf("phase %v, want %v", m.phase, stopStuck)
	}
	m.terminate(spec.StateCancelled, "once more")
	if m.phase != stopTerm || m.graceC == nil {
		t.Errorf("a reason when stuck: phase %v, grace %v; want SIGTERM and a new grace", m.phase, m.graceC)
	}
}

// The time limit stops the job as TIMEOUT and drops the checkpoint
// timers.
func TestStopMachineTimeLimit(t *testing.T) {
	m, job, _, ck, clock := newTestStopMachine(t0.Add(time.Hour), &ckptPlan{sig: syscall.SIGUSR1, interval: 10 * time.Minute, owner: true})
	clock.Advance(time.Hour - time.Second)
	if fired(m.deadlineC) {
		t.Fatal("time limit fired early")
	}
	fired(ck.intervalC) // the interval's timer fired meanwhile; not followed here
	clock.Advance(time.Second)
	if !fired(m.deadlineC) {
		t.Fatal("time limit did not fire")
	}
	m.onDeadline("time limit 1h0m0s reached")
	if st, why := job.ending(); st != spec.StateTimeout || why != "time limit 1h0m0s reached" {
		t.Errorf("reason %s %q, want TIMEOUT", st, why)
	}
	if !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) || !m.stopping() {
		t.Errorf("kills %v, stopping %v; want SIGTERM", job.kills, m.stopping())
	}
	if ck.intervalC != nil || ck.beforeC != nil {
		t.Error("checkpoint timers still armed while the job is stopped")
	}
	if m.stopC != nil {
		t.Error("the stop channel the time limit closed is still followed")
	}
}

// A stop that asks for a checkpoint first: the checkpoint is requested,
// no signal to end the job until it ended; then SIGTERM with the stop's
// reason.
func TestStopMachineCheckpointFirst(t *testing.T) {
	m, job, cj, ck, clock := newTestStopMachine(time.Time{}, &ckptPlan{sig: syscall.SIGUSR1, owner: true})
	job.request(spec.StateRequeued, "preempted", true)
	if !fired(m.stopC) {
		t.Fatal("stop request not seen")
	}
	m.onStop()
	if len(cj.signals) != 1 || len(job.kills) != 0 || m.phase != stopCheckpointFirst {
		t.Fatalf("checkpoint first: checkpoint signals %v, kills %v, phase %v; want a checkpoint and no kill", cj.signals, job.kills, m.phase)
	}
	if !slices.Equal(job.marked, []spec.JobState{spec.StateRequeued}) {
		t.Errorf("remembered %v, want REQUEUED before the checkpoint", job.marked)
	}
	clock.Advance(checkpointPoll)
	if !fired(ck.pollC) || ck.onPoll() {
		t.Fatal("checkpoint ended before .done")
	}
	if m.phase != stopCheckpointFirst || len(job.kills) != 0 {
		t.Fatal("stop went on while the checkpoint was still written")
	}
	cj.done = true
	clock.Advance(checkpointPoll)
	if !fired(ck.pollC) || !ck.onPoll() {
		t.Fatal("checkpoint did not end after .done")
	}
	if cj.seals != 1 {
		t.Errorf("seals %d, want 1", cj.seals)
	}
	m.checkpointEnded() // as the wait loop does when onPoll says so
	if !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("after the checkpoint: kills %v, want SIGTERM", job.kills)
	}
}

// checkpointEnded moves a stop waiting for its checkpoint on to SIGTERM,
// whether the checkpoint was sealed or given up; a fenced node stops at
// once.
func TestStopMachineCheckpointFirstEnds(t *testing.T) {
	m, job, _, _, _ := newTestStopMachine(time.Time{}, &ckptPlan{sig: syscall.SIGUSR1, owner: true})
	job.request(spec.StateRequeued, "preempted", true)
	m.onStop()
	m.checkpointEnded()
	if !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) || m.phase != stopTerm {
		t.Fatalf("after the checkpoint: kills %v, phase %v; want SIGTERM", job.kills, m.phase)
	}
	if st, _ := job.ending(); st != spec.StateRequeued {
		t.Errorf("reason %s, want REQUEUED", st)
	}

	m, job, cj, _, _ := newTestStopMachine(time.Time{}, &ckptPlan{sig: syscall.SIGUSR1, owner: true})
	cj.fenced = true
	job.request(spec.StateRequeued, "preempted", true)
	m.onStop()
	if len(cj.signals) != 0 || !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("fenced: checkpoint signals %v, kills %v; want no checkpoint and SIGTERM at once", cj.signals, job.kills)
	}

	// A job that does not checkpoint ignores "checkpoint first".
	m, job, cj, _, _ = newTestStopMachine(time.Time{}, nil)
	job.request(spec.StateRequeued, "preempted", true)
	m.onStop()
	if len(cj.signals) != 0 || !slices.Equal(job.kills, []syscall.Signal{syscall.SIGTERM}) {
		t.Errorf("no plan: checkpoint signals %v, kills %v; want SIGTERM at once", cj.signals, job.kills)
	}
}
