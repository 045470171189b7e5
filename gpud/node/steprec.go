package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Steps as records (DESIGN §7 "Allocations and steps"): numbered per job
// by the agent of the allocation's first node, reported to the
// controller through the outbox (start and end, so a controller restart
// loses none), cancelled or signalled one at a time (gpuq cancel N.S),
// and the targets of a job's signals (scancel [-b|-f] --signal,
// --signal=[B:]SIG@T): the steps' tasks, the batch shell, or all.

// stepRegistry is a runner's steps: those it serves (srun asked this
// node's agent) and the step tasks running in its container, whoever
// serves their step.
type stepRegistry struct {
	mu     sync.Mutex
	served map[int]*servedStep
	parts  map[*stepPart]bool
	// sigSeq is the newest step signal request acted on.
	sigSeq int
	// ledger books the allocation's steps' resources (stepres.go); the
	// first node's runner keeps it.
	ledger *stepLedger
	// nextID and idEnd are the step numbers reserved in the outbox and
	// not yet given (allocStepID, the first node's runner); idMu orders
	// reservations.
	idMu          sync.Mutex
	nextID, idEnd int
}

// servedStep is a running step this node serves.
type servedStep struct {
	rec       spec.Step
	signalAll func(syscall.Signal)
	mu        sync.Mutex
	cancelled string // who cancelled it, when someone did
	// recorded is closed once its start is in the outbox, so its end is
	// recorded after it.
	recorded chan struct{}
}

func (g *stepRegistry) addPart(p *stepPart) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.parts == nil {
		g.parts = map[*stepPart]bool{}
	}
	g.parts[p] = true
}

func (g *stepRegistry) removePart(p *stepPart) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.parts, p)
}

// signalParts sends sig to every step task running on this node; it
// reports whether there was any.
func (g *stepRegistry) signalParts(sig syscall.Signal) bool {
	g.mu.Lock()
	parts := make([]*stepPart, 0, len(g.parts))
	for p := range g.parts {
		parts = append(parts, p)
	}
	g.mu.Unlock()
	for _, p := range parts {
		p.signal(sig)
	}
	return len(parts) > 0
}

// stepIDBlock is how many step numbers one outbox commit reserves: srun
// pays for an fsync once per block, and an agent restart skips at most
// the rest of a block (never numbers a step twice).
const stepIDBlock = 32

// reserveStepIDs durably reserves the next n step numbers of alloc on
// this node (its rank 0) and returns the first.
func (o *outbox) reserveStepIDs(ctx context.Context, allocID string, n int) (int, error) {
	if o.mem != nil {
		return o.mem.reserveStepIDs(ctx, allocID, n)
	}
	var next int
	err := o.db.QueryRowContext(ctx, `INSERT INTO step_ids (alloc_id, next) VALUES (?, ?)
		ON CONFLICT(alloc_id) DO UPDATE SET next = next + excluded.next RETURNING next`, allocID, n).Scan(&next)
	if err != nil {
		return 0, fmt.Errorf("number the next steps of alloc %s: %w", allocID, err)
	}
	return next - n, nil
}

// stepOwner is the runner that numbers the allocation's steps and keeps
// their ledger: the first node's, when it is in this process (this agent,
// or a peer under gpud standalone), else this one. On separate hosts srun
// in the batch script and srun outside the job both reach the first node,
// so it serves (numbers and books) their steps; only a step started from
// a task on another node is numbered and booked there, apart.
func (r *runner) stepOwner() *runner {
	if r.asg == nil || r.self.Rank == 0 {
		return r
	}
	for _, n := range r.asg.Alloc.Nodes {
		if n.Rank != 0 {
			continue
		}
		if p, err := r.d.peer(n); err == nil {
			if o := p.stepOwner(r.allocID); o != nil {
				return o
			}
		}
	}
	return r
}

// allocStepID numbers a new step of the runner's job. Steps are numbered
// per job, not per node: the runner of the allocation's first node
// numbers them (stepOwner).
func (r *runner) allocStepID(ctx context.Context) (int, error) {
	owner := r.stepOwner()
	g := &owner.steps
	g.idMu.Lock()
	defer g.idMu.Unlock()
	if g.nextID == g.idEnd {
		first, err := owner.d.ob.reserveStepIDs(context.WithoutCancel(ctx), r.allocID, stepIDBlock)
		if err != nil {
			return 0, err
		}
		g.nextID, g.idEnd = first, first+stepIDBlock
	}
	id := g.nextID
	g.nextID++
	return id, nil
}

// stepStarted registers a step this node serves and records its start.
func (r *runner) stepStarted(ctx context.Context, step int, req api.StepRequest, l layout, gr stepGrant, names []string, nt int, signalAll func(syscall.Signal)) *servedStep {
	cpus, gpus := 0, 0
	for i := range l.nodes {
		cpus += gr.cpus[i]
		gpus += len(gr.gpus[i])
	}
	s := &servedStep{
		rec: spec.Step{ID: strconv.Itoa(step), Name: stepName(req.Args[0]), State: spec.StateRunning,
			StartTime: spec.NewTime(r.d.clock.Now()), Nodes: names, NTasks: nt, CPUs: cpus, GPUs: gpus},
		signalAll: signalAll,
		recorded:  make(chan struct{}),
	}
	g := &r.steps
	g.mu.Lock()
	if g.served == nil {
		g.served = map[int]*servedStep{}
	}
	g.served[step] = s
	g.mu.Unlock()
	rec := s.rec
	// Off srun's path: the outbox commit is an fsync.
	go func() {
		defer close(s.recorded)
		ev := api.AllocEvent{Node: r.d.cfg.Name, AllocID: r.allocID, JobID: r.jobID, Kind: api.EventStepStarted,
			Time: rec.StartTime, Step: &rec}
		if err := r.d.record(ctx, ev); err != nil {
			r.log().Warn("record step start; the controller learns of the step when it ends", "step", step, "err", err)
		}
	}()
	return s
}

// resumeServed registers a step re-adopted after an agent restart
// (stepstate.go) as served here again, from its recorded start (already
// in the outbox): the controller's step signals reach it and its end is
// recorded.
func (r *runner) resumeServed(rec spec.Step, signalAll func(syscall.Signal)) *servedStep {
	s := &servedStep{rec: rec, signalAll: signalAll, recorded: make(chan struct{})}
	close(s.recorded)
	g := &r.steps
	g.mu.Lock()
	if g.served == nil {
		g.served = map[int]*servedStep{}
	}
	g.served[rec.Num()] = s
	g.mu.Unlock()
	return s
}

// stepEnded records the end of a step this node served: its state from
// its tasks' exits (worst code, first signal) or its cancel.
func (r *runner) stepEnded(ctx context.Context, s *servedStep, code, sig int) {
	g := &r.steps
	n := s.rec.Num()
	g.mu.Lock()
	delete(g.served, n)
	g.mu.Unlock()
	<-s.recorded
	rec := s.rec
	rec.Nodes = slices.Clone(rec.Nodes)
	rec.EndTime = spec.NewTime(r.d.clock.Now())
	rec.ExitCode, rec.Signal = code, sig
	s.mu.Lock()
	by := s.cancelled
	s.mu.Unlock()
	switch {
	case by != "":
		rec.State, rec.Reason = spec.StateCancelled, "cancelled by "+by
	case code != 0 || sig != 0:
		rec.State = spec.StateFailed
	default:
		rec.State = spec.StateCompleted
	}
	ev := api.AllocEvent{Node: r.d.cfg.Name, AllocID: r.allocID, JobID: r.jobID, Kind: api.EventStepEnded,
		Time: rec.EndTime, State: rec.State, ExitCode: code, Signal: sig, Step: &rec}
	if err := r.d.record(context.WithoutCancel(ctx), ev); err != nil {
		r.log().Warn("record step end; accounting will show the step as ended with its job", "step", n, "err", err)
	}
}

// stepSignals carries out the controller's step signal and cancel
// requests for the steps this node serves, each once.
func (r *runner) stepSignals(ctx context.Context, reqs []spec.StepSignal) {
	g := &r.steps
	for _, q := range reqs {
		if q.AllocID != r.allocID {
			continue
		}
		g.mu.Lock()
		done := q.Seq <= g.sigSeq
		s := g.served[q.Step]
		if !done && s != nil {
			g.sigSeq = q.Seq
		}
		g.mu.Unlock()
		if done || s == nil {
			continue // acted on, or not served here (or ended)
		}
		log := r.log().With("step", q.Step, "by", q.By)
		if !q.Cancel {
			sig, err := signame.Parse(q.Signal)
			if err != nil {
				log.Warn("controller asked for an unknown signal for a step; ignoring it", "signal", q.Signal, "err", err)
				continue
			}
			log.Info("signalling step", "signal", q.Signal)
			s.signalAll(sig)
			continue
		}
		s.mu.Lock()
		s.cancelled = q.By
		s.mu.Unlock()
		grace := r.d.cfg.KillGrace
		log.Info("cancelling step", "kill_grace", grace)
		// As Slurm's scancel of a step: SIGCONT, SIGTERM, and SIGKILL
		// after KillWait (the node's kill grace) to what is left.
		s.signalAll(syscall.SIGCONT)
		s.signalAll(syscall.SIGTERM)
		go func() {
			select {
			case <-r.d.clock.After(grace):
				s.signalAll(syscall.SIGKILL)
			case <-ctx.Done():
			}
		}()
	}
}

// signalTarget delivers a job signal (scancel --signal) to its target:
// the step tasks running on this node (spec.SignalSteps), the batch
// shell (spec.SignalBatch, on the batch node only), or every process of
// the container ("" or spec.SignalFull).
func (r *runner) signalTarget(ctx context.Context, target string, sig syscall.Signal) error {
	switch target {
	case spec.SignalSteps:
		if !r.steps.signalParts(sig) {
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

// maxStepName bounds a step's name (its command's base name) in records.
const maxStepName = 64

// stepName is a step's name for its records: its command's base name,
// printable and short. The name reaches the controller in an outbox event,
// which the controller refuses whole if a field is malformed; a user's
// odd command must not stall the node's events.
func stepName(cmd string) string {
	name := []rune(filepath.Base(cmd))
	for i, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			name[i] = '?'
		}
	}
	out := string(name)
	for len(out) > maxStepName {
		name = name[:len(name)-1]
		out = string(name)
	}
	return out
}
