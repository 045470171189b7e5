package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Job steps (DESIGN §7 "Allocations and steps"). Every node of an
// allocation runs one container: the first runs the batch script, the
// others a holder that waits. srun in the job asks its node's agent, over
// the job's step socket (jobs/<container>/step.sock, bind-mounted into the
// container with the job directory and owned by the job's user), for a
// step; that agent lays the tasks out in blocks over the allocation's
// nodes and asks each node's agent to exec its tasks into its allocation
// container (stepPeer). Output and exits stream back through the first
// agent to srun.
//
// Peers: under `gpud standalone` every agent is in one process and a
// Peers registry holds them all; agents on separate hosts reach each
// other's step listeners over TLS with their node certificates
// (steplisten.go), with the same three calls: start a node's tasks,
// signal them, stream their output and exits back.

// stepSocketName is the step socket in the job directory.
const stepSocketName = "step.sock"

// holderScript keeps a non-first node's allocation container alive, doing
// nothing, until the allocation ends (SIGTERM) or the container is killed.
// Other signals the agent sends to the whole container (a checkpoint's
// SIGUSR1, --signal) are for the steps' tasks: the holder ignores them.
const holderScript = `trap 'exit 0' TERM INT HUP; trap '' USR1 USR2 QUIT ALRM PIPE; while :; do sleep 86400 & wait $!; done`

// Peers finds the agents of other nodes for steps. Safe for concurrent use.
type Peers struct {
	mu     sync.Mutex
	agents map[string]*Agent
}

// NewPeers returns an empty registry; agents given it with WithPeers add
// themselves when they run.
func NewPeers() *Peers { return &Peers{agents: map[string]*Agent{}} }

func (p *Peers) add(a *Agent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.agents[a.cfg.Name] = a
}

func (p *Peers) remove(a *Agent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents[a.cfg.Name] == a {
		delete(p.agents, a.cfg.Name)
	}
}

func (p *Peers) get(name string) *Agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.agents[name]
}

// stepPeer runs one node's share of a step: that node's agent, in this
// process (the agent itself, or Peers under gpud standalone) or over the
// network (remotePeer, peerclient.go).
type stepPeer interface {
	startTasks(ctx context.Context, allocID string, st stepTasks, out *stepStream) (*stepPart, error)
	// stepOwner is the peer's runner of allocation allocID where the
	// peer is in this process (it numbers the allocation's steps and
	// books their resources when it runs the first node's part,
	// steprec.go), nil where it is not or over the network.
	stepOwner(allocID string) *runner
}

// stepOwner is this agent's runner of allocID, if it runs a part of it.
func (a *Agent) stepOwner(allocID string) *runner {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runners[allocID]
}

// peer returns the agent running node nd's part of steps: this one, an
// in-process peer, or the node's step listener.
func (a *Agent) peer(nd spec.NodeAlloc) (stepPeer, error) {
	if nd.Node == a.cfg.Name {
		return a, nil
	}
	if a.opts.peers != nil {
		if p := a.opts.peers.get(nd.Node); p != nil {
			return p, nil
		}
	}
	return a.remotePeer(nd)
}

// stepSocket is the step socket path of a runner's job directory.
func (r *runner) stepSocket() string { return filepath.Join(r.jobDir(), stepSocketName) }

// serveSteps listens on the job's step socket until ctx ends or the
// runner is done, or until the returned func is called. Only a runner
// that started the job (it knows the assignment) serves steps.
func (r *runner) serveSteps(ctx context.Context) (stop func()) {
	if r.asg == nil {
		return func() {}
	}
	log := r.log()
	path := r.stepSocket()
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		log.Warn("listen on the job's step socket; srun will not work in this job", "err", err)
		return func() {}
	}
	// The job directory is root's (0711) and only root writes it, so the
	// path cannot have been swapped for a link.
	if os.Geteuid() == 0 {
		if err := os.Chown(path, int(r.asg.Job.UID), int(r.asg.Job.GID)); err != nil {
			log.Warn("give the step socket to the job's user", "err", err)
		}
	}
	_ = os.Chmod(path, 0o600)
	stopC := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-r.done:
		case <-stopC:
		}
		ln.Close()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serveStep(ctx, c)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stopC) }) }
}

// resumeSteps serves steps again in a job this agent re-adopted (an
// agent restart), once it knows the job's assignment: it rebuilds the
// node's part of the container's environment and listens on the job's
// step socket again. Steps that were running when the old agent died are
// re-adopted first (stepstate.go): their srun reattaches.
func (r *runner) resumeSteps(ctx context.Context, log *slog.Logger) {
	groups, _ := supplementaryGroups(r.asg.Job.UID, r.asg.Job.GID)
	cfg, err := buildTask(taskInput{
		Asg: *r.asg, Self: r.self, NodeName: r.d.cfg.Name, Hostname: r.d.cfg.Hostname, SelfAddr: r.d.cfg.Addr,
		DefaultImage: r.d.cfg.DefaultImage, GPUs: r.d.gpus, NICs: r.d.nics, MIG: r.mig, ContainerID: r.id, JobDir: r.jobDir(),
		ScriptPath: filepath.Join(r.jobDir(), "script"), GroupIDs: groups, Hide: r.d.hidden(), Show: r.d.cfg.ShowPaths,
		ToolsDir: r.d.cfg.ToolsDir,
	})
	if err != nil {
		log.Warn("re-adopted job: srun will not work in it", "err", err)
		return
	}
	r.mu.Lock()
	r.env = cfg.Env
	r.mu.Unlock()
	r.readoptSteps(ctx, log)
	r.serveSteps(ctx)
	log.Info("re-adopted job serves steps again")
}

// layout is where a step's tasks run: per node (in step order) the
// global task IDs.
type layout struct {
	nodes []spec.NodeAlloc
	tasks [][]int
}

// stepLayout lays a step out in blocks over the allocation's nodes, as
// Slurm's default distribution does, and checks it fits.
func stepLayout(alloc []spec.NodeAlloc, req api.StepRequest) (layout, error) {
	nodes := slices.Clone(alloc)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Rank < nodes[j].Rank })
	have := fmt.Sprintf("the allocation has %d node(s): %s", len(nodes), describeAlloc(nodes))
	if req.NTasks < 0 || req.Nodes < 0 || req.NTasksPerNode < 0 || req.CPUsPerTask < 0 || req.GPUsPerTask < 0 || req.GPUs < 0 || req.GPUsPerNode < 0 {
		return layout{}, spec.Errorf(spec.ErrInvalid, "negative task, node, CPU or GPU count")
	}
	nn := req.Nodes
	if nn > len(nodes) {
		return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d nodes but %s", nn, have)
	}
	if req.NodeList != "" {
		// -w: these nodes of the allocation, first (in rank order), and
		// all of them.
		want, err := hostlist.Expand(req.NodeList)
		if err != nil {
			return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist=%s: %v", req.NodeList, err)
		}
		for _, w := range want {
			if !slices.ContainsFunc(nodes, func(n spec.NodeAlloc) bool { return n.Node == w }) {
				return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist: node %s is not in the job's allocation; %s", w, have)
			}
		}
		sort.SliceStable(nodes, func(i, j int) bool {
			return slices.Contains(want, nodes[i].Node) && !slices.Contains(want, nodes[j].Node)
		})
		if nn == 0 {
			nn = len(slices.Compact(slices.Sorted(slices.Values(want))))
		} else if nn < len(want) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "--nodelist names %d nodes but -N asks for %d", len(want), nn)
		}
		if req.NTasks > 0 && req.NTasks < nn {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d tasks on the %d nodes of --nodelist=%s; each node needs at least one task", req.NTasks, nn, req.NodeList)
		}
	}
	nt := req.NTasks
	switch {
	case nn == 0 && nt > 0 && req.NTasksPerNode == 0:
		nn = min(nt, len(nodes))
	case nn == 0 && nt > 0:
		nn = min((nt+req.NTasksPerNode-1)/req.NTasksPerNode, len(nodes))
	case nn == 0:
		nn = len(nodes)
	}
	if nt == 0 {
		nt = nn * max(req.NTasksPerNode, 1)
	}
	if nt < nn {
		return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d tasks on %d nodes; each node needs at least one task", nt, nn)
	}
	l := layout{nodes: nodes[:nn], tasks: make([][]int, nn)}
	next := 0
	for i := range nn {
		n := nt / nn
		if i < nt%nn {
			n++
		}
		if req.NTasksPerNode > 0 && n > req.NTasksPerNode {
			return layout{}, spec.Errorf(spec.ErrInvalid, "%d tasks do not fit on %d nodes at --ntasks-per-node=%d", nt, nn, req.NTasksPerNode)
		}
		for range n {
			l.tasks[i] = append(l.tasks[i], next)
			next++
		}
		nd := nodes[i]
		if c := req.CPUsPerTask; c > 0 && n*c > nd.CPUs {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step needs %d CPUs on node %s (%d tasks x %d) but %s", n*c, nd.Node, n, c, have)
		}
		if g := req.GPUsPerTask; g > 0 && n*g > devices(nd) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step needs %d GPUs on node %s (%d tasks x %d) but %s", n*g, nd.Node, n, g, have)
		}
		if g := req.GPUsPerNode; g > devices(nd) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d GPUs per node but %s", g, have)
		}
	}
	if g := req.GPUs; g > 0 {
		for i, nd := range l.nodes {
			if want := stepGPUs(req, l, i, devices(nd)); want > devices(nd) {
				return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d GPUs (%d on node %s) but %s", g, want, nd.Node, have)
			}
		}
	}
	return l, nil
}

func describeAlloc(nodes []spec.NodeAlloc) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%d CPUs, %d GPUs)", n.Node, n.CPUs, devices(n))
	}
	return strings.Join(parts, ", ")
}

// tasksPerNode is Slurm's SLURM_TASKS_PER_NODE form: "2(x3),1".
func tasksPerNode(l layout) string {
	var parts []string
	for i := 0; i < len(l.tasks); {
		j := i
		for j < len(l.tasks) && len(l.tasks[j]) == len(l.tasks[i]) {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d(x%d)", len(l.tasks[i]), j-i))
		} else {
			parts = append(parts, strconv.Itoa(len(l.tasks[i])))
		}
		i = j
	}
	return strings.Join(parts, ",")
}

// stepStream writes StepMsg frames to srun; safe for concurrent use.
type stepStream struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	err error
	// gate, while set, holds tasks' output back until the step is
	// recorded (the writers wait, so a task blocks on its full pipe): an
	// srun that has seen a task's output has been told the step started
	// and can follow it again after an agent restart (stepstate.go).
	gate chan struct{}
}

// holdOutput makes output wait until releaseOutput.
func (s *stepStream) holdOutput() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *stepStream) releaseOutput() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

func (s *stepStream) send(m api.StepMsg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if s.err = api.WriteStepMsg(s.bw, m); s.err == nil {
		s.err = s.bw.Flush()
	}
}

// output writes a task's output as frames.
func (s *stepStream) output(kind string, task int, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.gate != nil {
		g := s.gate
		s.mu.Unlock()
		<-g
		s.mu.Lock()
	}
	if s.err == nil {
		if s.err = api.WriteStepOutput(s.bw, kind, task, p); s.err == nil {
			s.err = s.bw.Flush()
		}
	}
}

// stepSink takes tasks' output: srun's stream, or a re-adopted step's
// relay holding it until srun reattaches (stepstate.go).
type stepSink interface {
	output(kind string, task int, p []byte)
}

// taskWriter turns a task's output into output frames.
type taskWriter struct {
	s    stepSink
	kind string
	task int
}

func (w taskWriter) Write(p []byte) (int, error) {
	// srun gone: the output is dropped, the task runs on until killed.
	w.s.output(w.kind, w.task, p)
	return len(p), nil
}

// serveStep runs one srun's step from request to done.
func (r *runner) serveStep(ctx context.Context, c net.Conn) {
	defer c.Close()
	out := &stepStream{bw: bufio.NewWriter(c)}
	dec := json.NewDecoder(bufio.NewReader(c))
	var req api.StepRequest
	if err := dec.Decode(&req); err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: "bad step request: " + err.Error()})
		return
	}
	if req.Attach {
		r.reattachStep(ctx, dec, out, req.Step)
		return
	}
	if len(req.Args) == 0 {
		out.send(api.StepMsg{Kind: api.StepError, Error: "srun: no command given"})
		return
	}
	r.runStep(ctx, req, dec, out)
}

// runStep runs srun's step req, whose later messages (signals, stdin)
// come from dec and whose frames go to out: from the job's step socket or
// from the node's step listener (srun with the allocation's ticket).
func (r *runner) runStep(ctx context.Context, req api.StepRequest, dec *json.Decoder, out *stepStream) {
	log := r.log()
	l, err := stepLayout(r.asg.Alloc.Nodes, req)
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	// A node steps cannot reach refuses the step before any task runs.
	for _, nd := range l.nodes {
		if _, err := r.d.peer(nd); err != nil {
			out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
			return
		}
	}
	bind, err := parseGPUBind(req.GPUBind, req.GPUsPerTask) // stepres.go
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	// srun's messages (signals, stdin) and its going away, from now on.
	msgs := readStepMsgs(dec)
	// The step's share of the allocation: it waits while running steps
	// hold what it needs (stepres.go).
	ledger := r.ledger()
	var grant stepGrant
	for waited := false; ; {
		changed := ledger.wait()
		gr, ok := ledger.take(req, l)
		if ok {
			grant = gr
			break
		}
		if !waited {
			waited = true
			out.send(api.StepMsg{Kind: api.StepWaiting, Error: "Job step creation temporarily disabled, retrying (Requested nodes are busy)"})
		}
		select {
		case <-changed:
		case m, ok := <-msgs:
			if !ok || m.Kind == api.StepSignal && (m.Signal == int(syscall.SIGINT) || m.Signal == int(syscall.SIGTERM)) {
				return // srun gone or interrupted while it waited
			}
		case <-ctx.Done():
			return
		}
	}
	defer ledger.give(l, grant)
	step, err := r.allocStepID(ctx) // steprec.go: numbered per job
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}

	names := make([]string, len(l.nodes))
	for i, n := range l.nodes {
		names[i] = n.Node
	}
	nt := 0
	for _, t := range l.tasks {
		nt += len(t)
	}
	stepEnv := []string{
		"SLURM_STEP_ID=" + strconv.Itoa(step),
		"SLURM_STEPID=" + strconv.Itoa(step),
		"SLURM_STEP_NODELIST=" + hostlist.Compress(names),
		"SLURM_STEP_NUM_NODES=" + strconv.Itoa(len(names)),
		"SLURM_STEP_NUM_TASKS=" + strconv.Itoa(nt),
		"SLURM_STEP_TASKS_PER_NODE=" + tasksPerNode(l),
		"SLURM_TASKS_PER_NODE=" + tasksPerNode(l),
		"SLURM_NTASKS=" + strconv.Itoa(nt),
		"SLURM_NPROCS=" + strconv.Itoa(nt),
		"SLURM_NNODES=" + strconv.Itoa(len(names)),
	}
	if req.CPUsPerTask > 0 {
		stepEnv = append(stepEnv, "SLURM_CPUS_PER_TASK="+strconv.Itoa(req.CPUsPerTask))
	}

	// srun learns the step and where each task runs before any task
	// writes output (its %s and %n output patterns).
	perNode := make([]int, len(l.tasks))
	for i, t := range l.tasks {
		perNode[i] = len(t)
	}
	out.send(api.StepMsg{Kind: api.StepLayout, Step: step, NTasks: nt, Nodes: names, TasksPerNode: perNode})

	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// srun's stdin goes to task 0 (on the first node of the step).
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	// At the end a write blocked on a task that never read is released.
	endStdin := func() { stdinW.Close(); stdinR.Close() }
	// Output waits until the step is recorded and srun told it started.
	out.holdOutput()
	defer out.releaseOutput()
	// Every node starts its tasks at once (each exec is a runc run).
	parts := make([]*stepPart, len(l.nodes))
	errs := make([]error, len(l.nodes))
	var startWG sync.WaitGroup
	for i, nd := range l.nodes {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			p, err := r.d.peer(nd)
			if err == nil {
				st := stepTasks{
					Step: step, NodeIndex: i, Tasks: l.tasks[i], GPUIdx: grant.gpus[i], Bind: bind,
					Args: req.Args, Env: mergeEnv(req.Env, stepEnv), Cwd: req.Cwd,
					Pty: req.Pty, Rows: req.Rows, Cols: req.Cols,
				}
				if i == 0 && req.Stdin {
					st.Stdin = stdinR
				}
				parts[i], err = p.startTasks(sctx, r.allocID, st, out)
			}
			errs[i] = err
		}()
	}
	startWG.Wait()
	if err := errors.Join(errs...); err != nil {
		out.releaseOutput() // a part's wait drains its output
		for _, p := range parts {
			if p != nil {
				p.signal(syscall.SIGKILL)
				p.wait()
			}
		}
		out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("start step %d.%d: %v", r.jobID, step, err)})
		return
	}
	signalAll := func(sig syscall.Signal) {
		for _, p := range parts {
			p.signal(sig)
		}
	}
	served := r.stepStarted(ctx, step, req, l, grant, names, nt, signalAll) // steprec.go
	// For srun to follow the step again after an agent restart, and the
	// restarted agent to record its end (stepstate.go): recorded before
	// srun hears of the start or sees any output.
	acct := served.rec
	r.recordStep(stepRecord{Step: step, NTasks: nt, Nodes: names, Tasks: l.tasks, Pty: req.Pty, Stdin: req.Stdin,
		KillOnBadExit: req.KillOnBadExit, Acct: &acct, Grant: recordGrant(grant)})
	log.Info("step started", "step", step, "tasks", nt, "nodes", names, "pty", req.Pty)
	out.send(api.StepMsg{Kind: api.StepStarted, Step: step, NTasks: nt, Nodes: names, TasksPerNode: perNode})
	out.releaseOutput()
	defer r.forgetStep(step)
	worst, worstSig := followStep(ctx, msgs, parts, stdinW, req.KillOnBadExit, out)
	cancel()
	endStdin()
	log.Info("step ended", "step", step, "exit_code", worst)
	out.send(api.StepMsg{Kind: api.StepDone, Step: step, Code: worst})
	r.stepEnded(ctx, served, worst, worstSig) // after srun has its answer: this commits to disk
}

// readStepMsgs decodes srun's messages after its request (signals,
// resizes, stdin); the channel is closed when srun goes away.
func readStepMsgs(dec *json.Decoder) <-chan api.StepMsg {
	msgs := make(chan api.StepMsg, 16)
	go func() {
		defer close(msgs)
		for {
			var m api.StepMsg
			if dec.Decode(&m) != nil {
				return
			}
			msgs <- m
		}
	}()
	return msgs
}

// followStep is the step's message loop, for a step this agent started
// (runStep) and for one it re-adopted after a restart (reattachStep):
// it carries srun's messages (msgs) to the step's parts on every node
// and their exits to srun (out), until every task exited. Signals go to
// every task, terminal sizes to every part, stdin (when stdin is not
// nil) to task 0, an empty stdin message closing it; srun going away
// (msgs closed) before the step ended kills the tasks, since nobody
// reads their output or exit any more. With killOnBadExit, a task that
// exits non-zero kills the others. It returns the worst exit code and
// the first signal that ended a task.
func followStep(ctx context.Context, msgs <-chan api.StepMsg, parts []*stepPart, stdin *io.PipeWriter, killOnBadExit bool,
	out *stepStream) (worst, worstSig int) {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // ends with the step
	defer cancel()
	signalAll := func(sig syscall.Signal) {
		for _, p := range parts {
			p.signal(sig)
		}
	}
	stdinC := make(chan []byte, 64)
	if stdin != nil {
		defer stdin.Close() // releases a write blocked on a task that never read
		go func() {
			for {
				select {
				case <-fctx.Done():
					return
				case b := <-stdinC:
					if b == nil {
						stdin.Close()
						continue
					}
					_, _ = stdin.Write(b) // task 0 gone: its input is dropped
				}
			}
		}()
	}
	go func() {
		for {
			m, ok := <-msgs
			if !ok {
				select {
				case <-fctx.Done():
				default:
					signalAll(syscall.SIGKILL)
				}
				return
			}
			switch {
			case m.Kind == api.StepSignal && m.Signal > 0 && m.Signal < 65:
				signalAll(syscall.Signal(m.Signal))
			case m.Kind == api.StepResize:
				for _, p := range parts {
					p.resize(m.Rows, m.Cols)
				}
			case m.Kind == api.StepStdin && stdin != nil:
				var b []byte // nil: the end of the input
				if len(m.Data) > 0 {
					b = m.Data
				}
				// Backpressure once 64 chunks wait for task 0 to read.
				select {
				case stdinC <- b:
				case <-fctx.Done():
				}
			}
		}
	}()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ex := range p.exits {
				out.send(ex)
				mu.Lock()
				worst = max(worst, ex.Code)
				if worstSig == 0 {
					worstSig = ex.Signal
				}
				mu.Unlock()
				if ex.Code != 0 && killOnBadExit {
					signalAll(syscall.SIGKILL)
				}
			}
		}()
	}
	wg.Wait()
	return worst, worstSig
}

// stepTasks is one node's share of a step.
type stepTasks struct {
	Step      int
	NodeIndex int   // the node's index within the step
	Tasks     []int // global task IDs, in local order
	GPUIdx    []int // the step's GPUs among the node's devices
	Bind      gpuBind
	Args, Env []string
	Cwd       string
	// Stdin is task 0's input (on the node that runs task 0).
	Stdin io.Reader
	// Pty runs task 0 on a terminal of Rows x Cols; the other tasks, as
	// under Slurm's --pty, run without one and their output is dropped.
	Pty        bool
	Rows, Cols int
}

// stepPart is one node's running tasks of a step.
type stepPart struct {
	mu    sync.Mutex
	procs []runtime.Process
	tty   runtime.Process  // task 0 on its terminal (srun --pty), if here
	exits chan api.StepMsg // one per task, then closed
	// remote signals the tasks of a part on another host (remotePeer);
	// remoteResize sets the size of its terminal (srun --pty, task 0).
	remote       func(syscall.Signal)
	remoteResize func(rows, cols int)
}

func (p *stepPart) signal(sig syscall.Signal) {
	if p.remote != nil {
		p.remote(sig)
		return
	}
	p.mu.Lock()
	procs := slices.Clone(p.procs)
	p.mu.Unlock()
	for _, pr := range procs {
		_ = pr.Signal(context.Background(), sig)
	}
}

func (p *stepPart) wait() {
	for range p.exits {
	}
}

// nodeEnvKeys are the job variables that differ between nodes: on each
// node its own value wins over the one srun's environment carries.
var nodeEnvKeys = []string{"GPUD_NODEID", "GPUD_GPUS", "NODE_RANK", "SLURM_NODEID", "SLURM_CPUS_ON_NODE",
	"SLURM_MEM_PER_NODE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
	"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "NCCL_IB_HCA", "SLURMD_NODENAME", "HOSTNAME"}

// startTasks execs this node's tasks of a step into the allocation's
// container and returns them running; their output goes to out.
func (a *Agent) startTasks(ctx context.Context, allocID string, st stepTasks, out *stepStream) (*stepPart, error) {
	ex, ok := a.rt.(runtime.Execer)
	if !ok {
		return nil, errors.New("this node's runtime cannot start processes in a running container")
	}
	a.mu.Lock()
	r := a.runners[allocID]
	a.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("node %s runs no part of allocation %s", a.cfg.Name, allocID)
	}
	r.mu.Lock()
	nodeEnv := r.env
	r.mu.Unlock()
	if nodeEnv == nil {
		return nil, fmt.Errorf("node %s has not started (or, after an agent restart, not re-learned) its part of allocation %s", a.cfg.Name, allocID)
	}
	own := map[string]string{}
	for _, kv := range nodeEnv {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(nodeEnvKeys, k) {
			own[k] = v
		}
	}
	own["SLURMD_NODENAME"] = a.cfg.Name
	gpus := strings.FieldsFunc(own["CUDA_VISIBLE_DEVICES"], func(r rune) bool { return r == ',' })
	part := &stepPart{exits: make(chan api.StepMsg, len(st.Tasks))}
	var wg sync.WaitGroup
	execErrs := make([]error, len(st.Tasks))
	var startWG sync.WaitGroup
	for local, task := range st.Tasks {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			execErrs[local] = a.startTask(ctx, ex, r.id, st, local, task, own, gpus, out, part, &wg)
		}()
	}
	startWG.Wait()
	if err := errors.Join(execErrs...); err != nil {
		out.releaseOutput() // the started tasks' waits drain their output
		part.signal(syscall.SIGKILL)
		wg.Wait()
		return nil, err
	}
	// The node's step tasks get the job's signals meant for steps
	// (scancel --signal without -b), whoever serves their step.
	r.steps.addPart(part)
	r.recordPart(st)
	go func() { wg.Wait(); r.steps.removePart(part); r.forgetPart(st.Step); close(part.exits) }()
	return part, nil
}

// startTask execs one task of a step and has a goroutine report its exit
// on part.exits.
func (a *Agent) startTask(ctx context.Context, ex runtime.Execer, ctr string, st stepTasks, local, task int,
	own map[string]string, gpus []string, out *stepStream, part *stepPart, wg *sync.WaitGroup) error {
	over := []string{
		"SLURM_PROCID=" + strconv.Itoa(task),
		"SLURM_LOCALID=" + strconv.Itoa(local),
		"SLURM_NODEID=" + strconv.Itoa(st.NodeIndex),
		"SLURM_GPUS_ON_NODE=" + strconv.Itoa(len(gpus)),
	}
	for _, k := range nodeEnvKeys {
		if v, ok := own[k]; ok && k != "SLURM_NODEID" {
			over = append(over, k+"="+v)
		}
	}
	// The task's GPUs: of the node's, the step's, and of those its own
	// under --gpus-per-task or --gpu-bind (stepres.go).
	mine, err := taskGPUs(gpus, st.GPUIdx, st.Bind, local)
	if err != nil {
		return fmt.Errorf("task %d on node %s: %w", task, a.cfg.Name, err)
	}
	if len(gpus) > 0 {
		over = append(over, "CUDA_VISIBLE_DEVICES="+strings.Join(mine, ","), "SLURM_GPUS_ON_NODE="+strconv.Itoa(len(mine)))
	}
	cfg := runtime.ExecConfig{
		ID:   execID(st.Step, task),
		Args: st.Args, Env: mergeEnv(st.Env, over), Cwd: st.Cwd,
		Stdout: taskWriter{out, api.StepStdout, task}, Stderr: taskWriter{out, api.StepStderr, task},
		Stdin: stdinOf(st, local),
	}
	ptyTask(&cfg, st, local)
	proc, err := ex.Exec(ctx, ctr, cfg)
	if err != nil {
		return fmt.Errorf("task %d on node %s: %w", task, a.cfg.Name, err)
	}
	part.mu.Lock()
	part.procs = append(part.procs, proc)
	if cfg.Terminal {
		part.tty = proc
	}
	part.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := api.StepMsg{Kind: api.StepExit, Task: task, Node: a.cfg.Name}
		st, err := proc.Wait(context.WithoutCancel(ctx))
		if err != nil {
			m.Code = 1
			m.Error = err.Error()
		} else {
			m.Code, m.Signal = st.Code, int(st.Signal)
		}
		_ = proc.Delete(context.WithoutCancel(ctx))
		part.exits <- m
	}()
	return nil
}

// stdinOf is the input of a node's local task: the step's stdin for the
// step's task 0, none for the others.
func stdinOf(st stepTasks, local int) io.Reader {
	if st.Stdin != nil && st.NodeIndex == 0 && local == 0 {
		return st.Stdin
	}
	return nil
}
