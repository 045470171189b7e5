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
// Peers: agents reach each other through a Peers registry. Under `gpud
// standalone` every agent is in one process and the registry holds them
// all; the agent-to-agent transport over the nodes' mTLS identities, for
// agents on separate hosts, speaks the same startTasks/signal/wait calls
// but is not built yet: a step that needs a node the registry lacks is
// refused with an error that says so.

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

// peer returns the agent running node name's part of steps.
func (a *Agent) peer(name string) (*Agent, error) {
	if name == a.cfg.Name {
		return a, nil
	}
	if a.opts.peers != nil {
		if p := a.opts.peers.get(name); p != nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("node %s of the allocation is not reachable from node %s for steps: steps across separate hosts need the agent-to-agent transport, which gpud does not have yet (run steps within one node, or under gpud standalone)", name, a.cfg.Name)
}

// reachesAll says whether every node of an allocation can run steps'
// tasks for this agent (peer). Where one cannot, the job runs its script
// on every node instead (taskInput.EveryNode); each agent of the
// allocation decides alike, since under standalone all share one Peers
// and separate hosts have none.
func (a *Agent) reachesAll(nodes []spec.NodeAlloc) bool {
	for _, n := range nodes {
		if _, err := a.peer(n.Node); err != nil {
			return false
		}
	}
	return true
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
		Asg: *r.asg, Self: r.self, NodeName: r.a.cfg.Name, Hostname: r.a.cfg.Hostname, SelfAddr: r.a.cfg.Addr,
		DefaultImage: r.a.cfg.DefaultImage, GPUs: r.a.gpus, NICs: r.a.nics, MIG: r.mig, ContainerID: r.id, JobDir: r.jobDir(),
		ScriptPath: filepath.Join(r.jobDir(), "script"), GroupIDs: groups, Hide: r.a.hidden(), Show: r.a.cfg.ShowPaths,
		ToolsDir: r.a.cfg.ToolsDir,
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
	if req.NTasks < 0 || req.Nodes < 0 || req.NTasksPerNode < 0 || req.CPUsPerTask < 0 || req.GPUsPerTask < 0 {
		return layout{}, spec.Errorf(spec.ErrInvalid, "negative task, node, CPU or GPU count")
	}
	nn := req.Nodes
	if nn > len(nodes) {
		return layout{}, spec.Errorf(spec.ErrInvalid, "step asks for %d nodes but %s", nn, have)
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
		if g := req.GPUsPerTask; g > 0 && n*g > len(nd.GPUs) {
			return layout{}, spec.Errorf(spec.ErrInvalid, "step needs %d GPUs on node %s (%d tasks x %d) but %s", n*g, nd.Node, n, g, have)
		}
	}
	return l, nil
}

func describeAlloc(nodes []spec.NodeAlloc) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s (%d CPUs, %d GPUs)", n.Node, n.CPUs, len(n.GPUs))
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
	log := r.log()
	bw := bufio.NewWriter(c)
	out := &stepStream{bw: bw}
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
	l, err := stepLayout(r.asg.Alloc.Nodes, req)
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	step := r.newStep()

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

	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// srun's stdin goes to task 0 (on the first node of the step).
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	stdinC := make(chan []byte, 64)
	go func() {
		for {
			select {
			case <-sctx.Done():
				return
			case b := <-stdinC:
				if b == nil {
					stdinW.Close()
					continue
				}
				_, _ = stdinW.Write(b) // task 0 gone: its input is dropped
			}
		}
	}()
	// At the end a write blocked on a task that never read is released.
	endStdin := func() { stdinW.Close(); stdinR.Close() }
	// Every node starts its tasks at once (each exec is a runc run).
	parts := make([]*stepPart, len(l.nodes))
	errs := make([]error, len(l.nodes))
	var startWG sync.WaitGroup
	for i, nd := range l.nodes {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			p, err := r.a.peer(nd.Node)
			if err == nil {
				st := stepTasks{
					Step: step, NodeIndex: i, Tasks: l.tasks[i], GPUsPerTask: req.GPUsPerTask,
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
		for _, p := range parts {
			if p != nil {
				p.signal(syscall.SIGKILL)
				p.wait()
			}
		}
		out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("start step %d.%d: %v", r.jobID, step, err)})
		return
	}
	log.Info("step started", "step", step, "tasks", nt, "nodes", names, "pty", req.Pty)
	out.send(api.StepMsg{Kind: api.StepStarted, Step: step, NTasks: nt, Nodes: names})
	r.recordStep(stepRecord{Step: step, NTasks: nt, Nodes: names, Tasks: l.tasks, Pty: req.Pty, Stdin: req.Stdin, KillOnBadExit: req.KillOnBadExit})
	defer r.forgetStep(step)
	signalAll := func(sig syscall.Signal) {
		for _, p := range parts {
			p.signal(sig)
		}
	}
	// srun's signals, and srun going away (kill the tasks: nobody reads
	// their output or exit any more).
	go func() {
		for {
			var m api.StepMsg
			if err := dec.Decode(&m); err != nil {
				select {
				case <-sctx.Done():
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
			case m.Kind == api.StepStdin && len(m.Data) == 0:
				select {
				case stdinC <- nil:
				case <-sctx.Done():
				}
			case m.Kind == api.StepStdin:
				// Backpressure once 64 chunks wait for task 0 to read.
				select {
				case stdinC <- m.Data:
				case <-sctx.Done():
				}
			}
		}
	}()
	var mu sync.Mutex
	worst := 0
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ex := range p.exits {
				out.send(ex)
				code := ex.Code
				mu.Lock()
				worst = max(worst, code)
				mu.Unlock()
				if code != 0 && req.KillOnBadExit {
					signalAll(syscall.SIGKILL)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	endStdin()
	log.Info("step ended", "step", step, "exit_code", worst)
	out.send(api.StepMsg{Kind: api.StepDone, Step: step, Code: worst})
}

// stepTasks is one node's share of a step.
type stepTasks struct {
	Step        int
	NodeIndex   int   // the node's index within the step
	Tasks       []int // global task IDs, in local order
	GPUsPerTask int
	Args, Env   []string
	Cwd         string
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
}

func (p *stepPart) signal(sig syscall.Signal) {
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
		part.signal(syscall.SIGKILL)
		wg.Wait()
		return nil, err
	}
	r.recordPart(st)
	go func() { wg.Wait(); r.forgetPart(st.Step); close(part.exits) }()
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
	if g := st.GPUsPerTask; g > 0 && (local+1)*g <= len(gpus) {
		mine := strings.Join(gpus[local*g:(local+1)*g], ",")
		over = append(over, "CUDA_VISIBLE_DEVICES="+mine, "SLURM_GPUS_ON_NODE="+strconv.Itoa(g))
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
