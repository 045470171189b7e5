package node

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// stopCleanupTime bounds the clean-stop pass beyond the kill grace.
const stopCleanupTime = 30 * time.Second

// stopReason is the reason of jobs ended by StopJobsOnStop.
const stopReason = "stopped with its node agent (gpud standalone --stop-jobs)"

// stopCleanly runs when Run ends because its context did, after the
// runners returned. A task that exited meanwhile has nobody to report and
// delete it, and its containerd-shim would stay behind, holding the exit,
// until an agent of this node starts again (which, for a throwaway
// standalone state dir, is never). So its exit is recorded in the outbox
// (sent at the next start, exactly as recovery would) and the container
// deleted, which ends its shim. With StopJobsOnStop the running jobs are
// stopped first (SIGTERM, KillGrace, SIGKILL) and recorded NODE_FAIL.
// Containers left running otherwise keep their shims: they hold the jobs.
func (a *Agent) stopCleanly() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.KillGrace+stopCleanupTime)
	defer cancel()
	infos, err := a.rt.List(ctx)
	if err != nil {
		a.log.Warn("list containers at stop; exited ones stay until the next start", "err", err)
		return
	}
	type mine struct {
		ti      runtime.TaskInfo
		allocID string
		job     spec.JobID
	}
	var exited, running []mine
	for _, ti := range infos {
		if ti.Labels[LabelNode] != a.cfg.Name {
			continue // another agent's (standalone mode shares containerd)
		}
		job, err := strconv.ParseUint(ti.Labels[LabelJob], 10, 64)
		m := mine{ti: ti, allocID: ti.Labels[LabelAlloc], job: spec.JobID(job)}
		switch {
		case m.allocID == "" || err != nil:
		case ti.Status == runtime.StatusExited:
			exited = append(exited, m)
		case a.cfg.StopJobsOnStop:
			// Running, or a start still in flight when the runner
			// returned (created, unknown): ended the same way.
			if err := a.rt.Signal(ctx, ti.ID, syscall.SIGTERM); err != nil {
				a.log.Warn("signal job at stop", "container", ti.ID, "err", err)
			}
			running = append(running, m)
		}
	}
	a.log.Info("clean stop: ending what no runner watches", "containers", len(infos), "exited", len(exited), "stopping", len(running))
	// grace closes when the kill grace is over, for every waiter at once.
	grace := make(chan struct{})
	if len(running) > 0 {
		go func() {
			select {
			case <-a.clock.After(a.cfg.KillGrace):
				close(grace)
			case <-ctx.Done():
			}
		}()
	}
	for _, m := range running {
		log := a.log.With("job_id", m.job, "alloc_id", m.allocID, "container", m.ti.ID)
		st, err := a.waitOrKill(ctx, m.ti.ID, grace)
		if errors.Is(err, runtime.ErrNotFound) {
			// A container whose task was never created: nothing ran,
			// and, as recovery does, it is removed without an event.
			a.cleanup(ctx, log, m.ti.ID)
			continue
		}
		if err != nil {
			log.Warn("stop job at agent stop; it stays for the next start", "err", err)
			continue
		}
		if err := a.record(ctx, a.exitEvent(m.allocID, m.job, spec.StateNodeFail, stopReason, st)); err != nil {
			log.Error("record the exit of a job stopped with the agent; the container stays for the next start", "err", err)
			continue
		}
		a.cleanup(ctx, log, m.ti.ID)
	}
	for _, m := range exited {
		log := a.log.With("job_id", m.job, "alloc_id", m.allocID, "container", m.ti.ID)
		rec, err := a.ob.alloc(ctx, m.allocID)
		if err == nil {
			err = a.recordExit(ctx, log, m.ti, m.allocID, m.job, rec)
		}
		if err != nil {
			log.Error("record an exit at stop; the container stays for the next start", "err", err)
			continue
		}
		a.cleanup(ctx, log, m.ti.ID)
	}
}

// waitOrKill waits for container id's task to exit; once grace fires it
// is sent SIGKILL.
func (a *Agent) waitOrKill(ctx context.Context, id string, grace <-chan struct{}) (runtime.ExitStatus, error) {
	type result struct {
		st  runtime.ExitStatus
		err error
	}
	done := make(chan result, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		st, err := a.rt.Wait(wctx, id)
		done <- result{st, err}
	}()
	select {
	case r := <-done:
		return r.st, r.err
	case <-grace:
		if err := a.rt.Signal(ctx, id, syscall.SIGKILL); err != nil {
			a.log.Warn("SIGKILL job at stop", "container", id, "err", err)
		}
	}
	r := <-done
	return r.st, r.err
}
