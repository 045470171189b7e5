package step

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/guard"
	"github.com/gpud/gpud/gpud/spec"
)

// The step listener (api.StepHello): agents on separate hosts start each
// other's shares of a step over TLS with their node certificates, and
// srun outside the job's containers starts steps with the allocation's
// step ticket. A peer may act only on an allocation the controller
// assigned to both nodes (this agent runs a part of it and the
// allocation lists the peer); a ticket admits steps only in its own
// allocation.

// Net is a node's part in steps across hosts: where it listens, and its
// node certificate and the cluster CA for the peers' TLS.
type Net struct {
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
	// guard is the listener's (serveNet), for its counts.
	guard *guard.Listener
}

// Stats are the step listener's counts of connections it closed before
// they were served (zero before it serves).
func (sn *Net) Stats() guard.Stats {
	if sn == nil || sn.guard == nil {
		return guard.Stats{}
	}
	return sn.guard.Stats()
}

// fill makes the TLS session cache.
func (sn *Net) fill() {
	if sn.sessions == nil {
		sn.sessions = tls.NewLRUClientSessionCache(256)
	}
}

// stepHello bounds a connection's TLS handshake and first line: both are
// milliseconds for a peer or srun; the rest is for a loaded host.
const stepHello = 5 * time.Second

// maxStepHello bounds the first line (a step's argv and environment).
const maxStepHello = 4 << 20

// Limits are the step listener's caps (gpud/guard): it is on the
// network and a caller is known only after its handshake and hello, so
// one address keeps at most 8 connections in them (a newer one evicts
// its oldest), all addresses together 128, and every connection has
// stepHello to finish them. Established connections (peers' parts, srun's
// steps) are not capped per address: a busy login host opens many.
var Limits = guard.Limits{Handshake: stepHello, MaxPending: 128, MaxPendingPerAddr: 8, MaxOpen: 4096}

// serveNet accepts step connections until ctx ends or stop is called.
func (n *Node) serveNet(ctx context.Context) (stop func()) {
	sn := n.cfg.Net
	gl := guard.NewListener(sn.Listener, "step listener", Limits, n.peerLog)
	sn.guard = gl
	ln := tls.NewListener(gl, auth.StepServerTLS(sn.Cert, sn.CA))
	n.cfg.Log.Info("serving steps to peers and srun", "addr", sn.Listener.Addr().String())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
					n.cfg.Log.Warn("step listener stopped", "err", err)
				}
				return
			}
			go n.serveConn(ctx, c.(*tls.Conn))
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

// serveConn reads one connection's hello and serves it.
func (n *Node) serveConn(ctx context.Context, c *tls.Conn) {
	defer c.Close()
	defer n.cfg.Revocations.Untrack(c)
	_ = c.SetDeadline(time.Now().Add(stepHello))
	out := newStream(c)
	if err := c.HandshakeContext(ctx); err != nil {
		n.peerLog.Info("step connection: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
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
	if !guard.Established(c) {
		return // evicted or past its deadline meanwhile
	}
	// What follows the hello (signals, stdin) is not bounded by the
	// hello's limit.
	dec := json.NewDecoder(io.MultiReader(br, c))
	cs := c.ConnectionState()
	peer, isNode := auth.NodeOf(cs.VerifiedChains)
	al, cred, err := n.admit(h, peer, isNode, cs)
	if err == nil {
		// Revoking the credential later closes the connection: the
		// step's tasks here lose it and are killed.
		err = n.cfg.Revocations.Track(c, cred)
	}
	if err != nil {
		level := slog.LevelWarn
		if isNotHeld(err) {
			level = slog.LevelDebug // not yet: a gang start or a step asks again
		}
		n.peerLog.Log(level, "step connection refused", "remote", c.RemoteAddr().String(), "peer", peer, "alloc_id", h.Alloc, "err", err)
		out.send(api.StepMsg{Kind: api.StepError, Error: err.Error(), Retry: isNotHeld(err)})
		return
	}
	switch {
	case h.Part != nil:
		n.servePart(ctx, al, *h.Part, dec, out) // keep.go
	case h.Holds:
		out.send(api.StepMsg{Kind: api.StepDone}) // admit: its container runs
	case h.NumberStep:
		if al.view().self.Rank != 0 {
			out.send(api.StepMsg{Kind: api.StepError, Error: fmt.Sprintf("node %s is not the first node of allocation %s: it numbers none of its steps", n.cfg.Node, h.Alloc)})
			return
		}
		id, err := al.newID(ctx)
		if err != nil {
			out.send(api.StepMsg{Kind: api.StepError, Error: err.Error()})
			return
		}
		out.send(api.StepMsg{Kind: api.StepStarted, Step: id})
	case h.Probe:
		n.probe(ctx, al, out)
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
			// agent restarted (state.go).
			al.reattach(ctx, dec, out, h.Step.Step, h.Step.Received)
			return
		}
		if len(h.Step.Args) == 0 {
			out.send(api.StepMsg{Kind: api.StepError, Error: "no command given: srun runs a program (srun [OPTIONS] PROGRAM [ARGS...])"})
			return
		}
		// srun outside the containers brings the login host's
		// environment; the job's own variables (its id, nodes, rendezvous)
		// come from the allocation, as inside it.
		h.Step.Env = MergeEnv(h.Step.Env, jobVars(al.view().env))
		al.run(ctx, *h.Step, dec, out)
	}
}

// admit checks who may do what the hello asks and returns the steps of
// its allocation and the credential the caller is admitted on (its node
// certificate, or the one its step ticket was obtained with): the
// caller tracks the connection under it. The credential is judged first:
// a revoked or forged one learns nothing about what runs here.
func (n *Node) admit(h api.StepHello, peer string, isNode bool, cs tls.ConnectionState) (*Alloc, auth.Credential, error) {
	var none auth.Credential
	fromPeer := h.Part != nil || h.Holds || h.NumberStep
	if fromPeer && (h.Step != nil || h.Probe || h.Ticket != "") {
		return nil, none, errors.New("a step hello asks for either a node's part (peer) or a step (srun with a ticket), not both")
	}
	// A stale revocation list trusts nobody, for now: it is stale until
	// the agent registers after a restart, and while it is cut off from
	// the controller, so a peer or srun asks again (notHeld) instead of
	// taking a node that is coming back for one that refuses.
	if err := n.cfg.Revocations.Check(); err != nil {
		return nil, none, notHeld{n.cfg.Node, fmt.Errorf("node %s: %w", n.cfg.Node, err)}
	}
	var cred auth.Credential
	if fromPeer {
		if !isNode {
			return nil, none, errors.New("only a node agent with its node certificate may start a node's part of a step")
		}
		cred = auth.CertCredential(cs.PeerCertificates[0])
		if err := n.cfg.Revocations.Check(cred); err != nil {
			return nil, none, fmt.Errorf("node %s: %w", peer, err)
		}
	} else {
		if h.Ticket == "" {
			return nil, none, fmt.Errorf("no step ticket for allocation %s: only its job's owner (or root) gets one, with gpuq/srun from the controller", h.Alloc)
		}
		key := ""
		if n.cfg.TicketKey != nil {
			key = n.cfg.TicketKey()
		}
		tk, err := auth.VerifyStepTicket(key, h.Ticket, h.Alloc, n.cfg.Now())
		if err != nil {
			return nil, none, fmt.Errorf("step ticket refused by node %s: %w", n.cfg.Node, err)
		}
		if err := n.cfg.Revocations.Check(tk.Holder); err != nil {
			return nil, none, fmt.Errorf("step ticket for allocation %s refused: the credential it was obtained with: %w", h.Alloc, err)
		}
		cred = tk.Holder
	}
	al := n.host.Alloc(h.Alloc)
	if al == nil {
		return nil, none, notHeld{n.cfg.Node, fmt.Errorf("node %s runs no part of allocation %q (ended, or never assigned here)", n.cfg.Node, h.Alloc)}
	}
	v := al.view()
	if v.env == nil || !v.running {
		// Its container may be made but not started yet (a gang's nodes
		// start theirs at their own pace): tasks exec'd now would fail.
		return nil, none, notHeld{n.cfg.Node, fmt.Errorf("node %s has not started (or, after an agent restart, not re-learned) its part of allocation %s; retry in a moment", n.cfg.Node, h.Alloc)}
	}
	if fromPeer && !slices.ContainsFunc(v.asg.Alloc.Nodes, func(n spec.NodeAlloc) bool { return n.Node == peer }) {
		return nil, none, fmt.Errorf("node %s is not in allocation %s; a node may start tasks only in allocations the controller assigned to it", peer, h.Alloc)
	}
	return al, cred, nil
}

// probe runs `true` on every node of al's allocation, as a step's tasks
// run but outside the step count and with no output, and answers
// StepDone when all ran, else StepError saying which node is not ready.
func (n *Node) probe(ctx context.Context, al *Alloc, out *stream) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	nodes := al.view().asg.Alloc.Nodes
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := n.peer(nd)
			if err == nil {
				sink := newStream(io.Discard)
				var running *part
				running, err = p.startTasks(pctx, al.allocID, tasks{Step: -1, NodeIndex: i, Tasks: []int{i},
					Args: []string{"/bin/sh", "-c", ":"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}}, sink)
				if err == nil {
					for ex := range running.exits {
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
