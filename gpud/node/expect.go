package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Containers prepared for expected jobs (node.toml prepared_containers,
// issue 31): each heartbeat answer lists the pending jobs the scheduler
// expects to start on this node next (api.HeartbeatResponse.Prepare: its
// backfill reservations — the head of the queue once running jobs end,
// the next tasks of an array), with the job as it would be assigned and
// its planned part here. The agent computes the container each one's
// start would make (the runner's own taskInput and buildTask, so shapeOf
// is the start's) and prepares one container for it within prepared_max.
// The job's start takes it when its shape is still the same (the planned
// GPUs, cores and mounts are those it got); otherwise the job starts cold
// and the container is destroyed. A container is destroyed when an answer
// no longer lists its job (after withdrawGrace: the job may have just been
// placed here, its assignment still on the way), when the controller has
// not named the job for prepared_max_age (heartbeats stopped), when the
// job started here without it, and at the agent's stop. Isolation is the
// pool's: a container serves one job of its own user, and only the
// scheduler's reservations are listed, which it makes only on nodes the job
// may use.

// withdrawGrace is how long a container of an expectation the controller
// no longer lists is kept.
const withdrawGrace = 2 * time.Second

// expectation is one expected job's entry in the pool.
type expectation struct {
	job    spec.JobID
	shape  string
	seen   time.Time // when an answer last listed it
	gone   time.Time // when an answer first no longer listed it (zero: listed)
	making bool
	// made is closed when a preparation under way ends (nil: none).
	made chan struct{}
	ctr  *preparedCtr // its prepared container (nil: none yet, or taken)
}

// madeWait bounds how long a job's start waits for the container being
// prepared for it: most of a create is done by then.
const madeWait = 2 * time.Second

// awaitMade waits (up to madeWait) for the container of shape being
// prepared for job, if one is; it reports whether it waited for one.
func (p *preparedPool) awaitMade(ctx context.Context, job spec.JobID, shape string) bool {
	p.mu.Lock()
	x := p.expected[job]
	var ch chan struct{}
	if x != nil && x.making && x.shape == shape {
		ch = x.made
	}
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
	case <-p.d.clock.After(madeWait):
	case <-ctx.Done():
	}
	return true
}

// holds says whether c is x's prepared container.
func (x *expectation) holds(c *preparedCtr) bool { return x != nil && x.ctr == c }

// expectIn is an expected job's container to prepare.
type expectIn struct {
	job   spec.JobID
	tmpl  runtime.TaskConfig // with the shape's placeholder directories
	shape string
}

// prepareExpected hands the pool the jobs of a heartbeat answer (all of
// them: a job no longer listed is withdrawn).
func (a *Agent) prepareExpected(ctx context.Context, es []api.Expected) {
	pool := a.pool
	if pool == nil {
		return
	}
	var in []expectIn
	for i := range es {
		if x, ok := a.expectedTask(&es[i]); ok {
			in = append(in, x)
		}
	}
	pool.expect(ctx, in)
}

// expectedTask is the container e's start would make here, built as the
// runner builds it, or false when the job would not start in a prepared
// container or the node cannot know its container before the start.
func (a *Agent) expectedTask(e *api.Expected) (expectIn, bool) {
	d := &a.runnerDeps
	if e.Node.Node != d.cfg.Name || e.Job.ID == 0 {
		return expectIn{}, false
	}
	asg := api.Assignment{Job: e.Job, Alloc: spec.Alloc{Nodes: []spec.NodeAlloc{e.Node}}}
	r := &runner{d: d, jobID: e.Job.ID, asg: &asg, self: e.Node}
	if img := (&taskInput{Asg: &asg, DefaultImage: d.cfg.DefaultImage}).image(); img != runtime.ImageHost {
		// An image's container names the reference and holds the
		// content its pull stores: known once the image was prefetched
		// for the job's user (prefetch.go), which the job's own pull
		// then resolves anew (the same digest, or it starts cold).
		res, ok := a.pf.prefetched(e.Job.Image, e.Job.UID)
		if !ok {
			return expectIn{}, false
		}
		r.pulled = res
	}
	if numa := gpuNUMA(e.Node, d.gpus); len(numa) > 0 {
		// As acquire will pick them once the jobs on its GPUs ended.
		r.cpus, r.mems = d.pins.peek(e.Node.CPUs, numa, a.allocsOn(e.Node.GPUs))
	}
	in, err := r.taskInput(shapeJobDir, shapeCkptDir, "")
	if err != nil {
		return expectIn{}, false
	}
	if _, err := os.Lstat(d.ckpt.JobDir(e.Job.ID)); !errors.Is(err, fs.ErrNotExist) {
		return expectIn{}, false // a checkpoint directory: it may restart from it
	}
	tmpl, err := buildTask(&in)
	if err != nil || !poolable(&in, tmpl) {
		return expectIn{}, false
	}
	return expectIn{job: e.Job.ID, tmpl: tmpl, shape: shapeKey(tmpl, "", "", r.pulled.Digest)}, true
}

// allocsOn returns the allocations running on any of gpus (the controller's
// last assignments answer says whose GPUs are whose).
func (a *Agent) allocsOn(gpus []string) map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]bool{}
	for id, o := range a.owners {
		if slices.ContainsFunc(o.GPUs, func(g string) bool { return slices.Contains(gpus, g) }) {
			out[id] = true
		}
	}
	return out
}

// expect takes a heartbeat answer's expected jobs: new ones get a
// container prepared (within prepared_max), ones planned differently now
// a new one, unlisted ones are withdrawn.
func (p *preparedPool) expect(ctx context.Context, es []expectIn) {
	now := p.d.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	listed := make(map[spec.JobID]bool, len(es))
	for _, e := range es {
		if _, ok := p.started[e.job]; ok {
			continue // the answer was made before its start
		}
		listed[e.job] = true
		x := p.expected[e.job]
		if x != nil && x.shape != e.shape {
			// Planned on other GPUs or cores now: the container made
			// for the old plan goes at the next sweep.
			delete(p.expected, e.job)
			x = nil
		}
		if x == nil {
			x = &expectation{job: e.job, shape: e.shape}
			p.expected[e.job] = x
		}
		x.seen, x.gone = now, time.Time{}
		if x.ctr == nil && !x.making && p.total < p.max {
			p.launchLocked(ctx, e.tmpl, e.shape, x)
		}
	}
	for job, x := range p.expected {
		if !listed[job] && x.gone.IsZero() {
			x.gone = now
		}
	}
}

// noteStarted records that job starts here now: a list made before the
// start prepares nothing more for it, and a container prepared for it
// that its start does not take (started cold: planned differently) goes
// after withdrawGrace.
func (p *preparedPool) noteStarted(job spec.JobID) {
	now := p.d.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started[job] = now
	if x := p.expected[job]; x != nil && x.gone.IsZero() {
		x.gone = now
	}
}

// pruneExpected drops the expectations withdrawn more than withdrawGrace
// ago or not listed for maxAge (their containers then go, see expire),
// and forgets starts older than a minute or maxAge. p.mu is held.
func (p *preparedPool) pruneExpected(now time.Time) {
	for job, x := range p.expected {
		if !x.gone.IsZero() && now.Sub(x.gone) >= withdrawGrace || now.Sub(x.seen) >= p.maxAge {
			delete(p.expected, job)
		}
	}
	keep := max(p.maxAge, time.Minute)
	for job, at := range p.started {
		if now.Sub(at) >= keep {
			delete(p.started, job)
		}
	}
}
