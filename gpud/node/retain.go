package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// A job directory in the checkpoint root that holds a sealed checkpoint
// stays after the job's part on the node ends (removeUnsealedCheckpoints):
// the node cannot tell a job that ended for good from one that will be
// requeued and restart from it; so does one of a part stopped while its
// job may run again (mayRunAgain), and a rank other than 0's on a
// node-local root. So every CheckpointReportEvery the agent
// lists those that no runner on the node uses (checkpoint.Store.Sealed,
// oldest first, at most api.MaxSealed) in its next heartbeat; the
// controller names back those no job will restart from
// (HeartbeatResponse.Ended), and the agent removes each once its last
// change (the job's end on the node, Touch) is older than
// CheckpointRetention. An older controller, whose answers do not say
// it takes the list (HeartbeatResponse.Sealed), is never sent one:
// nothing is removed. Scans and removals run beside the heartbeat loop, one at a
// time, never delaying a heartbeat.

// retainer is the agent's state of that exchange.
type retainer struct {
	// takes: the controller's last heartbeat answer said it takes the
	// list (an older controller refuses a field it does not know).
	takes atomic.Bool
	busy  atomic.Bool // a scan or removal runs
	mu    sync.Mutex
	next  time.Time      // when to scan next
	ready []api.CkptDir  // the last scan's list, for the next heartbeat
	wg    sync.WaitGroup // the running scan or removal (tests wait)
}

// sealedReport returns the list for this heartbeat (nil: none ready) and
// starts a scan when one is due.
func (a *Agent) sealedReport() []api.CkptDir {
	rt := &a.retain
	if !rt.takes.Load() {
		return nil
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.ready != nil {
		l := rt.ready
		rt.ready = nil
		return l
	}
	now := a.clock.Now()
	if now.Before(rt.next) || !rt.busy.CompareAndSwap(false, true) {
		return nil
	}
	rt.next = now.Add(a.cfg.CheckpointReportEvery)
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		defer rt.busy.Store(false)
		dirs, err := a.ckpt.Sealed(api.MaxSealed, a.jobRunsHere)
		if err != nil {
			a.log.Warn("list checkpoint dirs for retention", "err", err)
			return
		}
		if len(dirs) == 0 {
			return
		}
		l := make([]api.CkptDir, len(dirs))
		for i, d := range dirs {
			l[i] = api.CkptDir{Job: d.ID, Tag: d.Tag}
		}
		rt.mu.Lock()
		rt.ready = l
		rt.mu.Unlock()
	}()
	return nil
}

// retainEnded notes whether the controller takes the list (takes) and
// removes, beside the heartbeat loop, the directories the
// controller named (HeartbeatResponse.Ended) that are older than the
// retention.
func (a *Agent) retainEnded(ctx context.Context, takes bool, ended []api.CkptDir) {
	rt := &a.retain
	rt.takes.Store(takes)
	if len(ended) == 0 || !rt.busy.CompareAndSwap(false, true) {
		return // the next report names them again
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		defer rt.busy.Store(false)
		for _, d := range ended {
			if ctx.Err() != nil {
				return
			}
			a.removeEnded(d)
		}
	}()
}

// removeEnded removes job directory d if it is old enough and no runner
// of its job is on the node, under the job's ckptLock, so an attempt's
// prepare (which takes it too) never sees it vanish halfway: it runs
// before (then a runner exists and the directory stays) or after (then
// it makes a fresh directory).
func (a *Agent) removeEnded(d api.CkptDir) {
	mu := a.ckptLock(d.Job)
	mu.Lock()
	defer mu.Unlock()
	if a.jobRunsHere(d.Job) {
		return
	}
	before := a.clock.Now()
	if a.cfg.CheckpointRetention > 0 {
		before = before.Add(-a.cfg.CheckpointRetention)
	}
	removed, err := a.ckpt.RemoveSealed(d.Job, d.Tag, before)
	switch {
	case err != nil:
		a.log.Warn("remove checkpoints of an ended job", "job_id", uint64(d.Job), "dir", a.ckpt.JobDir(d.Job), "err", err)
	case removed:
		a.log.Info("checkpoints of an ended job removed after the retention", "job_id", uint64(d.Job), "dir", a.ckpt.JobDir(d.Job),
			"retention", a.cfg.CheckpointRetention)
	}
}

// jobRunsHere reports whether the agent has a runner, not ended, of job
// id.
func (a *Agent) jobRunsHere(id spec.JobID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.runners {
		if r.jobID == id && !r.ended.Load() {
			return true
		}
	}
	return false
}
