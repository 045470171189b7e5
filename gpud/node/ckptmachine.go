package node

import (
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/signame"
)

// checkpointMachine drives one running job's cooperative checkpoints
// (DESIGN §4) for its runner. Its states:
//
//   - off: no plan (the job does not checkpoint, or an adopted runner
//     does not know its job yet); arm moves it to idle.
//   - idle: the interval and before-the-limit timers are armed (as the
//     plan has them); a request (a timer, or a stop that checkpoints
//     first) moves it to writing.
//   - writing: the job was signalled and has until `until` to finish; the
//     machine polls every checkpointPoll for the checkpoint (rank 0
//     seals it; other ranks see it sealed), and back to idle when it is
//     there or the time is up (onPoll reports that).
//
// disarm (the job is being stopped) drops the timers: no new request
// starts, but one being written still completes. One request at a time:
// a request while writing starts nothing, unless the job has just marked
// that one done (rank 0 seals it at once and asks anew) or its time is up
// (given up at once, and asked anew). A fenced node
// (fence.go) asks for none.
//
// The runner's wait loop selects on intervalC, beforeC and pollC and
// calls onInterval, onBefore and onPoll; each timer is one Clock.After,
// made when the state is entered.
type checkpointMachine struct {
	clock   Clock
	timeout time.Duration // how long the job has to write one
	log     *slog.Logger
	job     checkpointJob

	plan     *ckptPlan // nil: off
	deadline time.Time // the job's time limit (zero: none)
	until    time.Time // writing until then (zero: not writing)
	peerBase int       // newest sealed seq when a non-owner rank signalled

	intervalC, beforeC, pollC <-chan time.Time
}

// checkpointJob is what the checkpoint machine does to the job and its
// checkpoint directory (the runner's, runnerCheckpoints in runner.go).
type checkpointJob interface {
	// mayCheckpoint says why the node must not ask for (or seal) a
	// checkpoint now (fenced, fence.go), or nil.
	mayCheckpoint() error
	// ready reports whether the job's staging directory is marked done.
	ready() bool
	// seal seals the ready staging directory (logging what happened).
	seal()
	// newestSealed is the seq of the job's newest sealed checkpoint.
	newestSealed() int
	// signal sends the job's checkpoint signal to target (logging a
	// failure).
	signal(target string, sig syscall.Signal)
}

func newCheckpointMachine(clock Clock, timeout time.Duration, log *slog.Logger, job checkpointJob) *checkpointMachine {
	return &checkpointMachine{clock: clock, timeout: timeout, log: log, job: job}
}

// arm takes plan (nil: off) and arms its timers, the before-the-limit
// one against deadline (zero: no time limit).
func (m *checkpointMachine) arm(plan *ckptPlan, deadline time.Time) {
	m.plan, m.deadline = plan, deadline
	if plan == nil {
		return
	}
	if plan.interval > 0 {
		first := plan.interval
		if since := m.clock.Now().Sub(plan.phase); !plan.phase.IsZero() && since > 0 {
			first = plan.interval - since%plan.interval // the next multiple from phase
		}
		m.intervalC = m.clock.After(first)
	}
	if plan.before > 0 && !deadline.IsZero() {
		m.beforeC = m.clock.After(deadline.Add(-plan.before).Sub(m.clock.Now()))
	}
}

// active reports whether the job checkpoints (the machine is not off).
func (m *checkpointMachine) active() bool { return m.plan != nil }

// writing reports whether a request is out.
func (m *checkpointMachine) writing() bool { return !m.until.IsZero() }

// disarm drops the interval and before-the-limit timers.
func (m *checkpointMachine) disarm() { m.intervalC, m.beforeC = nil, nil }

// onInterval handles the interval timer: it is re-armed, and a
// checkpoint requested.
func (m *checkpointMachine) onInterval() {
	m.intervalC = m.clock.After(m.plan.interval)
	m.request(fmt.Sprintf("every %s", m.plan.interval))
}

// onBefore handles the before-the-limit timer (it fires once).
func (m *checkpointMachine) onBefore() {
	m.beforeC = nil
	m.request(fmt.Sprintf("%s before the time limit", m.plan.before))
}

// request asks the job for a checkpoint and reports whether one is now
// being written (false: fenced while none was out).
func (m *checkpointMachine) request(why string) bool {
	if err := m.job.mayCheckpoint(); err != nil {
		// Fenced (logged once): asking the job would have it write a
		// checkpoint nobody may seal, into staging that a requeued
		// attempt elsewhere may be using.
		return m.writing()
	}
	p := m.plan
	if p.owner && m.job.ready() {
		// The job finished one, unasked or answering the request out:
		// sealed now, that request is answered (back to idle). Left
		// writing, the machine would wait for a .done the job already
		// wrote, and a stop asking for a checkpoint first would wait
		// the whole checkpoint timeout; this request asks anew instead.
		m.job.seal() // logged
		m.until, m.pollC = time.Time{}, nil
	}
	if m.writing() && !m.clock.Now().Before(m.until) {
		// The last one's time is up and the poll that would give up on
		// it has not been handled yet (it fired with this timer, or the
		// loop was late): given up here, and this request asks anew.
		// Left writing, this request would be dropped and the job not
		// asked for a whole interval.
		m.giveUp()
	}
	if m.writing() {
		return true // the job is still writing the last one
	}
	if !p.owner {
		m.peerBase = m.job.newestSealed()
	}
	m.log.Info("checkpoint requested", "signal", signame.Full(p.sig), "why", why, "timeout", m.timeout, "rank", p.rank)
	m.job.signal(p.target, p.sig)
	m.until = m.clock.Now().Add(m.timeout)
	m.pollC = m.clock.After(checkpointPoll)
	return true
}

// onPoll handles the poll timer while writing: it reports whether the
// checkpoint ended (sealed, seen sealed, or given up), back to idle;
// otherwise it polls again.
func (m *checkpointMachine) onPoll() (ended bool) {
	p := m.plan
	switch {
	case p.owner && m.job.ready():
		m.job.seal() // logged
	case !p.owner && (m.job.ready() || m.job.newestSealed() > m.peerBase):
		// Rank 0's agent seals; this rank only needed its processes
		// signalled and the checkpoint written.
		m.log.Info("checkpoint of the job completed (sealed by rank 0's node)", "rank", p.rank)
	case !m.clock.Now().Before(m.until):
		m.giveUp()
		return true
	default:
		m.pollC = m.clock.After(checkpointPoll)
		return false
	}
	m.until, m.pollC = time.Time{}, nil
	return true
}

// giveUp ends the request out, its time up (back to idle).
func (m *checkpointMachine) giveUp() {
	m.log.Warn("job did not complete its checkpoint in time; it must write into $GPUD_CHECKPOINT_DIR and then touch .done there",
		"timeout", m.timeout)
	m.until, m.pollC = time.Time{}, nil
}
