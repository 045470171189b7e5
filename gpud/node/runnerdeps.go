package node

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/checkpoint"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/safefs"
)

// runnerDeps is everything a runner uses of its node: the agent's
// configuration, runtime, outbox, checkpoint store, clock and logger, and
// the few questions only the agent can answer (the funcs below, which it
// fills with its own methods). The agent embeds it and hands its runners
// a pointer to it: a runner reaches no other part of the agent. Fields
// are set by New, except ob, ckpt and jobs, set by Run before any runner
// starts; none changes afterwards (cfg.Inventory, which refreshMIGLayout
// updates under Agent.invMu, is no runner's business).
type runnerDeps struct {
	cfg   Config
	rt    runtime.Runtime
	ob    *outbox
	ckpt  *checkpoint.Store
	clock Clock
	log   *slog.Logger        // the node's (with node=<name>)
	gpus  map[string]spec.GPU // inventory by UUID
	nics  map[string]spec.NIC // RDMA NICs by name
	// pins places GPU jobs on cores of their GPUs' NUMA node; nil when
	// the topology is unknown.
	pins *cpuPins
	// steps is the node's step service (gpud/node/step): it makes each
	// runner's step.Alloc and finds the peers of other nodes.
	steps *step.Node
	// kick wakes the outbox sender; buffered so a send never blocks.
	kick chan struct{}
	// images is the node's image pulls and cache inventory, for its
	// heartbeats (inventory.go).
	images *imageState
	// pool holds the containers prepared ahead of jobs (prepared.go);
	// nil when off.
	pool *preparedPool
	// backoffMin and backoffMax bound retry pacing (newBackoff).
	backoffMin, backoffMax time.Duration
	// ckptMu serialises, per job (striped by job ID), what makes, joins
	// or claims a job's checkpoint directory with what removes it
	// (checkpoint.go, ckptLock), so that no attempt of a job prepares or
	// mounts it while another attempt's end has it moved aside.
	ckptMu [16]sync.Mutex
	// otherAttempt reports whether the agent has a runner, not ended,
	// for another allocation of r's job (a requeued attempt placed back
	// on this node while the old one stops); nil: none.
	otherAttempt func(r *runner) bool

	// The agent's answers (its methods of the same names). mayCheckpoint:
	// self-fencing (fence.go). acquireDevices, releaseDevices and
	// refreshMIGLayout: the node's MIG layout (mig.go).
	mayCheckpoint    func(r *runner) error
	acquireDevices   func(ctx context.Context, log *slog.Logger, self spec.NodeAlloc) ([]migDevice, error)
	releaseDevices   func(ctx context.Context, log *slog.Logger, self spec.NodeAlloc) (stale bool)
	refreshMIGLayout func(ctx context.Context, log *slog.Logger)
	// gateGPUs is the start gate (health.go): the drain-worthy findings
	// of a fresh reading of the GPUs (UUIDs), each now a latched fault
	// reported to the controller; none when the node has no health model.
	gateGPUs func(ctx context.Context, uuids []string) []health.Finding
	// holdGPUs marks GPUs held by a job until release: no background
	// diagnostic runs on them (one running ends first); nil: none run.
	holdGPUs func(uuids []string) (release func())

	// jobs is the node's jobs/ directory, open (openJobs); set by Run
	// before any runner starts, closed after the last one returned.
	jobs *safefs.Dir

	// hiddenMemo is the last hidden list and what its paths were when it
	// was made (hidden).
	hiddenMemo atomic.Pointer[hiddenMemo]
}

// backoff paces retries: exponential between the agent's bounds, with
// jitter so a restarted controller is not hit by every node at once.
type backoff struct {
	min, max, cur time.Duration
}

func (d *runnerDeps) newBackoff() *backoff {
	return &backoff{min: d.backoffMin, max: d.backoffMax}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur + rand.N(b.cur/5+1)
}

func (b *backoff) reset() { b.cur = 0 }

// exitEvent builds an exited event.
func (d *runnerDeps) exitEvent(allocID string, job spec.JobID, state spec.JobState, reason string, st runtime.ExitStatus) api.AllocEvent {
	t := st.ExitedAt
	if t.IsZero() {
		t = d.clock.Now()
	}
	return api.AllocEvent{
		Node: d.cfg.Name, AllocID: allocID, JobID: job, Kind: api.EventExited, Time: spec.NewTime(t),
		State: state, ExitCode: st.Code, Signal: int(st.Signal), Reason: reason,
	}
}

// record commits ev to the outbox and wakes the sender. The commit does
// not honour ctx cancellation: an event observed is an event kept.
func (d *runnerDeps) record(ctx context.Context, ev api.AllocEvent) error {
	seq, err := d.ob.record(context.WithoutCancel(ctx), ev)
	if err != nil {
		return err
	}
	// Its arguments are made only for a log that takes Info lines.
	if d.log.Enabled(ctx, slog.LevelInfo) {
		d.log.Info("alloc "+ev.Kind, "seq", seq, "job_id", ev.JobID, "alloc_id", ev.AllocID, "state", ev.State,
			"exit_code", ev.ExitCode, "reason", ev.Reason)
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
	return nil
}

// hidden are the directories of daemon state kept out of jobs' view: the
// agent's state and checkpoint roots and Config.HidePaths.
//
// The list is made again only when one of those paths is no longer what
// it was when the last list was made (another file or directory there,
// or one gone or come): each is stat'ed per call, as hiddenPaths does,
// but the symlink resolution hiddenPaths does to drop a path below
// another (an lstat per component of each pair) is done once per change.
func (d *runnerDeps) hidden() []string {
	cands := append([]string{d.cfg.StateDir, d.cfg.CheckpointRoot}, d.cfg.HidePaths...)
	ids := make([]pathID, len(cands))
	for i, p := range cands {
		ids[i] = statPathID(p)
	}
	if m := d.hiddenMemo.Load(); m != nil && slices.Equal(m.ids, ids) {
		return m.list
	}
	// ids were taken before the list is made: a path that changes in
	// between makes the next call's ids differ, so it is made again.
	list := slices.Clip(hiddenPaths(cands))
	d.hiddenMemo.Store(&hiddenMemo{ids: ids, list: list})
	return list
}

// hiddenMemo is a hidden list and the identities of the paths it was
// made from.
type hiddenMemo struct {
	ids  []pathID
	list []string
}

// pathID is what stat says a path is: its file (device and inode) and
// type; the zero pathID when stat fails.
type pathID struct {
	dev, ino uint64
	mode     uint32
	ok       bool
}

func statPathID(p string) pathID {
	var st unix.Stat_t
	if p == "" || unix.Stat(p, &st) != nil {
		return pathID{}
	}
	return pathID{dev: st.Dev, ino: st.Ino, mode: st.Mode & unix.S_IFMT, ok: true}
}

// openJobs returns the node's jobs/ directory open: the agent's, which Run
// opens once for its whole run (done does nothing), or, where there is
// none (a runnerDeps made without Run), one opened now that done closes.
func (d *runnerDeps) openJobs() (jobs *safefs.Dir, done func(), err error) {
	if d.jobs != nil {
		return d.jobs, func() {}, nil
	}
	jobs, err = safefs.OpenDir(d.cfg.jobsDir())
	if err != nil {
		return nil, nil, fmt.Errorf("open job directories: %w", err)
	}
	return jobs, func() { jobs.Close() }, nil
}

// removeJobDir removes job directory id (jobs/<id>, which its user owns)
// without following anything the user put there. A failure is logged.
func (d *runnerDeps) removeJobDir(log *slog.Logger, id string) {
	jobs, done, err := d.openJobs()
	if err == nil {
		err = jobs.RemoveAll(id)
		done()
	}
	if err != nil {
		log.Warn("remove job directory; the next agent start retries", "dir", id, "err", err)
	}
}

// removeMadeJobDir removes job directory id, which makeJobDir made, if
// it holds only what a start makes (removeStartEntries; its step socket
// unless sockMoved), and reports whether it is gone.
func (d *runnerDeps) removeMadeJobDir(id string, sockMoved bool) bool {
	jobs, done, err := d.openJobs()
	if err != nil {
		return false
	}
	defer done()
	jd, err := jobs.Sub(id)
	return err == nil && removeStartEntries(jd, sockMoved)
}

// cleanup deletes container id and its job directory. A failure is only
// logged: the exit is already recorded, so the next recovery retries.
func (d *runnerDeps) cleanup(ctx context.Context, log *slog.Logger, id string) {
	if d.deleteContainer(ctx, log, id) {
		d.removeJobDir(log, id)
	}
}

// deleteContainer deletes container id and reports whether it is gone;
// a failure is only logged (see cleanup).
func (d *runnerDeps) deleteContainer(ctx context.Context, log *slog.Logger, id string) bool {
	if err := d.rt.Delete(ctx, id); err != nil {
		if ctx.Err() == nil {
			log.Warn("delete container; will retry at next agent start", "err", err)
		}
		return false
	}
	return true
}
