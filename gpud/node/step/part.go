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
// container and returns them running; their output goes to out.
func (n *Node) startTasks(ctx context.Context, allocID string, st tasks, out *stream) (*part, error) {
	ex, ok := n.cfg.Runtime.(runtime.Execer)
	if !ok {
		return nil, errors.New("this node's runtime cannot start processes in a running container")
	}
	al := n.host.Alloc(allocID)
	if al == nil {
		return nil, fmt.Errorf("node %s runs no part of allocation %s", n.cfg.Node, allocID)
	}
	v := al.view()
	if v.env == nil {
		return nil, fmt.Errorf("node %s has not started (or, after an agent restart, not re-learned) its part of allocation %s", n.cfg.Node, allocID)
	}
	own := map[string]string{}
	for _, kv := range v.env {
		k, v, _ := strings.Cut(kv, "=")
		if slices.Contains(nodeEnvKeys, k) {
			own[k] = v
		}
	}
	own["SLURMD_NODENAME"] = n.cfg.Node
	gpus := strings.FieldsFunc(own["CUDA_VISIBLE_DEVICES"], func(r rune) bool { return r == ',' })
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
	// Not here: the tasks' output may be held back until the step is
	// recorded, and the line waits with it.
	go warnCwd(out, st, cwdWarning)
	p := newPart(len(st.Tasks))
	var wg sync.WaitGroup
	execErrs := make([]error, len(st.Tasks))
	var startWG sync.WaitGroup
	for local, task := range st.Tasks {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			execErrs[local] = n.startTask(ctx, ex, v.ctr, st, local, task, own, gpus, mp, out, p, &wg)
		}()
	}
	startWG.Wait()
	if err := errors.Join(execErrs...); err != nil {
		out.releaseOutput() // the started tasks' waits drain their output
		p.signal(syscall.SIGKILL)
		wg.Wait()
		stopMPI()
		return nil, err
	}
	// The node's step tasks get the job's signals meant for steps
	// (scancel --signal without -b), whoever serves their step.
	al.reg.addPart(p)
	al.recordPart(st)
	go func() { wg.Wait(); stopMPI(); al.reg.removePart(p); al.forgetPart(st.Step); close(p.exits) }()
	return p, nil
}

// startTask execs one task of a step and has a goroutine report its exit
// on p.exits.
func (n *Node) startTask(ctx context.Context, ex runtime.Execer, ctr string, st tasks, local, task int,
	own map[string]string, gpus []string, mp *mpiPart, out *stream, p *part, wg *sync.WaitGroup) error {
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
	ptyTask(&cfg, st, local)
	proc, err := ex.Exec(ctx, ctr, cfg)
	if err != nil {
		return fmt.Errorf("task %d on node %s: %w", task, n.cfg.Node, err)
	}
	p.add(proc, cfg.Terminal)
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.exits <- waitExit(ctx, proc, task, n.cfg.Node)
	}()
	return nil
}

// waitExit waits for a task and reports its exit.
func waitExit(ctx context.Context, proc runtime.Process, task int, node string) api.StepMsg {
	m := api.StepMsg{Kind: api.StepExit, Task: task, Node: node}
	st, err := proc.Wait(context.WithoutCancel(ctx))
	if err != nil {
		m.Code = 1
		m.Error = err.Error()
	} else {
		m.Code, m.Signal = st.Code, int(st.Signal)
	}
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
