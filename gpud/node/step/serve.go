package step

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/pmi"
	"github.com/gpud/gpud/gpud/spec"
)

// Job steps (DESIGN §7 "Allocations and steps"). Every node of an
// allocation runs one container: the first runs the batch script, the
// others a holder that waits. srun in the job asks its node's agent, over
// the job's step socket (jobs/<container>/step.sock, bind-mounted into the
// container with the job directory and owned by the job's user), for a
// step; that agent lays the tasks out in blocks over the allocation's
// nodes and asks each node's agent to exec its tasks into its allocation
// container (peer). Output and exits stream back through the first
// agent to srun.
//
// Peers: under `gpud standalone` every agent is in one process and a
// Peers registry holds them all; agents on separate hosts reach each
// other's step listeners over TLS with their node certificates
// (listen.go), with the same three calls: start a node's tasks, signal
// them, stream their output and exits back.

// serveConn runs one srun's step from request to done.
func (al *Alloc) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	out := newStream(c)
	dec := json.NewDecoder(bufio.NewReader(c))
	var req api.StepRequest
	if err := dec.Decode(&req); err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: "bad step request: " + err.Error()})
		return
	}
	if req.Attach {
		al.reattach(ctx, dec, out, req.Step, req.Received)
		return
	}
	if len(req.Args) == 0 {
		out.send(api.StepMsg{Kind: api.StepError, Error: "no command given: srun runs a program (srun [OPTIONS] PROGRAM [ARGS...])"})
		return
	}
	if req.HetGroup > 0 {
		target, err := al.hetTarget(req.HetGroup - 1)
		if err != nil {
			out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
			return
		}
		if target != al {
			// The component's own variables, not the caller's: its id,
			// nodes and layout (as a step from outside gets them).
			req.Env = MergeEnv(dropSlurmVars(req.Env), jobVars(target.view().env))
		}
		al = target
	}
	al.run(ctx, req, dec, out)
}

// hetTarget is the allocation of component k of al's heterogeneous job,
// whose steps srun --het-group=k runs: its first node's, served by this
// node's agent or, under gpud standalone, by another agent of this
// process. A component whose first node is another host's is refused
// for now: its agent takes steps only from srun with a ticket.
func (al *Alloc) hetTarget(k int) (*Alloc, error) {
	v := al.view()
	if len(v.asg.Het) == 0 {
		if k == 0 {
			return al, nil // Slurm's --het-group=0 of a plain job
		}
		return nil, fmt.Errorf("--het-group=%d: job %d is not a heterogeneous job; leave --het-group out", k, v.asg.Job.ID)
	}
	i := slices.IndexFunc(v.asg.Het, func(h spec.HetComponent) bool { return h.Offset == k })
	if i < 0 {
		return nil, fmt.Errorf("--het-group=%d: job %d has components 0-%d; name one of them", k, v.asg.Job.HetJobID, len(v.asg.Het)-1)
	}
	hc := v.asg.Het[i]
	if hc.JobID == v.asg.Job.ID {
		return al, nil
	}
	if hc.AllocID == "" || len(hc.Nodes) == 0 {
		return nil, fmt.Errorf("--het-group=%d: component %d+%d (job %d) holds no allocation now (ended?); its steps cannot run", k, v.asg.Job.HetJobID, k, hc.JobID)
	}
	first := hc.Nodes[0]
	p, err := al.n.peer(first)
	if err != nil {
		return nil, fmt.Errorf("--het-group=%d: reach node %s, first of component %d+%d: %v", k, first.Node, v.asg.Job.HetJobID, k, err)
	}
	t := p.owner(hc.AllocID)
	if t == nil {
		return nil, fmt.Errorf("--het-group=%d: component %d+%d's first node %s is another host's; gpud runs a component's steps from a node of the same agent only (run srun --het-group=%d from that component's node, or with salloc/srun outside the job)", k, v.asg.Job.HetJobID, k, first.Node, k)
	}
	if tv := t.view(); tv.env == nil || !tv.running {
		return nil, fmt.Errorf("--het-group=%d: component %d+%d has not started on node %s yet; retry in a moment", k, v.asg.Job.HetJobID, k, first.Node)
	}
	return t, nil
}

// dropSlurmVars is env without the job's variables (jobVars' names).
func dropSlurmVars(env []string) []string {
	keep := jobVars(nil)
	for _, kv := range env {
		if len(jobVars([]string{kv})) == 0 {
			keep = append(keep, kv)
		}
	}
	return keep
}

// run runs srun's step req, whose later messages (signals, stdin) come
// from dec and whose frames go to out: from the job's step socket or
// from the node's step listener (srun with the allocation's ticket).
func (al *Alloc) run(ctx context.Context, req api.StepRequest, dec *json.Decoder, out *stream) {
	log := al.logger()
	// The request sent again (this agent restarted before srun heard of
	// the step, or before it answered): srun follows the step started
	// for it. A step start is keyed by srun's request key.
	if step, ok := al.stepOfKey(req.Key); ok {
		log.Info("srun sent a step request again; it follows the step started for it", "step", step)
		al.reattach(ctx, dec, out, step, nil)
		return
	}
	v := al.view()
	l, err := stepLayout(v.asg.Alloc.Nodes, req)
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	// A node steps cannot reach refuses the step before any task runs.
	for _, nd := range l.nodes {
		if _, err := al.n.peer(nd); err != nil {
			out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
			return
		}
	}
	bind, err := parseGPUBind(req.GPUBind, req.GPUsPerTask) // ledger.go
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	mpiType, cpu, err := stepMPIBind(req, v.asg.MPIDefault) // mpi.go, bind.go
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	// srun's messages (signals, stdin) and its going away, from now on.
	msgs := readMsgs(dec)
	// The step's share of the allocation: it waits while running steps
	// hold what it needs (ledger.go).
	ledger := al.ledger()
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
	// The step's share goes back to the ledger before srun hears of its
	// end (giveBack below): a script's next srun must find it free, not
	// wait for this one's end to be written to disk ("Requested nodes
	// are busy" between two back-to-back steps under load).
	giveBack := sync.OnceFunc(func() { ledger.give(l, grant) })
	defer giveBack()
	step, err := al.newID(ctx) // record.go: numbered per job
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}

	names, nt := l.names(), l.ntasks()
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
	if req.Distribution != "" {
		stepEnv = append(stepEnv, "SLURM_DISTRIBUTION="+req.Distribution)
	}

	// Recorded before any task runs: srun sending its request again
	// after an agent restart follows this step (its key), and the
	// restarted agent re-adopts it.
	early := al.stepAcct(step, req, l, grant)
	rec := stepRecord{Step: step, Key: req.Key, NTasks: nt, Nodes: names, Tasks: l.tasks, Pty: req.Pty, Stdin: req.Stdin,
		KillOnBadExit: req.KillOnBadExit, Acct: &early, Grant: recordGrant(grant)}
	al.recordStep(rec)

	// srun learns the step and where each task runs before any task
	// writes output (its %s and %n output patterns).
	perNode := make([]int, len(l.tasks))
	for i, t := range l.tasks {
		perNode[i] = len(t)
	}
	var taskNodes []int
	if !l.blocked() {
		taskNodes = l.taskNodes()
	}
	out.send(api.StepMsg{Kind: api.StepLayout, Step: step, NTasks: nt, Nodes: names, TasksPerNode: perNode, TaskNodes: taskNodes})
	// The step's PMI fence, when it has MPI (mpi.go).
	var sp *stepPMI
	if mpiType != pmi.None {
		sp = newStepPMI(len(l.nodes), out)
		defer sp.fence.Fail(nil) // a server still waiting when the step ends
	}

	// Task 0's input is acknowledged to srun when task 0 runs here
	// (stdin.go).
	var stdinAcks []api.StepCount
	if req.Stdin && !req.Pty && names[0] == al.n.cfg.Node {
		stdinAcks = stdinCount(0)
		al.followStdin(step, out)
		defer al.followStdin(step, nil)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	// srun's stdin goes to task 0 (on the first node of the step).
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	// At the end a write blocked on a task that never read is released.
	endStdin := func() { stdinW.Close(); stdinR.Close() }
	// Output waits until the step is recorded and srun told it started.
	out.holdOutput()
	out.releasedHook = al.n.releasedHook // before any task runs
	defer out.releaseOutput()
	// Every node starts its tasks at once (each exec is a runc run).
	parts := make([]*part, len(l.nodes))
	errs := make([]error, len(l.nodes))
	var startWG sync.WaitGroup
	waiting := al.waitNotice(out)
	for i, nd := range l.nodes {
		startWG.Add(1)
		go func() {
			defer startWG.Done()
			st := tasks{
				Step: step, NodeIndex: i, Tasks: l.tasks[i], GPUIdx: grant.gpus[i], Bind: bind,
				Args: req.Args, Env: MergeEnv(req.Env, stepEnv), Cwd: req.Cwd,
				Pty: req.Pty, Rows: req.Rows, Cols: req.Cols, CPU: cpu,
			}
			if sp != nil {
				st.MPI, st.StepNodes, st.StepTasks, st.PMI = mpiType, names, l.tasks, sp.link(i)
			}
			if i == 0 && req.Stdin {
				st.Stdin = stdinR
			}
			parts[i], errs[i] = al.startPart(sctx, nd, st, out, waiting)
		}()
	}
	startWG.Wait()
	if err := errors.Join(errs...); err != nil {
		out.releaseOutput() // a part's wait drains its output
		for _, p := range parts {
			if p != nil {
				p.signal(syscall.SIGKILL)
				p.wait()
				p.done()
			}
		}
		al.forgetStep(step)
		// The job's part ends before srun hears: its script then cannot
		// carry on as if the step had run.
		al.failGang(errs, step)
		msg := fmt.Sprintf("start step %d.%d: %v", al.jobID, step, err)
		out.send(api.StepMsg{Kind: api.StepError, Error: msg})
		return
	}
	signalAll := func(sig syscall.Signal) {
		for _, p := range parts {
			p.signal(sig)
		}
	}
	if sp != nil {
		sp.started(func() { signalAll(syscall.SIGKILL) })
	}
	if h := al.n.startedHook; h != nil {
		h()
	}
	served := al.started(ctx, step, req, l, grant, signalAll) // record.go
	// For the restarted agent to record its end (state.go): recorded
	// before srun hears of the start or sees any output.
	acct := served.rec
	rec.Acct, rec.AcctStarted = &acct, true
	al.recordStep(rec)
	log.Info("step started", "step", step, "tasks", nt, "nodes", names, "pty", req.Pty)
	out.send(api.StepMsg{Kind: api.StepStarted, Step: step, NTasks: nt, Nodes: names, TasksPerNode: perNode, TaskNodes: taskNodes, Counts: stdinAcks})
	out.releaseOutput()
	defer al.forgetStep(step)
	worst, worstSig := follow(ctx, msgs, parts, stdinW, req.KillOnBadExit, out)
	endStdin()
	log.Info("step ended", "step", step, "exit_code", worst)
	al.ends.add() // before srun hears: its script may end the job at once
	defer al.ends.done()
	giveBack() // its tasks have exited
	out.send(api.StepMsg{Kind: api.StepDone, Step: step, Code: worst})
	// srun has the step's end: no part need be followed again.
	for _, p := range parts {
		p.done()
	}
	cancel()
	al.ended(ctx, served, worst, worstSig) // after srun has its answer: this commits to disk
}

// partWait bounds how long a step waits for a node of the allocation that
// does not hold its part yet (its agent starts it late, or restarts). A
// variable for tests.
var partWait = 2 * time.Minute

// startPart starts node nd's part of a step, waiting up to partWait while
// the node does not hold its part of the allocation (notHeld); waiting is
// called once it waits.
func (al *Alloc) startPart(ctx context.Context, nd spec.NodeAlloc, st tasks, out *stream, waiting func(node string, err error)) (*part, error) {
	deadline := time.Now().Add(partWait)
	pause := 100 * time.Millisecond
	for {
		p, err := al.n.peer(nd)
		if err != nil {
			return nil, err
		}
		running, err := p.startTasks(ctx, al.allocID, st, out)
		if err == nil || !isNotHeld(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return running, err
		}
		waiting(nd.Node, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// waitNotice tells srun, once, that its step waits for a node.
func (al *Alloc) waitNotice(out *stream) func(node string, err error) {
	var once sync.Once
	return func(node string, err error) {
		once.Do(func() {
			al.logger().Info("step waits for a node of the allocation to hold its part", "node_peer", node, "err", err, "max", partWait)
			out.send(api.StepMsg{Kind: api.StepWaiting, Error: fmt.Sprintf(
				"waiting up to %v for node %s to start its part of the allocation (%v)", partWait, node, err)})
		})
	}
}

// failGang ends the job when a step could not start because a node of
// its allocation does not hold its part: the job cannot do its work
// without it, and must not end COMPLETED on what ran without it (Slurm
// fails a job whose launch fails on a node). A batch job's part here ends
// NODE_FAIL (the controller requeues it if it may); an interactive
// allocation's srun decides for itself.
func (al *Alloc) failGang(errs []error, step int) {
	v := al.view()
	if v.asg == nil || v.asg.Job.Interactive {
		return
	}
	for _, err := range errs {
		var nh notHeld
		if errors.As(err, &nh) {
			reason := fmt.Sprintf("step %d.%d could not start on node %s, which does not hold its part of the allocation: %v", al.jobID, step, nh.node, nh.err)
			al.logger().Warn("a node of the allocation does not hold its part; ending the job", "node_peer", nh.node, "step", step, "err", nh.err)
			al.n.host.Fail(al.allocID, reason)
			return
		}
	}
}

// readMsgs decodes srun's messages after its request (signals, resizes,
// stdin); the channel is closed when srun goes away.
func readMsgs(dec *json.Decoder) <-chan api.StepMsg {
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
