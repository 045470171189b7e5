package step

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// SocketName is the job's step socket in its job directory
// (api.EnvStepSocket in the container's environment).
const SocketName = "step.sock"

// HolderScript keeps a non-first node's allocation container alive, doing
// nothing, until the allocation ends (SIGTERM) or the container is killed.
// Other signals the agent sends to the whole container (a checkpoint's
// SIGUSR1, --signal) are for the steps' tasks: the holder ignores them.
const HolderScript = `trap 'exit 0' TERM INT HUP; trap '' USR1 USR2 QUIT ALRM PIPE; while :; do sleep 86400 & wait $!; done`

// Alloc is one allocation's steps on this node: the steps it serves
// (srun asked this node's agent), the step tasks running in its
// container (whoever serves their step) and the steps re-adopted after
// an agent restart. The agent's runner of the allocation holds it.
type Alloc struct {
	n       *Node
	allocID string
	jobID   spec.JobID

	mu  sync.Mutex
	ctr string // container ID
	dir string // job directory
	asg *api.Assignment
	// self is this node's part of the allocation.
	self spec.NodeAlloc
	// env is the container's environment: nil until Ready, so a node
	// that has not started (or, after an agent restart, not re-learned)
	// its part refuses steps.
	env []string
	// running says the allocation's container runs here: this node holds
	// its part (api.StepHello.Holds).
	running bool
	log     *slog.Logger

	// endSock ends the step socket Serve listens on (nil: none),
	// recycling it or not; it reports whether its file left the job
	// directory (EndServe).
	endSock func(recycle bool) bool

	reg     registry   // record.go
	resumed stateSteps // state.go
	// ends counts the steps served here whose end srun has heard and
	// whose record is not yet committed (WaitStepEnds).
	ends pendingEnds
}

// pendingEnds counts work in flight that can be waited for with a bound.
type pendingEnds struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (p *pendingEnds) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.zero = make(chan struct{})
	}
	p.n++
}

func (p *pendingEnds) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	if p.n == 0 {
		close(p.zero)
	}
}

// WaitStepEnds waits up to d for the ends of the steps served here that
// srun has heard of to be recorded, and says whether they were. The
// allocation's exit is recorded after them: a batch script that ends the
// moment its last srun returns would otherwise have the job's end reach
// the controller before its step's, which then closes the step as
// CANCELLED with no exit code (a chaos run found step 0 of a job so).
func (al *Alloc) WaitStepEnds(d time.Duration) bool {
	p := &al.ends
	p.mu.Lock()
	if p.n == 0 {
		p.mu.Unlock()
		return true
	}
	zero := p.zero
	p.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
		return true
	case <-t.C:
		return false
	}
}

// Ready makes the allocation serve steps: its container ctr (its job
// directory dir) runs asg's part self with environment env. It is called
// before the container starts (its first line may be srun) and, after an
// agent restart, once the agent knows the assignment again.
func (al *Alloc) Ready(asg *api.Assignment, self spec.NodeAlloc, ctr, dir string, env []string, log *slog.Logger) {
	al.mu.Lock()
	defer al.mu.Unlock()
	al.asg, al.self, al.ctr, al.dir, al.env, al.log = asg, self, ctr, dir, env, log
}

// Started says the allocation's container runs: this node holds its
// part, and a batch script waiting for its gang may start (gang.go).
func (al *Alloc) Started() {
	al.mu.Lock()
	defer al.mu.Unlock()
	al.running = true
}

// Resume serves steps again in a job a restarted agent re-adopted, once
// it knows the job's assignment (the arguments are Ready's): the steps
// that were running when the old agent died are re-adopted first
// (state.go), and only then does the allocation take steps, and its
// peers' requests to follow their parts again.
func (al *Alloc) Resume(ctx context.Context, asg *api.Assignment, self spec.NodeAlloc, ctr, dir string, env []string, log *slog.Logger) {
	al.mu.Lock()
	al.asg, al.self, al.ctr, al.dir, al.log = asg, self, ctr, dir, log
	al.mu.Unlock()
	al.readopt(ctx, env)
	al.mu.Lock()
	al.env, al.running = env, true
	al.mu.Unlock()
}

// view is what the allocation's steps know of it, once Ready (asg nil
// before).
type view struct {
	asg     *api.Assignment
	self    spec.NodeAlloc
	ctr     string
	env     []string
	running bool
}

func (al *Alloc) view() view {
	al.mu.Lock()
	defer al.mu.Unlock()
	return view{asg: al.asg, self: al.self, ctr: al.ctr, env: al.env, running: al.running}
}

func (al *Alloc) logger() *slog.Logger {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.log
}

func (al *Alloc) jobDir() string {
	al.mu.Lock()
	defer al.mu.Unlock()
	return al.dir
}

// EndServe stops serving the job's step socket for good: the job ended
// and its container is gone, so the socket may wait in the node's pool
// for its user's next job (sockpool.go). It reports whether the socket's
// file left the job directory (the caller need not remove it).
func (al *Alloc) EndServe() (moved bool) {
	al.mu.Lock()
	end := al.endSock
	al.mu.Unlock()
	return end != nil && end(true)
}

// euid is the agent's effective uid, read once (no gpud process changes
// its own credentials).
var euid = os.Geteuid()

// Serve listens on the job's step socket until ctx ends or done is
// closed (the runner returned), or until the returned func is called.
// A nil done is never closed: the caller calls stop when it is done, and
// the listener then needs no goroutine of its own to watch for the end
// (a node agent serves steps in every job it starts). Only an allocation
// that is Ready serves steps.
func (al *Alloc) Serve(ctx context.Context, done <-chan struct{}) (stop func()) {
	v := al.view()
	if v.asg == nil {
		return func() {}
	}
	// The socket is one of the process's job sockets (sockets.go): one
	// acceptor serves them all, none has a goroutine of its own.
	path := filepath.Join(al.jobDir(), SocketName)
	h, err := al.n.openSocket(ctx, al, path, int(v.asg.Job.UID), int(v.asg.Job.GID))
	if err != nil {
		al.logger().Warn("listen on the job's step socket; srun will not work in this job", "err", err)
		return func() {}
	}
	var once sync.Once
	var moved bool
	end := func(recycle bool) bool {
		once.Do(func() { moved = al.n.closeSocket(h, path, recycle) })
		return moved
	}
	al.mu.Lock()
	al.endSock = end
	al.mu.Unlock()
	closeLn := func() { end(false) }
	if done == nil {
		unwatch := context.AfterFunc(ctx, closeLn)
		return func() { unwatch(); closeLn() }
	}
	stopC := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		case <-stopC:
		}
		closeLn()
	}()
	var stopOnce sync.Once
	return func() { stopOnce.Do(func() { close(stopC) }) }
}
