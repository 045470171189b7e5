package server_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

// The controller identity end to end: a real controller (its state.db
// replaced between two runs, as an admin starting over or a fresh HA group
// would) and a real node agent (its outbox.db kept), the container
// runtime faked at the edge.

// identRig is one controller state directory and one node agent whose
// state directory outlives it.
type identRig struct {
	t        *testing.T
	dir      string // the controller's: state.db and gpud.sock
	agentDir string
	home     string
	rt       *fake.Runtime
	addr     string
	ctrl     *controller.Controller
	stopCtl  func()
	stopNode func()
}

func newIdentRig(t *testing.T) *identRig {
	dir, err := os.MkdirTemp("", "gid")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &identRig{t: t, dir: dir, agentDir: t.TempDir(), home: t.TempDir(), rt: fake.New()}
	r.startController()
	return r
}

func (r *identRig) startController() {
	r.addr, r.ctrl, r.stopCtl = servertest.Start(r.t, nil, servertest.Options{Dir: r.dir})
}

// resetController stops the controller and starts it again on a new
// state.db in the same directory (the same address).
func (r *identRig) resetController() {
	r.t.Helper()
	old := r.ctrl.Identity()
	r.stopCtl()
	for _, f := range []string{"state.db", "state.db-wal", "state.db-shm"} {
		if err := os.Remove(filepath.Join(r.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.t.Fatal(err)
		}
	}
	r.startController()
	if id := r.ctrl.Identity(); id == "" || id == old {
		r.t.Fatalf("a new state.db has identity %q, the old one had %q; want a new one", id, old)
	}
}

func (r *identRig) startNode() {
	r.t.Helper()
	cl := client(r.t, r.addr)
	a, err := node.New(node.Config{Name: "n1", Addr: "10.0.0.1", StateDir: r.agentDir, Inventory: spec.Inventory{CPUs: 8, MemMiB: 16 << 10},
		KillGrace: time.Second, HeartbeatInterval: time.Second, PollWait: 5 * time.Second, Hostname: "n1.test", Version: "test",
		SysfsRoot: r.t.TempDir()}, cl, r.rt, node.WithLogger(node.TestLogger(r.t)), node.WithRetryBackoff(10*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	r.stopNode = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("node agent: %v", err)
		}
		cl.HTTPClient().CloseIdleConnections()
	}
	r.t.Cleanup(r.stopNode)
}

func (r *identRig) submit() spec.JobID {
	r.t.Helper()
	resp, err := client(r.t, r.addr).Submit(ctxT(r.t), api.SubmitRequest{Job: spec.JobSpec{Name: "j", Script: "#!/bin/sh\nsleep 1000\n", WorkDir: r.home}})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.ID
}

func (r *identRig) job(id spec.JobID) spec.Job {
	r.t.Helper()
	j, err := client(r.t, r.addr).Job(ctxT(r.t), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *identRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: not within 30s", what)
		}
		select {
		case <-r.rt.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// running waits for the n-th container start, which must be job id's,
// and for its task to run; it returns the container's ID.
func (r *identRig) running(id spec.JobID, n int) string {
	r.t.Helper()
	r.waitFor("container start "+strconv.Itoa(n), func() bool { return len(r.rt.Starts()) >= n })
	cfg := r.rt.Starts()[n-1]
	if cfg.Labels[node.LabelJob] != strconv.FormatUint(uint64(id), 10) {
		r.t.Fatalf("start %d is of job %s, want %d", n, cfg.Labels[node.LabelJob], id)
	}
	r.waitFor("container "+cfg.ID+" runs", func() bool { st, ok := r.rt.Status(cfg.ID); return ok && st == runtime.StatusRunning })
	return cfg.ID
}

// ended waits for job id to end and checks it completed with exit 0.
func (r *identRig) completed(id spec.JobID) {
	r.t.Helper()
	var j spec.Job
	r.waitFor("job ended", func() bool { j = r.job(id); return j.State.Terminal() })
	if j.State != spec.StateCompleted || j.ExitCode != 0 {
		r.t.Fatalf("job %d ended %s with exit %d (%s); want COMPLETED with 0: an event of the old state's job of the same allocation ID was applied to it", id, j.State, j.ExitCode, j.Reason)
	}
}

// TestOldEventsNeverEndANewJob: the agent's undelivered exit of job 1,
// recorded for the old state, must not end the new state's job 1, placed
// on the node under the same allocation ID before the agent comes back
// (the order that applied it before identities).
func TestOldEventsNeverEndANewJob(t *testing.T) {
	r := newIdentRig(t)
	r.startNode()
	old := r.submit()
	cid := r.running(old, 1)
	r.stopNode()
	// The old job's task exits while the agent is down: its exit is
	// recorded (and queued for the controller) when the agent comes back.
	if !r.rt.Exit(cid, runtime.ExitStatus{Code: 7}) {
		t.Fatal("the old container had already exited")
	}

	r.resetController()
	// The node is known to the new state and the new job 1 placed on it
	// before the agent is back.
	if _, err := client(t, r.addr).Register(ctxT(t), spec.Inventory{Name: "n1", Addr: "10.0.0.1", CPUs: 8, MemMiB: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	fresh := r.submit()
	if fresh != old {
		t.Fatalf("the new state's first job is %d, want %d (the same allocation ID)", fresh, old)
	}
	r.waitFor("the new job 1 placed on n1", func() bool { j := r.job(fresh); return j.Alloc != nil && j.State == spec.StateRunning })
	r.startNode()
	ncid := r.running(fresh, 2)
	if j := r.job(fresh); j.State != spec.StateRunning {
		t.Fatalf("the new job 1 is %s (exit %d, %s) once its container runs; want RUNNING", j.State, j.ExitCode, j.Reason)
	}
	r.rt.Exit(ncid, runtime.ExitStatus{})
	r.completed(fresh)
}

// TestNewJobNeverHandedToOldRunner: an agent restarted while the old
// state's job 1 still ran re-adopts its container; the new state's job 1,
// assigned under the same allocation ID, gets a container of its own (the
// old one is stopped), and the old one's end does not end it.
func TestNewJobNeverHandedToOldRunner(t *testing.T) {
	r := newIdentRig(t)
	r.startNode()
	old := r.submit()
	r.running(old, 1)
	r.stopNode()

	r.resetController()
	fresh := r.submit()
	if fresh != old {
		t.Fatalf("the new state's first job is %d, want %d (the same allocation ID)", fresh, old)
	}
	r.startNode() // re-adopts the old container, then registers
	ncid := r.running(fresh, 2)
	r.rt.Exit(ncid, runtime.ExitStatus{})
	r.completed(fresh)
}

// TestEventsOfAnotherIdentityRefused: the events call refuses events
// that say another controller identity (409, naming both), and takes
// those that say its own or none (an older agent's).
func TestEventsOfAnotherIdentityRefused(t *testing.T) {
	addr, c := servertest.TestServer(t, nil)
	cl := client(t, addr)
	reg, err := cl.Register(ctxT(t), inventory("n1", 0))
	if err != nil {
		t.Fatal(err)
	}
	mine := c.Identity()
	if len(mine) != 32 || reg.ControllerID != mine {
		t.Fatalf("register answered identity %q, the controller's is %q; want the same 32 hex digits", reg.ControllerID, mine)
	}
	asg, err := cl.PollAssignments(ctxT(t), "n1", api.AssignmentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if asg.ControllerID != mine {
		t.Fatalf("assignments answered identity %q, want %q", asg.ControllerID, mine)
	}
	// An event for no known allocation: acknowledged (and dropped) when
	// taken at all.
	evs := []api.AllocEvent{{Seq: 1, Node: "n1", AllocID: "9.1", JobID: 9, Kind: api.EventExited, Time: spec.NewTime(time.Now()), State: spec.StateFailed, ExitCode: 7}}
	for _, said := range []string{"", mine} {
		if _, err := cl.EventsFor(ctxT(t), "n1", evs, time.Now(), said); err != nil {
			t.Errorf("events saying identity %q: %v; want them taken", said, err)
		}
	}
	other := strings.Repeat("ab", 16)
	_, err = cl.EventsFor(ctxT(t), "n1", evs, time.Now(), other)
	if !errors.Is(err, spec.ErrConflict) || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), mine) {
		t.Fatalf("events saying identity %s: %v; want 409 naming both identities", other, err)
	}
}
