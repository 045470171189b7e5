package step

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/guard"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// Host is what steps ask of their node agent. The agent implements it;
// every method is safe for concurrent use.
type Host interface {
	// Alloc is the steps of allocation id on this node, nil when the
	// node runs no part of it.
	Alloc(id string) *Alloc
	// Record commits ev to the node's outbox and wakes its sender. The
	// commit does not honour ctx's cancellation: an event observed is an
	// event kept.
	Record(ctx context.Context, ev api.AllocEvent) error
	// ReserveIDs durably reserves the next n step numbers of allocation
	// id and returns the first: a restart never numbers a step twice.
	ReserveIDs(ctx context.Context, allocID string, n int) (first int, err error)
	// Fail ends this node's part of allocation id because another node
	// of it does not hold its part (a step could not start there): the
	// agent stops its container and reports NODE_FAIL with reason, so the
	// job is requeued (or fails) instead of running on without that node.
	Fail(allocID, reason string)
}

// Clock is the time of steps' records and of a step cancel's kill grace.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Config is a node's part in steps.
type Config struct {
	Node    string // the node's name
	Version string // the agent's, for peers refused a step flag
	// KillGrace is the wait between SIGTERM and SIGKILL when a step is
	// cancelled (Slurm's KillWait).
	KillGrace time.Duration
	Runtime   runtime.Runtime
	Clock     Clock
	Log       *slog.Logger // the node's
	// Peers finds the agents of other nodes in this process (gpud
	// standalone); nil: none.
	Peers *Peers
	// Net is the step listener and the node's identity towards peers on
	// other hosts (listen.go); nil: none.
	Net *Net
	// Tools is the directory of gpud's tools, bound into every job at
	// the same path: gpuq (the task launcher, bind.go) and gpud-pmix (the
	// PMIx helper, mpi.go); "" when the node has none.
	Tools string
	// GPUNUMA is the NUMA node of each of the node's GPUs, by UUID
	// (--gpu-bind=closest).
	GPUNUMA map[string]int
	// Revocations is the node's copy of the controller's revocation
	// lists: every credential a peer or srun presents, and every peer
	// this node dials, is checked against it, and nothing is trusted
	// while it is stale. Nil: a copy never filled (nothing trusted).
	Revocations *auth.Revocations
	// TicketKey is the key step tickets are verified with, as the
	// controller last sent it ("" or nil: none; tickets are refused).
	TicketKey func() string
	// Now is the wall clock tickets' expiry is judged by (nil:
	// time.Now); Clock may be a test's.
	Now func() time.Time
	// SocketPool is a directory for the step sockets of ended jobs to
	// wait in for their users' next jobs (sockpool.go): the node's own,
	// made afresh by Run (0700), on the job directories' filesystem.
	// "": each job's socket is made and closed.
	SocketPool string
}

// Node is a node agent's step service: it starts its node's parts of
// steps (for its own allocations' steps and for peers) and finds the
// peers of the others.
type Node struct {
	cfg  Config
	host Host
	// pool is the idle step sockets (sockpool.go), while Run runs.
	pool *socketPool
	// peerLog bounds the log lines a remote caller can trigger.
	peerLog *guard.RateLog
	// startedHook, when set (tests), is called as a step's tasks run and
	// before the step is recorded as started: where a test kills the agent.
	startedHook func()
	// releasedHook, when set (tests), is srun's streams' (stream.go).
	releasedHook func()
}

// NewNode returns the step service of the agent host.
func NewNode(cfg Config, host Host) *Node {
	if cfg.Net != nil {
		cfg.Net.fill()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Revocations == nil {
		cfg.Revocations = auth.NewRevocationCopy(time.Minute, cfg.Now)
	}
	return &Node{cfg: cfg, host: host, peerLog: guard.NewRateLog(cfg.Log), pool: &socketPool{dir: cfg.SocketPool, closed: true}}
}

// Run joins the in-process peers and serves the step listener, when the
// node has them, until ctx ends or stop is called (stop waits for the
// listener's accept loop).
func (n *Node) Run(ctx context.Context) (stop func()) {
	stops := []func(){}
	// The jobs' step sockets' acceptor (sockets.go) stays while the node
	// runs, not made again for each job.
	if _, err := acquireSockets(); err == nil {
		stops = append(stops, releaseSockets)
	} else {
		n.cfg.Log.Warn("no step socket acceptor yet; each job's start tries again", "err", err)
	}
	if err := n.pool.open(); err != nil {
		n.cfg.Log.Warn("no pool for ended jobs' step sockets; each job makes its own", "dir", n.cfg.SocketPool, "err", err)
	}
	// Before the acceptor's reference goes (stops run in order): the
	// idle sockets hold references of their own.
	stops = append([]func(){n.pool.close}, stops...)
	if p := n.cfg.Peers; p != nil {
		p.add(n)
		stops = append(stops, func() { p.remove(n) })
	}
	if n.cfg.Net != nil {
		stops = append(stops, n.serveNet(ctx))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, s := range stops {
				s()
			}
		})
	}
}

// NewAlloc returns the steps of one allocation on this node; they are
// served once Ready says where its container runs.
func (n *Node) NewAlloc(allocID string, jobID spec.JobID) *Alloc {
	return &Alloc{n: n, allocID: allocID, jobID: jobID, log: n.cfg.Log, resumed: stateSteps{recs: map[int]stepRecord{},
		parts: map[int]*resumedPart{}, kept: map[int]*kept{}, starting: map[int]chan struct{}{}, stdinOut: map[int]*stream{}, partRecs: map[int]*partRecord{}}}
}

// Peers finds the agents of other nodes in this process (gpud
// standalone) for steps. Safe for concurrent use.
type Peers struct {
	mu    sync.Mutex
	nodes map[string]*Node
}

// NewPeers returns an empty registry; agents given it add themselves
// while they run.
func NewPeers() *Peers { return &Peers{nodes: map[string]*Node{}} }

func (p *Peers) add(n *Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nodes[n.cfg.Node] = n
}

func (p *Peers) remove(n *Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.nodes[n.cfg.Node] == n {
		delete(p.nodes, n.cfg.Node)
	}
}

func (p *Peers) get(name string) *Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[name]
}

// peer runs one node's share of a step: that node's agent, in this
// process (this node itself, or Peers under gpud standalone) or over the
// network (remotePeer, peerclient.go).
type peer interface {
	startTasks(ctx context.Context, allocID string, st tasks, out sink) (*part, error)
	// owner is the peer's steps of allocation allocID where the peer is
	// in this process (it numbers the allocation's steps and books their
	// resources when it runs the first node's part, record.go), nil
	// where it is not or over the network.
	owner(allocID string) *Alloc
}

// owner is this node's steps of allocID, if it runs a part of it.
func (n *Node) owner(allocID string) *Alloc { return n.host.Alloc(allocID) }

// peer returns the agent running node nd's part of steps: this one, an
// in-process peer, or the node's step listener.
func (n *Node) peer(nd spec.NodeAlloc) (peer, error) {
	if nd.Node == n.cfg.Node {
		return n, nil
	}
	if n.cfg.Peers != nil {
		if p := n.cfg.Peers.get(nd.Node); p != nil {
			return p, nil
		}
	}
	return n.remotePeer(nd)
}
