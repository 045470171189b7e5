package step

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// kept is this node's part of a step that another node's agent serves
// (it asked over the step listener, StepPart.Resumable): its tasks
// outlive that agent's connection. While no connection follows it, its
// output waits in its relay (maxHeldOutput, then the tasks wait) and its
// exits are kept; the serving agent follows it again (StepFlagAttach)
// after its own restart, or after this agent's, or after the network
// between them broke, within stepReattachGrace, or its tasks are killed.
// Output stays in the relay until the serving agent acknowledges it
// (StepAck), so what a dying connection swallowed is sent again; the part
// ends when that agent acknowledges its StepDone.
type kept struct {
	al     *Alloc
	step   int
	ntasks int
	part   *part
	relay  *relay
	// pmi relays its PMI server's fences to the step's first node (nil:
	// the step has no MPI, or this agent re-adopted the part).
	pmi *pmiRelay
	// stdinC feeds task 0's input (nil: it has none), written by one
	// goroutine so that a task not reading blocks no connection.
	stdinC chan []byte
	// done is closed when the part is forgotten or given up.
	done     chan struct{}
	doneOnce sync.Once

	mu       sync.Mutex
	out      *stream // the connection that follows it; nil while none
	gen      int     // counts the connections that followed it
	exits    []api.StepMsg
	worst    int
	ended    bool // every task exited
	released bool
	grace    *time.Timer
}

// newKept keeps p (whose output goes to r, task 0's input to stdin when
// not nil) for the agent that serves step; attached says a connection
// follows it at once (else the grace runs from now).
func newKept(al *Alloc, step int, p *part, r *relay, stdin *io.PipeWriter, attached bool) *kept {
	k := &kept{al: al, step: step, ntasks: cap(p.exits), part: p, relay: r, done: make(chan struct{})}
	if stdin != nil {
		k.stdinC = make(chan []byte, 64)
		go func() {
			defer stdin.Close()
			for {
				select {
				case <-k.done:
					return
				case b := <-k.stdinC:
					if b == nil {
						stdin.Close() // the end of the input
						continue
					}
					_, _ = stdin.Write(b) // task 0 gone: its input is dropped
				}
			}
		}()
	}
	if !attached {
		k.grace = time.AfterFunc(stepReattachGrace, k.giveUp)
	}
	go k.collect()
	return k
}

// collect passes the tasks' exits to whoever follows the part.
func (k *kept) collect() {
	for ex := range k.part.exits {
		k.mu.Lock()
		k.exits = append(k.exits, ex)
		k.worst = max(k.worst, ex.Code)
		if k.out != nil {
			k.out.send(ex)
		}
		k.mu.Unlock()
	}
	k.mu.Lock()
	k.ended = true
	if k.out != nil {
		k.out.send(api.StepMsg{Kind: api.StepDone, Step: k.step, Code: k.worst})
	}
	released := k.released
	k.mu.Unlock()
	if released {
		k.forget()
	}
}

// follow serves one connection of the serving agent: the output it does
// not have (have, and what it acknowledged), every exit so far and what follows, and its signals,
// sizes, input and acknowledgements, until it acknowledges the part's end
// (the part is forgotten) or the connection drops (the part waits for the
// next one).
func (k *kept) follow(dec *json.Decoder, out *stream, have []api.StepCount) {
	if gen, ok := k.attach(out, have); ok {
		k.serve(gen, dec)
	}
}

// attach makes out the connection that follows the part (a newer one
// than any before): it gets the part's started answer, the output it
// does not have and every exit so far. It returns the connection's
// generation, or false (and tells out) when the part already ended.
func (k *kept) attach(out *stream, have []api.StepCount) (gen int, ok bool) {
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s's part of step %d.%d ended", k.al.n.cfg.Node, k.al.jobID, k.step)})
		return 0, false
	}
	if k.grace != nil {
		k.grace.Stop()
		k.grace = nil
	}
	k.gen++
	gen = k.gen
	if k.out != nil {
		k.relay.detach() // an older connection the agent gave up on
	}
	out.send(api.StepMsg{Kind: api.StepStarted, Step: k.step, NTasks: k.ntasks})
	k.relay.attach(out, true, have)
	for _, ex := range k.exits {
		out.send(ex)
	}
	if k.ended {
		out.send(api.StepMsg{Kind: api.StepDone, Step: k.step, Code: k.worst})
	}
	k.out = out
	k.mu.Unlock()
	if k.pmi != nil {
		k.pmi.attach(out)
	}
	return gen, true
}

// serve reads connection gen's signals, sizes, input and
// acknowledgements until the serving agent acknowledges the part's end
// or the connection drops or is superseded.
func (k *kept) serve(gen int, dec *json.Decoder) {
	msgs := readMsgs(dec)
	// Left early, the connection's reader must not block on msgs.
	defer func() { go drain(msgs) }()
	for m := range msgs {
		k.mu.Lock()
		current := k.gen == gen
		k.mu.Unlock()
		if !current {
			break // a newer connection follows the part: this one is stale
		}
		switch {
		case m.Kind == api.StepSignal && m.Signal > 0 && m.Signal < 65:
			k.part.signal(syscall.Signal(m.Signal))
		case m.Kind == api.StepResize:
			k.part.resize(m.Rows, m.Cols)
		case m.Kind == api.StepStdin && k.stdinC != nil:
			var b []byte // nil: the end of the input
			if len(m.Data) > 0 {
				b = m.Data
			}
			select {
			case k.stdinC <- b:
			case <-k.done:
			}
		case m.Kind == api.StepAck:
			k.relay.ack(m.Counts)
		case m.Kind == api.StepPMIFence && k.pmi != nil:
			k.pmi.answer(m)
		case m.Kind == api.StepDone:
			k.release()
			return
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gen != gen || k.released {
		return
	}
	// The serving agent's connection is gone: hold on for its next one.
	k.out = nil
	k.relay.detach()
	if k.pmi != nil {
		k.pmi.detach()
	}
	k.al.logger().Warn("lost the connection to the agent serving a step; its tasks here run on, waiting for it to follow them again",
		"step", k.step, "grace", stepReattachGrace)
	k.grace = time.AfterFunc(stepReattachGrace, k.giveUp)
}

// release ends the part: the serving agent has its end.
func (k *kept) release() {
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		return
	}
	k.released = true
	if k.grace != nil {
		k.grace.Stop()
	}
	ended := k.ended
	k.mu.Unlock()
	if ended {
		k.forget()
	}
}

// giveUp kills the tasks of a part no agent followed again within
// stepReattachGrace, as a dropped srun's are.
func (k *kept) giveUp() {
	k.mu.Lock()
	if k.out != nil || k.released {
		k.mu.Unlock()
		return
	}
	k.released = true
	ended := k.ended
	k.mu.Unlock()
	k.al.logger().Warn("no agent followed a step's part again; its tasks here are killed", "step", k.step, "grace", stepReattachGrace)
	k.doneOnce.Do(func() { close(k.done) })
	k.relay.close()
	if k.pmi != nil {
		k.pmi.close()
	}
	k.part.signal(syscall.SIGKILL)
	if ended {
		k.forget()
	}
}

// forget drops the part's record once it ended and was released.
func (k *kept) forget() {
	k.doneOnce.Do(func() { close(k.done) })
	if k.pmi != nil {
		k.pmi.close()
	}
	k.part.done()
	k.relay.close() // its spool's descriptor; the serving agent has all
	al := k.al
	al.resumed.mu.Lock()
	if al.resumed.kept[k.step] == k {
		delete(al.resumed.kept, k.step)
	}
	al.resumed.mu.Unlock()
}

// startOnce makes the start of this node's part of step idempotent: a
// node runs at most one part of a step (the step's layout gives each node
// one), so a start is keyed by the allocation and the step's number (the
// job's own, numbered once by its first node). It returns the part this
// node already keeps for step, to be followed instead of started twice
// (whose execs containerd would refuse: "already exists"), or nil and
// started, which the caller calls once its start succeeded (the part is
// kept) or failed; meanwhile a second start of step waits for it.
func (al *Alloc) startOnce(step int) (k *kept, started func()) {
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	for {
		if k := al.resumed.kept[step]; k != nil {
			return k, nil
		}
		busy := al.resumed.starting[step]
		if busy == nil {
			break
		}
		al.resumed.mu.Unlock()
		<-busy
		al.resumed.mu.Lock()
	}
	ch := make(chan struct{})
	al.resumed.starting[step] = ch
	var once sync.Once
	return nil, func() {
		once.Do(func() {
			al.resumed.mu.Lock()
			delete(al.resumed.starting, step)
			al.resumed.mu.Unlock()
			close(ch)
		})
	}
}

// keep registers k for the serving agent to follow (again).
func (al *Alloc) keep(k *kept) {
	al.resumed.mu.Lock()
	defer al.resumed.mu.Unlock()
	al.resumed.kept[k.step] = k
}

// servePart runs a peer's share of a step on this node: the tasks' output
// and exits go back as frames, its signals and stdin come in. A part the
// peer follows again after a lost connection (Resumable) is kept for it;
// an older peer's part has its tasks killed when the connection drops.
func (n *Node) servePart(ctx context.Context, al *Alloc, p api.StepPart, dec *json.Decoder, out *stream) {
	for _, f := range p.Flags {
		if !slices.Contains(api.StepPartFlags, f) {
			out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s's agent (version %s) does not know step flag %q; upgrade it", n.cfg.Node, n.cfg.Version, f)})
			return
		}
	}
	if slices.Contains(p.Flags, api.StepFlagAttach) {
		al.resumed.mu.Lock()
		k := al.resumed.kept[p.Step]
		al.resumed.mu.Unlock()
		if k == nil {
			out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s runs no part of step %d.%d to follow again (it ended, or its tasks were killed after %v without the agent serving the step)",
				n.cfg.Node, al.jobID, p.Step, stepReattachGrace)})
			return
		}
		k.follow(dec, out, p.Received)
		return
	}
	st := tasksOf(p)
	st.Kept = p.Resumable && p.Step >= 0
	started := func() {}
	if st.Kept {
		// The same start sent again (its answer was lost, or this agent
		// restarted after starting the tasks) follows the part already
		// running: a step's part is started once.
		var k *kept
		if k, started = al.startOnce(p.Step); k != nil {
			k.follow(dec, out, nil)
			return
		}
		defer started()
	}
	// The node's PMI server fences through the connection that follows
	// the part (mpi.go), which only a kept part has.
	var pr *pmiRelay
	if p.MPI != "" {
		if !st.Kept {
			out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s: an MPI step's part must be followed again after a lost connection (StepPart.Resumable); upgrade the agent serving the step", n.cfg.Node)})
			return
		}
		pr = newPMIRelay()
		st.MPI, st.StepNodes, st.StepTasks, st.PMI = p.MPI, p.StepNodes, p.StepTasks, pr.link()
	}
	// Task 0's input, when srun's goes to this node's part.
	var stdinW *io.PipeWriter
	if p.Stdin {
		var stdinR *io.PipeReader
		stdinR, stdinW = io.Pipe()
		defer stdinR.Close()
		st.Stdin = stdinR
	}
	var sink sink = out
	var r *relay
	if st.Kept {
		r = newRelay(true)
		r.sp = newHeldSpool(al, p.Step) // before any output is read
		sink = r
	}
	// The tasks' own context: a kept part outlives this connection.
	running, err := n.startTasks(context.WithoutCancel(ctx), al.allocID, st, sink)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		if pr != nil {
			pr.close()
		}
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error(), Retry: isNotHeld(err)})
		return
	}
	if st.Kept {
		k := newKept(al, p.Step, running, r, stdinW, true)
		k.pmi = pr
		al.keep(k)
		// Attached before a resend waiting in startOnce is let through,
		// so the resend's connection, the newer one, follows the part.
		gen, ok := k.attach(out, nil)
		started()
		if ok {
			k.serve(gen, dec)
		}
		return
	}
	out.send(api.StepMsg{Kind: api.StepStarted, Step: p.Step, NTasks: len(p.Tasks)})
	// The first node's agent kills on a bad exit and keeps the first
	// signal; this part only reports its exits (serve.go).
	worst, _ := follow(ctx, readMsgs(dec), []*part{running}, stdinW, false, out)
	out.send(api.StepMsg{Kind: api.StepDone, Step: p.Step, Code: worst})
	running.done()
}

// drain reads msgs until it is closed.
func drain(msgs <-chan api.StepMsg) {
	for range msgs {
	}
}
