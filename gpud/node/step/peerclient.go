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
// listener (steplisten.go) with this node's certificate.
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

// startTasks asks the peer to start its tasks and returns them running:
// their output is relayed into out, their exits onto the part's channel,
// and the part's signals go to the peer.
func (p *remotePeer) startTasks(ctx context.Context, allocID string, st tasks, out *stream) (*part, error) {
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
	if err != nil {
		return nil, fmt.Errorf("reach node %s's step listener at %s: %w", p.node, p.addr, err)
	}
	tc := nc.(*tls.Conn)
	// Revoking the peer's certificate later closes the connection: the
	// peer's tasks are then lost to this step.
	if err := rev.Track(tc, auth.CertCredential(tc.ConnectionState().PeerCertificates[0])); err != nil {
		tc.Close()
		return nil, fmt.Errorf("node %s: %w", p.node, err)
	}
	c := &trackedConn{Conn: tc, rev: rev}
	part := api.StepPart{Step: st.Step, NodeIndex: st.NodeIndex, Tasks: st.Tasks, GPUIdx: st.GPUIdx,
		GPUsPerTask: st.Bind.perTask, GPUBindSingle: st.Bind.single, GPUBindMap: st.Bind.mapGPU,
		GPUBindMask: st.Bind.maskGPU, GPUClosest: st.Bind.closest,
		Args: st.Args, Env: st.Env, Cwd: st.Cwd, Stdin: st.Stdin != nil && st.NodeIndex == 0,
		Pty: st.Pty, Rows: st.Rows, Cols: st.Cols,
		MPI: st.MPI, StepNodes: st.StepNodes, StepTasks: st.StepTasks,
		CPUBind: st.CPU.bind, Hint: st.CPU.hint, Distribution: st.CPU.dist, CPUsPerTask: st.CPU.cpusPerTask}
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
	var wmu sync.Mutex
	enc := json.NewEncoder(c)
	send := func(v any) error { wmu.Lock(); defer wmu.Unlock(); return enc.Encode(v) }
	if err := send(api.StepHello{Alloc: allocID, Part: &part}); err != nil {
		c.Close()
		return nil, fmt.Errorf("ask node %s for its tasks: %w", p.node, err)
	}
	br := bufio.NewReaderSize(c, 256<<10)
	// The peer's tasks may write before its started answer is sent:
	// their output waits here for it.
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
		return nil, fmt.Errorf("node %s's answer to start its tasks: %w", p.node, err)
	case m.Kind == api.StepError:
		c.Close()
		return nil, fmt.Errorf("node %s: %s", p.node, m.Error)
	case m.Kind != api.StepStarted:
		c.Close()
		return nil, fmt.Errorf("node %s answered %q to start its tasks", p.node, m.Kind)
	}
	sp := newPart(len(st.Tasks))
	sp.remote = func(sig syscall.Signal) { _ = send(api.StepMsg{Kind: api.StepSignal, Signal: int(sig)}) }
	if st.Pty && st.NodeIndex == 0 {
		sp.remoteResize = func(rows, cols int) { _ = send(api.StepMsg{Kind: api.StepResize, Rows: rows, Cols: cols}) }
	}
	if part.Stdin {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := st.Stdin.Read(buf)
				if n > 0 && send(api.StepMsg{Kind: api.StepStdin, Data: slices.Clone(buf[:n])}) != nil {
					return
				}
				if err != nil {
					_ = send(api.StepMsg{Kind: api.StepStdin})
					return
				}
			}
		}()
	}
	go func() {
		defer c.Close()
		defer close(sp.exits)
		// Written here, not before startTasks returns: srun's stream
		// holds output back until the whole step has started.
		for _, m := range early {
			_, _ = taskWriter{out, m.Kind, m.Task}.Write(m.Data)
		}
		exited := map[int]bool{}
		for {
			m, err := api.ReadStepFrame(br)
			if err != nil {
				// The peer is gone: each task it had not reported is
				// lost to this step, said so in its exit.
				for _, t := range st.Tasks {
					if !exited[t] {
						sp.exits <- api.StepMsg{Kind: api.StepExit, Task: t, Node: p.node, Code: 1,
							Error: fmt.Sprintf("lost the connection to node %s's agent before the task's exit: %v", p.node, err)}
					}
				}
				return
			}
			switch m.Kind {
			case api.StepStdout, api.StepStderr:
				_, _ = taskWriter{out, m.Kind, m.Task}.Write(m.Data)
			case api.StepPMIFence:
				// The peer's PMI server in a fence: join it for the peer
				// and answer when every node has (mpi.go).
				if st.PMI.fence != nil {
					go func() {
						parts, err := st.PMI.fence(ctx, m.Round, m.Data)
						reply := api.StepMsg{Kind: api.StepPMIFence, Round: m.Round, Parts: parts}
						if err != nil {
							reply.Error = err.Error()
						}
						_ = send(reply)
					}()
				}
			case api.StepPMIAbort:
				if st.PMI.abort != nil {
					st.PMI.abort(m.Code, m.Error)
				}
			case api.StepExit:
				if slices.Contains(st.Tasks, m.Task) && !exited[m.Task] {
					exited[m.Task] = true
					sp.exits <- m
				}
			case api.StepDone:
				for _, t := range st.Tasks {
					if !exited[t] {
						sp.exits <- api.StepMsg{Kind: api.StepExit, Task: t, Node: p.node, Code: 1, Error: "node " + p.node + " ended the step without the task's exit"}
					}
				}
				return
			case api.StepError:
				err = errors.New(m.Error)
				for _, t := range st.Tasks {
					if !exited[t] {
						sp.exits <- api.StepMsg{Kind: api.StepExit, Task: t, Node: p.node, Code: 1, Error: err.Error()}
						exited[t] = true
					}
				}
				return
			}
		}
	}()
	// The step's end (its context) ends the connection; the peer then
	// kills what is left of its tasks.
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	return sp, nil
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
