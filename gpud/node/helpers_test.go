package node

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is where every fake clock starts.
var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// fakeClock is a Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []clockWaiter
	changed chan struct{}
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: t0, changed: make(chan struct{})} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{c.now.Add(d), ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the clock and fires every timer that is now due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Waiters counts timers not yet fired.
func (c *fakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// fakeController speaks the node side of the gpud API on a unix socket:
// register, heartbeat, a long-polled assignment set the test drives, and
// an events endpoint that records what it is sent. Each endpoint can be
// made to fail (503) to play an unreachable or restarting controller.
type fakeController struct {
	t      testing.TB
	srv    *httptest.Server
	Client *api.Client
	quit   chan struct{}

	mu   sync.Mutex
	gen  uint64
	asgs []api.Assignment
	// now is the controller's clock its answers carry (zero: none).
	now      time.Time
	events   []api.AllocEvent
	seen     map[uint64]bool
	register []spec.Inventory
	beats    []api.HeartbeatRequest
	fail     map[string]bool
	after    uint64         // the after of the latest assignments poll
	calls    map[string]int // answered or failed, per endpoint
	changed  chan struct{}
	// nodeTimeout is the node_timeout registration answers carry (0:
	// none, as from an older controller).
	nodeTimeout time.Duration
	// rev is the revocation lists the answers carry; noRev: none (an
	// older controller). signer signs step tickets (Ticket), its public
	// key going out with the assignments.
	rev    *auth.RevocationList
	noRev  bool
	signer *auth.StepTicketSigner
	// gpusOut is what registration answers say gpud holds out.
	gpusOut []spec.GPUProblem
	// ctl is the controller identity the answers say ("": none, as an
	// older controller); said is the identity each delivered event's
	// request said, by seq (ident_test.go).
	ctl  string
	said map[uint64]string
	// ended is what the controller says no job restarts from: heartbeat
	// answers name those of the node's sealed list among them (retain.go).
	ended []api.CkptDir
	// watch, when set, answers the assignments requests that ask for a
	// watch stream (the test writes the stream's lines); n counts them
	// from 1.
	watch   func(w http.ResponseWriter, r *http.Request, n int)
	watches int
	// posts is each accepted events post's events, as sent (sendhold_test.go).
	posts [][]api.AllocEvent
}

const (
	epRegister    = "register"
	epHeartbeat   = "heartbeat"
	epAssignments = "assignments"
	epEvents      = "events"
)

func newFakeController(t testing.TB) *fakeController {
	t.Helper()
	// t.TempDir paths can exceed the 108-byte limit of socket paths.
	dir, err := os.MkdirTemp("", "gpn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeController{t: t, quit: make(chan struct{}), seen: map[uint64]bool{},
		fail: map[string]bool{}, calls: map[string]int{}, changed: make(chan struct{}), said: map[uint64]string{}}
	fc.rev, _ = auth.NewRevocationList(nil, nil)
	if fc.signer, err = auth.NewStepTicketSigner([]byte("fake controller's step ticket key 0123456789"), nil); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/register", fc.handleRegister)
	mux.HandleFunc("POST /v1/nodes/{name}/heartbeat", fc.handleHeartbeat)
	mux.HandleFunc("GET /v1/nodes/{name}/assignments", fc.handleAssignments)
	mux.HandleFunc("POST /v1/nodes/{name}/events", fc.handleEvents)
	fc.srv = httptest.NewUnstartedServer(mux)
	fc.srv.Listener = l
	fc.srv.Start()
	fc.Client, err = api.NewClient("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(fc.quit)
		fc.srv.Close()
		fc.Client.HTTPClient().CloseIdleConnections()
	})
	return fc
}

func (fc *fakeController) changedLocked() {
	close(fc.changed)
	fc.changed = make(chan struct{})
}

// Changed returns a channel closed at the controller's next change.
func (fc *fakeController) Changed() <-chan struct{} {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.changed
}

// enter counts a call and reports whether the endpoint should fail.
func (fc *fakeController) enter(w http.ResponseWriter, ep string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.calls[ep]++
	fc.changedLocked()
	if fc.fail[ep] {
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeUnavailable, Message: "controller is restarting"}})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (fc *fakeController) handleRegister(w http.ResponseWriter, r *http.Request) {
	if !fc.enter(w, epRegister) {
		return
	}
	var req api.RegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInvalid, Message: err.Error()}})
		return
	}
	fc.mu.Lock()
	fc.register = append(fc.register, req.Inventory)
	fc.changedLocked()
	nt := fc.nodeTimeout
	rev := fc.revocationsLocked(req.Revocations)
	out := fc.gpusOut
	ctl := fc.ctl
	fc.mu.Unlock()
	writeJSON(w, http.StatusOK, api.RegisterResponse{HeartbeatIntervalSec: 1, NodeTimeoutMS: nt.Milliseconds(), Revocations: rev, GPUsOut: out, ControllerID: ctl})
}

func (fc *fakeController) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	if !fc.enter(w, epHeartbeat) {
		return
	}
	var req api.HeartbeatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInvalid, Message: err.Error()}})
		return
	}
	fc.mu.Lock()
	fc.beats = append(fc.beats, req)
	fc.changedLocked()
	rev := fc.revocationsLocked(req.Revocations)
	var ended []api.CkptDir
	for _, d := range req.Sealed {
		if slices.Contains(fc.ended, d) {
			ended = append(ended, d)
		}
	}
	fc.mu.Unlock()
	if rev == nil && ended == nil {
		w.WriteHeader(http.StatusNoContent) // as an older controller
		return
	}
	writeJSON(w, http.StatusOK, api.HeartbeatResponse{Revocations: rev, Ended: ended, Sealed: true})
}

func (fc *fakeController) handleAssignments(w http.ResponseWriter, r *http.Request) {
	if !fc.enter(w, epAssignments) {
		return
	}
	fc.mu.Lock()
	watch := fc.watch
	if watch != nil && r.URL.Query().Get("watch") == "1" {
		fc.watches++
		n := fc.watches
		fc.changedLocked()
		fc.mu.Unlock()
		watch(w, r, n)
		return
	}
	fc.mu.Unlock()
	after, _ := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
	have := r.URL.Query().Get("revocations")
	fc.mu.Lock()
	fc.after = after
	fc.changedLocked()
	fc.mu.Unlock()
	timer := time.NewTimer(time.Duration(wait) * time.Second)
	defer timer.Stop()
	for {
		fc.mu.Lock()
		gen, asgs, ch, failing := fc.gen, fc.asgs, fc.changed, fc.fail[epAssignments]
		res := api.AssignmentsResponse{Generation: gen, Assignments: asgs, Revocations: fc.revocationsLocked(have), StepTicketKey: fc.signer.PublicKey(), Now: fc.now, ControllerID: fc.ctl}
		fc.mu.Unlock()
		if failing {
			writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeUnavailable, Message: "controller is restarting"}})
			return
		}
		if gen != after || res.Revocations != nil && res.Revocations.Lists != nil {
			writeJSON(w, http.StatusOK, res)
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			writeJSON(w, http.StatusOK, res)
			return
		case <-r.Context().Done():
			return
		case <-fc.quit:
			return
		}
	}
}

func (fc *fakeController) handleEvents(w http.ResponseWriter, r *http.Request) {
	if !fc.enter(w, epEvents) {
		return
	}
	var req api.EventsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInvalid, Message: err.Error()}})
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.posts = append(fc.posts, req.Events)
	var acked uint64
	for _, ev := range req.Events {
		if !fc.seen[ev.Seq] {
			fc.seen[ev.Seq] = true
			fc.events = append(fc.events, ev)
			fc.said[ev.Seq] = req.ControllerID
		}
		acked = max(acked, ev.Seq)
	}
	fc.changedLocked()
	writeJSON(w, http.StatusOK, api.EventsResponse{AckedSeq: acked})
}

// Set replaces the assignment set and returns its new generation.
func (fc *fakeController) Set(asgs ...api.Assignment) uint64 {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.gen++
	fc.asgs = asgs
	fc.changedLocked()
	return fc.gen
}

// revocationsLocked is the revocation state for a node holding version
// have (fc.mu held).
func (fc *fakeController) revocationsLocked(have string) *api.Revocations {
	if fc.noRev || have == "" {
		return nil
	}
	out := &api.Revocations{Version: fc.rev.Version}
	if have != fc.rev.Version {
		out.Lists = &api.RevocationLists{Certs: fc.rev.Certs, Tokens: fc.rev.Tokens}
	}
	return out
}

// Revoke replaces the revocation lists the answers carry.
func (fc *fakeController) Revoke(certs, tokens []string) {
	l, err := auth.NewRevocationList(certs, tokens)
	if err != nil {
		fc.t.Fatal(err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.rev = l
	fc.changedLocked()
}

// Ticket is a step ticket for alloc obtained with holder.
func (fc *fakeController) Ticket(alloc string, job uint64, holder auth.Credential) string {
	tk, err := fc.signer.Issue(alloc, job, holder)
	if err != nil {
		fc.t.Fatal(err)
	}
	return tk
}

// Reconciled reports whether the agent has handled generation gen: it
// polls again only after reconciling the previous answer.
func (fc *fakeController) Reconciled(gen uint64) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.after >= gen
}

// Fail makes endpoint ep answer 503 (or work again).
func (fc *fakeController) Fail(ep string, fail bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.fail[ep] = fail
	fc.changedLocked()
}

func (fc *fakeController) Events() []api.AllocEvent {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]api.AllocEvent(nil), fc.events...)
}

// Posts returns the events of each accepted events post, in order.
func (fc *fakeController) Posts() [][]api.AllocEvent {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return slices.Clone(fc.posts)
}

func (fc *fakeController) Calls(ep string) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.calls[ep]
}

func (fc *fakeController) Registered() []spec.Inventory {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]spec.Inventory(nil), fc.register...)
}

func (fc *fakeController) Heartbeats() []api.HeartbeatRequest {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]api.HeartbeatRequest(nil), fc.beats...)
}

// changer is anything with a change broadcast channel.
type changer interface{ Changed() <-chan struct{} }

// waitFor polls cond until it holds, waking on any change of the given
// fakes, and fails the test after a deadline. The agent works in its own
// goroutines, so this is the one place tests wait; no test sleeps.
func waitFor(t testing.TB, what string, cond func() bool, on ...changer) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	// A slow tick covers changes no fake announces (files on disk).
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		chans := make([]<-chan struct{}, len(on))
		for i, c := range on {
			chans[i] = c.Changed()
		}
		if cond() {
			return
		}
		cases := make(chan struct{}, 1)
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for _, ch := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-ch:
					select {
					case cases <- struct{}{}:
					default:
					}
				case <-stop:
				}
			}()
		}
		select {
		case <-cases:
		case <-tick.C:
		case <-deadline.C:
			close(stop)
			wg.Wait()
			t.Fatalf("timed out waiting for %s", what)
		}
		close(stop)
		wg.Wait()
	}
}

// env is one agent under test with its fakes.
type env struct {
	fc    *fakeController
	rt    *fake.Runtime
	clock *fakeClock
	agent *Agent
	stop  func()
	dir   string // state dir
	home  string // the job user's work and submit dirs, outside the state dir
	// rtOverride, cfgExtra and opts, set by prep, replace the runtime the
	// agent gets and add to its Config and options.
	rtOverride runtime.Runtime
	cfgExtra   func(*Config)
	opts       []Option
}

func (e *env) on() []changer { return []changer{e.fc, e.rt, e.clock} }

// newEnv starts a fake controller, a fake runtime, a fake clock and an
// agent named node-1 with two GPUs. prep runs before the agent starts.
func newEnv(t *testing.T, prep func(e *env)) *env {
	t.Helper()
	e := &env{fc: newFakeController(t), rt: fake.New(), clock: newFakeClock(), dir: t.TempDir(), home: t.TempDir()}
	e.rt.SetClock(e.clock.Now)
	if prep != nil {
		prep(e)
	}
	e.start(t)
	return e
}

func (e *env) start(t *testing.T) {
	t.Helper()
	var rt runtime.Runtime = e.rt
	if e.rtOverride != nil {
		rt = e.rtOverride
	}
	e.agent, e.stop = startTestAgent(t, func(c *Config) {
		c.StateDir = e.dir
		c.Addr = "10.0.0.2"
		c.Inventory.GPUs = []spec.GPU{
			{Index: 0, UUID: "GPU-a", Model: "h100", CDIName: "nvidia.com/gpu=GPU-a"},
			{Index: 1, UUID: "GPU-b", Model: "h100", CDIName: "nvidia.com/gpu=GPU-b"},
			{Index: 2, UUID: "GPU-c", Model: "h100", CDIName: "nvidia.com/gpu=GPU-c"},
		}
		if e.cfgExtra != nil {
			e.cfgExtra(c)
		}
	}, e.fc.Client, rt, append([]Option{WithClock(e.clock)}, e.opts...)...)
}

// eventsOf returns the delivered events of alloc with Seq zeroed, for
// comparisons that do not care about interleaving with other allocs.
func (e *env) eventsOf(alloc string) []api.AllocEvent {
	var out []api.AllocEvent
	for _, ev := range e.fc.Events() {
		if ev.AllocID == alloc {
			ev.Seq = 0
			out = append(out, ev)
		}
	}
	return out
}

// waitGone waits until container cid is deleted and its job directory
// (jobs/cid) is removed, as a runner leaves a node after its job.
func (e *env) waitGone(t *testing.T, cid string) {
	t.Helper()
	dir := filepath.Join(e.dir, "jobs", cid)
	waitFor(t, "container and job dir removed", func() bool {
		_, ok := e.rt.Status(cid)
		_, err := os.Lstat(dir)
		return !ok && errors.Is(err, os.ErrNotExist)
	}, e.on()...)
}

func (e *env) waitExited(t *testing.T, alloc string) api.AllocEvent {
	t.Helper()
	var got api.AllocEvent
	waitFor(t, "exited event of "+alloc, func() bool {
		for _, ev := range e.fc.Events() {
			if ev.AllocID == alloc && ev.Kind == api.EventExited {
				got = ev
				return true
			}
		}
		return false
	}, e.on()...)
	return got
}

// setAndWait sets the assignments and waits until the agent reconciled them.
func (e *env) setAndWait(t *testing.T, asgs ...api.Assignment) {
	t.Helper()
	gen := e.fc.Set(asgs...)
	waitFor(t, "assignments reconciled", func() bool { return e.fc.Reconciled(gen) }, e.on()...)
}

func (e *env) waitStarted(t *testing.T, id string) {
	t.Helper()
	waitFor(t, "container "+id+" running", func() bool {
		st, ok := e.rt.Status(id)
		return ok && st == runtime.StatusRunning
	}, e.on()...)
}

// asg builds a running assignment of job id on node-1 (rank 1 of two
// nodes, GPUs a and b), with alloc ID "a<id>".
func asg(id spec.JobID, dir string) api.Assignment {
	return api.Assignment{
		Job: spec.Job{
			ID: id,
			JobSpec: spec.JobSpec{
				Name: "train", Partition: "gpu", TimeLimit: spec.Duration(time.Hour),
				Script: "#!/bin/bash\necho hi\n", Args: []string{"--lr", "0.1"},
				Env:     []string{"FOO=bar", "CUDA_VISIBLE_DEVICES=9", "FOO=baz"},
				WorkDir: filepath.Join(dir, "work"), SubmitDir: filepath.Join(dir, "submit"),
				Output: "logs/%x-%j.out",
			},
			User: "alice", UID: 1000, GID: 1000, Attempt: 1,
		},
		Alloc: spec.Alloc{
			ID: "a" + strconv.FormatUint(uint64(id), 10), JobID: id, Attempt: 1, StartTime: spec.NewTime(t0),
			Nodes: []spec.NodeAlloc{
				{Node: "node-1", Rank: 1, CPUs: 4, MemMiB: 8192, GPUs: []string{"GPU-a", "GPU-b"}},
				{Node: "node-0", Rank: 0, Addr: "10.0.0.1", CPUs: 4, MemMiB: 8192, GPUs: []string{"GPU-x", "GPU-y"}},
			},
		},
	}
}
