package step

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/signame"
	"github.com/gpud/gpud/gpud/spec"
)

// Steps as records (DESIGN §7 "Allocations and steps"): numbered per job
// by the agent of the allocation's first node, reported to the
// controller through the outbox (start and end, so a controller restart
// loses none), cancelled or signalled one at a time (gpuq cancel N.S),
// and the targets of a job's signals meant for steps (scancel --signal,
// --signal=SIG@T): the steps' tasks.

// registry is an allocation's steps on this node: those it serves (srun
// asked this node's agent) and the step tasks running in its container,
// whoever serves their step.
type registry struct {
	mu     sync.Mutex
	served map[int]*servedStep
	parts  map[*part]bool
	// sigSeq is the newest step signal request acted on.
	sigSeq int
	// ledger books the allocation's steps' resources (ledger.go); the
	// first node's steps keep it.
	ledger *stepLedger
	// nextID and idEnd are the step numbers reserved in the outbox and
	// not yet given (newID, the first node's steps); idMu orders
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

func (g *registry) addPart(p *part) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.parts == nil {
		g.parts = map[*part]bool{}
	}
	g.parts[p] = true
}

func (g *registry) removePart(p *part) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.parts, p)
}

// SignalTasks sends sig to every step task running on this node (a job
// signal meant for its steps, spec.SignalSteps); it reports whether there
// was any.
func (al *Alloc) SignalTasks(sig syscall.Signal) bool {
	g := &al.reg
	g.mu.Lock()
	parts := make([]*part, 0, len(g.parts))
	for p := range g.parts {
		parts = append(parts, p)
	}
	g.mu.Unlock()
	for _, p := range parts {
		p.signal(sig)
	}
	return len(parts) > 0
}

// IDBlock is how many step numbers one outbox commit reserves
// (Host.ReserveIDs): srun pays for an fsync once per block, and an agent
// restart skips at most the rest of a block (never numbers a step twice).
const IDBlock = 32

// owner is the allocation's steps that number its steps and keep their
// ledger: the first node's, when it is in this process (this agent, or a
// peer under gpud standalone), else this one. On separate hosts srun in
// the batch script and srun outside the job both reach the first node,
// so it serves (numbers and books) their steps; a step started from a
// task on another node is numbered by the first node over its step
// listener (newID) but booked apart, in that node's ledger.
func (al *Alloc) owner() *Alloc {
	v := al.view()
	if v.asg == nil || v.self.Rank == 0 {
		return al
	}
	for _, nd := range v.asg.Alloc.Nodes {
		if nd.Rank != 0 {
			continue
		}
		if p, err := al.n.peer(nd); err == nil {
			if o := p.owner(al.allocID); o != nil {
				return o
			}
		}
	}
	return al
}

// newID numbers a new step of the job. Steps are numbered per job, not
// per node: the steps of the allocation's first node number them
// (owner).
func (al *Alloc) newID(ctx context.Context) (int, error) {
	o := al.owner()
	if v := al.view(); o == al && v.asg != nil && v.self.Rank != 0 {
		if id, err, asked := al.remoteID(ctx, v.asg.Alloc.Nodes); asked {
			return id, err
		}
	}
	g := &o.reg
	g.idMu.Lock()
	defer g.idMu.Unlock()
	if g.nextID == g.idEnd {
		first, err := o.n.host.ReserveIDs(context.WithoutCancel(ctx), al.allocID, IDBlock)
		if err != nil {
			return 0, err
		}
		g.nextID, g.idEnd = first, first+IDBlock
	}
	id := g.nextID
	g.nextID++
	return id, nil
}

// remoteID asks the allocation's first node, on another host, for a new
// step number, waiting up to partWait while it cannot answer; asked is
// false when it cannot be asked (no step listener): the step is then
// numbered here.
func (al *Alloc) remoteID(ctx context.Context, nodes []spec.NodeAlloc) (id int, err error, asked bool) {
	for _, nd := range nodes {
		if nd.Rank != 0 {
			continue
		}
		p, err := al.n.peer(nd)
		rp, ok := p.(*remotePeer)
		if err != nil || !ok {
			return 0, nil, false
		}
		deadline := time.Now().Add(partWait)
		for {
			id, err := rp.numberStep(ctx, al.allocID)
			if err == nil || !isNotHeld(err) || time.Now().After(deadline) {
				if err != nil {
					err = fmt.Errorf("number the step at the allocation's first node: %w", err)
				}
				return id, err, true
			}
			select {
			case <-ctx.Done():
				return 0, err, true
			case <-time.After(time.Second):
			}
		}
	}
	return 0, nil, false
}

// started registers a step this node serves and records its start.
func (al *Alloc) started(ctx context.Context, step int, req api.StepRequest, l layout, gr stepGrant, signalAll func(syscall.Signal)) *servedStep {
	return al.startedAs(ctx, al.stepAcct(step, req, l, gr), signalAll)
}

// stepAcct is the accounting record of step as it starts now.
func (al *Alloc) stepAcct(step int, req api.StepRequest, l layout, gr stepGrant) spec.Step {
	cpus, gpus := 0, 0
	for i := range l.nodes {
		cpus += gr.cpus[i]
		gpus += len(gr.gpus[i])
	}
	return spec.Step{ID: strconv.Itoa(step), Name: stepName(req.Args[0]), State: spec.StateRunning,
		StartTime: spec.NewTime(al.n.cfg.Clock.Now()), Nodes: l.names(), NTasks: l.ntasks(), CPUs: cpus, GPUs: gpus}
}

// startedAs is started for the step whose accounting record is acct (a
// restarted agent's, for a step its predecessor started but had not
// recorded as started).
func (al *Alloc) startedAs(ctx context.Context, acct spec.Step, signalAll func(syscall.Signal)) *servedStep {
	step := acct.Num()
	s := &servedStep{rec: acct, signalAll: signalAll, recorded: make(chan struct{})}
	al.serve(step, s)
	rec := s.rec
	// Off srun's path: the outbox commit is an fsync.
	go func() {
		defer close(s.recorded)
		ev := api.AllocEvent{Node: al.n.cfg.Node, AllocID: al.allocID, JobID: al.jobID, Kind: api.EventStepStarted,
			Time: rec.StartTime, Step: &rec}
		if err := al.n.host.Record(ctx, ev); err != nil {
			al.logger().Warn("record step start; the controller learns of the step when it ends", "step", step, "err", err)
		}
	}()
	return s
}

// serve registers s as step n served here.
func (al *Alloc) serve(n int, s *servedStep) {
	g := &al.reg
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.served == nil {
		g.served = map[int]*servedStep{}
	}
	g.served[n] = s
}

// resumeServed registers a step re-adopted after an agent restart
// (state.go) as served here again, from its recorded start (already in
// the outbox): the controller's step signals reach it and its end is
// recorded.
func (al *Alloc) resumeServed(rec spec.Step, signalAll func(syscall.Signal)) *servedStep {
	s := &servedStep{rec: rec, signalAll: signalAll, recorded: make(chan struct{})}
	close(s.recorded)
	al.serve(rec.Num(), s)
	return s
}

// ended records the end of a step this node served: its state from its
// tasks' exits (worst code, first signal) or its cancel.
func (al *Alloc) ended(ctx context.Context, s *servedStep, code, sig int) {
	g := &al.reg
	n := s.rec.Num()
	g.mu.Lock()
	delete(g.served, n)
	g.mu.Unlock()
	<-s.recorded
	rec := s.rec
	rec.Nodes = slices.Clone(rec.Nodes)
	rec.EndTime = spec.NewTime(al.n.cfg.Clock.Now())
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
	ev := api.AllocEvent{Node: al.n.cfg.Node, AllocID: al.allocID, JobID: al.jobID, Kind: api.EventStepEnded,
		Time: rec.EndTime, State: rec.State, ExitCode: code, Signal: sig, Step: &rec}
	if err := al.n.host.Record(context.WithoutCancel(ctx), ev); err != nil {
		al.logger().Warn("record step end; accounting will show the step as ended with its job", "step", n, "err", err)
	}
}

// Signals carries out the controller's step signal and cancel requests
// for the steps this node serves, each once.
func (al *Alloc) Signals(ctx context.Context, reqs []spec.StepSignal) {
	g := &al.reg
	for _, q := range reqs {
		if q.AllocID != al.allocID {
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
		log := al.logger().With("step", q.Step, "by", q.By)
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
		grace := al.n.cfg.KillGrace
		log.Info("cancelling step", "kill_grace", grace)
		// As Slurm's scancel of a step: SIGCONT, SIGTERM, and SIGKILL
		// after KillWait (the node's kill grace) to what is left.
		s.signalAll(syscall.SIGCONT)
		s.signalAll(syscall.SIGTERM)
		go func() {
			select {
			case <-al.n.cfg.Clock.After(grace):
				s.signalAll(syscall.SIGKILL)
			case <-ctx.Done():
			}
		}()
	}
}

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
