package node

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// ckptAsg is a single-node (rank 0) assignment of job id that checkpoints
// every interval, with alloc "a<id>" of the given attempt.
func ckptAsg(id spec.JobID, dir string, interval time.Duration, attempt int) api.Assignment {
	a := asg(id, dir)
	a.Job.Ckpt = spec.Duration(interval)
	a.Job.Attempt = attempt
	a.Job.SubmitTime = spec.NewTime(t0) // the same across requeues: the checkpoint directory's tag
	a.Alloc.Attempt = attempt
	a.Alloc.Nodes = []spec.NodeAlloc{{Node: "node-1", Rank: 0, CPUs: 4, MemMiB: 8192, GPUs: []string{"GPU-a"}}}
	if attempt > 1 {
		a.Alloc.ID += "-" + string(rune('0'+attempt))
	}
	return a
}

// writeCheckpoint plays the job's side: files into staging, then .done.
func writeCheckpoint(t *testing.T, staging, counter string) {
	t.Helper()
	writeAsJob(t, staging, "counter", counter)
	writeAsJob(t, staging, ".done", "")
}

// writeAsJob writes a file into staging owned, as the job's would be, by
// the staging directory's owner (sealing refuses anyone else's files).
func writeAsJob(t *testing.T, staging, name, text string) {
	t.Helper()
	p := filepath.Join(staging, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(staging)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
}

func hasSignal(sigs []syscall.Signal, sig syscall.Signal) int {
	n := 0
	for _, s := range sigs {
		if s == sig {
			n++
		}
	}
	return n
}

func checkpointEvents(evs []api.AllocEvent) []api.AllocEvent {
	var out []api.AllocEvent
	for _, ev := range evs {
		if ev.Kind == api.EventCheckpointed {
			out = append(out, ev)
		}
	}
	return out
}

func TestCheckpointEveryInterval(t *testing.T) {
	e := newEnv(t, nil)
	const every = 10 * time.Minute
	cid := ContainerID(7, 1, "node-1")
	e.fc.Set(ckptAsg(7, e.home, every, 1))
	e.waitStarted(t, cid)
	// The deadline and the first interval.
	waitFor(t, "interval timer", func() bool { return e.clock.Waiters() == 2 }, e.on()...)

	staging := filepath.Join(e.dir, "checkpoints", "7", "staging")
	fi, err := os.Stat(staging)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1000) {
		t.Errorf("staging owned by %d:%d, want the job's 1000:1000", st.Uid, st.Gid)
	}

	e.clock.Advance(every - time.Second)
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGUSR1); n != 0 {
		t.Fatalf("SIGUSR1 sent %d times before the first interval", n)
	}
	e.clock.Advance(time.Second)
	// Signal sent; deadline, next interval and the .done poll wait.
	waitFor(t, "first checkpoint signal", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 && e.clock.Waiters() == 3
	}, e.on()...)

	writeCheckpoint(t, staging, "41")
	e.clock.Advance(checkpointPoll)
	waitFor(t, "checkpointed event", func() bool { return len(checkpointEvents(e.eventsOf("a7"))) == 1 }, e.on()...)
	want := api.AllocEvent{Node: "node-1", AllocID: "a7", JobID: 7, Kind: api.EventCheckpointed,
		Time: spec.NewTime(t0.Add(every + checkpointPoll)), CkptSeq: 1, CkptBytes: 2}
	if diff := cmp.Diff(want, checkpointEvents(e.eventsOf("a7"))[0]); diff != "" {
		t.Errorf("checkpointed event (-want +got):\n%s", diff)
	}
	got, err := os.ReadFile(filepath.Join(e.dir, "checkpoints", "7", "ckpt-00000001", "counter"))
	if err != nil || string(got) != "41" {
		t.Errorf("sealed counter = %q, %v; want 41", got, err)
	}
	if ents, err := os.ReadDir(staging); err != nil || len(ents) != 0 {
		t.Errorf("staging after seal = %v, %v; want a fresh empty directory", ents, err)
	}

	// Second interval: the job never finishes; the agent gives up after
	// CheckpointTimeout and signals again at the third.
	waitFor(t, "poll done", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(every - checkpointPoll)
	waitFor(t, "second checkpoint signal", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 2 && e.clock.Waiters() == 3
	}, e.on()...)
	e.clock.Advance(DefaultCheckpointTimeout)
	// The poll that gives up has fired; the agent may handle it only with
	// the third interval (the fake clock fires both in one Advance under
	// load), and gives up on the second checkpoint then either way.
	waitFor(t, "give-up poll fired", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(every - DefaultCheckpointTimeout)
	waitFor(t, "third checkpoint signal", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 3
	}, e.on()...)
	if n := len(checkpointEvents(e.eventsOf("a7"))); n != 1 {
		t.Errorf("%d checkpointed events, want 1 (the second was never completed)", n)
	}
	if st, _ := e.rt.Status(cid); st != runtime.StatusRunning {
		t.Errorf("container %s, want still running", st)
	}
}

func TestRequeueCheckpointsFirstAndRestartsFromIt(t *testing.T) {
	e := newEnv(t, nil)
	cid := ContainerID(8, 1, "node-1")
	a := ckptAsg(8, e.home, time.Hour, 1)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "started event", func() bool { return len(e.eventsOf("a8")) == 1 }, e.on()...)

	stop := a
	stop.Stop, stop.StopState, stop.StopReason, stop.Checkpoint = true, spec.StateRequeued, "requeued by root", true
	e.setAndWait(t, stop)
	waitFor(t, "checkpoint signal before the stop", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1
	}, e.on()...)
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGTERM); n != 0 {
		t.Fatalf("SIGTERM sent before the checkpoint was sealed")
	}
	writeCheckpoint(t, filepath.Join(e.dir, "checkpoints", "8", "staging"), "99")
	// Wait for the poll timer before advancing to it.
	waitFor(t, "poll timer", func() bool { return e.clock.Waiters() == 3 }, e.on()...)
	e.clock.Advance(checkpointPoll)
	ex := e.waitExited(t, "a8")
	if ex.State != spec.StateRequeued || ex.Reason != "requeued by root" {
		t.Errorf("exit = %s %q, want REQUEUED %q", ex.State, ex.Reason, "requeued by root")
	}
	var kinds []string
	for _, ev := range e.eventsOf("a8") {
		kinds = append(kinds, ev.Kind)
	}
	if want := []string{api.EventStarted, api.EventCheckpointed, api.EventExited}; !slices.Equal(kinds, want) {
		t.Errorf("events = %v, want %v (the checkpoint is recorded before the exit)", kinds, want)
	}
	sigs := e.rt.Signals(cid)
	if i, j := slices.Index(sigs, syscall.SIGUSR1), slices.Index(sigs, syscall.SIGTERM); i < 0 || j < i {
		t.Errorf("signals = %v, want SIGUSR1 then SIGTERM", sigs)
	}

	// The next attempt (the controller requeued it) restarts from it.
	cid2 := ContainerID(8, 2, "node-1")
	e.fc.Set(ckptAsg(8, e.home, time.Hour, 2))
	e.waitStarted(t, cid2)
	cfg, _ := e.rt.Config(cid2)
	restart := filepath.Join(e.dir, "checkpoints", "8", "ckpt-00000001")
	if !slices.Contains(cfg.Env, "GPUD_RESTART_DIR="+restart) {
		t.Errorf("env of the second attempt lacks GPUD_RESTART_DIR=%s: %v", restart, cfg.Env)
	}
	if got, err := os.ReadFile(filepath.Join(restart, "counter")); err != nil || string(got) != "99" {
		t.Errorf("restart counter = %q, %v; want 99", got, err)
	}
}

func TestCheckpointExitCodeSealsAndRequeues(t *testing.T) {
	e := newEnv(t, nil)
	cid := ContainerID(9, 1, "node-1")
	e.fc.Set(ckptAsg(9, e.home, time.Hour, 1))
	e.waitStarted(t, cid)
	// The job writes its checkpoint without .done and exits 85.
	staging := filepath.Join(e.dir, "checkpoints", "9", "staging")
	writeAsJob(t, staging, "state", "abc")
	e.rt.Exit(cid, runtime.ExitStatus{Code: checkpoint.ExitCodeCheckpointed})
	ex := e.waitExited(t, "a9")
	if ex.State != spec.StateRequeued || ex.ExitCode != checkpoint.ExitCodeCheckpointed {
		t.Errorf("exit = %s code %d, want REQUEUED code %d", ex.State, ex.ExitCode, checkpoint.ExitCodeCheckpointed)
	}
	cks := checkpointEvents(e.eventsOf("a9"))
	if len(cks) != 1 || cks[0].CkptSeq != 1 || cks[0].CkptBytes != 3 {
		t.Errorf("checkpointed events = %+v, want seq 1 with 3 bytes", cks)
	}
}

func TestSignalBeforeTimeLimit(t *testing.T) {
	e := newEnv(t, nil)
	cid := ContainerID(10, 1, "node-1")
	a := ckptAsg(10, e.home, 0, 1) // no interval: --signal alone
	a.Job.JobSpec.Signal = "USR2@120"
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "deadline and signal timers", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(time.Hour - 121*time.Second)
	e.clock.Advance(time.Second)
	// The signal timer fired: the checkpoint poll replaced it.
	waitFor(t, "the checkpoint poll after the signal", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	time.Sleep(200 * time.Millisecond)
	// As Slurm's --signal without B:, it goes to the steps' tasks (none
	// here), never to every process: an untrapped batch shell would die.
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGUSR2); n != 0 {
		t.Errorf("SIGUSR2 sent %d times to the whole container; --signal without B: is for the steps", n)
	}
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGUSR1); n != 0 {
		t.Errorf("default SIGUSR1 sent %d times; the job named USR2", n)
	}
}

func TestNoCheckpointSignalsForPlainJobs(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(11, e.home)
	a.Alloc.Nodes = []spec.NodeAlloc{{Node: "node-1", Rank: 0, CPUs: 1}}
	cid := ContainerID(11, 1, "node-1")
	e.fc.Set(a)
	e.waitStarted(t, cid)
	// Only the deadline: no interval timer for a job without --checkpoint.
	waitFor(t, "deadline timer", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	stop := a
	stop.Stop, stop.StopState, stop.Checkpoint = true, spec.StateRequeued, true
	e.setAndWait(t, stop)
	ex := e.waitExited(t, "a11")
	if ex.State != spec.StateRequeued {
		t.Errorf("exit state %s, want REQUEUED", ex.State)
	}
	if sigs := e.rt.Signals(cid); slices.Contains(sigs, syscall.SIGUSR1) {
		t.Errorf("signals = %v; a job without checkpoints gets no checkpoint signal", sigs)
	}
}

// TestAdoptedJobCheckpointsAgain: after an agent restart the re-adopted
// container knows its job only once the controller names it; from then on
// it is signalled every interval and its checkpoints are sealed again.
func TestAdoptedJobCheckpointsAgain(t *testing.T) {
	const every = 10 * time.Minute
	cid := ContainerID(12, 1, "node-1")
	e := newEnv(t, func(e *env) {
		c := planted(cid, "node-1", "a12", "12", t0.Add(time.Hour).Format(time.RFC3339))
		if err := e.rt.Add(c, runtime.StatusRunning, runtime.ExitStatus{}); err != nil {
			t.Fatal(err)
		}
		// Staging left by the agent before the restart.
		if err := os.MkdirAll(filepath.Join(e.dir, "checkpoints", "12", "staging"), 0o700); err != nil {
			t.Fatal(err)
		}
	})
	a := ckptAsg(12, e.home, every, 1)
	a.Alloc.ID = "a12"
	e.setAndWait(t, a)
	// The deadline (from the label) and the first interval.
	waitFor(t, "deadline and interval timers", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	if n := len(e.rt.Starts()); n != 0 {
		t.Fatalf("starts = %d, want 0 (re-adopted)", n)
	}
	e.clock.Advance(every)
	waitFor(t, "checkpoint signal to the re-adopted job", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 && e.clock.Waiters() == 3
	}, e.on()...)
	writeCheckpoint(t, filepath.Join(e.dir, "checkpoints", "12", "staging"), "7")
	e.clock.Advance(checkpointPoll)
	waitFor(t, "checkpointed event", func() bool { return len(checkpointEvents(e.eventsOf("a12"))) == 1 }, e.on()...)
}

// TestOtherRanksSignalled: rank 1 of a gang gets the checkpoint signal
// before a checkpoint-first stop and every interval, but does not seal
// (rank 0's node does); it stops once rank 0's checkpoint is sealed.
func TestOtherRanksSignalled(t *testing.T) {
	e := newEnv(t, nil)
	const every = 10 * time.Minute
	a := asg(13, e.home) // rank 1 of two
	a.Job.Ckpt = spec.Duration(every)
	cid := ContainerID(13, 1, "node-1")
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "deadline and interval timers", func() bool { return e.clock.Waiters() == 2 }, e.on()...)

	// A checkpoint-first stop signals rank 1 and waits for rank 0's seal.
	stop := a
	stop.Stop, stop.StopState, stop.StopReason, stop.Checkpoint = true, spec.StatePreempted, "preempted by job 99", true
	e.setAndWait(t, stop)
	waitFor(t, "checkpoint signal before the stop", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 && e.clock.Waiters() == 3
	}, e.on()...)
	e.clock.Advance(checkpointPoll)
	waitFor(t, "poll re-armed", func() bool { return e.clock.Waiters() == 3 }, e.on()...)
	if n := hasSignal(e.rt.Signals(cid), syscall.SIGTERM); n != 0 {
		t.Fatal("SIGTERM before the checkpoint")
	}
	// Rank 0's node seals it in the shared root.
	st, err := checkpoint.New(filepath.Join(e.dir, "checkpoints"), 2)
	if err != nil {
		t.Fatal(err)
	}
	staging, err := st.Staging(13)
	if err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, staging, "6")
	if _, err := st.Seal(13); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(checkpointPoll)
	ex := e.waitExited(t, "a13")
	if ex.State != spec.StatePreempted {
		t.Errorf("exit state %s, want PREEMPTED", ex.State)
	}
	sigs := e.rt.Signals(cid)
	if i, j := slices.Index(sigs, syscall.SIGUSR1), slices.Index(sigs, syscall.SIGTERM); i < 0 || j < i {
		t.Errorf("signals = %v, want SIGUSR1 then SIGTERM", sigs)
	}
	if n := len(checkpointEvents(e.eventsOf("a13"))); n != 0 {
		t.Errorf("rank 1 reported %d checkpoints; only rank 0 seals", n)
	}

	// Periodic: rank 1 is signalled every interval and leaves .done alone
	// (a fresh agent, so no timer of the first job is still counted).
	e = newEnv(t, nil)
	b := asg(14, e.home)
	b.Job.Ckpt = spec.Duration(every)
	cid = ContainerID(14, 1, "node-1")
	e.fc.Set(b)
	e.waitStarted(t, cid)
	waitFor(t, "deadline and interval timers", func() bool { return e.clock.Waiters() == 2 }, e.on()...)
	e.clock.Advance(every)
	waitFor(t, "periodic signal to rank 1", func() bool {
		return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 && e.clock.Waiters() == 3
	}, e.on()...)
	staging = filepath.Join(e.dir, "checkpoints", "14", "staging")
	writeCheckpoint(t, staging, "5")
	e.clock.Advance(checkpointPoll)
	stop = b
	stop.Stop, stop.StopState = true, spec.StateCancelled
	e.setAndWait(t, stop)
	e.waitExited(t, "a14")
	if _, err := os.Stat(filepath.Join(staging, ".done")); err != nil {
		t.Errorf("rank 1 sealed or cleared the staging directory: %v", err)
	}
	if n := len(checkpointEvents(e.eventsOf("a14"))); n != 0 {
		t.Errorf("rank 1 reported %d checkpoints; only rank 0 seals", n)
	}
}

// TestCheckpointOfAnEarlierJobNotOffered: a reset controller's job 8 (its
// jobs numbered from 1 again; another submit time) is never offered the
// checkpoint an earlier job 8 sealed on this node, whose user's files it
// must not see: the old directory is replaced before the start, and the
// new job's checkpoints start from 1 in its own (a requeue of a job with
// the same submit time restarting from its checkpoint:
// TestRequeueCheckpointsFirstAndRestartsFromIt, tagged by ckptAsg).
func TestCheckpointOfAnEarlierJobNotOffered(t *testing.T) {
	e := newEnv(t, nil)
	cid := ContainerID(8, 1, "node-1")
	old := ckptAsg(8, e.home, time.Hour, 1)
	old.Job.SubmitTime = spec.NewTime(t0.Add(-time.Hour))
	e.fc.Set(old)
	e.waitStarted(t, cid)
	stop := old
	stop.Stop, stop.StopState, stop.StopReason, stop.Checkpoint = true, spec.StateRequeued, "requeued by root", true
	e.setAndWait(t, stop)
	waitFor(t, "checkpoint signal before the stop", func() bool { return hasSignal(e.rt.Signals(cid), syscall.SIGUSR1) == 1 }, e.on()...)
	jobDir := filepath.Join(e.dir, "checkpoints", "8")
	writeCheckpoint(t, filepath.Join(jobDir, "staging"), "old job's")
	waitFor(t, "poll timer", func() bool { return e.clock.Waiters() == 3 }, e.on()...)
	e.clock.Advance(checkpointPoll)
	e.waitExited(t, "a8")
	if _, err := os.Stat(filepath.Join(jobDir, "ckpt-00000001", "counter")); err != nil {
		t.Fatalf("the earlier job's checkpoint was not sealed: %v", err)
	}

	// The controller's state is reset: its job 8 is another job.
	cid2 := ContainerID(8, 2, "node-1")
	fresh := ckptAsg(8, e.home, time.Hour, 2) // submitted at t0
	e.fc.Set(fresh)
	e.waitStarted(t, cid2)
	cfg, _ := e.rt.Config(cid2)
	for _, kv := range cfg.Env {
		if strings.HasPrefix(kv, "GPUD_RESTART_DIR=") && kv != "GPUD_RESTART_DIR=" {
			t.Errorf("the new job 8 is offered the earlier job 8's checkpoint: %s", kv)
		}
	}
	if _, err := os.Stat(filepath.Join(jobDir, "ckpt-00000001")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the earlier job's checkpoint is still in the new job's directory: %v", err)
	}
}

// TestCheckpointDirRemovedWithoutSeal: every job's start makes its
// checkpoint directory; when the job's part on the node of its rank 0
// ends with nothing sealed there it is removed (nothing a restart could
// use), while one holding a sealed checkpoint stays for the requeued
// attempt (which then restarts from it:
// TestRequeueCheckpointsFirstAndRestartsFromIt). A job that can
// checkpoint only as it exits (no --checkpoint or --signal, one node)
// and has no job directory gets a run directory as its staging
// directory instead, the job directory only if it seals
// (TestRunDirOfAJobThatCheckpointsAtExit).
func TestCheckpointDirRemovedWithoutSeal(t *testing.T) {
	e := newEnv(t, nil)
	ckpts := filepath.Join(e.dir, "checkpoints")
	e.fc.Set(ckptAsg(7, e.home, 0, 1)) // rank 0, no --checkpoint: a run directory
	e.waitStarted(t, cid)
	run := filepath.Join(ckpts, checkpoint.RunName(cid))
	cfg, _ := e.rt.Config(cid)
	if fi, err := os.Lstat(run); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the running job's run directory %s: %v, %v; want a directory, 0700", run, fi, err)
	}
	if !slices.Contains(cfg.Env, "GPUD_CHECKPOINT_DIR="+run) || !slices.Contains(cfg.Env, "GPUD_RESTART_DIR=") ||
		!slices.Contains(cfg.Mounts, runtime.Mount{Source: run, Dest: run}) {
		t.Errorf("env %q, mounts %+v; want GPUD_CHECKPOINT_DIR=%s, mounted, and no restart directory", cfg.Env, cfg.Mounts, run)
	}
	if _, err := os.Lstat(filepath.Join(ckpts, "7")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("job 7 has a job directory while it runs (%v); want none until it seals", err)
	}
	e.rt.Exit(cid, runtime.ExitStatus{Code: 1})
	waitFor(t, "a7's container deleted", func() bool { _, ok := e.rt.Status(cid); return !ok }, e.on()...)
	waitFor(t, "the run directory removed", func() bool {
		_, err := os.Lstat(run)
		return errors.Is(err, fs.ErrNotExist)
	}, e.on()...)
	if _, err := os.Lstat(filepath.Join(ckpts, "7")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("job 7's end made a job directory (%v)", err)
	}

	// --checkpoint: the job's directory from the start, removed at the
	// end without a seal.
	cid8 := ContainerID(8, 1, "node-1")
	jobDir := filepath.Join(ckpts, "8")
	e.fc.Set(ckptAsg(8, e.home, time.Hour, 1))
	e.waitStarted(t, cid8)
	if _, err := os.Stat(filepath.Join(jobDir, "staging")); err != nil {
		t.Fatalf("the running job has no checkpoint staging directory: %v", err)
	}
	e.rt.Exit(cid8, runtime.ExitStatus{Code: 1})
	waitFor(t, "a8's container deleted", func() bool { _, ok := e.rt.Status(cid8); return !ok }, e.on()...)
	waitFor(t, "the checkpoint directory without a checkpoint removed", func() bool {
		_, err := os.Lstat(jobDir)
		return errors.Is(err, fs.ErrNotExist)
	}, e.on()...)

	// Sealed, then ended: kept.
	cid9 := ContainerID(9, 1, "node-1")
	a := ckptAsg(9, e.home, time.Hour, 1)
	e.fc.Set(a)
	e.waitStarted(t, cid9)
	e.rt.Exit(cid9, runtime.ExitStatus{Code: checkpoint.ExitCodeCheckpointed})
	waitFor(t, "a9's container deleted", func() bool { _, ok := e.rt.Status(cid9); return !ok }, e.on()...)
	if _, err := os.Stat(filepath.Join(e.dir, "checkpoints", "9", "ckpt-00000001")); err != nil {
		t.Errorf("the sealed checkpoint of a job exited %d is gone: %v", checkpoint.ExitCodeCheckpointed, err)
	}
}

// TestRunDirOfAJobThatCheckpointsAtExit: a job without --checkpoint
// writes into its run directory and exits with the checkpoint code (or
// touches .done and ends): the run directory becomes the staging
// directory of the job's directory, made then, tagged and claimed, and
// is sealed there; the requeued attempt restarts from it as from any
// checkpoint (its job directory exists: no run directory); a run
// directory whose .done is not a regular file is refused and removed.
func TestRunDirOfAJobThatCheckpointsAtExit(t *testing.T) {
	e := newEnv(t, nil)
	ckpts := filepath.Join(e.dir, "checkpoints")
	for _, c := range []struct {
		id     spec.JobID
		byCode bool
	}{{7, true}, {8, false}} {
		a := ckptAsg(c.id, e.home, 0, 1)
		cid := ContainerID(c.id, 1, "node-1")
		e.fc.Set(a)
		e.waitStarted(t, cid)
		run := filepath.Join(ckpts, checkpoint.RunName(cid))
		writeAsJob(t, run, "state", "abc")
		st := runtime.ExitStatus{Code: checkpoint.ExitCodeCheckpointed}
		if !c.byCode {
			writeAsJob(t, run, ".done", "")
			st.Code = 0
		}
		e.rt.Exit(cid, st)
		ex := e.waitExited(t, a.Alloc.ID)
		if want := map[bool]spec.JobState{true: spec.StateRequeued, false: spec.StateCompleted}[c.byCode]; ex.State != want {
			t.Errorf("job %d: exit %s (%s), want %s", c.id, ex.State, ex.Reason, want)
		}
		cks := checkpointEvents(e.eventsOf(a.Alloc.ID))
		if len(cks) != 1 || cks[0].CkptSeq != 1 || cks[0].CkptBytes != 3 {
			t.Errorf("job %d: checkpointed events = %+v, want seq 1 with 3 bytes", c.id, cks)
		}
		waitFor(t, "the container deleted", func() bool { _, ok := e.rt.Status(cid); return !ok }, e.on()...)
		jd := filepath.Join(ckpts, strconv.FormatUint(uint64(c.id), 10))
		if b, err := os.ReadFile(filepath.Join(jd, "ckpt-00000001", "state")); err != nil || string(b) != "abc" {
			t.Errorf("job %d: sealed state %q, %v; want abc", c.id, b, err)
		}
		if tag, err := os.ReadFile(filepath.Join(jd, ".job")); err != nil || strings.TrimSpace(string(tag)) != checkpoint.JobTag(t0.UnixNano()) {
			t.Errorf("job %d: tag %q, %v; want the job's", c.id, tag, err)
		}
		if _, err := os.Lstat(run); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("job %d: the run directory stays (%v)", c.id, err)
		}
	}

	// The requeued attempt of job 7 restarts from the checkpoint, in the
	// job's directory.
	again := ckptAsg(7, e.home, 0, 2)
	cid2 := ContainerID(7, 2, "node-1")
	e.fc.Set(again)
	e.waitStarted(t, cid2)
	cfg, _ := e.rt.Config(cid2)
	jd := filepath.Join(ckpts, "7")
	if want := "GPUD_RESTART_DIR=" + filepath.Join(jd, "ckpt-00000001"); !slices.Contains(cfg.Env, want) ||
		!slices.Contains(cfg.Env, "GPUD_CHECKPOINT_DIR="+filepath.Join(jd, "staging")) {
		t.Errorf("the requeued attempt's env %q; want %s and the job directory's staging", cfg.Env, want)
	}
	if _, err := os.Lstat(filepath.Join(ckpts, checkpoint.RunName(cid2))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the requeued attempt has a run directory (%v); want its job directory's", err)
	}
	e.rt.Exit(cid2, runtime.ExitStatus{})
	e.waitExited(t, again.Alloc.ID)

	// .done planted as a symlink, then exit 85: refused, nothing sealed,
	// the run directory and what it held removed without following.
	target := filepath.Join(e.home, "precious")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := ckptAsg(9, e.home, 0, 1)
	cid9 := ContainerID(9, 1, "node-1")
	e.fc.Set(a)
	e.waitStarted(t, cid9)
	run := filepath.Join(ckpts, checkpoint.RunName(cid9))
	if err := os.Symlink(target, filepath.Join(run, ".done")); err != nil {
		t.Fatal(err)
	}
	e.rt.Exit(cid9, runtime.ExitStatus{Code: checkpoint.ExitCodeCheckpointed})
	ex := e.waitExited(t, a.Alloc.ID)
	if ex.State == spec.StateRequeued || !strings.Contains(ex.Reason, "is a symlink") {
		t.Errorf("exit %s (%q); want not requeued, the symlink named", ex.State, ex.Reason)
	}
	waitFor(t, "the run directory removed", func() bool {
		_, err := os.Lstat(run)
		return errors.Is(err, fs.ErrNotExist)
	}, e.on()...)
	if b, err := os.ReadFile(target); err != nil || string(b) != "x" {
		t.Errorf("the symlink's target: %q, %v; want it untouched", b, err)
	}
	if _, err := os.Lstat(filepath.Join(ckpts, "9")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused checkpoint made job 9's directory (%v)", err)
	}
}

// TestRunDirsAfterAgentRestart: a restarted agent keeps the run
// directory of a job it re-adopts (and the job's checkpoint at exit is
// sealed from it), and removes the run directories of its own
// containers that are gone; another node's (a shared root) stay.
func TestRunDirsAfterAgentRestart(t *testing.T) {
	cid12 := ContainerID(12, 1, "node-1")
	var ckpts string
	e := newEnv(t, func(e *env) {
		c := planted(cid12, "node-1", "a12", "12", t0.Add(time.Hour).Format(time.RFC3339))
		if err := e.rt.Add(c, runtime.StatusRunning, runtime.ExitStatus{}); err != nil {
			t.Fatal(err)
		}
		ckpts = filepath.Join(e.dir, "checkpoints")
		for _, c := range []string{cid12, ContainerID(13, 1, "node-1"), ContainerID(14, 1, "node-1") + "-r2", ContainerID(13, 1, "node-10"), ContainerID(15, 1, "x-node-1")} {
			if err := os.MkdirAll(filepath.Join(ckpts, checkpoint.RunName(c)), 0o700); err != nil {
				t.Fatal(err)
			}
		}
		writeAsJobOrFail(t, filepath.Join(ckpts, checkpoint.RunName(ContainerID(13, 1, "node-1"))), "left")
	})
	a := ckptAsg(12, e.home, 0, 1)
	a.Alloc.ID = "a12"
	e.setAndWait(t, a)
	have, err := os.ReadDir(ckpts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range have {
		names = append(names, d.Name())
	}
	want := []string{checkpoint.RunName(ContainerID(15, 1, "x-node-1")), checkpoint.RunName(ContainerID(13, 1, "node-10")), checkpoint.RunName(cid12)}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("checkpoint root after the restart (-want +got):\n%s", diff)
	}
	run := filepath.Join(ckpts, checkpoint.RunName(cid12))
	writeAsJob(t, run, "state", "abcd")
	e.rt.Exit(cid12, runtime.ExitStatus{Code: checkpoint.ExitCodeCheckpointed})
	if ex := e.waitExited(t, "a12"); ex.State != spec.StateRequeued {
		t.Errorf("the re-adopted job exited %s (%s), want REQUEUED from its checkpoint", ex.State, ex.Reason)
	}
	waitFor(t, "the re-adopted job's run directory sealed", func() bool {
		_, err := os.Lstat(run)
		_, serr := os.Stat(filepath.Join(ckpts, "12", "ckpt-00000001", "state"))
		return errors.Is(err, fs.ErrNotExist) && serr == nil
	}, e.on()...)
}

// writeAsJobOrFail writes a file into dir (before the agent runs: no
// owner to copy but the test's).
func writeAsJobOrFail(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointDirKeptForAnotherAttempt: a requeued job placed back on
// this node while its old attempt stops (the chaos suite's node cuts) has
// its new attempt join the job's checkpoint directory there as a rank
// other than 0, which claims nothing; the old attempt's rank 0, ending
// after it, must not remove the directory the new attempt is using.
func TestCheckpointDirKeptForAnotherAttempt(t *testing.T) {
	e := newEnv(t, nil)
	jobDir := filepath.Join(e.dir, "checkpoints", "7")
	old := ckptAsg(7, e.home, 0, 1) // rank 0 here, GPU-a: claims the directory
	again := ckptAsg(7, e.home, 0, 2)
	again.Alloc.Nodes = []spec.NodeAlloc{
		{Node: "node-0", Rank: 0, Addr: "10.0.0.1", CPUs: 4, MemMiB: 8192, GPUs: []string{"GPU-x"}},
		{Node: "node-1", Rank: 1, CPUs: 4, MemMiB: 8192, GPUs: []string{"GPU-b"}},
	}
	cid2 := ContainerID(7, 2, "node-1")
	e.fc.Set(old)
	e.waitStarted(t, cid)
	e.fc.Set(old, again)
	e.waitStarted(t, cid2)
	e.rt.Exit(cid, runtime.ExitStatus{Code: 1})
	waitFor(t, "the old attempt's runner gone", func() bool { return !slices.Contains(e.agent.Running(), old.Alloc.ID) }, e.on()...)
	if _, err := os.Stat(filepath.Join(jobDir, "staging")); err != nil {
		t.Fatalf("the old attempt's end removed the checkpoint directory its new attempt uses: %v", err)
	}
}

// TestCheckpointDirKeptWhenTheJobMayRunAgain: a part the agent stops
// because the controller no longer lists it (fenced: requeued while the
// node was cut off) or asks a requeue of keeps the job's checkpoint
// directory, which the next attempt (on a node sharing the root, too) may
// be preparing or mounting; a part cancelled by the controller removes it.
func TestCheckpointDirKeptWhenTheJobMayRunAgain(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		id       spec.JobID
		end      func(a api.Assignment)
		kept     bool
		wantStop spec.JobState
	}{
		{7, func(api.Assignment) { e.fc.Set() }, true, spec.StateCancelled},
		{8, func(a api.Assignment) {
			a.Stop, a.StopState, a.StopReason = true, spec.StateRequeued, "requeued by root"
			e.fc.Set(a)
		}, true, spec.StateRequeued},
		{9, func(a api.Assignment) {
			a.Stop, a.StopState, a.StopReason = true, spec.StateCancelled, "cancelled by alice"
			e.fc.Set(a)
		}, false, spec.StateCancelled},
	} {
		a := ckptAsg(c.id, e.home, time.Hour, 1) // rank 0 here, --checkpoint: claims the job's directory
		e.fc.Set(a)
		e.waitStarted(t, ContainerID(c.id, 1, "node-1"))
		c.end(a)
		if got := e.waitExited(t, a.Alloc.ID); got.State != c.wantStop {
			t.Fatalf("job %d ended %+v, want %s", c.id, got, c.wantStop)
		}
		waitFor(t, "the runner gone", func() bool { return !slices.Contains(e.agent.Running(), a.Alloc.ID) }, e.on()...)
		_, err := os.Lstat(filepath.Join(e.dir, "checkpoints", strconv.FormatUint(uint64(c.id), 10)))
		if c.kept && err != nil {
			t.Errorf("job %d stopped %s: its checkpoint directory is gone (%v); the job may run again", c.id, c.wantStop, err)
		}
		if !c.kept && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("job %d stopped %s: its checkpoint directory stays (%v)", c.id, c.wantStop, err)
		}
	}
}

// TestOwnContainer: the run directories a restarted agent sweeps are
// those of its own node's containers, whose IDs ContainerID makes, also
// under a fresh ID ("-r<try>") and for a node name long enough that the
// ID is cut and ends in a hash of the whole; another node's, however
// alike its name, and IDs gpud did not make are not.
func TestOwnContainer(t *testing.T) {
	long := strings.Repeat("rack17-gpu-node-", 5) + "042"
	for _, tc := range []struct {
		node, cid string
		want      bool
	}{
		{"node-1", ContainerID(12, 1, "node-1"), true},
		{"node-1", ContainerID(12, 1, "node-1") + "-r2", true},
		{"node-1", ContainerID(12, 1, "node-10"), false},
		{"node-1", ContainerID(12, 1, "node-1") + "-rx", false},
		{long, ContainerID(7, 3, long), true},
		{long, ContainerID(7, 3, long) + "-r1", true},
		{long, ContainerID(7, 3, long[:len(long)-1]+"3"), false},
		{"node-1", "gpud-x-1-node-1", false},
		{"node-1", "other-12-1-node-1", false},
	} {
		a := &Agent{runnerDeps: runnerDeps{cfg: Config{Name: tc.node}}}
		if got := a.ownContainer(tc.cid); got != tc.want {
			t.Errorf("node %q, container %q: own = %v, want %v", tc.node, tc.cid, got, tc.want)
		}
	}
	if id := ContainerID(7, 3, long); len(id) >= len("gpud-7-3-"+long) {
		t.Fatalf("ContainerID(7, 3, a %d-byte name) = %q: not cut, so the test does not test the long case", len(long), id)
	}
}
