package node

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// checkpointPoll is how often (on the agent's clock) a runner looks for
// the .done file after sending the checkpoint signal.
const checkpointPoll = 100 * time.Millisecond

// ckptPlan is how a runner drives its job's cooperative checkpoints
// (DESIGN §4): which signal, how often, and how long before the time limit.
type ckptPlan struct {
	sig      syscall.Signal
	interval time.Duration // 0: no periodic checkpoints
	before   time.Duration // signal this long before the deadline; 0: not
	// owner: this runner seals (rank 0); other ranks only signal their
	// processes and wait for the checkpoint to appear.
	owner bool
	// target is who gets sig (signalTarget): every process for
	// --checkpoint; Slurm's rule for --signal: the steps' tasks, or with
	// B: the batch shell only.
	target string
	rank   int // the runner's rank in the job (for the log)
	// phase, when set, is where intervals count from: a gang's
	// allocation start, the same on every node, so that its ranks are
	// signalled together although their containers start apart (the
	// batch node's waits for the others: gang start).
	phase time.Time
}

// ownsCheckpoints reports whether this runner manages the job's checkpoint
// directory: creating staging, sealing and reporting. Only rank 0 does, so
// the ranks of a gang sharing one checkpoint root do not race on it; an
// adopted runner does once it has learnt its assignment (see learn).
func (r *runner) ownsCheckpoints() bool {
	return r.asg != nil && r.self.Rank == 0
}

// checkpointPlan returns the job's plan, or nil when the job does not
// checkpoint (neither --checkpoint nor --signal) or the runner does not
// know the job yet (adopted, before the controller's answer). Every rank
// is signalled, since each rank's processes hold their own state; only
// rank 0 seals.
func (r *runner) checkpointPlan() *ckptPlan {
	if r.asg == nil {
		return nil
	}
	job := &r.asg.Job
	if job.Ckpt <= 0 && job.JobSpec.Signal == "" {
		return nil
	}
	p := &ckptPlan{sig: checkpoint.DefaultSignal, interval: job.Ckpt.Std(), owner: r.ownsCheckpoints(), rank: r.self.Rank}
	if len(r.asg.Alloc.Nodes) > 1 {
		p.phase = allocStart(&r.asg.Alloc)
	}
	if job.JobSpec.Signal != "" {
		sig, secs, batchOnly, err := checkpoint.ParseSignal(job.JobSpec.Signal)
		if err != nil {
			r.log().Warn("job's --signal is not valid; checkpointing with the default signal", "signal", job.JobSpec.Signal, "err", err)
		} else {
			p.sig, p.before = sig, time.Duration(secs)*time.Second
			// As Slurm's --signal: the steps' tasks and not the batch
			// shell, or with B: the batch shell only.
			p.target = spec.SignalSteps
			if batchOnly {
				p.target = spec.SignalBatch
			}
		}
	}
	return p
}

// newestSealed is the seq of the job's newest verified checkpoint, 0 if
// none (or unreadable: a rank then waits for .done or its timeout).
func (r *runner) newestSealed() int {
	ck, ok, err := r.d.ckpt.Latest(r.jobID)
	if err != nil || !ok {
		return 0
	}
	return ck.Seq
}

// ckptTag is the tag of the job's checkpoint directory (checkpoint.JobTag):
// its submit time, the same on every node and across its requeues, so a
// reset controller's job of the same ID (numbered from 1 again) is never
// offered this job's checkpoints, nor this job's runner let seal into
// that job's directory. "" (no check, as before tags) when the controller
// sent no submit time.
func (r *runner) ckptTag() string {
	if r.asg == nil || r.asg.Job.SubmitTime.IsZero() {
		return ""
	}
	return checkpoint.JobTag(r.asg.Job.SubmitTime.UnixNano())
}

// prepareCheckpoints creates the job's fresh staging directory (owner), or
// (other ranks, which must not clear a staging directory rank 0 may be
// using) only what is missing, and returns the job's checkpoint
// directory and the newest sealed checkpoint to restart from ("" if none).
func (r *runner) prepareCheckpoints(uid, gid uint32) (dir, restart string, err error) {
	st := r.d.ckpt
	dir = st.JobDir(r.jobID)
	owner := -1
	if euid == 0 {
		owner = int(uid)
	}
	var latest checkpoint.Checkpoint
	var ok bool
	mu := r.d.ckptLock(r.jobID)
	mu.Lock()
	defer mu.Unlock()
	if r.exitOnlyCheckpoints() {
		// The usual job: no job directory yet (nothing to restart from),
		// and it can checkpoint only as it exits. Its run directory is
		// its staging directory until then (checkpoint/run.go).
		name := checkpoint.RunName(r.id)
		run, made, err := st.PrepareRun(name, r.jobID, owner, int(gid))
		if err != nil {
			return "", "", err
		}
		if made {
			r.ckptRun = name
			return run, "", nil
		}
	}
	if r.ownsCheckpoints() {
		// A fresh staging directory, the user's, the newest checkpoint
		// and this runner's claim, in one pass.
		latest, ok, r.ckptMark, err = st.PrepareClaim(r.jobID, r.ckptTag(), owner, int(gid))
	} else {
		// Create what is missing (a node-local root), clear nothing;
		// replace another job's directory of the same ID first.
		if _, err = st.Join(r.jobID, r.ckptTag(), owner, int(gid)); err == nil {
			latest, ok, err = st.Latest(r.jobID)
		}
	}
	if err != nil {
		return "", "", err
	}
	if ok {
		restart = latest.Dir
		r.log().Info("job restarts from checkpoint", "seq", latest.Seq, "dir", latest.Dir, "bytes", latest.Bytes)
	}
	return dir, restart, nil
}

// exitOnlyCheckpoints reports whether the job can checkpoint only as it
// exits (.done, or the checkpoint exit code), on this one node, which
// seals: no --checkpoint or --signal (nothing signals it to checkpoint
// while it runs, nor before a stop: the checkpoint machine has no plan),
// one node (the ranks of a gang share the job's staging directory on a
// shared root), rank 0. Such a job's checkpoint directory is a run
// directory while it has no job directory (prepareCheckpoints).
func (r *runner) exitOnlyCheckpoints() bool {
	if !r.ownsCheckpoints() {
		return false
	}
	job := &r.asg.Job
	return job.Ckpt <= 0 && job.JobSpec.Signal == "" && len(r.asg.Alloc.Nodes) == 1
}

// findRun sets ckptRun for an adopted runner whose job's checkpoint
// directory is a run directory (the agent before the restart made it):
// what the runner knew is not in the container's labels.
func (r *runner) findRun() {
	if r.adopted && r.ckptRun == "" && r.d.ckpt.RunExists(checkpoint.RunName(r.id)) {
		r.ckptRun = checkpoint.RunName(r.id)
	}
}

// removeRun removes the job's run directory, if it has one: at its end,
// and before a start under a fresh container ID makes another.
func (r *runner) removeRun(log *slog.Logger) {
	if r.ckptRun == "" {
		return
	}
	if err := r.d.ckpt.RemoveRun(r.ckptRun); err != nil {
		log.Warn("remove the job's checkpoint run directory; the next agent start retries", "dir", r.ckptRun, "err", err)
	}
	r.ckptRun = ""
}

// removeLeftRuns removes the run directories of this node's containers
// that are gone (keep: the containers re-adopted), left by a start or an
// end that a crash of the agent cut short: an exit the agent was down
// for seals nothing, as in a job's directory, where the next attempt's
// start clears what it left. Other nodes' (a shared root) are theirs.
func (a *Agent) removeLeftRuns(keep map[string]bool) {
	names, err := a.ckpt.Runs()
	if err != nil {
		a.log.Warn("list checkpoint run directories left by an earlier agent; they stay", "err", err)
		return
	}
	for _, n := range names {
		cid, _ := checkpoint.RunContainer(n)
		if keep[cid] || !a.ownContainer(cid) {
			continue
		}
		if err := a.ckpt.RemoveRun(n); err != nil {
			a.log.Warn("remove checkpoint run directory an earlier agent left", "dir", n, "err", err)
		}
	}
}

// ownContainer reports whether container ID cid is one of this node's
// jobs' (ContainerID, or a fresh ID after a stale one: "-r<try>"). The
// job and attempt are read from the ID's head and ContainerID itself
// says what this node's ID for them is: a long node name's ID is cut
// and ends in a hash of the whole (job and attempt included), which no
// suffix of the node's name matches.
func (a *Agent) ownContainer(cid string) bool {
	rest, ok := strings.CutPrefix(cid, "gpud-")
	var nums [2]uint64 // the job ID and the attempt
	for i := range nums {
		var num string
		if num, rest, ok = strings.Cut(rest, "-"); !ok {
			return false
		}
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return false
		}
		nums[i] = n
	}
	own := ContainerID(spec.JobID(nums[0]), int(nums[1]), a.cfg.Name)
	if cid == own {
		return true
	}
	try, ok := strings.CutPrefix(cid, own+"-r")
	return ok && try != "" && strings.Trim(try, "0123456789") == ""
}

// adoptRun makes the job's run directory, which holds the checkpoint
// it exited with, the staging directory of its job directory (made and
// claimed now), to be sealed there as any other (checkpointAtExit).
func (r *runner) adoptRun() error {
	if err := r.d.mayCheckpoint(r); err != nil {
		return err
	}
	mu := r.d.ckptLock(r.jobID)
	mu.Lock()
	defer mu.Unlock()
	m, err := r.d.ckpt.AdoptRun(r.ckptRun, r.jobID, r.ckptTag())
	if err != nil {
		return err
	}
	r.ckptRun, r.ckptMark = "", m
	return nil
}

// mayRunAgain reports whether the part's end may be followed by another
// attempt of the job: the agent stopped it (or an earlier agent had begun
// to: rec.StopState) for a reason other than the job's final end (a
// requeue, a preemption, a node failure), or because the controller no
// longer lists it (unassigned). A part that ended by itself, or was
// cancelled, timed out or failed by the controller's word, is the job's
// last on this node.
func (r *runner) mayRunAgain() bool {
	if r.unassigned.Load() {
		return true
	}
	state, _ := r.ending()
	if state == "" {
		state = r.rec.StopState
	}
	switch state {
	case "", spec.StateCancelled, spec.StateTimeout, spec.StateCompleted, spec.StateFailed, spec.StateOutOfMemory:
		return false
	}
	return true
}

// ckptLock is the lock of job id's checkpoint directory on this node
// (runnerDeps.ckptMu).
func (d *runnerDeps) ckptLock(id spec.JobID) *sync.Mutex {
	return &d.ckptMu[uint64(id)%uint64(len(d.ckptMu))]
}

// adoptCheckpointSlot makes prepared container slot the job's checkpoint
// directory and, on rank 0, claims it, under the job's ckptLock.
func (r *runner) adoptCheckpointSlot(slot string) error {
	mu := r.d.ckptLock(r.jobID)
	mu.Lock()
	defer mu.Unlock()
	if err := r.d.ckpt.AdoptSlot(slot, r.jobID, r.ckptTag()); err != nil {
		return err
	}
	if r.ownsCheckpoints() {
		r.claimCheckpoints(r.log())
	}
	return nil
}

// claimCheckpoints marks the job's checkpoint directory as this runner's
// (rank 0, after adopting a slot; prepareCheckpoints claims it with
// PrepareClaim), so that its end may remove it if nothing gets sealed
// there. Without the mark it stays.
func (r *runner) claimCheckpoints(log *slog.Logger) {
	m, err := r.d.ckpt.Claim(r.jobID, r.ckptTag())
	if err != nil {
		log.Warn("mark the job's checkpoint directory as this attempt's; it stays after the job", "err", err)
		return
	}
	r.ckptMark = m
}

// removeUnsealedCheckpoints removes the job's checkpoint directory when
// its part on this node has ended (the container is gone) and the runner
// claimed it (rank 0) and nothing was sealed there:
// it holds nothing a restart could use. A directory with a sealed
// checkpoint stays for a requeued attempt; so does one another attempt
// has prepared since (a requeue started on a node sharing the root).
//
// Another attempt of the job on this node keeps it too: a requeued job
// placed back here while this attempt stops (its rank 0 claims the
// directory, but a rank that only joins it does not), and the directory
// is moved aside while RemoveUnsealed looks at it a last time, so an
// attempt preparing or mounting it meanwhile would find it missing (the
// chaos suite's node cuts did: "error mounting <checkpoint_root>/<id>").
// Both run under the job's ckptLock.
//
// A part the agent stopped while the job may run again keeps it as well
// (mayRunAgain): the next attempt, on this node or on another node
// sharing the checkpoint root, may be preparing or mounting it right
// now, and RemoveUnsealed's move aside would pull it from under that
// attempt (the chaos suite's node cuts, with the root shared by the
// nodes: "error mounting <checkpoint_root>/<id>"). The next attempt's
// rank 0 claims it and removes it at its own end.
func (r *runner) removeUnsealedCheckpoints(log *slog.Logger) {
	// A run directory is the run's alone: no other attempt prepares or
	// mounts it, so it goes whatever the end (nothing was sealed in it:
	// a seal moves it into the job's directory first).
	r.findRun()
	if r.ckptRun != "" {
		r.removeRun(log)
		return
	}
	if r.ckptMark == (checkpoint.Mark{}) {
		return
	}
	if r.mayRunAgain() {
		log.Debug("checkpoint directory kept: the job may run again", "dir", r.d.ckpt.JobDir(r.jobID))
		return
	}
	mu := r.d.ckptLock(r.jobID)
	mu.Lock()
	defer mu.Unlock()
	if r.d.otherAttempt != nil && r.d.otherAttempt(r) {
		log.Debug("checkpoint directory kept: another attempt of the job runs on this node", "dir", r.d.ckpt.JobDir(r.jobID))
		return
	}
	removed, err := r.d.ckpt.RemoveUnsealed(r.jobID, r.ckptMark)
	if err != nil {
		log.Warn("remove the job's checkpoint directory, which holds no checkpoint", "err", err)
		return
	}
	if removed {
		log.Debug("checkpoint directory without a checkpoint removed", "dir", r.d.ckpt.JobDir(r.jobID))
		return
	}
	// It stays (a sealed checkpoint, or another attempt's claim): its
	// retention, once the controller says the job ended for good,
	// counts from now (retain.go).
	if err := r.d.ckpt.Touch(r.jobID); err != nil {
		log.Warn("note the job's end on its checkpoint directory; its retention counts from its last seal", "err", err)
	}
}

// sealCheckpoint seals the job's ready staging directory, gives the job a
// fresh one, and records the checkpoint in the outbox. It returns why no
// checkpoint was sealed, or nil.
func (r *runner) sealCheckpoint(ctx context.Context, log *slog.Logger) error {
	st := r.d.ckpt
	fenced := func() error { return r.d.mayCheckpoint(r) }
	var ck checkpoint.Checkpoint
	err := fenced()
	if err == nil {
		ck, err = st.SealUnless(r.jobID, r.ckptTag(), fenced)
	}
	if err != nil {
		log.Warn("seal checkpoint; the job's staging directory is discarded", "err", err)
	}
	// A fresh staging directory for the next checkpoint, the user's;
	// after a refused seal this also clears what the job left. Never in
	// another job's directory (the job's ID reused after a controller
	// reset), nor making one that is gone.
	owner := -1
	if os.Geteuid() == 0 {
		owner = int(r.asg.Job.UID)
	}
	if _, serr := st.Restage(r.jobID, r.ckptTag(), owner, int(r.asg.Job.GID)); serr != nil {
		log.Warn("re-create checkpoint staging directory", "err", serr)
	}
	if err != nil {
		return err
	}
	ev := api.AllocEvent{Node: r.d.cfg.Name, AllocID: r.allocID, JobID: r.jobID, Kind: api.EventCheckpointed,
		Time: spec.NewTime(ck.Created), CkptSeq: ck.Seq, CkptBytes: ck.Bytes}
	if err := r.d.record(ctx, ev); err != nil {
		// The checkpoint is sealed and will be offered for restart; only
		// the controller's record of it is missing.
		log.Error("record checkpoint in outbox", "seq", ck.Seq, "err", err)
	}
	log.Info("checkpoint sealed", "seq", ck.Seq, "bytes", ck.Bytes, "files", ck.Files, "dir", ck.Dir)
	return nil
}
