package step

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
)

// tasks is one node's share of a step.
type tasks struct {
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
	// MPI is the step's --mpi (pmi2, pmix; "" none), StepNodes and
	// StepTasks the whole step's nodes and each one's tasks, PMI how the
	// node's PMI server reaches the step's first node (mpi.go).
	MPI       string
	StepNodes []string
	StepTasks [][]int
	PMI       pmiLink
	// CPU binds each task's CPUs (bind.go).
	CPU cpuBind
	// Kept says this node runs the part for another node's agent, over
	// the step listener (keep.go): a restarted agent keeps it for that
	// agent to follow again.
	Kept bool
}

// part is one node's running tasks of a step.
type part struct {
	mu    sync.Mutex
	procs []runtime.Process
	tty   runtime.Process  // task 0 on its terminal (srun --pty), if here
	exits chan api.StepMsg // one per task, then closed
	// remote signals the tasks of a part on another host (remotePeer);
	// remoteResize sets the size of its terminal (srun --pty, task 0).
	remote       func(syscall.Signal)
	remoteResize func(rows, cols int)
	// release, once the step's end reached srun, lets the part go: its
	// node forgets its record (or, on another host, is told so).
	release     func()
	releaseOnce sync.Once
}

func newPart(ntasks int) *part { return &part{exits: make(chan api.StepMsg, ntasks)} }

func (p *part) signal(sig syscall.Signal) {
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

func (p *part) wait() {
	for range p.exits {
	}
}

// done lets the part go once the step's end reached srun (or the step
// was given up): it need not be followed again.
func (p *part) done() {
	if p.release != nil {
		p.releaseOnce.Do(p.release)
	}
}

// add keeps a started task's process (tty: on the step's terminal).
func (p *part) add(proc runtime.Process, tty bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs = append(p.procs, proc)
	if tty {
		p.tty = proc
	}
}

// startTasks execs this node's tasks of a step into the allocation's
// container and returns them running; their output goes to out. A node
// that does not hold its part (yet) answers notHeld.
func (n *Node) startTasks(ctx context.Context, allocID string, st tasks, out sink) (*part, error) {
	ex, ok := n.cfg.Runtime.(runtime.Execer)
	if !ok {
		return nil, errors.New("this node's runtime cannot start processes in a running container")
	}
	al, err := n.holder(allocID)
	if err != nil {
		return nil, err
	}
	v := al.view()
	own, gpus := n.nodeOwn(v.env)
	var cwdWarning string
	st.Cwd, cwdWarning = stepCwd(ctx, n.cfg.Runtime, v.ctr, st.Cwd) // cwd.go
	// The node's PMI server of the step, before its tasks (mpi.go).
	mp, err := n.startMPI(ctx, al, v.ctr, int(v.asg.Job.UID), int(v.asg.Job.GID), st)
	if err != nil {
		return nil, err
	}
	stopMPI := func() {
		if mp != nil {
			mp.stop()
		}
	}
	// srun's stream (this node serves the step, or an in-process peer
	// does): what the tasks write while it holds their output is spooled
	// here, so a kill of the agent does not lose it (early.go).
	if s, ok := out.(*stream); ok && st.Step >= 0 {
		out = earlySink{s: s, sp: &spool{al: al, step: st.Step}}
	}
	// Not here: the tasks' output may be held back until the step is
	// recorded, and the line waits with it.
	go warnCwd(out, st, cwdWarning)
	p := newPart(len(st.Tasks))
	// Recorded before any task runs: a restarted agent finds every task.
	al.recordPart(st)
	var wg sync.WaitGroup
	execErrs := make([]error, len(st.Tasks))
	var startWG sync.WaitGroup
	for local, task := range st.Tasks {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			execErrs[local] = n.startTask(ctx, ex, al, v.ctr, st, local, task, own, gpus, mp, out, p, &wg)
		}()
	}
	startWG.Wait()
	if err := errors.Join(execErrs...); err != nil {
		if e, ok := out.(earlySink); ok {
			e.s.releaseOutput() // the started tasks' waits drain their output
		}
		p.signal(syscall.SIGKILL)
		wg.Wait()
		stopMPI()
		al.forgetPart(st.Step)
		return nil, err
	}
	// The node's step tasks get the job's signals meant for steps
	// (scancel --signal without -b), whoever serves their step.
	al.reg.addPart(p)
	p.release = func() { al.forgetPart(st.Step) }
	go func() { wg.Wait(); stopMPI(); al.reg.removePart(p); close(p.exits) }()
	return p, nil
}

// nodeOwn is what of the node's part of the container's environment env
// its tasks get as their own (nodeEnvKeys), and the node's GPUs.
func (n *Node) nodeOwn(env []string) (own map[string]string, gpus []string) {
	own = map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(nodeEnvKeys, k) {
			own[k] = v
		}
	}
	own["SLURMD_NODENAME"] = n.cfg.Node
	gpus = strings.FieldsFunc(own["CUDA_VISIBLE_DEVICES"], func(r rune) bool { return r == ',' })
	return own, gpus
}

// holder is this node's steps of allocID if it holds its part: its
// container runs (or, for the batch node, is about to) and the agent knows
// its assignment.
func (n *Node) holder(allocID string) (*Alloc, error) {
	al := n.host.Alloc(allocID)
	if al == nil {
		return nil, notHeld{n.cfg.Node, fmt.Errorf("node %s runs no part of allocation %s", n.cfg.Node, allocID)}
	}
	if al.view().env == nil {
		return nil, notHeld{n.cfg.Node, fmt.Errorf("node %s has not started (or, after an agent restart, not re-learned) its part of allocation %s", n.cfg.Node, allocID)}
	}
	return al, nil
}

// notHeld says a node of the allocation does not (yet) hold its part:
// its agent runs no part of it, has not started it or re-learned it
// after a restart, or cannot be reached. A step waits a while for it
// (serve.go); a peer's listener answers it with Retry.
type notHeld struct {
	node string
	err  error
}

func (e notHeld) Error() string { return e.err.Error() }
func (e notHeld) Unwrap() error { return e.err }

// isNotHeld says err is (or wraps) a notHeld.
func isNotHeld(err error) bool {
	var nh notHeld
	return errors.As(err, &nh)
}

// startTask execs one task of a step and has a goroutine report its exit
// on p.exits, recorded before the process is deleted (so a restarted
// agent still knows it).
func (n *Node) startTask(ctx context.Context, ex runtime.Execer, al *Alloc, ctr string, st tasks, local, task int,
	own map[string]string, gpus []string, mp *mpiPart, out sink, p *part, wg *sync.WaitGroup) error {
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
	// under --gpus-per-task or --gpu-bind (ledger.go).
	mine, err := taskGPUs(gpus, st.GPUIdx, st.Bind, local)
	if err != nil {
		return fmt.Errorf("task %d on node %s: %w", task, n.cfg.Node, err)
	}
	if len(gpus) > 0 {
		over = append(over, "CUDA_VISIBLE_DEVICES="+strings.Join(mine, ","), "SLURM_GPUS_ON_NODE="+strconv.Itoa(len(mine)))
	}
	over = append(over, mp.taskEnv(task)...)
	args, err := n.taskArgs(st, local, task, mp, n.gpuNUMA(gpus, splitList(own["GPUD_GPUS"]), mine)) // bind.go
	if err != nil {
		return err
	}
	cfg := runtime.ExecConfig{
		ID:   execID(st.Step, task),
		Args: args, Env: MergeEnv(st.Env, over), Cwd: st.Cwd,
		Stdout: taskWriter{out, api.StepStdout, task}, Stderr: taskWriter{out, api.StepStderr, task},
		Stdin: stdinOf(st, local),
	}
	if cfg.Stdin != nil && st.Step >= 0 {
		cfg.Stdin = al.countStdin(st.Step, cfg.Stdin, 0) // stdin.go
	}
	ptyTask(&cfg, st, local)
	proc, err := ex.Exec(ctx, ctr, cfg)
	var warned *warnFirst
	if errors.Is(err, runtime.ErrNoCwd) && cfg.Cwd != noCwd {
		// As slurmstepd: a working directory the job's container does
		// not show (outside its mounts, or under the host's /tmp, which
		// is the job's own there) runs the task in /tmp, and says so on
		// its stderr, before anything it writes. (Not at once: srun's
		// stream holds output until every part started.)
		warned = &warnFirst{msg: fmt.Sprintf("gpud: warning: couldn't chdir to `%s': not in the job's container: going to %s instead\n", cfg.Cwd, noCwd),
			to: cfg.Stderr}
		if cfg.Stderr == nil {
			warned.to = cfg.Stdout // a terminal: one output
		}
		cfg.Stdout, cfg.Stderr = warned.before(cfg.Stdout), warned.before(cfg.Stderr)
		cfg.Cwd = noCwd
		proc, err = ex.Exec(ctx, ctr, cfg)
	}
	if err != nil {
		return fmt.Errorf("task %d on node %s: %w", task, n.cfg.Node, err)
	}
	p.add(proc, cfg.Terminal)
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := al.waitExit(ctx, proc, st.Step, task)
		if warned != nil {
			warned.flush() // a task that wrote nothing
		}
		p.exits <- m
	}()
	return nil
}

// warnFirst writes msg to to before a task's first output, or at flush
// (its exit) when it wrote none.
type warnFirst struct {
	mu   sync.Mutex
	to   io.Writer // nil: the task's output is dropped
	msg  string
	done bool
}

// before is w with the warning written first.
func (f *warnFirst) before(w io.Writer) io.Writer {
	if w == nil {
		return nil
	}
	return writerFunc(func(p []byte) (int, error) {
		f.flush()
		return w.Write(p)
	})
}

func (f *warnFirst) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done && f.to != nil {
		f.done = true
		_, _ = io.WriteString(f.to, f.msg)
	}
}

type writerFunc func(p []byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

// noCwd is where a task whose working directory the container does not
// show runs.
const noCwd = "/tmp"

// waitExit waits for a task of step and reports its exit, recorded in
// the part's record before the process is deleted.
func (al *Alloc) waitExit(ctx context.Context, proc runtime.Process, step, task int) api.StepMsg {
	m := api.StepMsg{Kind: api.StepExit, Task: task, Node: al.n.cfg.Node}
	st, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		m.Code = 1
		m.Error = err.Error()
	} else {
		m.Code, m.Signal = st.Code, int(st.Signal)
	}
	al.noteExit(step, m) // state.go
	_ = proc.Delete(context.WithoutCancel(ctx))
	return m
}

// stdinOf is the input of a node's local task: the step's stdin for the
// step's task 0, none for the others.
func stdinOf(st tasks, local int) io.Reader {
	if st.Stdin != nil && st.NodeIndex == 0 && local == 0 {
		return st.Stdin
	}
	return nil
}
