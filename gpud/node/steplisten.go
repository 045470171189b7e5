package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// The step listener (api.StepHello): agents on separate hosts start each
// other's shares of a step over TLS with their node certificates, and
// srun outside the job's containers starts steps with the allocation's
// step ticket. A peer may act only on an allocation the controller
// assigned to both nodes (this agent runs a part of it and the
// allocation lists the peer); a ticket admits steps only in its own
// allocation.

// StepNet is a node's part in steps across hosts: where it listens, and
// its node certificate and the cluster CA for the peers' TLS.
type StepNet struct {
	// Listener accepts the step connections (TCP); the agent wraps it in
	// TLS and closes it when Run returns.
	Listener net.Listener
	// Cert is the node's certificate (from joining the cluster), CA the
	// cluster's CA: both ends of a peer connection check each other's.
	Cert tls.Certificate
	CA   *x509.CertPool
	// sessions resumes TLS sessions with peers (a step's start costs no
	// full handshake after the first with each peer).
	sessions tls.ClientSessionCache
}

// WithStepNet has the agent serve steps to peers and srun on sn.Listener
// and reach peers on other hosts with sn's identity.
func WithStepNet(sn StepNet) Option {
	return func(o *options) {
		sn.sessions = tls.NewLRUClientSessionCache(256)
		o.stepNet = &sn
	}
}

// stepHelloTimeout bounds a connection's TLS handshake and first line.
const stepHelloTimeout = 10 * time.Second

// maxStepHello bounds the first line (a step's argv and environment).
const maxStepHello = 4 << 20

// maxStepGreetings bounds the connections in their handshake or hello at
// once: the listener is on the network, and a caller is known only after
// both; more are closed at once.
const maxStepGreetings = 128

// serveStepNet accepts step connections until ctx ends or stop is called.
func (a *Agent) serveStepNet(ctx context.Context) (stop func()) {
	sn := a.opts.stepNet
	ln := tls.NewListener(sn.Listener, auth.StepServerTLS(sn.Cert, sn.CA))
	a.log.Info("serving steps to peers and srun", "addr", sn.Listener.Addr().String())
	var wg sync.WaitGroup
	wg.Add(1)
	greeting := make(chan struct{}, maxStepGreetings)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					a.log.Warn("step listener stopped", "err", err)
				}
				return
			}
			select {
			case greeting <- struct{}{}:
			default:
				a.log.Warn("step connection closed: too many connections still in their handshake", "remote", c.RemoteAddr().String(), "max", maxStepGreetings)
				c.Close()
				continue
			}
			go a.serveStepConn(ctx, c.(*tls.Conn), func() { <-greeting })
		}
	}()
	stopC := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopC:
		}
		ln.Close()
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stopC); wg.Wait() }) }
}

// serveStepConn reads one connection's hello and serves it.
// greeted is called once the hello is read (or the connection failed
// before).
func (a *Agent) serveStepConn(ctx context.Context, c *tls.Conn, greeted func()) {
	defer c.Close()
	greetDone := sync.OnceFunc(greeted)
	defer greetDone()
	_ = c.SetDeadline(time.Now().Add(stepHelloTimeout))
	out := &stepStream{bw: bufio.NewWriter(c)}
	if err := c.HandshakeContext(ctx); err != nil {
		a.log.Info("step connection: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	br := bufio.NewReader(io.LimitReader(c, maxStepHello))
	line, err := br.ReadBytes('\n')
	var h api.StepHello
	if err == nil {
		err = json.Unmarshal(line, &h)
	}
	if err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: "bad step hello: " + err.Error()})
		return
	}
	_ = c.SetDeadline(time.Time{})
	greetDone()
	// What follows the hello (signals, stdin) is not bounded by the
	// hello's limit.
	dec := json.NewDecoder(io.MultiReader(br, c))
	peer, isNode := auth.NodeOf(c.ConnectionState().VerifiedChains)
	r, err := a.stepRunner(h, peer, isNode)
	if err != nil {
		a.log.Warn("step connection refused", "remote", c.RemoteAddr().String(), "peer", peer, "alloc_id", h.Alloc, "err", err)
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	switch {
	case h.Part != nil:
		a.servePart(ctx, r, *h.Part, dec, out)
	case h.Probe:
		a.probeAlloc(ctx, r, out)
	default:
		if h.Step == nil {
			h.Step = new(api.StepRequest)
			if err := dec.Decode(h.Step); err != nil {
				out.send(api.StepMsg{Kind: api.StepError, Error: "bad step request: " + err.Error()})
				return
			}
		}
		if h.Step.Attach {
			// srun outside the job following its step again after this
			// agent restarted (stepstate.go).
			r.reattachStep(ctx, dec, out, h.Step.Step)
			return
		}
		if len(h.Step.Args) == 0 {
			out.send(api.StepMsg{Kind: api.StepError, Error: "srun: no command given"})
			return
		}
		// srun outside the containers brings the login host's
		// environment; the job's own variables (its id, nodes, rendezvous)
		// come from the allocation, as inside it.
		r.mu.Lock()
		h.Step.Env = mergeEnv(h.Step.Env, jobVars(r.env))
		r.mu.Unlock()
		r.runStep(ctx, *h.Step, dec, out)
	}
}

// stepRunner checks who may do what the hello asks and returns the
// runner of its allocation.
func (a *Agent) stepRunner(h api.StepHello, peer string, isNode bool) (*runner, error) {
	if h.Part != nil && (h.Step != nil || h.Probe || h.Ticket != "") {
		return nil, errors.New("a step hello asks for either a node's part (peer) or a step (srun with a ticket), not both")
	}
	a.mu.Lock()
	r := a.runners[h.Alloc]
	a.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("node %s runs no part of allocation %q (ended, or never assigned here)", a.cfg.Name, h.Alloc)
	}
	r.mu.Lock()
	ready := r.env != nil
	r.mu.Unlock()
	if !ready {
		return nil, fmt.Errorf("node %s has not started (or, after an agent restart, not re-learned) its part of allocation %s; retry in a moment", a.cfg.Name, h.Alloc)
	}
	asg := r.asg // set before env (under r.mu above)
	if h.Part != nil {
		if !isNode {
			return nil, errors.New("only a node agent with its node certificate may start a node's part of a step")
		}
		if !slices.ContainsFunc(asg.Alloc.Nodes, func(n spec.NodeAlloc) bool { return n.Node == peer }) {
			return nil, fmt.Errorf("node %s is not in allocation %s; a node may start tasks only in allocations the controller assigned to it", peer, h.Alloc)
		}
		return r, nil
	}
	if asg.StepTicket == "" {
		return nil, fmt.Errorf("allocation %s has no step ticket (the controller is older than this agent); start steps from inside the job", h.Alloc)
	}
	if !auth.StepTicketOK(h.Ticket, asg.StepTicket) {
		return nil, fmt.Errorf("wrong step ticket for allocation %s: only its job's owner (or root) gets it, with gpuq/srun from the controller", h.Alloc)
	}
	return r, nil
}

// servePart runs a peer's share of a step on this node: the tasks' output
// and exits go back as frames, its signals and stdin come in, and a lost
// connection kills the tasks (no one reads their output or exit).
func (a *Agent) servePart(ctx context.Context, r *runner, p api.StepPart, dec *json.Decoder, out *stepStream) {
	for _, f := range p.Flags {
		if !slices.Contains(api.StepPartFlags, f) {
			out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s's agent (version %s) does not know step flag %q; upgrade it", a.cfg.Name, a.cfg.Version, f)})
			return
		}
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	st := stepTasks{Step: p.Step, NodeIndex: p.NodeIndex, Tasks: p.Tasks, GPUIdx: p.GPUIdx,
		Bind: gpuBind{perTask: p.GPUsPerTask, single: p.GPUBindSingle, mapGPU: p.GPUBindMap},
		Args: p.Args, Env: p.Env, Cwd: p.Cwd, Pty: p.Pty, Rows: p.Rows, Cols: p.Cols}
	// Task 0's input, when srun's goes to this node's part.
	var stdinW *io.PipeWriter
	if p.Stdin {
		var stdinR *io.PipeReader
		stdinR, stdinW = io.Pipe()
		defer stdinR.Close()
		st.Stdin = stdinR
	}
	part, err := a.startTasks(sctx, r.allocID, st, out)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	out.send(api.StepMsg{Kind: api.StepStarted, Step: p.Step, NTasks: len(p.Tasks)})
	// The first node's agent kills on a bad exit and keeps the first
	// signal; this part only reports its exits (step.go).
	worst, _ := followStep(ctx, readStepMsgs(dec), []*stepPart{part}, stdinW, false, out)
	out.send(api.StepMsg{Kind: api.StepDone, Step: p.Step, Code: worst})
}

// probeAlloc runs `true` on every node of r's allocation, as a step's
// tasks run but outside the step count and with no output, and answers
// StepDone when all ran, else StepError saying which node is not ready.
func (a *Agent) probeAlloc(ctx context.Context, r *runner, out *stepStream) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	nodes := r.asg.Alloc.Nodes
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := a.peer(nd)
			if err == nil {
				sink := &stepStream{bw: bufio.NewWriter(io.Discard)}
				var part *stepPart
				part, err = p.startTasks(pctx, r.allocID, stepTasks{Step: -1, NodeIndex: i, Tasks: []int{i},
					Args: []string{"/bin/sh", "-c", ":"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, sink)
				if err == nil {
					for ex := range part.exits {
						if ex.Error != "" {
							err = fmt.Errorf("node %s: %s", nd.Node, ex.Error)
						}
					}
				}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
		return
	}
	out.send(api.StepMsg{Kind: api.StepDone})
}

// jobVars are the job's own variables of a container environment.
func jobVars(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUD_") || strings.HasPrefix(k, "SLURM_") || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
			k == "WORLD_SIZE" || k == "NODE_RANK" {
			out = append(out, kv)
		}
	}
	return out
}
