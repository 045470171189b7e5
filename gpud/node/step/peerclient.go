package step

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// remotePeer is a node's agent on another host, reached at its step
// listener (listen.go) with this node's certificate.
type remotePeer struct {
	n    *Node
	node string
	addr string
}

// stepDialTimeout bounds reaching a peer's step listener.
const stepDialTimeout = 10 * time.Second

// remotePeer returns nd's agent over the network, or says why steps
// cannot reach it.
func (n *Node) remotePeer(nd spec.NodeAlloc) (peer, error) {
	if n.cfg.Net == nil {
		return nil, fmt.Errorf("node %s of the allocation is on another host and node %s has no step listener: steps across hosts need every node joined to the cluster with the join token (its node certificate is its identity to peers; [node] join_token_file), not a node token", nd.Node, n.cfg.Node)
	}
	if nd.StepPort == 0 {
		return nil, fmt.Errorf("node %s of the allocation has no step listener (it registered none: no node certificate, or an agent older than steps across hosts); join it with the join token ([node] join_token_file) and restart its agent", nd.Node)
	}
	host := nd.Addr
	if host == "" {
		host = nd.Node
	}
	return &remotePeer{n: n, node: nd.Node, addr: net.JoinHostPort(host, strconv.Itoa(nd.StepPort))}, nil
}

// owner is nil: a peer on another host numbers and books nothing for
// this node (record.go).
func (p *remotePeer) owner(string) *Alloc { return nil }

// dial opens a TLS connection to the peer's step listener and sends
// hello.
func (p *remotePeer) dial(ctx context.Context, hello api.StepHello) (*trackedConn, error) {
	sn := p.n.cfg.Net
	rev := p.n.cfg.Revocations
	cfg := auth.StepClientTLS(sn.CA, p.node, &sn.Cert)
	cfg.ClientSessionCache = sn.sessions
	// The peer's node certificate must not be revoked either (and this
	// node trusts no peer while its list is stale).
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return err
		}
		return rev.VerifyPeer(cs)
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: stepDialTimeout}, Config: cfg}
	dctx, cancel := context.WithTimeout(ctx, stepDialTimeout)
	nc, err := d.DialContext(dctx, "tcp", p.addr)
	cancel()
	switch {
	case errors.Is(err, auth.ErrRevoked):
		// Asking again cannot help: the part is lost to the step.
		return nil, fmt.Errorf("reach node %s's step listener at %s: %w", p.node, p.addr, err)
	case err != nil:
		return nil, notHeld{p.node, fmt.Errorf("reach node %s's step listener at %s: %w", p.node, p.addr, err)}
	}
	tc := nc.(*tls.Conn)
	// Revoking the peer's certificate later closes the connection: the
	// peer's tasks are then lost to this step.
	if err := rev.Track(tc, auth.CertCredential(tc.ConnectionState().PeerCertificates[0])); err != nil {
		tc.Close()
		return nil, fmt.Errorf("node %s: %w", p.node, err)
	}
	c := &trackedConn{Conn: tc, rev: rev}
	if err := json.NewEncoder(c).Encode(hello); err != nil {
		c.Close()
		return nil, notHeld{p.node, fmt.Errorf("ask node %s for its tasks: %w", p.node, err)}
	}
	return c, nil
}

// answerErr is the error of a peer's StepError answer: notHeld when it
// says to ask again.
func (p *remotePeer) answerErr(m api.StepMsg) error {
	err := fmt.Errorf("node %s: %s", p.node, m.Error)
	if m.Retry {
		return notHeld{p.node, err}
	}
	return err
}

// numberStep asks the peer, the allocation's first node, for the next
// step number of the job (api.StepHello.NumberStep).
func (p *remotePeer) numberStep(ctx context.Context, allocID string) (int, error) {
	m, err := p.ask(ctx, api.StepHello{Alloc: allocID, NumberStep: true})
	if err != nil {
		return 0, err
	}
	return m.Step, nil
}

// holds asks the peer whether it holds its part of allocID (its container
// runs; api.StepHello.Holds). An older agent, which cannot tell, is taken
// to hold it.
func (p *remotePeer) holds(ctx context.Context, allocID string) error {
	_, err := p.ask(ctx, api.StepHello{Alloc: allocID, Holds: true})
	if err != nil && !isNotHeld(err) {
		return nil // an older agent: it does not know the question
	}
	return err
}

// ask sends the peer a one-answer hello and returns its StepStarted or
// StepDone answer; a StepError answer is an error (notHeld when it says
// to ask again).
func (p *remotePeer) ask(ctx context.Context, hello api.StepHello) (api.StepMsg, error) {
	c, err := p.dial(ctx, hello)
	if err != nil {
		return api.StepMsg{}, err
	}
	defer c.Close()
	// An older agent reads a step request after a hello it does not
	// know: this one makes it answer (it has no command) rather than
	// wait.
	_ = json.NewEncoder(c).Encode(api.StepRequest{})
	_ = c.SetReadDeadline(time.Now().Add(2 * stepDialTimeout))
	m, err := api.ReadStepFrame(bufio.NewReader(c))
	switch {
	case err != nil:
		return m, notHeld{p.node, fmt.Errorf("node %s's answer: %w", p.node, err)}
	case m.Kind == api.StepError:
		return m, p.answerErr(m)
	}
	return m, nil
}

// startTasks asks the peer to start its tasks and returns them running:
// their output is relayed into out, their exits onto the part's channel,
// and the part's signals go to the peer. The part survives a restart of
// either agent (remotePart).
func (p *remotePeer) startTasks(ctx context.Context, allocID string, st tasks, out sink) (*part, error) {
	rp := newRemotePart(p, allocID, st, out)
	if err := rp.connect(ctx, false); err != nil {
		return nil, err
	}
	rp.start(ctx)
	return rp.part, nil
}

// attachRemote follows a running part on another host again (its
// server's agent restarted), asking until stepReattachGrace has passed
// while the peer cannot answer yet (it may be restarting too).
func attachRemote(ctx context.Context, pr peer, allocID string, st tasks, out sink, have []api.StepCount) (*part, error) {
	p, ok := pr.(*remotePeer)
	if !ok {
		return nil, errors.New("not a peer on another host")
	}
	rp := newRemotePart(p, allocID, st, out)
	for _, c := range have {
		rp.have[streamID{c.Kind, c.Task}] = c.Bytes
	}
	if err := rp.reconnect(ctx, time.Now().Add(stepReattachGrace)); err != nil {
		return nil, err
	}
	rp.start(ctx)
	return rp.part, nil
}

// remotePart is a part of a step on another host, followed over that
// host's step listener. A lost connection (either agent restarted, or the
// network between them broke) is followed again: this agent dials the
// peer again and asks for the part (StepFlagAttach) until
// stepReattachGrace has passed; meanwhile signals wait and the peer holds
// the tasks' output and exits. Output is acknowledged (StepAck) once
// passed on, so the peer sends again what a lost connection swallowed,
// and a new connection says what arrived (StepPart.Received), so the peer
// sends nothing twice; each exit is passed on once.
type remotePart struct {
	p       *remotePeer
	allocID string
	st      tasks
	out     sink
	part    *part

	mu     sync.Mutex
	cond   *sync.Cond
	c      *trackedConn // nil while away
	enc    *json.Encoder
	br     *bufio.Reader
	early  []api.StepMsg // output read before the started answer
	gone   bool          // ended or given up: nothing more is sent
	queued []api.StepMsg // signals sent while away
	size   *api.StepMsg  // the newest terminal size sent while away
	// exited are the tasks whose exits were passed on.
	exited map[int]bool
	// have counts each stream's output passed on (from the task's
	// start); written by read alone, read under mu.
	have map[streamID]int64
}

func newRemotePart(p *remotePeer, allocID string, st tasks, out sink) *remotePart {
	rp := &remotePart{p: p, allocID: allocID, st: st, out: out, part: newPart(len(st.Tasks)), exited: map[int]bool{},
		have: map[streamID]int64{}}
	rp.cond = sync.NewCond(&rp.mu)
	rp.part.remote = rp.signal
	if st.Pty && st.NodeIndex == 0 {
		rp.part.remoteResize = rp.resize
	}
	rp.part.release = rp.release
	return rp
}

// hello is the part's StepHello; attach follows the running part again.
func (rp *remotePart) hello(attach bool) api.StepHello {
	st := rp.st
	part := stepPartOf(st)
	part.Resumable = st.Step >= 0
	if st.Pty {
		part.Flags = append(part.Flags, api.StepFlagPty)
	}
	if st.MPI != "" {
		part.Flags = append(part.Flags, api.StepFlagMPI)
	}
	if st.CPU.binds() || st.Bind.closest || len(st.Bind.maskGPU) > 0 {
		part.Flags = append(part.Flags, api.StepFlagBind)
	}
	if st.GPUIdx != nil || st.Bind.single > 0 || len(st.Bind.mapGPU) > 0 {
		// A peer that does not know the step's GPUs would give its tasks
		// all of the allocation's: it refuses the part instead.
		part.Flags = append(part.Flags, api.StepFlagGPUs)
	}
	if attach {
		part.Flags = append(part.Flags, api.StepFlagAttach)
		part.Received = rp.counts()
	}
	return api.StepHello{Alloc: rp.allocID, Part: &part}
}

// counts are the output passed on, per stream.
func (rp *remotePart) counts() []api.StepCount {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	out := make([]api.StepCount, 0, len(rp.have))
	for k, n := range rp.have {
		out = append(out, api.StepCount{Task: k.task, Kind: k.kind, Bytes: n})
	}
	return out
}

// connect dials the peer, asks for the part (to start it, or with attach
// to follow it again) and waits for its started answer.
func (rp *remotePart) connect(ctx context.Context, attach bool) error {
	p := rp.p
	c, err := p.dial(ctx, rp.hello(attach))
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, 256<<10)
	// The peer's tasks may write before its started answer is sent
	// (an older peer): their output waits here for it.
	var early []api.StepMsg
	_ = c.SetReadDeadline(time.Now().Add(2 * stepDialTimeout))
	var m api.StepMsg
	for {
		m, err = api.ReadStepFrame(br)
		if err != nil || (m.Kind != api.StepStdout && m.Kind != api.StepStderr) {
			break
		}
		early = append(early, m)
	}
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		c.Close()
		return notHeld{p.node, fmt.Errorf("node %s's answer to start its tasks: %w", p.node, err)}
	case m.Kind == api.StepError:
		c.Close()
		return p.answerErr(m)
	case m.Kind != api.StepStarted:
		c.Close()
		return fmt.Errorf("node %s answered %q to start its tasks", p.node, m.Kind)
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.gone {
		c.Close()
		return errors.New("the step ended")
	}
	rp.c, rp.enc, rp.br, rp.early = c, json.NewEncoder(c), br, early
	// What was sent while away goes now.
	for _, m := range rp.queued {
		_ = rp.enc.Encode(m)
	}
	rp.queued = nil
	if rp.size != nil {
		_ = rp.enc.Encode(*rp.size)
		rp.size = nil
	}
	rp.cond.Broadcast()
	return nil
}

// reconnect follows the part again until it has, deadline passes, ctx
// ends or the peer says the part is gone.
func (rp *remotePart) reconnect(ctx context.Context, deadline time.Time) error {
	wait := 250 * time.Millisecond
	for {
		err := rp.connect(ctx, true)
		if err == nil {
			return nil
		}
		if !isNotHeld(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// start follows the part: its stdin, its frames, and its end with the
// step (ctx).
func (rp *remotePart) start(ctx context.Context) {
	if rp.st.Stdin != nil && rp.st.NodeIndex == 0 {
		go rp.pumpStdin()
	}
	go rp.read(ctx)
	// The step's end (its context) ends the connection; a peer that
	// still runs tasks then keeps them for stepReattachGrace (an older
	// one kills them at once).
	go func() {
		<-ctx.Done()
		rp.mu.Lock()
		rp.gone = true
		if rp.c != nil {
			rp.c.Close()
		}
		rp.cond.Broadcast()
		rp.mu.Unlock()
	}()
}

// send writes m to the peer, waiting while the part is away; false once
// the part is gone.
func (rp *remotePart) send(m api.StepMsg) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for rp.c == nil && !rp.gone {
		rp.cond.Wait()
	}
	return !rp.gone && rp.enc.Encode(m) == nil
}

func (rp *remotePart) signal(sig syscall.Signal) {
	m := api.StepMsg{Kind: api.StepSignal, Signal: int(sig)}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	switch {
	case rp.gone:
	case rp.c == nil || rp.enc.Encode(m) != nil:
		rp.queued = append(rp.queued, m) // sent once the part is followed again
	}
}

func (rp *remotePart) resize(rows, cols int) {
	m := api.StepMsg{Kind: api.StepResize, Rows: rows, Cols: cols}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if !rp.gone && (rp.c == nil || rp.enc.Encode(m) != nil) {
		rp.size = &m
	}
}

// pumpStdin sends task 0's input to the peer.
func (rp *remotePart) pumpStdin() {
	buf := make([]byte, 32<<10)
	for {
		n, err := rp.st.Stdin.Read(buf)
		if n > 0 && !rp.send(api.StepMsg{Kind: api.StepStdin, Data: slices.Clone(buf[:n])}) {
			return
		}
		if err != nil {
			rp.send(api.StepMsg{Kind: api.StepStdin})
			return
		}
	}
}

// release tells the peer the step's end reached srun: it forgets the
// part. A peer out of reach forgets it after stepReattachGrace.
func (rp *remotePart) release() {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.c != nil && !rp.gone {
		_ = rp.enc.Encode(api.StepMsg{Kind: api.StepDone})
		rp.c.Close()
	}
	rp.gone = true
	rp.cond.Broadcast()
}

// read passes the part's output and exits on until its StepDone, and
// follows the part again when the connection is lost.
func (rp *remotePart) read(ctx context.Context) {
	defer close(rp.part.exits)
	p := rp.p
	log := p.n.cfg.Log.With("node_peer", p.node, "step", rp.st.Step)
	rp.mu.Lock()
	br, early := rp.br, rp.early
	rp.early = nil
	rp.mu.Unlock()
	// Written here, not before startTasks returns: srun's stream holds
	// output back until the whole step has started.
	for _, m := range early {
		rp.pass(m)
	}
	lose := func(why string) {
		for _, t := range rp.st.Tasks {
			if !rp.exited[t] {
				rp.exited[t] = true
				rp.part.exits <- api.StepMsg{Kind: api.StepExit, Task: t, Node: p.node, Code: 1, Error: why}
			}
		}
	}
	for {
		m, err := api.ReadStepFrame(br)
		if err != nil {
			if ctx.Err() != nil || rp.isGone() {
				lose(fmt.Sprintf("node %s's part of the step was given up before the task's exit", p.node))
				return
			}
			// The connection is lost: follow the part again.
			log.Warn("lost the connection to a node's agent during a step; its tasks run on there; following its part again", "err", err, "grace", stepReattachGrace)
			rp.notify(fmt.Sprintf("lost the connection to node %s's agent (%v); its tasks run on; following them again", p.node, err))
			rp.mu.Lock()
			if rp.c != nil {
				rp.c.Close()
			}
			rp.c = nil
			rp.mu.Unlock()
			if err := rp.reconnect(ctx, time.Now().Add(stepReattachGrace)); err != nil {
				rp.mu.Lock()
				rp.gone = true // nothing more goes to the part
				rp.cond.Broadcast()
				rp.mu.Unlock()
				log.Warn("could not follow a node's part of a step again", "err", err)
				lose(fmt.Sprintf("lost the connection to node %s's agent before the task's exit and could not follow its part again within %v: %v", p.node, stepReattachGrace, err))
				return
			}
			log.Info("following a node's part of a step again")
			rp.notify(fmt.Sprintf("following node %s's tasks again", p.node))
			rp.mu.Lock()
			br, early = rp.br, rp.early
			rp.early = nil
			rp.mu.Unlock()
			for _, m := range early {
				rp.pass(m)
			}
			continue
		}
		switch m.Kind {
		case api.StepStdout, api.StepStderr:
			rp.pass(m)
			if br.Buffered() == 0 {
				rp.ack()
			}
		case api.StepPMIFence:
			// The peer's PMI server in a fence: join it for the peer and
			// answer when every node has (mpi.go).
			go answerFence(ctx, rp.st.PMI, m, rp.send)
		case api.StepPMIAbort:
			if rp.st.PMI.abort != nil {
				rp.st.PMI.abort(m.Code, m.Error)
			}
		case api.StepExit:
			if slices.Contains(rp.st.Tasks, m.Task) && !rp.exited[m.Task] {
				rp.exited[m.Task] = true
				rp.part.exits <- m
			}
		case api.StepDone:
			lose("node " + p.node + " ended the step without the task's exit")
			return
		case api.StepError:
			lose(m.Error)
			return
		}
	}
}

// ack tells the peer what output arrived.
func (rp *remotePart) ack() {
	counts := rp.counts()
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.c != nil && !rp.gone {
		_ = rp.enc.Encode(api.StepMsg{Kind: api.StepAck, Counts: counts})
	}
}

// pass passes an output frame on and counts it.
func (rp *remotePart) pass(m api.StepMsg) {
	rp.out.output(m.Kind, m.Task, m.Data)
	rp.mu.Lock()
	rp.have[streamID{m.Kind, m.Task}] += int64(len(m.Data))
	rp.mu.Unlock()
}

func (rp *remotePart) isGone() bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.gone
}

// notify tells srun what happened to the part, as its srun prints a
// waiting step's message.
func (rp *remotePart) notify(msg string) {
	if s, ok := rp.out.(*stream); ok {
		s.send(api.StepMsg{Kind: api.StepWaiting, Error: msg})
	}
}

// trackedConn is a dialled peer connection tracked by the revocation
// state until it is closed.
type trackedConn struct {
	*tls.Conn
	rev *auth.Revocations
}

func (c *trackedConn) Close() error {
	c.rev.Untrack(c.Conn)
	return c.Conn.Close()
}

// stepPartOf is st as the api describes a node's part of a step (a
// peer's start, a part record's); tasksOf is its inverse.
func stepPartOf(st tasks) api.StepPart {
	return api.StepPart{Step: st.Step, NodeIndex: st.NodeIndex, Tasks: st.Tasks, GPUIdx: st.GPUIdx,
		GPUsPerTask: st.Bind.perTask, GPUBindSingle: st.Bind.single, GPUBindMap: st.Bind.mapGPU,
		GPUBindMask: st.Bind.maskGPU, GPUClosest: st.Bind.closest,
		Args: st.Args, Env: st.Env, Cwd: st.Cwd, Stdin: st.Stdin != nil && st.NodeIndex == 0,
		Pty: st.Pty, Rows: st.Rows, Cols: st.Cols,
		MPI: st.MPI, StepNodes: st.StepNodes, StepTasks: st.StepTasks,
		CPUBind: st.CPU.bind, Hint: st.CPU.hint, Distribution: st.CPU.dist, CPUsPerTask: st.CPU.cpusPerTask}
}

// tasksOf is the node's part p (no input, PMI or keeping: the caller's).
func tasksOf(p api.StepPart) tasks {
	return tasks{Step: p.Step, NodeIndex: p.NodeIndex, Tasks: p.Tasks, GPUIdx: p.GPUIdx,
		Bind: gpuBind{perTask: p.GPUsPerTask, single: p.GPUBindSingle, mapGPU: p.GPUBindMap, maskGPU: p.GPUBindMask, closest: p.GPUClosest},
		Args: p.Args, Env: p.Env, Cwd: p.Cwd, Pty: p.Pty, Rows: p.Rows, Cols: p.Cols,
		CPU: cpuBind{bind: p.CPUBind, hint: p.Hint, dist: p.Distribution, cpusPerTask: p.CPUsPerTask}}
}
