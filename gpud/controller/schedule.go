package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// schedState coalesces scheduling: events set dirty; a cycle runs when the
// owner is next free, but no sooner than twice the last cycle's duration
// after it, so a huge queue under a submission storm spends at most about
// a third of the owner's time scheduling.
type schedState struct {
	dirty        bool
	lastEnd      time.Time // monotonic, real time: pacing, not job time
	lastDur      time.Duration
	lastPeriodic time.Time // controller clock
	snapID       uint64
}

const maxCycleGap = time.Second

// cycleDue returns 0 when a cycle should run now, how long to wait for
// one, or -1 when none is needed.
func (c *Controller) cycleDue() time.Duration {
	if !c.sched.dirty {
		return -1
	}
	gap := min(2*c.sched.lastDur, maxCycleGap)
	if wait := gap - time.Since(c.sched.lastEnd); wait > 0 {
		return wait
	}
	return 0
}

// cycle runs one scheduling cycle and applies its plan: persist the
// starts first, then bump the nodes' generations (commit does both in
// that order).
func (c *Controller) cycle(ctx context.Context) {
	start := time.Now()
	c.sched.dirty = false
	tx := newTxn()
	err := c.safely(fmt.Sprintf("scheduling cycle (snapshot %d)", c.sched.snapID+1), func() error {
		snap := c.snapshot()
		now := c.now()
		plan := sched.Schedule(snap, now, sched.Config{})
		c.apply(tx, plan, now)
		return nil
	})
	if err == nil {
		_ = c.commit(ctx, tx) // logged by commit; dirty stays for a retry
	}
	c.sched.lastDur = time.Since(start)
	c.sched.lastEnd = time.Now()
	c.obs.CycleDone(c.sched.lastDur)
}

// snapshot copies the state the scheduler needs.
func (c *Controller) snapshot() *sched.Snapshot {
	c.sched.snapID++
	snap := &sched.Snapshot{ID: c.sched.snapID, Nodes: make([]sched.Node, 0, len(c.st.nodes)), Jobs: make([]sched.Job, 0, len(c.st.pending))}
	for _, name := range sortedKeys(c.st.nodes) {
		n := c.st.nodes[name]
		u := c.st.usage(n)
		sn := sched.Node{
			Name:       name,
			State:      n.displayState(u),
			Features:   n.inv.Features,
			Partitions: c.cfg.partitionsOf(name),
			CPUs:       n.inv.CPUs,
			FreeCPUs:   n.inv.CPUs - u.cpus,
			MemMiB:     n.inv.MemMiB,
			FreeMemMiB: n.inv.MemMiB - u.mem,
			Allocs:     len(u.jobs),
		}
		for _, g := range n.inv.GPUs {
			sn.GPUs = append(sn.GPUs, sched.GPU{UUID: g.UUID, Model: g.Model, Free: !u.gpus[g.UUID], MIGEnabled: g.MIGEnabled,
				FreeFraction: 1, Unhealthy: g.Health != "" && g.Health != "ok"})
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	for _, rec := range c.st.pending {
		snap.Jobs = append(snap.Jobs, c.schedJob(&rec.job))
	}
	return snap
}

func (c *Controller) schedJob(j *spec.Job) sched.Job {
	sj := sched.Job{ID: j.ID, Partition: j.Partition, Priority: j.Priority, SubmitTime: j.SubmitTime.Time,
		BeginTime: j.BeginTime.Time, Held: j.Hold, Req: j.Resources}
	if p := c.cfg.partition(j.Partition); p == nil || p.State == PartitionDown || p.State == PartitionInactive {
		sj.PartitionDown = true
	}
	return sj
}

// apply turns a plan into state: starts become RUNNING jobs with a new
// alloc (id "<job>.<attempt>"), pending reasons are updated in memory.
func (c *Controller) apply(tx *txn, plan sched.Plan, now time.Time) {
	for _, s := range plan.Starts {
		rec := c.st.pending[s.JobID]
		if rec == nil {
			continue
		}
		j := &rec.job
		attempt := j.Attempt + 1
		a := &spec.Alloc{ID: fmt.Sprintf("%d.%d", j.ID, attempt), JobID: j.ID, Attempt: attempt, StartTime: spec.NewTime(now)}
		var names, gpus []string
		for _, p := range s.Nodes {
			if n := c.st.nodes[p.Node]; n != nil {
				p.Addr = n.inv.Addr
				n.allocs[a.ID] = j.ID
			}
			a.Nodes = append(a.Nodes, p)
			names = append(names, p.Node)
			gpus = append(gpus, p.GPUs...)
			tx.bump[p.Node] = true
		}
		j.Attempt = attempt
		j.Alloc = a
		j.State, j.Reason = spec.StateRunning, spec.ReasonNone
		j.StopState, j.StopReason = "", ""
		j.StartTime, j.EndTime = spec.NewTime(now), spec.Time{}
		j.Nodes, j.GPUs = names, gpus
		delete(c.st.pending, j.ID)
		tx.saveJob(rec)
		c.obs.JobStarted(j.Partition)
		c.log.Info("job started", "job_id", j.ID, "alloc_id", a.ID, "nodes", names)
	}
	for _, p := range plan.Pending {
		rec := c.st.pending[p.JobID]
		if rec == nil || rec.job.Reason == p.Reason {
			continue
		}
		// Reasons are shown, not persisted: a restart recomputes them.
		rec.job.Reason = p.Reason
		tx.touched[p.JobID] = rec
	}
}
