package step

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestStepWithoutAPartFailsTheJob: a step waits partWait for a node of
// the allocation that does not hold its part; then srun is told why, the
// tasks started elsewhere are killed, and a batch job's part here ends
// (NODE_FAIL, through Host.Fail) naming the node, so the job never ends
// COMPLETED on work that skipped it (issue 25 D). An interactive
// allocation is left to its srun.
func TestStepWithoutAPartFailsTheJob(t *testing.T) {
	defer func(d time.Duration) { partWait = d }(partWait)
	partWait = 300 * time.Millisecond
	for _, interactive := range []bool{false, true} {
		rt := &fakeRT{procs: map[string]*fakeProc{}, end: make(chan struct{})}
		t.Cleanup(func() { close(rt.end) })
		peers := NewPeers()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		mk := func(name string) (*Node, *fakeHost) {
			h := &fakeHost{allocs: map[string]*Alloc{}, next: map[string]int{}}
			n := NewNode(Config{Node: name, Clock: realClock{}, Log: log, Runtime: &agentRT{rt: rt, dead: make(chan struct{})}, Peers: peers}, h)
			t.Cleanup(n.Run(context.Background()))
			return n, h
		}
		n1, h1 := mk("n1")
		mk("n2") // runs no part of the allocation
		asg := &api.Assignment{Job: spec.Job{ID: 7, JobSpec: spec.JobSpec{Interactive: interactive}},
			Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1}, {Node: "n2", Rank: 1, CPUs: 1}}}}
		al := testAlloc(t, n1, h1, asg, t.TempDir())
		s := runStep(t, al, api.StepRequest{Args: []string{"work"}})
		s.until("the step's error", func() bool { return s.err != nil })
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		if !strings.Contains(err.Error(), "node n2 runs no part of allocation 7.1") {
			t.Errorf("srun was told %v; want why node n2 cannot start its tasks", err)
		}
		h1.mu.Lock()
		failed := h1.failed
		h1.mu.Unlock()
		switch {
		case interactive && len(failed) != 0:
			t.Errorf("an interactive allocation's part was ended: %q", failed)
		case !interactive && (len(failed) != 1 || !strings.Contains(failed[0], "7.1: step 7.0 could not start on node n2, which does not hold its part")):
			t.Errorf("the job's part here was ended with %q; want one NODE_FAIL naming node n2", failed)
		}
		rt.mu.Lock()
		p := rt.procs[execID(0, 0)]
		rt.mu.Unlock()
		if p != nil {
			t.Errorf("task 0 on n1 still runs after the step failed to start")
		}
	}
}

// TestStepCwdNotInContainer: a step whose working directory the job's
// container does not show runs in /tmp, with slurmstepd's warning on its
// stderr before its own output (issue 26).
func TestStepCwdNotInContainer(t *testing.T) {
	c := newTestCluster(t, "n1")
	a := c.start("n1", false)
	s := runStep(t, a.al, api.StepRequest{Args: []string{"work"}, Cwd: "/not/in/the/container"})
	p := c.rt.proc(t, execID(0, 0))
	p.write("hello\n")
	p.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	want := "0:gpud: warning: couldn't chdir to `/not/in/the/container': not in the job's container: going to /tmp instead\n0:hello\n"
	if got := s.output(); got != want || s.done.Code != 0 {
		t.Errorf("output %q (exit %d), want %q and exit 0", got, s.done.Code, want)
	}
}

// TestStepFreesItsShareBeforeSrunHears: when srun reads a step's end, the
// step's CPUs and GPUs are already back in the allocation's ledger, so a
// script's next srun starts at once instead of printing "Requested nodes
// are busy" while the ended step's record is written (seen in a full run
// under load: TestHostFilesystem's second srun waited).
func TestStepFreesItsShareBeforeSrunHears(t *testing.T) {
	c := newTestCluster(t, "n1")
	a := c.start("n1", false)
	cli, srv := net.Pipe()
	go a.al.serveConn(context.Background(), srv)
	t.Cleanup(func() { cli.Close() })
	// The share is read the moment the end is read, as srun would go on.
	held := make(chan int, 1)
	go func() {
		br := bufio.NewReader(cli)
		for {
			m, err := api.ReadStepFrame(br)
			if err != nil {
				held <- -1
				return
			}
			if m.Kind == api.StepDone {
				n := 0
				g := a.al.ledger()
				g.mu.Lock()
				for _, u := range g.nodes {
					n += u.cpus
					for _, b := range u.gpus {
						if b {
							n++
						}
					}
				}
				g.mu.Unlock()
				held <- n
				return
			}
		}
	}()
	if err := json.NewEncoder(cli).Encode(api.StepRequest{Args: []string{"work"}}); err != nil {
		t.Fatal(err)
	}
	c.rt.proc(t, execID(0, 0)).exit(0, 0)
	select {
	case n := <-held:
		if n != 0 {
			t.Errorf("srun had the step's end while the ledger still held %d of its CPUs and GPUs (-1: no end); want them given back first", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no step end within 30 s")
	}
}

// TestServeOverStaleSocket: the job's step socket is made on a fresh job
// directory without an unlink first; one an earlier agent left there (a
// kill -9 leaves the socket file) is replaced, and srun reaches the new
// agent through it; the socket is the job user's, mode 0600.
func TestServeOverStaleSocket(t *testing.T) {
	n, h := testNode("n1")
	for _, stale := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "job")
		asg := &api.Assignment{Job: spec.Job{ID: 7, UID: uint32(os.Getuid()), GID: uint32(os.Getgid())},
			Alloc: spec.Alloc{ID: "7.1", Nodes: []spec.NodeAlloc{{Node: "n1"}}}}
		al := testAlloc(t, n, h, asg, dir)
		path := filepath.Join(dir, SocketName)
		if stale {
			ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
		done := make(chan struct{})
		stop := al.Serve(context.Background(), done)
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatalf("stale socket %v: srun cannot reach the step socket: %v", stale, err)
		}
		if _, err := c.Write([]byte("{}\n")); err != nil {
			t.Fatal(err)
		}
		m, err := api.ReadStepFrame(bufio.NewReader(c))
		c.Close()
		if err != nil || m.Kind != api.StepError || !strings.Contains(m.Error, "no command given") {
			t.Errorf("stale socket %v: answer %+v, %v; want the step socket's refusal of a step without a command", stale, m, err)
		}
		fi, err := os.Lstat(path)
		if err != nil || fi.Mode() != os.ModeSocket|0o600 {
			t.Errorf("stale socket %v: step socket %v, %v; want a socket of mode 0600", stale, fi.Mode(), err)
		}
		stop()
		close(done)
	}
}
