package step

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/pmi"
	"github.com/gpud/gpud/runtime"
)

// MPI in steps (srun --mpi, issue 26). Every node of a step with --mpi
// runs a PMI server for its tasks: with pmi2 the agent serves PMI-1 and
// PMI-2 itself on a socket in the job directory, which each task's
// launcher (gpud/launch) connects to and hands over as PMI_FD; with pmix
// the agent execs the PMIx helper (gpud-pmix, OpenPMIx's server library)
// into the allocation's container as the job's user, and the tasks get
// the variables it gives for each (PMIX_SERVER_URI*, PMIX_NAMESPACE,
// PMIX_RANK, ...). The servers of a step's nodes meet in fences: the
// agent of the step's first node keeps the step's pmi.Fence; a part in
// this process joins it directly, a part on another host through its
// step connection (StepPMIFence up with the node's contribution, down
// with every node's).

// pmiLink is how a node's PMI server reaches the step's first node: its
// fences, and a task's abort (which ends the whole step).
type pmiLink struct {
	fence func(ctx context.Context, round int, data []byte) ([][]byte, error)
	abort func(code int, msg string)
}

// pmiSockName is a step's PMI socket in the job directory.
func pmiSockName(step int) string { return "pmi-" + strconv.Itoa(step) + ".sock" }

// helperName is the PMIx helper beside gpud's tools.
const helperName = "gpud-pmix"

// helperStartTimeout bounds the PMIx helper's setup.
const helperStartTimeout = time.Minute

// mpiPart is a node's PMI server of one step.
type mpiPart struct {
	env  map[int][]string // per local task (by global ID): the PMI variables
	sock string           // pmi2: the socket the launcher connects to
	stop func()
}

// taskEnv is task's PMI environment.
func (m *mpiPart) taskEnv(task int) []string {
	if m == nil {
		return nil
	}
	return m.env[task]
}

// startMPI starts this node's PMI server of the step st (nil with no
// --mpi), in allocation al's container ctr.
func (n *Node) startMPI(ctx context.Context, al *Alloc, ctr string, uid, gid int, st tasks) (*mpiPart, error) {
	switch st.MPI {
	case "", pmi.None:
		return nil, nil
	case pmi.PMI2:
		return n.startPMI2(ctx, al, uid, gid, st)
	case pmi.PMIx:
		return n.startPMIx(ctx, al, ctr, uid, gid, st)
	}
	return nil, fmt.Errorf("--mpi=%s: unknown MPI type", st.MPI)
}

// nodeOf is each task's node index in the step.
func nodeOf(stepTasks [][]int) []int {
	size := 0
	for _, ts := range stepTasks {
		size += len(ts)
	}
	out := make([]int, size)
	for i, ts := range stepTasks {
		for _, t := range ts {
			if t >= 0 && t < size {
				out[t] = i
			}
		}
	}
	return out
}

// kvsName is the step's PMI key-value space and PMI_JOBID, as Slurm
// names it.
func (al *Alloc) kvsName(step int) string { return fmt.Sprintf("%d.%d", al.jobID, step) }

// startPMI2 serves PMI-1 and PMI-2 to this node's tasks of st on a socket
// in the job directory, owned by the job's user.
func (n *Node) startPMI2(ctx context.Context, al *Alloc, uid, gid int, st tasks) (*mpiPart, error) {
	if n.cfg.Tools == "" {
		return nil, fmt.Errorf("--mpi=pmi2 on node %s: the node agent has no task launcher (gpuq beside gpud)", n.cfg.Node)
	}
	kvs := al.kvsName(st.Step)
	size := len(nodeOf(st.StepTasks))
	srv := pmi.NewNode(pmi.NodeConfig{KVSName: kvs, Size: size, Ranks: st.Tasks, Mapping: pmi.ProcessMapping(nodeOf(st.StepTasks)),
		Fence: st.PMI.fence, Abort: func(rank, code int, msg string) { st.PMI.abort(code, msg) }, Log: al.logger()})
	path := filepath.Join(al.jobDir(), pmiSockName(st.Step))
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--mpi=pmi2 on node %s: listen for the tasks' PMI: %w", n.cfg.Node, err)
	}
	// The job directory is root's and only root writes it: the path is
	// the socket just made (as the step socket, alloc.go).
	if euid == 0 {
		if err := os.Chown(path, uid, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("--mpi=pmi2 on node %s: give the PMI socket to the job's user: %w", n.cfg.Node, err)
		}
	}
	_ = os.Chmod(path, 0o600)
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); srv.Serve(sctx, c) }()
		}
	}()
	mp := &mpiPart{env: map[int][]string{}, sock: path}
	for _, t := range st.Tasks {
		mp.env[t] = append(pmi.Env(kvs, t, size), "SLURM_MPI_TYPE="+pmi.PMI2)
	}
	mp.stop = sync.OnceFunc(func() {
		ln.Close()
		srv.Close()
		cancel()
		wg.Wait()
		_ = os.Remove(path)
	})
	return mp, nil
}

// startPMIx execs the PMIx helper for this node's tasks of st and waits
// until it gave each task its variables.
func (n *Node) startPMIx(ctx context.Context, al *Alloc, ctr string, uid, gid int, st tasks) (*mpiPart, error) {
	ex, ok := n.cfg.Runtime.(runtime.Execer)
	if !ok {
		return nil, errors.New("this node's runtime cannot start processes in a running container")
	}
	helper := filepath.Join(n.cfg.Tools, helperName)
	if _, err := os.Stat(helper); n.cfg.Tools == "" || err != nil {
		return nil, fmt.Errorf("--mpi=pmix on node %s: no PMIx helper %s beside gpud (it is built with libpmix-dev installed: make deps build)", n.cfg.Node, helperName)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	errBuf := &tailBuffer{max: 4096}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	proc, err := ex.Exec(hctx, ctr, runtime.ExecConfig{ID: fmt.Sprintf("step%d-pmix", st.Step),
		Args: []string{helper}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp"}, Cwd: "/",
		Stdin: inR, Stdout: outW, Stderr: errBuf})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("--mpi=pmix on node %s: start the PMIx helper: %w", n.cfg.Node, err)
	}
	exited := make(chan struct{})
	go func() {
		_, _ = proc.Wait(context.WithoutCancel(ctx))
		_ = proc.Delete(context.WithoutCancel(ctx))
		outW.Close()
		close(exited)
	}()
	conn := pmi.NewHelperConn(outR, inW)
	stop := sync.OnceFunc(func() {
		inW.Close() // the helper finalizes its server and exits
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = proc.Signal(context.WithoutCancel(ctx), syscall.SIGKILL)
			<-exited
		}
		cancel()
		outR.Close()
	})
	fail := func(err error) (*mpiPart, error) {
		stop()
		if t := errBuf.String(); t != "" {
			err = fmt.Errorf("%w (helper: %s)", err, t)
		}
		return nil, fmt.Errorf("--mpi=pmix on node %s: %w", n.cfg.Node, err)
	}
	hs := pmi.HelperStep{Nspace: fmt.Sprintf("slurm.pmix.%d.%d", al.jobID, st.Step), JobID: al.kvsName(st.Step),
		Node: st.NodeIndex, Nodes: st.StepNodes, Tasks: st.StepTasks, UID: uid, GID: gid,
		TmpDir: fmt.Sprintf("/tmp/gpud-pmix.%d.%d.%d", al.jobID, st.Step, st.NodeIndex)}
	if err := conn.Send(pmi.HelperMsg{Kind: pmi.HelperStart, Step: &hs}); err != nil {
		return fail(err)
	}
	mp := &mpiPart{env: map[int][]string{}}
	msgs := make(chan pmi.HelperMsg, 16)
	go func() {
		defer close(msgs)
		for {
			m, err := conn.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	timeout := time.After(helperStartTimeout)
	for ready := false; !ready; {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				return fail(errors.New("the PMIx helper exited before it was ready"))
			case m.Kind == pmi.HelperEnv:
				mp.env[m.Rank] = append(m.Env, "SLURM_MPI_TYPE="+pmi.PMIx)
			case m.Kind == pmi.HelperReady:
				ready = true
			case m.Kind == pmi.HelperError:
				return fail(errors.New(m.Error))
			}
		case <-timeout:
			return fail(fmt.Errorf("the PMIx helper was not ready after %s", helperStartTimeout))
		}
	}
	// From now on: fences and aborts, until the helper ends.
	go func() {
		for m := range msgs {
			switch m.Kind {
			case pmi.HelperFence:
				go func() {
					parts, err := st.PMI.fence(hctx, m.Round, m.Data)
					reply := pmi.HelperMsg{Kind: pmi.HelperFenced, Round: m.Round, Parts: parts}
					if err != nil {
						reply.Error = err.Error()
					}
					_ = conn.Send(reply)
				}()
			case pmi.HelperAbort:
				st.PMI.abort(m.Code, m.Error)
			case pmi.HelperError:
				al.logger().Warn("PMIx helper failed", "step", st.Step, "err", m.Error)
			}
		}
	}()
	mp.stop = stop
	return mp, nil
}

// tailBuffer keeps the last max bytes written (a helper's stderr, for
// the error that names why it failed).
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// stepPMI is a step's side of MPI on its first node: the fence every
// node's server joins and what a task's abort does.
type stepPMI struct {
	fence *pmi.Fence
	mu    sync.Mutex
	kill  func() // ends the step's tasks, once they run
	abort bool   // an abort came before kill was known
	out   *stream
}

func newStepPMI(nodes int, out *stream) *stepPMI {
	return &stepPMI{fence: pmi.NewFence(nodes), out: out}
}

// link is node i's way to the fence.
func (s *stepPMI) link(i int) pmiLink {
	return pmiLink{
		fence: func(ctx context.Context, round int, data []byte) ([][]byte, error) {
			return s.fence.Join(ctx, i, round, data)
		},
		abort: s.abortStep,
	}
}

// abortStep ends the step: a task called PMI_Abort (MPI_Abort).
func (s *stepPMI) abortStep(code int, msg string) {
	s.mu.Lock()
	kill := s.kill
	first := !s.abort
	s.abort = true
	s.mu.Unlock()
	if first {
		text := fmt.Sprintf("srun: error: a task called MPI_Abort (PMI abort, code %d)", code)
		if msg != "" {
			text += ": " + msg
		}
		s.out.output(api.StepStderr, 0, []byte(text+"; ending the step\n"))
	}
	s.fence.Fail(errors.New("the step was aborted"))
	if kill != nil {
		kill()
	}
}

// started gives the fence the step's kill once its tasks run (an abort
// that came first takes effect now).
func (s *stepPMI) started(kill func()) {
	s.mu.Lock()
	s.kill = kill
	aborted := s.abort
	s.mu.Unlock()
	if aborted {
		kill()
	}
}

// pmiRelay is a kept part's link to the step's first node (keep.go):
// its PMI server's fence requests and aborts go up the connection that
// follows the part, the answers come down it. While no connection
// follows the part they wait; a new connection gets every request not
// answered yet again (the first node answers a repeated one with the same
// parts: pmi.Fence), so a fence survives a lost connection between the
// agents. The step's first node keeps the fence: if its agent restarts,
// the fence is lost and the servers' next fences fail.
type pmiRelay struct {
	mu      sync.Mutex
	out     *stream // the connection that follows the part; nil while none
	waiting map[int]*fenceWait
	aborts  []api.StepMsg // sent while no connection followed
	closed  bool
	done    chan struct{}
}

// fenceWait is a fence request waiting for its answer.
type fenceWait struct {
	data   []byte
	answer chan api.StepMsg
}

func newPMIRelay() *pmiRelay {
	return &pmiRelay{waiting: map[int]*fenceWait{}, done: make(chan struct{})}
}

// link is the part's PMI server's way to the fence.
func (r *pmiRelay) link() pmiLink {
	return pmiLink{
		fence: func(ctx context.Context, round int, data []byte) ([][]byte, error) {
			w := &fenceWait{data: data, answer: make(chan api.StepMsg, 1)}
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				return nil, errors.New("the step's part ended")
			}
			r.waiting[round] = w
			out := r.out
			r.mu.Unlock()
			if out != nil {
				out.send(api.StepMsg{Kind: api.StepPMIFence, Round: round, Data: data})
			}
			select {
			case m := <-w.answer:
				if m.Error != "" {
					return nil, errors.New(m.Error)
				}
				return m.Parts, nil
			case <-r.done:
				return nil, errors.New("the step's part ended")
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
		abort: func(code int, msg string) {
			m := api.StepMsg{Kind: api.StepPMIAbort, Code: code, Error: msg}
			r.mu.Lock()
			out := r.out
			if out == nil {
				r.aborts = append(r.aborts, m)
			}
			r.mu.Unlock()
			if out != nil {
				out.send(m)
			}
		},
	}
}

// attach sends what waits up a new connection, and what follows.
func (r *pmiRelay) attach(out *stream) {
	r.mu.Lock()
	r.out = out
	var ms []api.StepMsg
	for round, w := range r.waiting {
		ms = append(ms, api.StepMsg{Kind: api.StepPMIFence, Round: round, Data: w.data})
	}
	ms = append(ms, r.aborts...)
	r.aborts = nil
	r.mu.Unlock()
	for _, m := range ms {
		out.send(m)
	}
}

// detach: the connection is gone; requests wait for the next.
func (r *pmiRelay) detach() {
	r.mu.Lock()
	r.out = nil
	r.mu.Unlock()
}

// answer passes the first node's answer to a fence (a repeated request's
// second answer finds none waiting).
func (r *pmiRelay) answer(m api.StepMsg) {
	r.mu.Lock()
	w := r.waiting[m.Round]
	delete(r.waiting, m.Round)
	r.mu.Unlock()
	if w != nil {
		w.answer <- m
	}
}

// close fails the fences waiting: the part ended or was given up.
func (r *pmiRelay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.done)
	}
}

// answerFence joins a peer's PMI server to the step's fence for it (a
// StepPMIFence from the peer, on the first node) and sends the answer
// with send. A step this agent re-adopted after a restart has no fence
// any more: the peer's server is told so.
func answerFence(ctx context.Context, link pmiLink, m api.StepMsg, send func(api.StepMsg) bool) {
	reply := api.StepMsg{Kind: api.StepPMIFence, Round: m.Round}
	if link.fence == nil {
		reply.Error = "the step's first node lost its PMI fence (its agent restarted during the step)"
	} else {
		parts, err := link.fence(ctx, m.Round, m.Data)
		reply.Parts = parts
		if err != nil {
			reply.Error = err.Error()
		}
	}
	send(reply)
}
