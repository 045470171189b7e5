package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/growstack"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/safefs"
)

// runner owns one allocation's container on this node, from start (or
// re-adoption) to its reported exit. It has two ways to end: the agent's
// ctx (shutdown: return, leave the container running) and stop (kill:
// SIGTERM, KillGrace, SIGKILL, report). done is closed when it returns.
type runner struct {
	d        *runnerDeps // all it uses of the node (runnerdeps.go)
	id       string      // container ID
	allocID  string
	jobID    spec.JobID
	asg      *api.Assignment // nil when adopted
	self     spec.NodeAlloc
	deadline time.Time // zero: no time limit
	adopted  bool
	rec      allocRecord // what the outbox knew when the runner was made
	// ckptMark is this runner's claim of the job's checkpoint directory
	// (rank 0; zero: none), for removeUnsealedCheckpoints (checkpoint.go).
	ckptMark checkpoint.Mark
	// ckptRun is the name of the job's run directory (checkpoint.RunName)
	// while that is its checkpoint directory (checkpoint.go,
	// prepareCheckpoints); "": the job's directory is.
	ckptRun string
	// ended is set before the exit is recorded: from then on the job is
	// not running, and RunningJobs (usage samples, metrics) leaves it out
	// though the runner is still cleaning up.
	ended atomic.Bool
	// mig are the MIG instances acquireDevices got for the job; acquired
	// says releaseDevices has something to undo.
	mig      []migDevice
	acquired bool
	// cpus and mems pin a GPU job to its GPUs' NUMA node ("" = not pinned).
	cpus, mems string
	// ckptFenced (guarded by a.mu) is set when the agent finds itself out
	// of touch with the controller while the runner runs: the job may
	// have been requeued elsewhere, so it takes no checkpoint until an
	// assignments answer after contact returns lists it (fence.go).
	ckptFenced bool

	done     chan struct{}
	stopCh   chan struct{}
	stopOnce sync.Once

	// unassigned: the agent stops it because the controller no longer
	// lists its allocation (reconcile's fence): the job may run again
	// elsewhere (requeued while the node was cut off), so its checkpoint
	// directory stays (checkpoint.go, mayRunAgain).
	unassigned atomic.Bool

	mu        sync.Mutex
	stopState spec.JobState // why the agent is ending it; first reason wins
	stopWhy   string
	ckptFirst bool // checkpoint before stopping (with the first reason)
	signalSeq int
	noticeSeq int // the last notify message written (runnernotify.go)
	// outputReady says the batch script's output files are in place (the
	// container started or was re-adopted): a notify message waits for it.
	outputReady atomic.Bool
	// frozen says the container is paused (runnersuspend.go); timing
	// carries the time limit's changes to the runner goroutine.
	frozen bool
	timing chan runTiming
	// sentTiming is the timing last sent on timing (timingSent: one
	// was, or the runner's own was taken for it); reconcile's goroutine
	// alone uses them (suspendTo).
	sentTiming runTiming
	timingSent bool

	// learnC (adopted runners only) carries the job's assignment, which
	// container labels do not hold, from the first assignments answer
	// that names the allocation to the runner goroutine, so a re-adopted
	// job takes its periodic checkpoints again.
	learnC    chan learned
	learnOnce sync.Once

	// steps are the job's steps on this node (gpud/node/step): those
	// served here, the step tasks run here and the steps re-adopted
	// after an agent restart.
	steps *step.Alloc
	// logger is log's cache.
	logger atomic.Pointer[runnerLog]
	// pulled is the job's image as pullImage got it (Ref "" when the
	// job runs on the host's root or the runtime does not pull).
	pulled runtime.PullResult
	// gateFailed are the GPUs that failed the start gate (gate), sent
	// with the exit event.
	gateFailed []spec.GPUProblem
	// release ends holdGPUs' hold (nil: none).
	release func()
	// madeDir says prepare made the job directory (makeJobDir) and it
	// holds what a start makes, for removeJobDir (runner goroutine only;
	// false for a job started otherwise).
	madeDir bool
	// stopServe ends serveSteps' listener; run calls it when it returns
	// (runner goroutine only; nil when it serves none).
	stopServe func()
}

// learned is an adopted runner's assignment and its part of it.
type learned struct {
	asg  *api.Assignment
	self spec.NodeAlloc
}

// learn hands an adopted runner its assignment; only the first call
// counts, and runners that started the job themselves ignore it.
func (r *runner) learn(asg *api.Assignment, start time.Time, self spec.NodeAlloc) {
	if r.learnC == nil {
		return // asg is the answer's, read only until reconcile returns
	}
	r.learnOnce.Do(func() { r.learnC <- learned{asg: localAssignment(asg, start), self: self} })
}

// localAssignment is a copy of asg, kept by a runner, with the start on
// this node's clock (localStarts).
func localAssignment(asg *api.Assignment, start time.Time) *api.Assignment {
	c := new(api.Assignment)
	*c = *asg
	c.Alloc.StartTime = spec.Time{Time: start}
	return c
}

func newRunner(d *runnerDeps, asg *api.Assignment, self spec.NodeAlloc, rec allocRecord) *runner {
	r := &runner{
		d: d, allocID: asg.Alloc.ID, jobID: asg.Job.ID, asg: asg, self: self, rec: rec,
		id:        ContainerID(asg.Job.ID, asg.Alloc.Attempt, d.cfg.Name),
		steps:     d.steps.NewAlloc(asg.Alloc.ID, asg.Job.ID),
		signalSeq: rec.SignalSeq,
		noticeSeq: rec.NoticeSeq,
		done:      make(chan struct{}),
		stopCh:    make(chan struct{}),
	}
	if tl := asg.Job.TimeLimit.Std(); tl > 0 {
		start := asg.Alloc.StartTime.Time
		if start.IsZero() {
			start = d.clock.Now()
		}
		r.deadline = start.Add(tl)
	}
	return r
}

// stop asks the runner to end the allocation and report state. Safe to
// call any number of times from any goroutine; the first reason wins.
func (r *runner) stop(state spec.JobState, why string) { r.stopAfter(state, why, false) }

// stopAfter is stop that, when checkpointFirst is set (and the job
// checkpoints), has the job checkpoint before it is stopped.
func (r *runner) stopAfter(state spec.JobState, why string, checkpointFirst bool) {
	r.mu.Lock()
	if r.stopState == "" {
		r.stopState, r.stopWhy, r.ckptFirst = state, why, checkpointFirst
	}
	r.mu.Unlock()
	r.stopOnce.Do(func() { close(r.stopCh) })
}

// checkpointFirst reports whether the stop asked for a checkpoint first.
func (r *runner) checkpointFirst() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ckptFirst
}

// ending returns the state the agent is ending the job with, if any.
func (r *runner) ending() (spec.JobState, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopState, r.stopWhy
}

// signal delivers a controller-requested signal once per seq.
func (r *runner) signal(ctx context.Context, name string, seq int, target string) {
	// Only the reconcile goroutine calls signal, so checking and then
	// updating signalSeq after delivery does not race with itself; a
	// failed delivery (container not created yet) is retried by the
	// next assignments answer.
	r.mu.Lock()
	last := r.signalSeq
	r.mu.Unlock()
	if seq <= last {
		return
	}
	log := r.log()
	sig, err := signame.Parse(name)
	if err != nil {
		log.Warn("controller asked for an unknown signal; ignoring it", "signal", name, "err", err)
		return
	}
	// Deliver before remembering: a crash in between resends it once,
	// which a checkpoint signal tolerates better than never.
	if err := r.signalTarget(ctx, target, sig); err != nil { // runnersteps.go
		log.Warn("signal job container", "signal", name, "target", target, "err", err)
		return
	}
	r.mu.Lock()
	r.signalSeq = seq
	r.mu.Unlock()
	if err := r.d.ob.markSignal(ctx, r.allocID, r.jobID, seq, r.d.clock.Now()); err != nil {
		log.Warn("remember delivered signal", "err", err)
	}
	log.Info("signal delivered", "signal", name, "target", target, "signal_seq", seq)
}

// log is the runner's logger, made once per container ID: a job start
// asks for it a dozen times, and each With copies the attributes.
func (r *runner) log() *slog.Logger {
	id := r.id
	if l := r.logger.Load(); l != nil && l.id == id {
		return l.log
	}
	// job_id as the number it is (a spec.JobID would be formatted by
	// fmt, the same text at several times the cost).
	h := &lazyAttrs{base: r.d.log.Handler(), attrs: [...]slog.Attr{
		slog.Uint64("job_id", uint64(r.jobID)), slog.String("alloc_id", r.allocID), slog.String("container", id)}}
	l := &runnerLog{id: id, log: slog.New(h)}
	r.logger.Store(l)
	return l.log
}

// runnerLog is a runner's logger for one container ID.
type runnerLog struct {
	id  string
	log *slog.Logger
}

// lazyAttrs is base with a runner's attributes, added as slog's With
// adds them but only once something is logged: the text and JSON
// handlers format With's attributes when the logger is made (~8 µs and
// 5 allocations per job in the live loadtest's agents, which log
// warnings only and so, for most jobs, nothing at all). The output is
// With's, byte for byte: the first record or With that passes Enabled
// makes base.WithAttrs(attrs) once and hands everything to it.
type lazyAttrs struct {
	base  slog.Handler
	attrs [3]slog.Attr
	once  sync.Once
	with  slog.Handler
}

func (h *lazyAttrs) handler() slog.Handler {
	h.once.Do(func() { h.with = h.base.WithAttrs(h.attrs[:]) })
	return h.with
}

func (h *lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.base.Enabled(ctx, l) }

func (h *lazyAttrs) Handle(ctx context.Context, rec slog.Record) error {
	return h.handler().Handle(ctx, rec)
}

func (h *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler { return h.handler().WithAttrs(as) }
func (h *lazyAttrs) WithGroup(name string) slog.Handler    { return h.handler().WithGroup(name) }

func (r *runner) jobDir() string { return filepath.Join(r.d.cfg.jobsDir(), r.id) }

func (r *runner) run(ctx context.Context) {
	if !r.adopted {
		// First, while shallow: the start goes deep (prepare, buildTask,
		// taskMounts, EvalSymlinks), where the stack grew by doubling.
		growstack.Grow()
	}
	log := r.log()
	defer func() {
		if r.stopServe != nil {
			r.stopServe() // the step socket's listener (serveSteps)
		}
		if r.release != nil {
			r.release()
		}
	}()
	if !r.adopted {
		r.holdGPUs()
		select {
		case <-r.stopCh:
			// Stopped before it started: nothing to kill.
			state, why := r.ending()
			r.finish(ctx, log, runtime.ExitStatus{}, state, why)
			return
		default:
		}
		// image.go, runnersteps.go
		if !r.pullImage(ctx, log) || !r.gate(ctx, log) || !r.acquire(ctx, log) || !r.waitGang(ctx, log) || !r.start(ctx, log) {
			return
		}
	}
	if !r.rec.Started {
		ev := api.AllocEvent{Node: r.d.cfg.Name, AllocID: r.allocID, JobID: r.jobID, Kind: api.EventStarted,
			Time: spec.NewTime(r.d.clock.Now())}
		for _, m := range r.mig {
			ev.MIG = append(ev.MIG, m.UUID)
		}
		// What the image cost this start (accounting: sacct's
		// ImagePullTime and ImagePullBytes); zero for an adopted run.
		ev.PullMS, ev.PullBytes = r.pulled.Duration.Milliseconds(), r.pulled.Bytes
		if err := r.d.record(ctx, ev); err != nil {
			// The exit event will still tell the controller it ran.
			log.Error("record start of job", "err", err)
		}
	}
	r.wait(ctx, log)
}

// gate runs the start gate the job's partition asks for (Assignment.Gate
// "quick"): the node's health model judges a fresh reading of the job's
// GPUs (MIG slices: their parent GPUs). A GPU that fails is latched as a
// fault (out of service with the next heartbeat) and the job is handed
// back unstarted, REQUEUED with the findings (GateFailed): the controller
// takes the GPUs out and places the job again without charging it a
// restart. It reports whether the job may start.
func (r *runner) gate(ctx context.Context, log *slog.Logger) bool {
	if r.asg.Gate != gateQuick || r.d.gateGPUs == nil {
		return true
	}
	uuids := r.physicalGPUs()
	if len(uuids) == 0 {
		return true
	}
	began := time.Now()
	fs := r.d.gateGPUs(ctx, uuids)
	log.Debug("start gate", "gpus", uuids, "failed", len(fs), "took", time.Since(began))
	if len(fs) == 0 || ctx.Err() != nil {
		return ctx.Err() == nil
	}
	why := make([]string, 0, len(fs))
	for _, f := range fs {
		why = append(why, f.Reason())
	}
	r.gateFailed = problemsOf(fs)
	reason := fmt.Sprintf("start gate on node %s: %s", r.d.cfg.Name, strings.Join(why, "; "))
	log.Warn("job's GPUs failed the start gate; handing the job back to be placed again", "reason", reason)
	r.finish(ctx, log, runtime.ExitStatus{}, spec.StateRequeued, reason)
	return false
}

// physicalGPUs are the node's GPUs (UUIDs) the job's part uses: its
// whole or shared GPUs and its MIG slices' parents.
func (r *runner) physicalGPUs() []string {
	var uuids []string
	for _, u := range r.self.GPUs {
		if _, ok := r.d.gpus[u]; ok && !slices.Contains(uuids, u) {
			uuids = append(uuids, u)
		}
	}
	for _, m := range r.self.MIG {
		if !slices.Contains(uuids, m.GPU) {
			uuids = append(uuids, m.GPU)
		}
	}
	return uuids
}

// holdGPUs marks the job's GPUs held (no background diagnostic runs on
// them; one running ends first) until run returns. Runner goroutine only.
func (r *runner) holdGPUs() {
	if r.release == nil && r.d.holdGPUs != nil {
		r.release = r.d.holdGPUs(r.physicalGPUs())
	}
}

// gateQuick is Assignment.Gate's quick start gate.
const gateQuick = "quick"

// acquire makes the job's MIG instances (and switches MIG mode off for
// whole GPUs that need it). A failure is the node's, not the job's: the
// node reports its real MIG layout to the controller, then the job is
// requeued so that it is planned again, not lost.
func (r *runner) acquire(ctx context.Context, log *slog.Logger) bool {
	devs, err := r.d.acquireDevices(ctx, log, r.self)
	if err == nil {
		r.mig, r.acquired = devs, true
		if numa := gpuNUMA(r.self, r.d.gpus); len(numa) > 0 {
			r.cpus, r.mems = r.d.pins.pick(r.allocID, r.self.CPUs, numa)
		}
		return true
	}
	if ctx.Err() != nil {
		return false
	}
	log.Error("prepare MIG devices; requeueing the job", "err", err)
	r.d.refreshMIGLayout(ctx, log)
	r.finish(ctx, log, runtime.ExitStatus{Code: 1}, spec.StateRequeued,
		fmt.Sprintf("prepare GPUs for job %d on node %s: %v", r.jobID, r.d.cfg.Name, err))
	return false
}

// start prepares the job directory and starts the container. It reports
// whether the container runs; otherwise the runner is finished.
func (r *runner) start(ctx context.Context, log *slog.Logger) bool {
	started, refill := r.startPrepared(ctx, log) // prepared.go
	if started {
		refill()
		return true
	}
	base := r.id
	var err error
	for try := 1; ; try++ {
		var cfg runtime.TaskConfig
		cfg, err = r.prepare()
		if err == nil {
			// Listen before the job starts: its first line may be srun.
			stopServe := r.serveSteps(ctx, cfg.Env) // runnersteps.go
			err = r.d.rt.Start(ctx, cfg)
			if err != nil {
				stopServe()
			}
			if err != nil && !errors.Is(err, os.ErrExist) {
				// Start may have created the container before failing.
				if derr := r.d.rt.Delete(context.WithoutCancel(ctx), r.id); derr != nil {
					log.Warn("delete container after failed start", "err", derr)
				}
			}
		}
		if !errors.Is(err, runtime.ErrIDInUse) || try == 3 {
			if err == nil {
				r.steps.Started()
				r.outputReady.Store(true)
				log.Info("job container started", "image", cfg.Image, "uid", cfg.UID, "gpus", r.self.GPUs)
			}
			break
		}
		// A kill -9 mid-create left engine state under this ID; nothing
		// ran, so start under a fresh one (labels, not IDs, identify it).
		r.removeJobDir(log)
		r.id = fmt.Sprintf("%s-r%d", base, try)
		log.Warn("container ID held by stale state; starting under a fresh ID", "container", r.id, "err", err)
	}
	if err == nil {
		if refill != nil {
			refill()
		}
		return true
	}
	if ctx.Err() != nil {
		// The agent is shutting down, not the job failing: record
		// nothing, so the next agent starts it again.
		r.removeJobDir(log)
		r.removeRun(log)
		return false
	}
	log.Error("start job container", "err", err)
	r.finish(ctx, log, runtime.ExitStatus{Code: 1}, spec.StateFailed,
		fmt.Sprintf("start job %d on node %s: %v", r.jobID, r.d.cfg.Name, err))
	return false
}

// prepare writes the job directory and returns the container config.
func (r *runner) prepare() (runtime.TaskConfig, error) {
	job := &r.asg.Job
	dir := r.jobDir()
	r.madeDir = false    // a retry under a fresh ID: the old one is gone
	r.removeRun(r.log()) // and its run directory (checkpoint.go)
	jobs, done, err := r.d.openJobs()
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	err = makeJobDir(jobs, r.id, []byte(job.Script), int(job.UID), int(job.GID))
	done()
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	r.madeDir = true
	ckpt, restart, err := r.prepareCheckpoints(job.UID, job.GID)
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	in, err := r.taskInput(dir, ckpt, restart)
	if err != nil {
		return runtime.TaskConfig{}, err
	}
	in.CkptIsStaging = r.ckptRun != "" // a run directory (checkpoint.go)
	return buildTask(&in)
}

// taskInput gathers what buildTask needs for the job, with dir as its
// job directory, ckpt its checkpoint directory and restart the checkpoint
// it restarts from (""). It changes nothing on the node.
func (r *runner) taskInput(dir, ckpt, restart string) (taskInput, error) {
	job := &r.asg.Job
	// One lookup for both the groups and the home (each checks that the
	// user database's files did not change).
	u := users.lookup(job.UID)
	groups, err := u.supplementaryGroups(job.GID)
	if err != nil {
		r.log().Debug("no supplementary groups for job user", "uid", job.UID, "err", err)
	}
	return taskInput{
		Asg: r.asg, Self: r.self, NodeName: r.d.cfg.Name, Hostname: r.d.cfg.Hostname, SelfAddr: r.d.cfg.Addr,
		DefaultImage: r.d.cfg.DefaultImage, GPUs: r.d.gpus, NICs: r.d.nics, MIG: r.mig, ContainerID: r.id, JobDir: dir,
		CPUSet: r.cpus, CPUMems: r.mems,
		ScriptPath: filepath.Join(dir, "script"), CkptDir: ckpt, RestartDir: restart, GroupIDs: groups, Deadline: r.deadline,
		Hide: r.d.hidden(), Show: r.d.cfg.ShowPaths, Home: u.homeDir(),
		Mounts: existingDirs(r.d.cfg.Mounts), ToolsDir: r.d.cfg.ToolsDir, PulledImage: r.pulled.Ref,
		HostRootReadOnly: r.d.cfg.HostRootReadOnly, SharedTmp: r.d.cfg.SharedTmp,
	}, nil
}

// makeJobDir makes the job directory afresh in jobs (the node's jobs/):
// <id>/ with tmp/ and, unless script is nil, the script. The user can
// traverse jobs/ and knows the name, so nothing is reused that was not
// just made and nothing is followed (safefs) while only root can write
// there; tmp/ and script are handed to uid:gid (fchownat without
// following, fchown on the script's descriptor) once complete. The
// directory itself stays root's (0711): the user can never add, rename
// or swap an entry in it, so neither root's later removal nor the
// runtime's bind mounts of tmp/ and the script can be pointed elsewhere.
// That is also why it is a safefs.Sub, reached as <id>/<entry> from
// jobs/'s descriptor, which the agent holds for its whole run: only
// root writes jobs/ and <id>/, so the path reaches what a descriptor of
// <id>/ would, without opening, checking and keeping one per job, nor
// lstat'ing tmp/ to check it (4 system calls per start and a descriptor
// per running job; TestJobDirAttackedByItsUser).
func makeJobDir(jobs *safefs.Dir, id string, script []byte, uid, gid int) error {
	d, err := jobs.MkdirSub(id, 0o711)
	if errors.Is(err, fs.ErrExist) {
		// Left by a start that a kill -9 cut short: never reused.
		if err := jobs.RemoveAll(id); err != nil {
			return fmt.Errorf("clear job directory: %w", err)
		}
		d, err = jobs.MkdirSub(id, 0o711)
	}
	if err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	return fillJobDir(d, script, uid, gid)
}

// fillJobDir makes tmp/ and the script (unless nil) in the new job
// directory d.
func fillJobDir(d safefs.Sub, script []byte, uid, gid int) error {
	// Only root can give files away; an unprivileged agent (development)
	// runs jobs as itself and keeps them.
	owner := -1
	if euid == 0 {
		owner = uid
	}
	// tmp/ given away by name: d is root's, 0711, and only root adds
	// entries to it (safefs.Sub.MkdirFor).
	if err := d.MkdirFor(jobTmpName, 0o700, owner, gid); err != nil {
		return fmt.Errorf("create job directory's tmp/ for uid %d: %w", uid, err)
	}
	if script == nil {
		return nil
	}
	// 0700: readable by the job's user only (the path is predictable).
	// Not fsynced: after a crash of the machine the job's container is
	// gone too, and its next start makes a fresh directory.
	if err := d.WriteNew(jobScriptName, script, 0o700, owner, gid); err != nil {
		return fmt.Errorf("write job script: %w", err)
	}
	return nil
}

// The entries a job start makes in its job directory (besides the step
// socket, step.SocketName).
const (
	jobTmpName    = "tmp"
	jobScriptName = "script"
)

// euid is the agent's effective uid, read once: no gpud process changes
// its own credentials.
var euid = os.Geteuid()

// removeJobDir removes the runner's job directory: when prepare made it,
// the entries a start makes (the script, the step socket, tmp/ when the
// job left it empty), by name, then the directory; anything else there
// (a step's records, what the job left in tmp/) is removed as
// runnerDeps.removeJobDir removes it, which is also how a directory the
// runner did not make goes.
//
// The step socket's service ends first (its container is gone): its file
// leaves the directory for the node's pool of idle sockets when it can
// (gpud/node/step's sockpool.go), and is not unlinked then.
func (r *runner) removeJobDir(log *slog.Logger) {
	made := r.madeDir
	r.madeDir = false
	sockMoved := r.steps != nil && r.steps.EndServe()
	if made && r.d.removeMadeJobDir(r.id, sockMoved) {
		return
	}
	r.d.removeJobDir(log, r.id)
}

// removeStartEntries removes from job directory jd the entries a start
// makes (the step socket unless sockMoved: it left already), and jd once
// they are gone; it reports whether jd is gone (tmp/ goes only when it is
// empty, and jd only when nothing else is there).
func removeStartEntries(jd safefs.Sub, sockMoved bool) bool {
	gone := func(err error) bool { return err == nil || errors.Is(err, fs.ErrNotExist) }
	ok := gone(jd.Unlink(jobScriptName))
	if !sockMoved {
		ok = gone(jd.Unlink(step.SocketName)) && ok
	}
	ok = gone(jd.Rmdir(jobTmpName)) && ok
	return ok && jd.Remove() == nil
}

// wait follows the running container until it exits (then reports it) or
// the agent shuts down (then leaves it running). Its checkpoints and its
// stop (a stop request or the time limit) are state machines of their
// own (ckptmachine.go, stopmachine.go); wait hands them their events.
func (r *runner) wait(ctx context.Context, log *slog.Logger) {
	exits, stopWaiting := r.watchExit(ctx, log)
	defer stopWaiting()
	ck := newCheckpointMachine(r.d.clock, r.d.cfg.CheckpointTimeout, log, runnerCheckpoints{r, ctx, log})
	sm := newStopMachine(r.d.clock, r.d.cfg.KillGrace, log, runnerStops{r, ctx, log}, ck, r.stopCh, r.stopAt(r.deadline))
	ck.arm(r.checkpointPlan(), r.deadline)
	learnC := r.learnC
	timing, frozen := r.timingC(), false
	adopt := func(l learned) {
		learnC = nil
		r.adopt(ctx, log, l, ck, sm)
	}
	for {
		// An adopted runner learns its job before acting on a stop that
		// came with the same assignments answer (checkpoint first).
		select {
		case l := <-learnC:
			adopt(l)
		default:
		}
		select {
		case <-ctx.Done():
			return // shutdown: the container keeps running
		case l := <-learnC:
			adopt(l)
		case res := <-exits:
			if res.err != nil && ctx.Err() != nil {
				return // shutdown
			}
			r.exited(ctx, log, res)
			return
		case t := <-timing:
			r.retime(t, sm, ck, &frozen) // runnersuspend.go
		case <-sm.deadlineC:
			sm.onDeadline(fmt.Sprintf("time limit %s reached", r.timeLimit()))
		case <-sm.stopC:
			sm.onStop()
		case <-ck.intervalC:
			ck.onInterval()
		case <-ck.beforeC:
			ck.onBefore()
		case <-ck.pollC:
			if ck.onPoll() {
				sm.checkpointEnded()
			}
		case <-sm.graceC:
			sm.onGrace()
		case <-sm.stuckC:
			sm.onStuck()
		}
	}
}

// adopt takes an adopted runner's assignment: it serves steps again and,
// unless it is being stopped, takes its job's checkpoints again.
func (r *runner) adopt(ctx context.Context, log *slog.Logger, l learned, ck *checkpointMachine, sm *stopMachine) {
	r.asg, r.self = l.asg, l.self
	r.holdGPUs()
	r.resumeSteps(ctx, log)
	if !sm.stopping() {
		ck.arm(r.checkpointPlan(), r.deadline)
	}
	if ck.active() {
		log.Info("re-adopted job takes its checkpoints again", "interval", ck.plan.interval, "rank", r.self.Rank)
	}
}

type waitResult struct {
	st  runtime.ExitStatus
	err error // nil, or runtime.ErrNotFound
}

// watchExit waits for the container's task to exit, retrying the
// runtime's Wait with backoff while it fails. The channel carries the
// exit status, or runtime.ErrNotFound when the container disappeared;
// nothing when ctx ends first. stop ends the waiting and returns once
// it has.
func (r *runner) watchExit(ctx context.Context, log *slog.Logger) (exits <-chan waitResult, stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	resc := make(chan waitResult, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bo := r.d.newBackoff()
		for {
			st, err := r.d.rt.Wait(wctx, r.id)
			if err == nil || errors.Is(err, runtime.ErrNotFound) && wctx.Err() == nil {
				resc <- waitResult{st, err}
				return
			}
			if wctx.Err() != nil {
				return
			}
			d := bo.next()
			log.Warn("wait for job container; retrying", "err", err, "retry_in", d)
			if !sleep(wctx, d) {
				return
			}
		}
	}()
	return resc, func() { cancel(); <-done }
}

// exited reports how the job's container ended: the stop reason the
// agent began, or (for a job that checkpointed and exited with the
// checkpoint code) a requeue from that checkpoint, or what its exit
// status says; a container that disappeared behind the agent's back is
// not running, so it is reported as ended.
func (r *runner) exited(ctx context.Context, log *slog.Logger, res waitResult) {
	if res.err != nil {
		state, why := r.ending()
		if state == "" {
			state, why = spec.StateFailed, "job container disappeared from the runtime"
		}
		r.finish(ctx, log, runtime.ExitStatus{Code: -1}, state, why)
		return
	}
	st := res.st
	state, why := r.ending()
	if state == "" {
		state, why = r.rec.StopState, r.rec.StopWhy
	}
	sealed, refused := r.checkpointAtExit(ctx, log, st)
	switch {
	case state != "":
	case sealed:
		// The job checkpointed and stopped by itself: run it again from
		// that checkpoint instead of failing it.
		state, why = spec.StateRequeued, fmt.Sprintf("job checkpointed and exited with code %d", checkpoint.ExitCodeCheckpointed)
	case refused != "":
		state, why = spec.StateFailed, refused
	}
	state, why = exitState(st, state, why)
	r.finish(ctx, log, st, state, why)
}

// runnerCheckpoints is the runner as its checkpoint machine's job.
type runnerCheckpoints struct {
	r   *runner
	ctx context.Context
	log *slog.Logger
}

func (c runnerCheckpoints) mayCheckpoint() error { return c.r.d.mayCheckpoint(c.r) }
func (c runnerCheckpoints) ready() bool          { return c.r.d.ckpt.Ready(c.r.jobID) }
func (c runnerCheckpoints) seal()                { _ = c.r.sealCheckpoint(c.ctx, c.log) } // logged
func (c runnerCheckpoints) newestSealed() int    { return c.r.newestSealed() }

func (c runnerCheckpoints) signal(target string, sig syscall.Signal) {
	if err := c.r.signalTarget(c.ctx, target, sig); err != nil && c.ctx.Err() == nil { // runnersteps.go
		c.log.Warn("send the checkpoint signal", "signal", signame.Full(sig), "target", target, "err", err)
	}
}

// runnerStops is the runner as its stop machine's job.
type runnerStops struct {
	r   *runner
	ctx context.Context
	log *slog.Logger
}

func (s runnerStops) stop(state spec.JobState, why string) { s.r.stop(state, why) }
func (s runnerStops) ending() (spec.JobState, string)      { return s.r.ending() }
func (s runnerStops) checkpointFirst() bool                { return s.r.checkpointFirst() }
func (s runnerStops) kill(sig syscall.Signal)              { s.r.kill(s.ctx, s.log, sig) }

func (s runnerStops) markStopping(state spec.JobState, why string) {
	r := s.r
	if err := r.d.ob.markStopping(context.WithoutCancel(s.ctx), r.allocID, r.jobID, state, why, r.d.clock.Now()); err != nil {
		s.log.Warn("remember why the job is being stopped", "err", err)
	}
}

// stopAt is when a job whose time limit ends at deadline is stopped: the
// site's OverTimeLimit later (zero: no limit).
func (r *runner) stopAt(deadline time.Time) time.Time {
	if deadline.IsZero() {
		return deadline
	}
	return deadline.Add(r.d.cfg.OverTimeLimit)
}

func (r *runner) timeLimit() time.Duration {
	if r.asg != nil {
		return r.asg.Job.TimeLimit.Std()
	}
	return 0
}

// kill sends sig to the container, logging (not failing on) errors: a
// task that already exited reports its status through Wait anyway.
func (r *runner) kill(ctx context.Context, log *slog.Logger, sig syscall.Signal) {
	if err := r.d.rt.Signal(ctx, r.id, sig); err != nil && !errors.Is(err, runtime.ErrNotFound) && ctx.Err() == nil {
		log.Warn("signal job container", "signal", sig, "err", err)
	}
}

// checkpointAtExit seals what the job left in its staging directory when
// it exited: a checkpoint it marked ready, or everything there when it
// exited with checkpoint.ExitCodeCheckpointed. It reports whether the job
// exited with that code and its checkpoint was sealed, and otherwise, for
// such a job, why its checkpoint was refused ("" when it was not refused).
func (r *runner) checkpointAtExit(ctx context.Context, log *slog.Logger, st runtime.ExitStatus) (sealed bool, refused string) {
	if !r.ownsCheckpoints() {
		return false, ""
	}
	byCode := st.Code == checkpoint.ExitCodeCheckpointed && st.Signal == 0 && !st.OOMKilled
	if r.findRun(); r.ckptRun != "" {
		// A run directory (checkpoint.go): marked and looked at in
		// place, then moved into the job's directory to be sealed.
		if byCode {
			if err := r.d.ckpt.MarkRunReady(r.ckptRun); err != nil {
				log.Warn("job exited with the checkpoint exit code but its staging directory cannot be sealed", "err", err)
				return false, fmt.Sprintf("exited with code %d but its checkpoint was refused: %v", checkpoint.ExitCodeCheckpointed, err)
			}
		}
		// An empty run directory goes here (removeRun has nothing left
		// to do); one with files stays until the seal or removeRun.
		ready, gone := r.d.ckpt.EndRun(r.ckptRun)
		if gone {
			r.ckptRun = ""
		}
		if !ready {
			return false, ""
		}
		if err := r.adoptRun(); err != nil {
			log.Warn("seal checkpoint; the job's staging directory is discarded", "err", err)
			if byCode {
				return false, fmt.Sprintf("exited with code %d but its checkpoint was refused: %v", checkpoint.ExitCodeCheckpointed, err)
			}
			return false, ""
		}
	} else if byCode {
		if err := r.d.ckpt.MarkReady(r.jobID, r.ckptTag()); err != nil {
			log.Warn("job exited with the checkpoint exit code but its staging directory cannot be sealed", "err", err)
			return false, fmt.Sprintf("exited with code %d but its checkpoint was refused: %v", checkpoint.ExitCodeCheckpointed, err)
		}
	}
	if !r.d.ckpt.Ready(r.jobID) {
		return false, ""
	}
	err := r.sealCheckpoint(ctx, log)
	if byCode && err != nil {
		return false, fmt.Sprintf("exited with code %d but its checkpoint was refused: %v", checkpoint.ExitCodeCheckpointed, err)
	}
	return err == nil && byCode, ""
}

// exitState maps how a task ended to the job's state on this node. A stop
// the agent began (stopState) wins, since the exit is its consequence.
func exitState(st runtime.ExitStatus, stopState spec.JobState, stopWhy string) (spec.JobState, string) {
	switch {
	case stopState != "":
		return stopState, stopWhy
	case st.OOMKilled:
		return spec.StateOutOfMemory, "out of memory: the job exceeded its memory limit"
	case st.Code == 0 && st.Signal == 0:
		return spec.StateCompleted, ""
	case st.Signal != 0:
		return spec.StateFailed, "killed by signal " + signame.Full(st.Signal)
	default:
		// Slurm's reason; the code itself is in exit_code.
		return spec.StateFailed, "NonZeroExitCode"
	}
}

// stepEndsWait bounds how long a job's exit waits for the record of a
// step's end that srun has already heard (an outbox commit).
const stepEndsWait = 10 * time.Second

// finish releases the job's devices, records the exit (committed before
// the container goes), then deletes the container and the job directory.
func (r *runner) finish(ctx context.Context, log *slog.Logger, st runtime.ExitStatus, state spec.JobState, why string) {
	if r.acquired {
		// Before the exit is reported: once the controller hears of it,
		// it may plan the same MIG placement (and cores) for the next job,
		// which must not find this job's instance still there.
		stale := r.d.releaseDevices(ctx, log, r.self)
		r.d.pins.release(r.allocID)
		r.acquired = false
		if stale {
			r.d.refreshMIGLayout(ctx, log)
		}
	}
	r.ended.Store(true)
	if !r.rec.Exited {
		// A step's end srun has heard goes to the outbox first.
		if r.steps != nil && !r.steps.WaitStepEnds(stepEndsWait) {
			log.Warn("a step's end is not recorded yet; recording the job's exit first (accounting may show the step CANCELLED)", "waited", stepEndsWait)
		}
		ev := r.d.exitEvent(r.allocID, r.jobID, state, why, st)
		ev.GateFailed = r.gateFailed
		bo := r.d.newBackoff()
		for {
			err := r.d.record(ctx, ev)
			if err == nil {
				break
			}
			// Without the record the container must stay: it is the only
			// other evidence of the exit, and recovery reports from it.
			log.Error("record job exit in outbox; retrying", "err", err)
			if !sleep(ctx, bo.next()) {
				return
			}
		}
	}
	if r.d.deleteContainer(ctx, log, r.id) {
		r.removeJobDir(log)
		r.removeUnsealedCheckpoints(log) // checkpoint.go
	}
}
