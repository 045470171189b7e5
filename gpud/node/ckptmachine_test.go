package node

import (
	"errors"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// fakeCkptJob is a job and checkpoint store for the checkpoint machine:
// the test says whether the staging directory is done, what is sealed
// and whether the node is fenced; the machine's calls are counted.
type fakeCkptJob struct {
	fenced  bool
	done    bool // staging marked .done
	sealedN int  // newest sealed seq
	signals []syscall.Signal
	targets []string
	seals   int
}

func (j *fakeCkptJob) mayCheckpoint() error {
	if j.fenced {
		return errors.New("fenced")
	}
	return nil
}
func (j *fakeCkptJob) ready() bool       { return j.done }
func (j *fakeCkptJob) newestSealed() int { return j.sealedN }
func (j *fakeCkptJob) seal() {
	j.seals++
	j.sealedN++
	j.done = false
}
func (j *fakeCkptJob) signal(target string, sig syscall.Signal) {
	j.signals = append(j.signals, sig)
	j.targets = append(j.targets, target)
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestCkptMachine(job checkpointJob) (*checkpointMachine, *fakeClock) {
	clock := newFakeClock()
	return newCheckpointMachine(clock, time.Minute, discardLog(), job), clock
}

// fired reports whether c has a value now; a nil channel never has.
func fired[T any](c <-chan T) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A gang's ranks count intervals from the allocation's start (phase), so
// that a rank whose container started late is signalled with the others.
func TestCheckpointMachineIntervalPhase(t *testing.T) {
	m, clock := newTestCkptMachine(&fakeCkptJob{})
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, interval: 10 * time.Minute, phase: t0.Add(-13 * time.Minute)}, time.Time{})
	clock.Advance(7*time.Minute - time.Second)
	if fired(m.intervalC) {
		t.Fatal("interval timer fired before the allocation's next 10 minutes")
	}
	clock.Advance(time.Second)
	if !fired(m.intervalC) {
		t.Fatal("interval timer did not fire 20 minutes after the allocation's start")
	}
}

// Every interval the job is signalled once; the machine polls until the
// job marks its checkpoint done, seals it (rank 0) and goes idle, and the
// next interval asks again.
func TestCheckpointMachineInterval(t *testing.T) {
	job := &fakeCkptJob{}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, interval: 10 * time.Minute, owner: true}, time.Time{})
	if m.beforeC != nil || m.pollC != nil || m.intervalC == nil {
		t.Fatalf("armed without a time limit: interval %v, before %v, poll %v; want only the interval timer", m.intervalC, m.beforeC, m.pollC)
	}
	clock.Advance(10*time.Minute - time.Second)
	if fired(m.intervalC) {
		t.Fatal("interval timer fired early")
	}
	clock.Advance(time.Second)
	if !fired(m.intervalC) {
		t.Fatal("interval timer did not fire")
	}
	m.onInterval()
	if len(job.signals) != 1 || job.signals[0] != syscall.SIGUSR1 || !m.writing() || m.pollC == nil {
		t.Fatalf("after the interval: signals %v, writing %v; want one SIGUSR1 and a poll", job.signals, m.writing())
	}
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || m.onPoll() {
		t.Fatal("poll before .done ended the checkpoint")
	}
	if m.pollC == nil || job.seals != 0 {
		t.Fatalf("poll before .done: poll timer %v, seals %d; want it polling again, nothing sealed", m.pollC, job.seals)
	}
	job.done = true
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || !m.onPoll() {
		t.Fatal("poll after .done did not end the checkpoint")
	}
	if job.seals != 1 || m.writing() || m.pollC != nil {
		t.Fatalf("after .done: seals %d, writing %v, poll %v; want one seal and idle", job.seals, m.writing(), m.pollC)
	}
	clock.Advance(10*time.Minute - checkpointPoll)
	if !fired(m.intervalC) {
		t.Fatal("interval timer not re-armed after it fired")
	}
	m.onInterval()
	if len(job.signals) != 2 {
		t.Fatalf("second interval: %d signals, want 2", len(job.signals))
	}
}

// A job that does not finish its checkpoint in time is given up on (no
// seal); a request while one is out sends no second signal, and rank 0
// seals a checkpoint the job finished unasked before asking again.
func TestCheckpointMachineTimeoutAndOneAtATime(t *testing.T) {
	job := &fakeCkptJob{}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR2, owner: true}, time.Time{})
	if !m.request("test") || !m.request("again") {
		t.Fatal("request did not report a checkpoint being written")
	}
	if len(job.signals) != 1 {
		t.Fatalf("two requests while writing: %d signals, want 1", len(job.signals))
	}
	for i := 0; clock.Now().Before(t0.Add(time.Minute - checkpointPoll)); i++ {
		clock.Advance(checkpointPoll)
		if !fired(m.pollC) || m.onPoll() {
			t.Fatalf("poll %d, %v after the signal: ended before the timeout", i, clock.Now().Sub(t0))
		}
	}
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || !m.onPoll() {
		t.Fatal("not given up at the timeout")
	}
	if job.seals != 0 || m.writing() {
		t.Fatalf("after the timeout: seals %d, writing %v; want none, idle", job.seals, m.writing())
	}
	job.done = true // finished late, unasked
	m.request("next")
	if job.seals != 1 || len(job.signals) != 2 {
		t.Fatalf("next request: seals %d, signals %d; want the late one sealed first and a new signal", job.seals, len(job.signals))
	}
}

// An interval that comes while the last checkpoint's time is up but its
// poll not yet handled (both timers fired together, or the runner's loop
// was late and its select took the interval first) gives up on the last
// one and asks anew. Before, the request was dropped as "still writing",
// the late poll then gave up, and the job was not asked for a whole
// interval (TestCheckpointEveryInterval's "third checkpoint signal" under
// load).
func TestCheckpointMachineIntervalAfterTimeUpBeforePoll(t *testing.T) {
	job := &fakeCkptJob{}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, interval: 10 * time.Minute, owner: true}, time.Time{})
	clock.Advance(10 * time.Minute)
	if !fired(m.intervalC) {
		t.Fatal("interval timer did not fire")
	}
	m.onInterval()
	stalePoll := m.pollC
	clock.Advance(10 * time.Minute) // the poll (long due) and the next interval
	if !fired(m.intervalC) {
		t.Fatal("second interval timer did not fire")
	}
	m.onInterval() // taken before the poll
	if len(job.signals) != 2 || !m.writing() || m.pollC == stalePoll {
		t.Fatalf("interval after the last one's time was up: %d signals, writing %v, new poll %v; want 2, writing, a fresh poll",
			len(job.signals), m.writing(), m.pollC != stalePoll)
	}
	if want := clock.Now().Add(time.Minute); !m.until.Equal(want) {
		t.Errorf("writing until %v, want %v (a full timeout from the new signal)", m.until, want)
	}
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || m.onPoll() {
		t.Fatal("the new request's first poll ended it before .done or its timeout")
	}
	if job.seals != 0 {
		t.Errorf("%d seals, want none (the job wrote nothing)", job.seals)
	}
}

// A stop that asks for a checkpoint first while an interval's checkpoint
// is out and already marked done (the job wrote it; the next poll has not
// come yet) is answered at once: that checkpoint is sealed and the job
// asked for a fresh one, which the next poll finds. Before, the machine
// sealed it, stayed writing and polled for a .done the job had already
// written, so the stop waited the whole checkpoint timeout (the XID 79
// e2e test's job not requeued within 60 s under load).
func TestCheckpointMachineRequestAfterDoneBeforePoll(t *testing.T) {
	job := &fakeCkptJob{}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, owner: true}, time.Time{})
	m.request("every 2s")
	job.done = true // the job answered; the poll is 100 ms away
	if !m.request("checkpoint before stop (REQUEUED)") {
		t.Fatal("the stop's request reports no checkpoint being written")
	}
	if job.seals != 1 || len(job.signals) != 2 {
		t.Fatalf("stop's request: seals %d, signals %d; want the done one sealed and the job asked again", job.seals, len(job.signals))
	}
	job.done = true // the job answers the stop's request
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || !m.onPoll() {
		t.Fatal("the stop's checkpoint did not end at the first poll after the job marked it done")
	}
	if job.seals != 2 || m.writing() {
		t.Fatalf("after the stop's checkpoint: seals %d, writing %v; want 2, idle", job.seals, m.writing())
	}
}

// Fenced, the machine asks for nothing: a request reports no checkpoint
// unless one was already out.
func TestCheckpointMachineFenced(t *testing.T) {
	job := &fakeCkptJob{fenced: true}
	m, _ := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, owner: true}, time.Time{})
	if m.request("fenced") || len(job.signals) != 0 || m.pollC != nil {
		t.Fatalf("fenced request: signals %v, poll %v; want none", job.signals, m.pollC)
	}
	job.fenced = false
	m.request("in touch")
	job.fenced = true
	if !m.request("fenced while writing") {
		t.Error("fenced request while one is out should report it being written")
	}
	if len(job.signals) != 1 {
		t.Errorf("signals %v, want one", job.signals)
	}
}

// A rank other than 0 never seals: its checkpoint ends when rank 0's node
// has sealed one newer than the newest when it signalled.
func TestCheckpointMachineOtherRank(t *testing.T) {
	job := &fakeCkptJob{sealedN: 4}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, target: spec.SignalSteps, rank: 1}, time.Time{})
	m.request("test")
	if len(job.targets) != 1 || job.targets[0] != spec.SignalSteps {
		t.Fatalf("signal targets %v, want the steps", job.targets)
	}
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || m.onPoll() {
		t.Fatal("ended with no newer sealed checkpoint")
	}
	job.sealedN = 5
	clock.Advance(checkpointPoll)
	if !fired(m.pollC) || !m.onPoll() {
		t.Fatal("not ended once rank 0 sealed a newer checkpoint")
	}
	if job.seals != 0 {
		t.Errorf("rank 1 sealed %d checkpoints, want 0", job.seals)
	}
}

// --signal=...@secs: the signal goes out that long before the time
// limit, once; disarm (a stop) drops the timers.
func TestCheckpointMachineBeforeLimitAndDisarm(t *testing.T) {
	job := &fakeCkptJob{}
	m, clock := newTestCkptMachine(job)
	m.arm(&ckptPlan{sig: syscall.SIGUSR1, before: 2 * time.Minute, interval: time.Hour, owner: true}, t0.Add(time.Hour))
	clock.Advance(58*time.Minute - time.Second)
	if fired(m.beforeC) {
		t.Fatal("before-the-limit timer fired early")
	}
	clock.Advance(time.Second)
	if !fired(m.beforeC) {
		t.Fatal("before-the-limit timer did not fire 2m before the limit")
	}
	m.onBefore()
	if m.beforeC != nil || len(job.signals) != 1 {
		t.Fatalf("after it: before timer %v, signals %d; want it gone and one signal", m.beforeC, len(job.signals))
	}
	m.disarm()
	if m.intervalC != nil || m.beforeC != nil {
		t.Error("disarm left timers armed")
	}
	if m.pollC == nil {
		t.Error("disarm dropped the poll of the checkpoint being written")
	}
	// off: no plan, no timers.
	off, _ := newTestCkptMachine(job)
	off.arm(nil, t0.Add(time.Hour))
	if off.active() || off.intervalC != nil || off.beforeC != nil {
		t.Error("a machine without a plan is armed")
	}
}
