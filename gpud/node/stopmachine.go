package node

import (
	"log/slog"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// stopPhase is where a runner's stop is.
type stopPhase int

const (
	// stopNone: running; no stop handled yet.
	stopNone stopPhase = iota
	// stopCheckpointFirst: a stop that asked for a checkpoint first waits
	// for the one it requested to end (sealed, or given up).
	stopCheckpointFirst
	// stopTerm: SIGTERM sent; the kill grace runs.
	stopTerm
	// stopKill: the grace passed, SIGKILL sent; one more grace runs.
	stopKill
	// stopStuck: the container survived SIGKILL (logged); the runner
	// keeps waiting for it, and a new stop reason starts over at SIGTERM.
	stopStuck
)

func (p stopPhase) String() string {
	return [...]string{"running", "checkpoint first", "SIGTERM sent", "SIGKILL sent", "stuck"}[p]
}

// stopMachine carries out the end of a runner's job: a stop request (the
// controller's, a fence, a clean stop with StopJobsOnStop) or the time
// limit. A stop that asks for a checkpoint first, of a job that
// checkpoints, has the checkpoint machine request one and waits for it
// (stopCheckpointFirst); then, as for every other stop, SIGTERM, the kill
// grace, SIGKILL, another grace, and a log line if the container is still
// there (stopTerm, stopKill, stopStuck). The first reason wins (the
// runner keeps it); each later one (the time limit during a stop)
// repeats SIGTERM without restarting the grace that runs.
//
// The runner's wait loop selects on stopC (closed by a stop request),
// deadlineC, graceC and stuckC and calls onStop, onDeadline, onGrace and
// onStuck; checkpointEnded tells it the checkpoint machine is back to
// idle. The container's exit ends it from outside (the runner returns).
type stopMachine struct {
	clock Clock
	grace time.Duration // Config.KillGrace
	log   *slog.Logger
	job   stopJob
	ck    *checkpointMachine

	phase                     stopPhase
	stopC                     <-chan struct{}
	deadlineC, graceC, stuckC <-chan time.Time
}

// stopJob is what the stop machine does to the runner and its container
// (runnerStops in runner.go).
type stopJob interface {
	// stop records state and why as the reason if there is none yet
	// (and closes the stop channel).
	stop(state spec.JobState, why string)
	// ending is the reason recorded (the first).
	ending() (spec.JobState, string)
	// checkpointFirst reports whether the stop asked for a checkpoint
	// first.
	checkpointFirst() bool
	// markStopping remembers the reason in the outbox (logging a
	// failure), so that a restarted agent reports it.
	markStopping(state spec.JobState, why string)
	// kill sends sig to the container (logging a failure).
	kill(sig syscall.Signal)
}

// newStopMachine follows stopC (closed by a stop request) and, unless
// deadline is zero, the time limit.
func newStopMachine(clock Clock, grace time.Duration, log *slog.Logger, job stopJob, ck *checkpointMachine,
	stopC <-chan struct{}, deadline time.Time) *stopMachine {
	m := &stopMachine{clock: clock, grace: grace, log: log, job: job, ck: ck, stopC: stopC}
	if !deadline.IsZero() {
		m.deadlineC = clock.After(deadline.Sub(clock.Now()))
	}
	return m
}

// stopping reports whether a stop (or the time limit) is being handled.
func (m *stopMachine) stopping() bool { return m.phase != stopNone }

// onDeadline handles the time limit: a stop with state TIMEOUT.
func (m *stopMachine) onDeadline(why string) {
	m.deadlineC = nil
	m.terminate(spec.StateTimeout, why)
}

// onStop handles a stop request: a checkpoint first when the stop asks
// for one, the job checkpoints and the node may (not fenced), else
// SIGTERM at once.
func (m *stopMachine) onStop() {
	state, why := m.job.ending()
	if m.ck.active() && m.job.checkpointFirst() {
		m.stopC = nil
		m.phase = stopCheckpointFirst
		m.job.markStopping(state, why)
		if m.ck.request("checkpoint before stop (" + string(state) + ")") {
			return
		}
		// fenced: no checkpoint to wait for
	}
	m.terminate(state, why)
}

// checkpointEnded is told that the checkpoint machine went back to idle:
// a stop waiting for it goes on.
func (m *stopMachine) checkpointEnded() {
	if m.phase == stopCheckpointFirst {
		state, why := m.job.ending()
		m.terminate(state, why)
	}
}

// terminate records the reason (if first), drops the checkpoint timers,
// remembers why the job is stopped and sends SIGTERM, then starts the
// kill grace unless one (or the wait after SIGKILL) runs already.
func (m *stopMachine) terminate(state spec.JobState, why string) {
	m.job.stop(state, why) // records the reason if it is the first
	m.stopC = nil          // the stop just closed it; it is being handled
	m.ck.disarm()
	state, why = m.job.ending()
	m.job.markStopping(state, why)
	m.log.Info("stopping job", "state", state, "reason", why, "kill_grace", m.grace)
	m.job.kill(syscall.SIGTERM)
	if m.phase != stopTerm && m.phase != stopKill {
		m.phase = stopTerm
		m.graceC = m.clock.After(m.grace)
	}
}

// onGrace handles the end of the kill grace: SIGKILL, and one more grace.
func (m *stopMachine) onGrace() {
	m.graceC = nil
	m.phase = stopKill
	m.log.Warn("job did not exit within the kill grace; sending SIGKILL", "kill_grace", m.grace)
	m.job.kill(syscall.SIGKILL)
	m.stuckC = m.clock.After(m.grace)
}

// onStuck handles the end of the grace after SIGKILL.
func (m *stopMachine) onStuck() {
	m.stuckC = nil
	m.phase = stopStuck
	// Nothing more the agent can do: the processes are likely in
	// uninterruptible sleep. Keep waiting; the allocation stays reported
	// as running so its GPUs are not reused.
	m.log.Error("job container survived SIGKILL; still waiting for it to exit (check the node for stuck processes)")
}
