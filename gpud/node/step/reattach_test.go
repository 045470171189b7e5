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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// fakeRT runs step tasks the test drives. Like tasks under a shim, they
// outlive the agent that started them: output written while no agent
// reads it waits (as in a FIFO) for the next one to attach.
type fakeRT struct {
	mu    sync.Mutex
	procs map[string]*fakeProc // by exec ID
	end   chan struct{}        // closed when the test ends
}

type fakeProc struct {
	mu    sync.Mutex
	out   io.Writer // the agent reading its output; nil: none
	owner *agentRT
	fifo  []string // written while none reads
	done  chan struct{}
	st    runtime.ExitStatus
}

func (p *fakeProc) write(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		p.fifo = append(p.fifo, s)
		return
	}
	_, _ = io.WriteString(p.out, s)
}

// readNow has the agent that reads the task's output now read s (as
// containerd's copy reads a FIFO) and returns at once; done is closed
// once the agent's writer returned. Unlike write, a kill of the agent
// after readNow cannot hand s to the next agent: the old one read it.
func (p *fakeProc) readNow(s string) (done chan struct{}) {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	done = make(chan struct{})
	if out == nil {
		panic("readNow: no agent reads the task's output")
	}
	go func() {
		defer close(done)
		_, _ = io.WriteString(out, s)
	}()
	return done
}

func (p *fakeProc) exit(code int, sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
	default:
		p.st = runtime.ExitStatus{Code: code, Signal: sig}
		close(p.done)
	}
}

// agentRT is one agent's runtime: its handles die with it (kill).
type agentRT struct {
	runtime.Runtime // not used by steps
	rt              *fakeRT
	dead            chan struct{}
	// stall, when set, is told when Exec is entered, and Exec then creates
	// nothing and never returns: the agent is to be killed while it
	// creates a task's process.
	stall chan struct{}
}

func (a *agentRT) Exec(_ context.Context, _ string, cfg runtime.ExecConfig) (runtime.Process, error) {
	if a.stall != nil {
		a.stall <- struct{}{}
		<-a.dead
		<-a.rt.end // a dead agent hears nothing more
		return nil, errors.New("agent gone")
	}
	if cfg.Cwd == "/not/in/the/container" {
		return nil, fmt.Errorf("start %q: %w: chdir to cwd failed", cfg.Args[0], runtime.ErrNoCwd)
	}
	p := &fakeProc{out: cfg.Stdout, owner: a, done: make(chan struct{})}
	a.rt.mu.Lock()
	defer a.rt.mu.Unlock()
	if a.rt.procs[cfg.ID] != nil {
		// As containerd: an exec ID is the container's once.
		return nil, fmt.Errorf("exec %s: already exists", cfg.ID)
	}
	a.rt.procs[cfg.ID] = p
	return &fakeHandle{p: p, a: a}, nil
}

func (a *agentRT) AttachExec(_ context.Context, _, id string, cfg runtime.ExecConfig) (runtime.Process, error) {
	a.rt.mu.Lock()
	p := a.rt.procs[id]
	a.rt.mu.Unlock()
	if p == nil {
		return nil, runtime.ErrNotFound
	}
	p.mu.Lock()
	p.out, p.owner = cfg.Stdout, a
	fifo := p.fifo
	p.fifo = nil
	p.mu.Unlock()
	for _, s := range fifo {
		_, _ = io.WriteString(cfg.Stdout, s)
	}
	return &fakeHandle{p: p, a: a}, nil
}

// kill is kill -9 of the agent: its handles never answer again, and its
// tasks' output waits for the next agent.
func (a *agentRT) kill() {
	close(a.dead)
	a.rt.mu.Lock()
	defer a.rt.mu.Unlock()
	for _, p := range a.rt.procs {
		p.mu.Lock()
		if p.owner == a {
			p.out = nil
		}
		p.mu.Unlock()
	}
}

type fakeHandle struct {
	p *fakeProc
	a *agentRT
}

func (h *fakeHandle) Wait(context.Context) (runtime.ExitStatus, error) {
	select {
	case <-h.p.done:
		select {
		case <-h.a.dead:
		default:
			return h.p.st, nil
		}
	case <-h.a.dead:
	}
	<-h.a.rt.end // a dead agent hears nothing more
	return runtime.ExitStatus{}, errors.New("agent gone")
}

func (h *fakeHandle) Signal(_ context.Context, sig syscall.Signal) error {
	select {
	case <-h.a.dead:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		h.p.exit(137, sig)
	}
	return nil
}

func (h *fakeHandle) Delete(context.Context) error {
	h.a.rt.mu.Lock()
	defer h.a.rt.mu.Unlock()
	for id, p := range h.a.rt.procs {
		if p == h.p {
			delete(h.a.rt.procs, id)
		}
	}
	return nil
}

func (rt *fakeRT) proc(t *testing.T, id string) *fakeProc {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		rt.mu.Lock()
		p := rt.procs[id]
		rt.mu.Unlock()
		if p != nil {
			return p
		}
	}
	t.Fatalf("task %s never started", id)
	return nil
}

// trackLn closes, on kill, the connections it accepted.
type trackLn struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackLn) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackLn) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// testAgent is a node agent's step side over a step listener.
type testAgent struct {
	n    *Node
	h    *fakeHost
	al   *Alloc
	rt   *agentRT
	ln   *trackLn
	stop func()
}

func (a *testAgent) kill() {
	a.rt.kill()
	a.stop()
	a.ln.cut()
}

type testCluster struct {
	t     *testing.T
	rt    *fakeRT
	pool  *x509.CertPool
	ca    *auth.CA
	asg   *api.Assignment
	dirs  map[string]string
	ports map[string]int
	logs  *logBuf
	// tools is the agents' Config.Tools ("" none).
	tools string
}

func newTestCluster(t *testing.T, names ...string) *testCluster {
	files, err := auth.EnsureTLS(t.TempDir(), "test", []string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := auth.LoadCA(files, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, rt: &fakeRT{procs: map[string]*fakeProc{}, end: make(chan struct{})}, pool: ca.Pool(), ca: ca,
		dirs: map[string]string{}, ports: map[string]int{}, logs: &logBuf{}}
	t.Cleanup(func() {
		close(c.rt.end)
		if t.Failed() {
			t.Logf("agents' logs:\n%s", c.logs.String())
		}
	})
	asg := &api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "7.1"}}
	jobs := jobDirs(t)
	for i, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.ports[name] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		c.dirs[name] = filepath.Join(jobs, "job-"+name)
		asg.Alloc.Nodes = append(asg.Alloc.Nodes, spec.NodeAlloc{Node: name, Rank: i, Addr: "127.0.0.1", StepPort: c.ports[name], CPUs: 1})
	}
	c.asg = asg
	return c
}

// jobDirs returns a directory for the agents' job directories, removed
// after the agents stopped. A stopped (or killed) agent of a test is not
// a dead process: its goroutines can still write or drop a step's
// records (step-N.tasks.json, step-N.held) for a moment after the test
// ended, and t.TempDir's single RemoveAll then fails with "directory not
// empty". The removal is tried again until nothing comes back.
func jobDirs(t *testing.T) string {
	dir, err := os.MkdirTemp("", "steptest-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered before any agent's stop, so it runs after them.
	t.Cleanup(func() {
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(end) {
				t.Errorf("remove the agents' job directories: %v", err)
				return
			}
		}
	})
	return dir
}

func (c *testCluster) cert(name string) tls.Certificate {
	keyPEM, csrPEM, err := auth.NodeKey(name)
	if err != nil {
		c.t.Fatal(err)
	}
	certPEM, err := c.ca.SignNode(csrPEM, name)
	if err != nil {
		c.t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		c.t.Fatal(err)
	}
	return cert
}

// start starts node name's agent (again, with resume: after a restart).
func (c *testCluster) start(name string, resume bool) *testAgent {
	t := c.t
	var ln net.Listener
	var err error
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports[name])); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	tl := &trackLn{Listener: ln}
	rt := &agentRT{rt: c.rt, dead: make(chan struct{})}
	h := &fakeHost{allocs: map[string]*Alloc{}, next: map[string]int{}}
	log := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
	// The controller's list, never stale: a node's copy is stale until
	// its registration brings one, and trusts no peer meanwhile.
	n := NewNode(Config{Node: name, Clock: realClock{}, Log: log, Runtime: rt, Revocations: auth.NewRevocations(nil), Tools: c.tools,
		Net: &Net{Listener: tl, Cert: c.cert(name), CA: c.pool}}, h)
	ctx, cancel := context.WithCancel(context.Background())
	stopNet := n.Run(ctx)
	var self spec.NodeAlloc
	for _, nd := range c.asg.Alloc.Nodes {
		if nd.Node == name {
			self = nd
		}
	}
	al := n.NewAlloc(c.asg.Alloc.ID, c.asg.Job.ID)
	h.add(c.asg.Alloc.ID, al)
	env := []string{"PATH=/bin"}
	if resume {
		al.Resume(context.Background(), c.asg, self, "ctr-"+name, c.dirs[name], env, log)
	} else {
		mkdir(t, c.dirs[name])
		al.Ready(c.asg, self, "ctr-"+name, c.dirs[name], env, log)
		al.Started()
	}
	a := &testAgent{n: n, h: h, al: al, rt: rt, ln: tl}
	var once sync.Once
	a.stop = func() { once.Do(func() { cancel(); stopNet() }) }
	t.Cleanup(a.stop)
	return a
}

// logBuf keeps the agents' logs, shown when the test fails: agents of
// the test may log after it ended.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
}

// srun is a step client on the server agent's step socket side: it
// reads the step's frames as they come.
type srun struct {
	t    *testing.T
	c    net.Conn
	mu   sync.Mutex
	out  strings.Builder
	exit map[int]api.StepMsg
	done *api.StepMsg
	err  error
}

func runStep(t *testing.T, al *Alloc, req api.StepRequest) *srun {
	cli, srv := net.Pipe()
	go al.serveConn(context.Background(), srv)
	t.Cleanup(func() { cli.Close() })
	s := &srun{t: t, c: cli, exit: map[int]api.StepMsg{}}
	go func() {
		br := bufio.NewReader(cli)
		for {
			m, err := api.ReadStepFrame(br)
			s.mu.Lock()
			switch {
			case err != nil:
				if s.err == nil {
					s.err = err
				}
			case m.Kind == api.StepStdout || m.Kind == api.StepStderr:
				fmt.Fprintf(&s.out, "%d:%s", m.Task, m.Data)
			case m.Kind == api.StepExit:
				if _, dup := s.exit[m.Task]; dup {
					s.err = fmt.Errorf("task %d's exit reported twice", m.Task)
				}
				s.exit[m.Task] = m
			case m.Kind == api.StepDone:
				s.done = &m
			case m.Kind == api.StepError:
				s.err = errors.New(m.Error)
			}
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	if err := json.NewEncoder(cli).Encode(req); err != nil {
		t.Fatal(err)
	}
	return s
}

// until waits for cond (called with s.mu held).
func (s *srun) until(what string, cond func() bool) {
	s.t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		s.mu.Lock()
		ok, err, out := cond(), s.err, s.out.String()
		s.mu.Unlock()
		if ok {
			return
		}
		if err != nil {
			s.t.Fatalf("waiting for %s: %v (output so far %q)", what, err, out)
		}
	}
	s.t.Fatalf("timed out waiting for %s (output so far %q)", what, s.output())
}

func (s *srun) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *srun) has(text string) func() bool {
	return func() bool { return strings.Contains(s.out.String(), text) }
}

// TestPartFollowedAgain: a 2-node step over the step listeners outlives
// the loss of the connection between the agents and a kill -9 of the
// second node's agent: the part's tasks run on, their output written
// meanwhile arrives once (none lost: what a dying connection swallowed
// is sent again, as the part keeps output until acknowledged), and each
// task's exit arrives once, with the step's exit code.
func TestPartFollowedAgain(t *testing.T) {
	c := newTestCluster(t, "n1", "n2")
	a1 := c.start("n1", false)
	a2 := c.start("n2", false)
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"work"}, Env: []string{}})
	t0, t1 := c.rt.proc(t, execID(0, 0)), c.rt.proc(t, execID(0, 1))
	t0.write("a1\n")
	t1.write("b1\n")
	s.until("the first lines", func() bool { return s.has("0:a1\n")() && s.has("1:b1\n")() })

	// The network between the agents breaks: the first agent follows
	// the part again over a new connection.
	a2.ln.cut()
	t1.write("b2\n")
	s.until("b2 after the connection was lost", s.has("1:b2\n"))

	// kill -9 of n2's agent: its task runs on and writes; a new agent
	// re-adopts the part from its record and the first agent follows it
	// again.
	a2.kill()
	t1.write("b3\n")
	time.Sleep(100 * time.Millisecond)
	t0.write("a2\n")
	s.until("the first node's output while n2 is away", s.has("0:a2\n"))
	c.start("n2", true)
	s.until("b3 written while n2's agent was away", s.has("1:b3\n"))
	t1.write("b4\n")
	t1.exit(3, 0)
	t0.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	s.mu.Lock()
	defer s.mu.Unlock()
	if got, want := s.out.String(), "0:a1\n1:b1\n1:b2\n0:a2\n1:b3\n1:b4\n"; got != want {
		t.Errorf("output %q, want %q (every line once, in order per task)", got, want)
	}
	if len(s.exit) != 2 || s.exit[1].Code != 3 || s.exit[1].Error != "" || s.exit[0].Code != 0 || s.done.Code != 3 {
		t.Errorf("exits %+v done %+v; want task 1 exit 3 and the step's code 3", s.exit, s.done)
	}
}

// TestPartStartSentAgain: the first node's agent sends the start of the
// second node's part again (its answer was lost, or that agent restarted
// just after starting the tasks): the start sent again follows the
// running part instead of starting its tasks twice (which containerd
// refuses, "already exists"), with every line of output once.
func TestPartStartSentAgain(t *testing.T) {
	c := newTestCluster(t, "n1", "n2")
	a1 := c.start("n1", false)
	a2 := c.start("n2", false)
	pr, err := a1.n.peer(c.asg.Alloc.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(step int, out sink) *remotePart {
		t.Helper()
		st := tasks{Step: step, NodeIndex: 1, Tasks: []int{1}, Args: []string{"work"}, Env: []string{}}
		rp := newRemotePart(pr.(*remotePeer), c.asg.Alloc.ID, st, out)
		if err := rp.connect(ctx, false); err != nil {
			t.Fatalf("start node n2's part of step %d: %v", step, err)
		}
		return rp
	}
	lose := func(rp *remotePart) { // the answer never reaches the sender
		rp.mu.Lock()
		rp.c.Close()
		rp.mu.Unlock()
	}
	follow := func(rp *remotePart, out *recSink, task *fakeProc, last, want string) {
		t.Helper()
		rp.start(ctx)
		task.write(last)
		task.exit(0, 0)
		for ex := range rp.part.exits {
			if ex.Code != 0 || ex.Error != "" {
				t.Errorf("task exit %+v; want 0", ex)
			}
		}
		if got := out.text(); got != want {
			t.Errorf("output %q; want %q (each line once)", got, want)
		}
		rp.release()
		eventually(t, "the task deleted once the part was released", func() bool {
			c.rt.mu.Lock()
			defer c.rt.mu.Unlock()
			return len(c.rt.procs) == 0
		})
	}

	// Its answer lost, the start is sent again, twice.
	lose(start(4, &recSink{}))
	task := c.rt.proc(t, execID(4, 1))
	task.write("one\n")
	lose(start(4, &recSink{}))
	task.write("two\n")
	out := &recSink{}
	follow(start(4, out), out, task, "three\n", "one\ntwo\nthree\n")

	// Sent again after n2's agent restarted, which re-adopted the part.
	lose(start(5, &recSink{}))
	task = c.rt.proc(t, execID(5, 1))
	a2.kill()
	task.write("four\n")
	c.start("n2", true)
	out = &recSink{}
	follow(start(5, out), out, task, "five\n", "four\nfive\n")
}

// TestStepRequestSentAgain: srun sends its step request again after its
// agent was killed before srun heard of the step (its connection ended
// before the started answer): the restarted agent finds the step started
// for the request's key and srun follows it; no second step starts.
func TestStepRequestSentAgain(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	req := api.StepRequest{Args: []string{"work"}, Env: []string{}, Key: "k-1"}
	s := runStep(t, a1.al, req)
	task := c.rt.proc(t, execID(0, 0))
	a1.kill()
	task.write("one\n")
	a1 = c.start("n1", true)
	s = runStep(t, a1.al, req)
	task.write("two\n")
	task.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	if got, want := s.output(), "0:one\n0:two\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	for id := range c.rt.procs {
		if id != execID(0, 0) {
			t.Errorf("a second step ran (%s)", id)
		}
	}
}

// TestTaskNeverCreatedStartsAfterRestart: the agent is killed after it
// recorded a step's part and before it created the task's process (the
// kill -9 of a batch node's agent as srun starts step 0 that a
// TestChaosShort run found: the job ended COMPLETED with none of the
// step's output). The task never ran, so the restarted agent starts it:
// srun, sending its request again, gets its output and its exit code,
// not "its exit status was lost".
func TestTaskNeverCreatedStartsAfterRestart(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	a1.rt.stall = make(chan struct{})
	req := api.StepRequest{Args: []string{"work"}, Env: []string{"FROM_SRUN=1"}, Key: "k-1"}
	runStep(t, a1.al, req)
	<-a1.rt.stall // the part is recorded; its task is being created
	a1.kill()
	c.rt.mu.Lock()
	created := len(c.rt.procs)
	c.rt.mu.Unlock()
	if created != 0 {
		t.Fatalf("%d processes created before the kill, want none", created)
	}
	a1 = c.start("n1", true)
	s := runStep(t, a1.al, req)
	task := c.rt.proc(t, execID(0, 0))
	task.write("ran\n")
	task.exit(3, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	s.mu.Lock()
	defer s.mu.Unlock()
	if got := s.out.String(); got != "0:ran\n" {
		t.Errorf("output %q, want the task's line", got)
	}
	if ex := s.exit[0]; ex.Code != 3 || ex.Error != "" || s.done.Code != 3 {
		t.Errorf("task 0's exit %+v, step's code %d; want the task's own exit code 3", ex, s.done.Code)
	}
	a1.h.mu.Lock()
	defer a1.h.mu.Unlock()
	if len(a1.h.failed) != 0 {
		t.Errorf("the job was failed (%q); nothing was lost", a1.h.failed)
	}
}

// TestLostStepTasksFailJob: the agent was killed after it recorded a
// step and before it recorded (or started) the step's part: the restarted
// agent cannot know whether the tasks ran, so srun hears that their exit
// status is unknown and the batch job's part ends NODE_FAIL (the
// controller requeues it) with a reason naming the node, instead of the
// script carrying on to COMPLETED without the step's work.
func TestLostStepTasksFailJob(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	a1.al.recordStep(stepRecord{Step: 0, Key: "k-1", NTasks: 1, Nodes: []string{"n1"}, Tasks: [][]int{{0}}})
	a1.kill()
	a1 = c.start("n1", true)
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"work"}, Env: []string{}, Key: "k-1"})
	s.until("the step's end", func() bool { return s.done != nil })
	s.mu.Lock()
	ex := s.exit[0]
	s.mu.Unlock()
	if ex.Code == 0 || !strings.Contains(ex.Error, "exit status is unknown") {
		t.Errorf("task 0's exit %+v; want its exit status unknown", ex)
	}
	a1.h.mu.Lock()
	defer a1.h.mu.Unlock()
	if len(a1.h.failed) != 1 || !strings.Contains(a1.h.failed[0], "7.1: step 7.0 lost tasks on node n1 when a node agent restarted") {
		t.Errorf("job failures %q; want the allocation failed once, naming node n1", a1.h.failed)
	}
}

// TestStepEndRecordedBeforeJobEnds: srun hears a step's end before the
// agent has committed its record (off srun's path), and a batch script
// may end the job the moment srun returns: the allocation's exit waits
// for the step's record (WaitStepEnds), so the controller never closes
// the step as CANCELLED for a job that ended first.
func TestStepEndRecordedBeforeJobEnds(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	hold := make(chan struct{})
	a1.h.mu.Lock()
	a1.h.holdEnd = hold
	a1.h.mu.Unlock()
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"work"}, Env: []string{}, Key: "k-1"})
	task := c.rt.proc(t, execID(0, 0))
	task.exit(2, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	if a1.al.WaitStepEnds(200 * time.Millisecond) {
		t.Fatal("WaitStepEnds returned true while the end of a step srun has heard is not recorded")
	}
	close(hold)
	if !a1.al.WaitStepEnds(10 * time.Second) {
		t.Fatal("WaitStepEnds still waits after the step's end was recorded")
	}
	a1.h.mu.Lock()
	defer a1.h.mu.Unlock()
	ended := false
	for _, ev := range a1.h.events {
		if ev.Kind == api.EventStepEnded && ev.Step != nil && ev.Step.ID == "0" && ev.State == spec.StateFailed && ev.ExitCode == 2 {
			ended = true
		}
	}
	if !ended {
		t.Errorf("events %+v; want step 0's end, FAILED with exit code 2", a1.h.events)
	}
}

// TestOutputReadWhileStepStartsSurvivesKill: the agent is killed -9 while
// a step starts (its tasks run; the step is not yet recorded as started,
// so srun's stream holds their output), after it read a task's first
// line from the task's pipe (TestChaosShort lost one line of 80 so:
// "1 of 80 step output lines lost [during agent kill -9 (step's node 0)]").
// srun, sending its request again, gets that line once from the
// restarted agent, then the rest.
func TestOutputReadWhileStepStartsSurvivesKill(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	reached := make(chan struct{})
	a1.n.startedHook = func() { // the kill -9 comes here: never returns
		close(reached)
		<-c.rt.end
	}
	req := api.StepRequest{Args: []string{"work"}, Env: []string{}, Key: "k-1"}
	s := runStep(t, a1.al, req)
	task := c.rt.proc(t, execID(0, 0))
	<-reached // the task runs; its output is held until the step is recorded
	read := task.readNow("early\n")
	select {
	case <-read:
	case <-time.After(5 * time.Second):
		t.Error("a task's write waited for the step's start record (what the agent read of it is in its memory only)")
	}
	a1.kill()
	s.c.Close() // the dead agent's socket
	a1 = c.start("n1", true)
	s = runStep(t, a1.al, req)
	task.write("two\n")
	task.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	if got, want := s.output(), "0:early\n0:two\n"; got != want {
		t.Errorf("output %q, want %q (every line the task wrote, once)", got, want)
	}
}

// TestEarlyOutputSentOnceAfterKill: the agent is killed -9 just after
// srun's stream passed on a task's early output (srun has the step's
// start and the line) and before it removed the line's spool: srun,
// following the step again with what it received, does not get the
// line twice.
func TestEarlyOutputSentOnceAfterKill(t *testing.T) {
	c := newTestCluster(t, "n1")
	a1 := c.start("n1", false)
	reached, passed := make(chan struct{}), make(chan struct{})
	a1.n.startedHook = func() { <-reached }
	a1.n.releasedHook = func() { // the kill -9 comes here: never returns
		close(passed)
		<-c.rt.end
	}
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"work"}, Env: []string{}, Key: "k-1"})
	task := c.rt.proc(t, execID(0, 0))
	<-task.readNow("early\n")
	close(reached)
	<-passed
	s.until("the early line", s.has("0:early\n"))
	a1.kill()
	s.c.Close()
	a1 = c.start("n1", true)
	s2 := runStep(t, a1.al, api.StepRequest{Attach: true, Step: 0,
		Received: []api.StepCount{{Kind: api.StepStdout, Task: 0, Bytes: int64(len("early\n"))}}})
	task.write("two\n")
	task.exit(0, 0)
	s2.until("the step's end", func() bool { return s2.done != nil })
	if got, want := s2.output(), "0:two\n"; got != want {
		t.Errorf("output after following the step again %q, want %q (srun had the early line)", got, want)
	}
}

// TestHeldOutputSurvivesKillWhileAway: the network between the agents
// breaks for good (the second node's listener is gone too, so the agent
// serving the step cannot follow the part again), the second node's
// agent reads a task's line meanwhile, which nobody acknowledges, and is
// killed -9 before the network comes back. The line was only in the dead
// agent's memory and the task's pipe has moved past it; its successor
// has it from the part's spool (step-0.held), and srun gets every line
// once.
func TestHeldOutputSurvivesKillWhileAway(t *testing.T) {
	c := newTestCluster(t, "n1", "n2")
	a1 := c.start("n1", false)
	a2 := c.start("n2", false)
	s := runStep(t, a1.al, api.StepRequest{Args: []string{"work"}, Env: []string{}})
	t0, t1 := c.rt.proc(t, execID(0, 0)), c.rt.proc(t, execID(0, 1))
	t1.write("b1\n")
	s.until("the first line", s.has("1:b1\n"))

	a2.ln.Listener.Close() // no new connection gets through
	a2.ln.cut()
	select {
	case <-t1.readNow("b2\n"): // n2's agent has read it
	case <-time.After(5 * time.Second):
		t.Fatal("the part's relay did not take a line while the serving agent was away")
	}
	a2.kill()
	c.start("n2", true) // the network is back with the new agent
	t1.write("b3\n")
	t1.exit(0, 0)
	t0.exit(0, 0)
	s.until("the step's end", func() bool { return s.done != nil })
	if got, want := s.output(), "1:b1\n1:b2\n1:b3\n"; got != want {
		t.Errorf("output %q, want %q (the line n2's dead agent held, once)", got, want)
	}
	// n2 forgets its part once n1 acknowledged the part's end, just
	// after srun heard the step's.
	held := filepath.Join(c.dirs["n2"], heldFile(0))
	var err error
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err = os.Stat(held); errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	t.Errorf("n2's %s after the step ended: %v, want it removed", heldFile(0), err)
}
