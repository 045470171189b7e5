package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// The runner's side of its job's steps; the steps themselves are package
// gpud/node/step, which sees the agent only as its step.Host.

// stepHost is the agent as its steps' Host.
type stepHost struct{ a *Agent }

// Alloc is the steps of the agent's runner of allocation id.
func (h stepHost) Alloc(id string) *step.Alloc {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	if r := h.a.runners[id]; r != nil {
		return r.steps
	}
	return nil
}

func (h stepHost) Record(ctx context.Context, ev api.AllocEvent) error { return h.a.record(ctx, ev) }

func (h stepHost) ReserveIDs(ctx context.Context, allocID string, n int) (int, error) {
	return h.a.ob.reserveStepIDs(ctx, allocID, n)
}

// Fail ends the node's part of allocID with NODE_FAIL: the controller
// requeues the job if it may, else it ends NODE_FAIL with reason.
func (h stepHost) Fail(allocID, reason string) {
	h.a.mu.Lock()
	r := h.a.runners[allocID]
	h.a.mu.Unlock()
	if r != nil {
		r.stop(spec.StateNodeFail, reason)
	}
}

// serveSteps makes the job's steps Ready (its container's environment
// cfgEnv) and listens on its step socket until ctx ends or run returns
// (r.stopServe, which run defers), or until the returned func is called.
func (r *runner) serveSteps(ctx context.Context, env []string) (stop func()) {
	r.steps.Ready(r.asg, r.self, r.id, r.jobDir(), env, r.log())
	stop = r.steps.Serve(ctx, nil)
	r.stopServe = stop
	return stop
}

// waitGang holds a multi-node batch job's script back until every node
// of its allocation holds its part (gpud/node/step's gang start). It
// reports whether the script may start; otherwise the runner is finished
// (stopped meanwhile: as asked; a node that never started its part:
// NODE_FAIL, which the controller requeues if it may).
func (r *runner) waitGang(ctx context.Context, log *slog.Logger) bool {
	if r.self.Rank != 0 || r.asg.Job.Interactive || len(r.asg.Alloc.Nodes) < 2 {
		return true
	}
	err := r.d.steps.WaitGang(ctx, r.allocID, r.asg.Alloc.Nodes, r.stopCh)
	switch {
	case err == nil:
		return true
	case ctx.Err() != nil:
		return false // shutdown: the next agent starts it again
	}
	state, why := r.ending()
	if state == "" {
		state, why = spec.StateNodeFail, fmt.Sprintf("the batch script of job %d did not start: %v", r.jobID, err)
		log.Error("a node of the allocation did not start its part; the job's script never ran", "err", err)
	}
	r.finish(ctx, log, runtime.ExitStatus{}, state, why)
	return false
}

// resumeSteps serves steps again in a job this agent re-adopted (an
// agent restart), once it knows the job's assignment: it rebuilds the
// node's part of the container's environment and listens on the job's
// step socket again. Steps that were running when the old agent died are
// re-adopted first: their srun reattaches.
func (r *runner) resumeSteps(ctx context.Context, log *slog.Logger) {
	groups, _ := supplementaryGroups(r.asg.Job.UID, r.asg.Job.GID)
	cfg, err := buildTask(&taskInput{
		Asg: r.asg, Self: r.self, NodeName: r.d.cfg.Name, Hostname: r.d.cfg.Hostname, SelfAddr: r.d.cfg.Addr,
		DefaultImage: r.d.cfg.DefaultImage, GPUs: r.d.gpus, NICs: r.d.nics, MIG: r.mig, ContainerID: r.id, JobDir: r.jobDir(),
		ScriptPath: filepath.Join(r.jobDir(), "script"), GroupIDs: groups, Hide: r.d.hidden(), Show: r.d.cfg.ShowPaths,
		ToolsDir: r.d.cfg.ToolsDir,
	})
	if err != nil {
		log.Warn("re-adopted job: srun will not work in it", "err", err)
		return
	}
	r.steps.Resume(ctx, r.asg, r.self, r.id, r.jobDir(), cfg.Env, r.log())
	r.steps.Serve(ctx, r.done)
	log.Info("re-adopted job serves steps again")
}

// signalTarget delivers a job signal (scancel --signal) to its target:
// the step tasks running on this node (spec.SignalSteps), the batch
// shell (spec.SignalBatch, on the batch node only), or every process of
// the container ("" or spec.SignalFull).
func (r *runner) signalTarget(ctx context.Context, target string, sig syscall.Signal) error {
	switch target {
	case spec.SignalSteps:
		if !r.steps.SignalTasks(sig) {
			r.log().Info("signal for the job's steps: no step task runs on this node", "signal", signame.Full(sig))
		}
		return nil
	case spec.SignalBatch:
		return r.signalBatch(ctx, sig)
	default:
		return r.d.rt.Signal(ctx, r.id, sig)
	}
}

// batchShellScript signals the batch script's process in the container
// (its PID namespace), $1 the signal number: the container's init is the
// /bin/sh -c wrapper (PID 1, which stays to redirect the output), and the
// script is the first process it started, the oldest of its children
// (/proc/1/task/1/children lists them oldest first; processes exec'd into
// the container, step tasks and this one, are not its children).
const batchShellScript = `set -- "$1" $(cat /proc/1/task/1/children 2>/dev/null)
[ -n "$2" ] || { echo "the job's batch shell is not running (PID 1 has no child)" >&2; exit 1; }
kill -"$1" "$2"`

// signalBatch sends sig to the batch shell alone (scancel -b,
// --signal=B:), not to its children or the steps: as Slurm, a shell that
// traps it runs its handler once the command it waits for returns. The
// signal is sent from inside the container (its PID namespace, the job's
// user) by a process exec'd there; holder nodes have no batch shell.
func (r *runner) signalBatch(ctx context.Context, sig syscall.Signal) error {
	if r.asg != nil && r.self.Rank != 0 {
		return nil // a holder node: the batch shell runs on the first node
	}
	ex, ok := r.d.rt.(runtime.Execer)
	if !ok {
		return errors.New("this node's runtime cannot start a process in a running container, so it cannot signal the batch shell alone")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchSignalTimeout)
	defer cancel()
	var out bytes.Buffer
	p, err := ex.Exec(ctx, r.id, runtime.ExecConfig{
		ID:     fmt.Sprintf("signal-batch-%d", r.d.clock.Now().UnixNano()),
		Args:   []string{"/bin/sh", "-c", batchShellScript, "gpud-signal-batch", strconv.Itoa(int(sig))},
		Stdout: &out, Stderr: &out,
	})
	if err != nil {
		return fmt.Errorf("start a process to signal the batch shell: %w", err)
	}
	st, err := p.Wait(ctx)
	_ = p.Delete(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("signal the batch shell: %w", err)
	}
	if st.Code != 0 || st.Signal != 0 {
		return fmt.Errorf("signal the batch shell: exit %d: %s", st.Code, strings.TrimSpace(out.String()))
	}
	return nil
}

// batchSignalTimeout bounds the exec that signals the batch shell.
const batchSignalTimeout = 10 * time.Second
