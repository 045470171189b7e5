package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/gpud/gpud/gpud/spec"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeStore keeps what Apply wrote; failNext makes the next Apply fail.
type fakeStore struct {
	mu       sync.Mutex
	jobs     map[spec.JobID]spec.Job
	nodes    map[string]spec.Node
	next     spec.JobID
	failNext bool
	applies  int
	// discard keeps nothing (benchmarks measure the controller's heap).
	discard bool
	// admin is the AdminStore's records by kind/name (admin_test.go).
	admin map[string]spec.AdminRecord
}

func newFakeStore() *fakeStore {
	return &fakeStore{jobs: map[spec.JobID]spec.Job{}, nodes: map[string]spec.Node{}, next: 1}
}

func (s *fakeStore) Load(context.Context) ([]spec.Job, []spec.Node, spec.JobID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var jobs []spec.Job
	for id := spec.JobID(1); id < s.next; id++ {
		if j, ok := s.jobs[id]; ok {
			jobs = append(jobs, j)
		}
	}
	var nodes []spec.Node
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	return jobs, nodes, s.next, nil
}

func (s *fakeStore) Apply(_ context.Context, jobs []*spec.Job, nodes []*spec.Node, next spec.JobID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failNext {
		s.failNext = false
		return errors.New("disk full")
	}
	s.applies++
	if s.discard {
		return nil
	}
	for _, j := range jobs {
		c := *j
		c.Alloc = cloneAlloc(j.Alloc)
		s.jobs[j.ID] = c
	}
	for _, n := range nodes {
		s.nodes[n.Name] = *n
	}
	if next != 0 {
		s.next = next
	}
	return nil
}

type fakeRecorder struct {
	mu   sync.Mutex
	jobs []spec.Job
	// batches is how many RecordJobs calls there were.
	batches int
}

func (r *fakeRecorder) RecordJobs(_ context.Context, jobs []spec.Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches++
	r.jobs = append(r.jobs, jobs...)
	return nil
}

// harness runs a controller with a fake clock and a manual ticker.
type harness struct {
	t     testing.TB
	c     *Controller
	store *fakeStore
	rec   *fakeRecorder
	mu    sync.Mutex
	now   time.Time
	tick  chan time.Time
	stop  func()
}

var (
	root  = Caller{UID: 0, User: "root", Known: true}
	alice = Caller{UID: 1000, GID: 1000, User: "alice", Known: true}
	bob   = Caller{UID: 1001, GID: 1001, User: "bob", Known: true}
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(t testing.TB, store *fakeStore, cfgFn func(*Config)) *harness {
	t.Helper()
	return newHarnessAt(t, store, cfgFn, t0)
}

func newHarnessAt(t testing.TB, store *fakeStore, cfgFn func(*Config), now time.Time, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t, store: store, rec: &fakeRecorder{}, now: now, tick: make(chan time.Time)}
	cfg := DefaultConfig()
	if cfgFn != nil {
		cfgFn(&cfg)
	}
	// opts come last, so a test can replace the fake recorder.
	c, err := New(cfg, store, append([]Option{WithClock(h.clock), WithTicker(h.tick), WithRecorder(h.rec),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// advance moves the clock and delivers one tick; the tick is received
// (unbuffered) before advance returns, and the next call is served after it.
//
// A cycle already due runs first, at the time it became due: in a real
// controller it runs within milliseconds (the loop's pacing follows the
// wall clock), long before a jump of d could pass. Without this, under
// load the loop's paced cycle could run after the clock moved but
// before the tick's housekeeping, e.g. starting a job on a node the
// housekeeping then marks DOWN (session 17: TestReservationLifecycle).
func (h *harness) advance(d time.Duration) {
	h.settle()
	h.mu.Lock()
	h.now = h.now.Add(d)
	now := h.now
	h.mu.Unlock()
	h.tick <- now
}

// skip moves the clock on by d without a tick: no cycle runs for it.
func (h *harness) skip(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// settle runs the pending scheduling cycle, if any, on the owner now,
// rather than waiting for the loop's pacing.
func (h *harness) settle() {
	h.t.Helper()
	err := h.c.query(context.Background(), func() error {
		if h.c.sched.dirty {
			h.c.cycle(context.Background())
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) submit(who Caller, mod func(*spec.JobSpec)) spec.JobID {
	h.t.Helper()
	js := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp"}
	if mod != nil {
		mod(&js)
	}
	id, err := h.c.Submit(context.Background(), who, js)
	if err != nil {
		h.t.Fatalf("Submit: %v", err)
	}
	return id
}

func (h *harness) job(id spec.JobID) spec.Job {
	h.t.Helper()
	h.settle()
	j, err := h.c.Job(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

func (h *harness) register(name string, gpus int) {
	h.t.Helper()
	inv := spec.Inventory{Name: name, CPUs: 8, MemMiB: 1000}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: "h100"})
	}
	if _, err := h.c.Register(context.Background(), root, inv); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) exit(node string, j spec.Job, state spec.JobState, code int) {
	h.t.Helper()
	_, err := h.c.NodeEvents(context.Background(), root, node, []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: j.ID, Kind: EventExited, State: state, ExitCode: code}})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) assignments(node string) []Assignment {
	h.t.Helper()
	h.settle()
	_, as, err := h.c.Assignments(context.Background(), root, node, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return as
}

func TestHoldReleaseAndPermissions(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	id := h.submit(alice, func(j *spec.JobSpec) { j.Hold = true })
	h.register("n1", 0)
	if j := h.job(id); j.State != spec.StatePending || j.Reason != spec.ReasonHeld {
		t.Fatalf("held job = %s/%s, want PENDING/%s", j.State, j.Reason, spec.ReasonHeld)
	}
	if _, err := h.c.JobAction(ctx, bob, id, ActionRelease, ""); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("bob releasing alice's job: %v, want permission denied", err)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionRelease, ""); err != nil {
		t.Fatal(err)
	}
	if j := h.job(id); j.State != spec.StateRunning || j.User != "alice" || j.UID != 1000 {
		t.Fatalf("released job = %s user %s uid %d, want RUNNING as alice/1000", j.State, j.User, j.UID)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionHold, ""); !errors.Is(err, spec.ErrConflict) {
		t.Fatalf("hold of a running job: %v, want conflict", err)
	}
	if _, err := h.c.JobAction(ctx, root, id, ActionCancel, ""); err != nil {
		t.Fatalf("root cancelling alice's job: %v", err)
	}
	if _, err := h.c.Submit(ctx, root, spec.JobSpec{Script: "x", WorkDir: "/"}); !errors.Is(err, spec.ErrRefused) {
		t.Fatalf("root submit without allow_root_jobs: %v, want refused", err)
	}
	if _, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/", Nice: -5}); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("negative nice by a user: %v, want permission denied", err)
	}
}

func TestPriorityOrderAndReasons(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) {
		c.QOS = []QOS{{Name: "normal"}, {Name: "high", Priority: 10}}
	}, t0, fullCyclesOnly) // reasons and order are a full cycle's
	h.register("n1", 1)
	// Keep the node busy so the rest queue up.
	first := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	// Start it before the others arrive: a cycle that saw them all would
	// rightly give the GPU to the high-QOS job instead.
	if j := h.job(first); j.State != spec.StateRunning {
		t.Fatalf("first job is %s, want RUNNING", j.State)
	}
	low := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Nice = 100 })
	normal := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	high := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.QOS = "high" })
	h.settle()
	got := map[spec.JobID]string{}
	for _, id := range []spec.JobID{low, normal, high} {
		got[id] = h.job(id).Reason
	}
	want := map[spec.JobID]string{high: spec.ReasonResources, normal: spec.ReasonPriority, low: spec.ReasonPriority}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("reasons (-want +got):\n%s", diff)
	}
	h.exit("n1", h.job(first), spec.StateCompleted, 0)
	if j := h.job(high); j.State != spec.StateRunning {
		t.Fatalf("after the node frees, high-QOS job is %s, want RUNNING", j.State)
	}
}

// TestHeartbeatQueuedBehindBusyLoopCounts: a heartbeat that arrived while
// the owner loop was busy counts when housekeeping runs before the loop
// has applied it. Before noteHeard, housekeeping saw only the last applied
// heartbeat and marked the live node DOWN (gpud loadtest: 51 of 1,000
// nodes at once during a 100,000-job drain).
func TestHeartbeatQueuedBehindBusyLoopCounts(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 0)
	job := h.submit(alice, func(j *spec.JobSpec) { j.Resources.CPUsPerNode = 4 })
	if h.job(job).State != spec.StateRunning {
		t.Fatal("job did not start")
	}
	h.mu.Lock()
	h.now = h.now.Add(31 * time.Second) // past the 30s timeout since registering
	h.mu.Unlock()
	ctx := context.Background()
	errc := make(chan error, 1)
	registered := h.c.lastHeard("n1", time.Time{})
	err := h.c.query(ctx, func() error {
		// The loop is busy here; a heartbeat arrives and queues.
		go func() { errc <- h.c.Heartbeat(ctx, root, "n1", nil) }()
		deadline := time.Now().Add(10 * time.Second)
		for h.c.lastHeard("n1", time.Time{}).Equal(registered) {
			if time.Now().After(deadline) {
				return fmt.Errorf("the heartbeat never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		h.c.housekeep(ctx) // the tick wins the race with the queued heartbeat
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	nodes, _ := h.c.Nodes(ctx)
	if nodes[0].State == spec.NodeDown {
		t.Fatalf("node = DOWN (%s), want up: its heartbeat had arrived", nodes[0].Reason)
	}
	if j := h.job(job); j.State != spec.StateRunning {
		t.Fatalf("job = %s, want still RUNNING", j.State)
	}
}

func TestNodeTimeoutFailsOrRequeues(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 0)
	keep := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.CPUsPerNode = 4 })
	lose := h.submit(alice, func(j *spec.JobSpec) { j.Resources.CPUsPerNode = 4 })
	if h.job(keep).State != spec.StateRunning || h.job(lose).State != spec.StateRunning {
		t.Fatal("jobs did not start")
	}
	firstAlloc := h.job(keep).Alloc.ID
	h.advance(20 * time.Second)
	if err := h.c.Heartbeat(context.Background(), root, "n1", nil); err != nil {
		t.Fatal(err)
	}
	h.advance(31 * time.Second) // silent since t+20s: 31s > 30s timeout
	nodes, _ := h.c.Nodes(context.Background())
	if nodes[0].State != spec.NodeDown || nodes[0].Reason != reasonNotResponding {
		t.Fatalf("node = %s (%s), want DOWN (not responding)", nodes[0].State, nodes[0].Reason)
	}
	if j := h.job(lose); j.State != spec.StateNodeFail || j.EndTime.IsZero() {
		t.Fatalf("non-requeue job = %s end %v, want NODE_FAIL with end time", j.State, j.EndTime)
	}
	if j := h.job(keep); j.State != spec.StatePending || j.Alloc != nil {
		t.Fatalf("requeue job = %s alloc %v, want PENDING without an alloc", j.State, j.Alloc)
	}
	// The cycle since then shows why it waits now; the store has the cause.
	h.store.mu.Lock()
	stored := h.store.jobs[keep]
	h.store.mu.Unlock()
	if stored.State != spec.StatePending || stored.Reason != "NodeFail requeue" {
		t.Fatalf("stored requeue job = %s/%s, want PENDING/NodeFail requeue", stored.State, stored.Reason)
	}
	// The node comes back; the requeued job starts with a new alloc id, and
	// an exit event for the old alloc is ignored.
	h.register("n1", 0)
	j := h.job(keep)
	if j.State != spec.StateRunning || j.Alloc.ID == firstAlloc || j.Attempt != 2 {
		t.Fatalf("requeued job = %s alloc %s attempt %d, want RUNNING with a new alloc, attempt 2", j.State, j.Alloc.ID, j.Attempt)
	}
	if _, err := h.c.NodeEvents(context.Background(), root, "n1", []NodeEvent{{Seq: 9, AllocID: firstAlloc, JobID: keep, Kind: EventExited, State: spec.StateFailed}}); err != nil {
		t.Fatal(err)
	}
	if j := h.job(keep); j.State != spec.StateRunning {
		t.Fatalf("stale exit changed the job to %s", j.State)
	}
	h.stop() // flushes the recorder; it takes rec.mu, so lock only after
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	// The failed job, and the requeued job's first attempt (billed when it
	// ended, ended by the node failure).
	got := map[spec.JobID]spec.Job{}
	for _, j := range h.rec.jobs {
		got[j.ID] = j
	}
	if len(h.rec.jobs) != 2 || got[lose].State != spec.StateNodeFail {
		t.Fatalf("recorded %v, want job %d (NODE_FAIL) and job %d's first attempt", h.rec.jobs, lose, keep)
	}
	if a := got[keep]; a.State != spec.StatePending || a.Alloc == nil || a.Alloc.ID != firstAlloc || a.EndTime.IsZero() {
		t.Fatalf("recorded attempt of job %d = %s alloc %v end %v, want PENDING with alloc %s and an end time", keep, a.State, a.Alloc, a.EndTime, firstAlloc)
	}
}

func TestEveryEndedAttemptIsRecorded(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	first := h.job(id)
	// Move the clock without a tick: a tick would find n1 silent and down.
	h.skip(10 * time.Minute)
	if _, err := h.c.JobAction(ctx, alice, id, ActionRequeue, "try again"); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", first, spec.StateCancelled, 0)
	second := h.job(id)
	if second.State != spec.StateRunning || second.Attempt != 2 {
		t.Fatalf("requeued job = %s attempt %d, want RUNNING attempt 2", second.State, second.Attempt)
	}
	h.skip(5 * time.Minute)
	h.exit("n1", second, spec.StateCompleted, 0)
	if got := h.job(id); got.State != spec.StateCompleted {
		t.Fatalf("job = %s, want COMPLETED", got.State)
	}
	h.stop() // flushes the recorder
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	type rec struct {
		State      spec.JobState
		Attempt    int
		AllocID    string
		GPUs       []string
		Start, End time.Time
	}
	var got []rec
	for _, j := range h.rec.jobs {
		r := rec{State: j.State, Attempt: j.Attempt, Start: j.StartTime.Time, End: j.EndTime.Time}
		if j.Alloc != nil {
			r.AllocID, r.GPUs = j.Alloc.ID, j.Alloc.Nodes[0].GPUs
		}
		got = append(got, r)
	}
	want := []rec{
		{State: spec.StatePending, Attempt: 1, AllocID: fmt.Sprintf("%d.1", id), GPUs: []string{"GPU-n1-0"},
			Start: first.StartTime.Time, End: t0.Add(10 * time.Minute)},
		{State: spec.StateCompleted, Attempt: 2, AllocID: fmt.Sprintf("%d.2", id), GPUs: []string{"GPU-n1-0"},
			Start: second.StartTime.Time, End: t0.Add(15 * time.Minute)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded attempts (-want +got):\n%s", diff)
	}
}

func TestGangFirstFailureEndsJobAndStopsPeers(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("a", 1)
	h.register("b", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.Nodes = 2; j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	if j.State != spec.StateRunning || len(j.Alloc.Nodes) != 2 {
		t.Fatalf("gang = %s on %v", j.State, j.Nodes)
	}
	h.exit("a", j, spec.StateFailed, 2)
	if got := h.job(id); got.State != spec.StateFailed || got.ExitCode != 2 {
		t.Fatalf("after rank failure: %s exit %d, want FAILED 2", got.State, got.ExitCode)
	}
	as := h.assignments("b")
	if len(as) != 1 || !as[0].Stop || as[0].StopState != spec.StateCancelled {
		t.Fatalf("peer assignments = %+v, want one Stop CANCELLED", as)
	}
	// Node b's GPU stays held until b reports: a new job cannot take it.
	next := h.submit(alice, func(j *spec.JobSpec) { j.Resources.NodeList = []string{"b"}; j.Resources.GPUsPerNode = 1 })
	if got := h.job(next); got.State != spec.StatePending {
		t.Fatalf("job on b started while b still runs the gang (%s)", got.State)
	}
	h.exit("b", j, spec.StateCancelled, 0)
	if got := h.job(id); got.State != spec.StateFailed {
		t.Fatalf("peer exit changed the ended gang to %s", got.State)
	}
	if got := h.job(next); got.State != spec.StateRunning {
		t.Fatalf("job on b = %s after the gang freed it, want RUNNING", got.State)
	}
}

func TestRequeueAndCancelRunning(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 0)
	id := h.submit(alice, nil)
	j := h.job(id)
	if _, err := h.c.JobAction(ctx, alice, id, ActionRequeue, ""); err != nil {
		t.Fatal(err)
	}
	as := h.assignments("n1")
	if len(as) != 1 || !as[0].Stop || as[0].StopState != spec.StateRequeued {
		t.Fatalf("assignments = %+v, want Stop REQUEUED", as)
	}
	h.exit("n1", j, spec.StateCancelled, 0)
	j2 := h.job(id)
	if j2.State != spec.StateRunning || j2.Alloc.ID != fmt.Sprintf("%d.2", id) || !j2.SubmitTime.Equal(j.SubmitTime.Time) {
		t.Fatalf("requeued job = %s alloc %v; want RUNNING again as %d.2 with the same submit time", j2.State, j2.Alloc, id)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionCancel, "stop it"); err != nil {
		t.Fatal(err)
	}
	if got := h.job(id); got.State != spec.StateCompleting || got.StopState != spec.StateCancelled {
		t.Fatalf("cancelled running job = %s/%s, want COMPLETING/CANCELLED", got.State, got.StopState)
	}
	h.exit("n1", j2, spec.StateCancelled, 0)
	if got := h.job(id); got.State != spec.StateCancelled {
		t.Fatalf("after exit: %s, want CANCELLED", got.State)
	}
}

func TestRestartKeepsStopIntentAndGeneration(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ctx := context.Background()
	h.register("n1", 0)
	id := h.submit(alice, nil)
	h.settle()
	if _, err := h.c.JobAction(ctx, alice, id, ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	gen, _, err := h.c.Assignments(ctx, root, "n1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.stop()

	// Long after: the node still gets a fresh timeout.
	h2 := newHarnessAt(t, store, nil, h.clock().Add(time.Hour))
	h2.advance(time.Second)
	gen2, as, err := h2.c.Assignments(ctx, root, "n1", gen, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if gen2 == gen || len(as) != 1 || !as[0].Stop || as[0].StopState != spec.StateCancelled {
		t.Fatalf("after restart: gen %d (before %d), %+v; want a different gen at once and the cancel kept", gen2, gen, as)
	}
	nodes, _ := h2.c.Nodes(ctx)
	if nodes[0].State == spec.NodeDown {
		t.Fatal("node judged DOWN right after a controller restart")
	}
	if next := h2.submit(alice, nil); next != id+1 {
		t.Fatalf("id after restart = %d, want %d", next, id+1)
	}
}

func TestFailedCommitIsNotAcknowledged(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ok := h.submit(alice, nil)
	store.mu.Lock()
	store.failNext = true
	store.mu.Unlock()
	_, err := h.c.Submit(context.Background(), alice, spec.JobSpec{Script: "x", WorkDir: "/"})
	if !errors.Is(err, spec.ErrUnavailable) {
		t.Fatalf("submit with failing store: %v, want unavailable", err)
	}
	// Memory was reloaded from the store: the failed job is gone and its
	// id is handed out again (it was never acknowledged).
	jobs, err := h.c.ListJobs(context.Background(), JobFilter{All: true})
	if err != nil || len(jobs) != 1 || jobs[0].Job().ID != ok {
		t.Fatalf("jobs after failed commit = %d (%v), want only job %d", len(jobs), err, ok)
	}
	if next := h.submit(alice, nil); next != ok+1 {
		t.Fatalf("next id = %d, want %d", next, ok+1)
	}
}

func TestWaitJobTimesOutAndWakes(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	id := h.submit(alice, nil)
	j, err := h.c.WaitJob(ctx, id, time.Millisecond)
	if err != nil || j.State != spec.StatePending {
		t.Fatalf("WaitJob timeout = %s, %v; want PENDING", j.State, err)
	}
	done := make(chan spec.Job, 1)
	go func() {
		j, _ := h.c.WaitJob(ctx, id, time.Minute)
		done <- j
	}()
	if _, err := h.c.JobAction(ctx, alice, id, ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	if j := <-done; j.State != spec.StateCancelled {
		t.Fatalf("waiter got %s, want CANCELLED", j.State)
	}
}

func TestReconfigure(t *testing.T) {
	store := newFakeStore()
	var next Config
	var reloadErr error
	cfg := DefaultConfig()
	c, err := New(cfg, store, WithReload(func() (Config, error) { return next, reloadErr }), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	reloadErr = errors.New("gpud.toml:3: unknown key")
	if _, err := c.Reconfigure(ctx, root); err == nil {
		t.Fatal("reconfigure with a bad file succeeded")
	}
	reloadErr = nil
	next = DefaultConfig()
	next.Partitions = []Partition{{Name: "gpu", Default: true}}
	if _, err := c.Reconfigure(ctx, alice); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("reconfigure by a user: %v", err)
	}
	msg, err := c.Reconfigure(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(msg)
	id, err := c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := c.Job(ctx, id); j.Partition != "gpu" {
		t.Fatalf("job partition after reconfigure = %q, want gpu", j.Partition)
	}
}

// A node that reports NODE_FAIL for an allocation (the runtime killed it
// while the agent was down) requeues the job when allowed, like a silent
// node does, and ends it NODE_FAIL otherwise.
func TestNodeReportedNodeFail(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	keep := h.submit(alice, func(j *spec.JobSpec) { j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	lose := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if h.job(keep).State != spec.StateRunning || h.job(lose).State != spec.StateRunning {
		t.Fatal("jobs did not start")
	}
	first := h.job(keep).Alloc.ID
	h.exit("n1", h.job(keep), spec.StateNodeFail, 137)
	h.exit("n1", h.job(lose), spec.StateNodeFail, 137)
	if j := h.job(lose); j.State != spec.StateNodeFail {
		t.Errorf("--no-requeue job = %s, want NODE_FAIL", j.State)
	}
	// The requeued job is pending again or, the GPU being free, already
	// running under a new allocation.
	if j := h.job(keep); j.State.Terminal() || j.Alloc != nil && j.Alloc.ID == first {
		t.Errorf("requeue job = %s alloc %v, want requeued with a new allocation", j.State, j.Alloc)
	}
}

// TestTimeLimits: no --time gets the partition's default, --time=UNLIMITED
// its maximum (none when it has none), like Slurm.
func TestTimeLimits(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions = []Partition{
			{Name: "short", Default: true, DefaultTime: time.Hour, MaxTime: 4 * time.Hour},
			{Name: "long"},
		}
	})
	ctx := context.Background()
	for _, tc := range []struct {
		part      string
		limit     time.Duration
		unlimited bool
		want      time.Duration
		wantErr   string
	}{
		{part: "short", want: time.Hour},
		{part: "short", unlimited: true, want: 4 * time.Hour},
		{part: "short", limit: 2 * time.Hour, want: 2 * time.Hour},
		{part: "long", unlimited: true, want: 0},
		{part: "short", limit: time.Hour, unlimited: true, wantErr: "both given"},
	} {
		id, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Partition: tc.part,
			TimeLimit: spec.Duration(tc.limit), TimeUnlimited: tc.unlimited})
		if tc.wantErr != "" {
			if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%+v: %v, want invalid containing %q", tc, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got := h.job(id).TimeLimit.Std(); got != tc.want {
			t.Errorf("%+v: time limit %v, want %v", tc, got, tc.want)
		}
	}
}

// TestPartitionListStartsWhereItCan: Slurm's rule for sbatch -p a,b. A
// job whose first partition is full starts in the other, which it then
// shows; one whose first partition has room stays there; a partition
// whose maximum time the job exceeds is not among its choices.
func TestPartitionListStartsWhereItCan(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions = []Partition{
			{Name: "a", Default: true, Nodes: []string{"n1"}},
			{Name: "b", Nodes: []string{"n2"}},
			{Name: "short", Nodes: []string{"n3"}, MaxTime: time.Minute},
		}
	})
	h.register("n1", 2)
	h.register("n2", 2)
	h.register("n3", 2)
	sub := func(parts string) spec.JobID {
		return h.submit(alice, func(js *spec.JobSpec) {
			js.Partition, js.TimeLimit, js.Resources.GPUsPerNode = parts, spec.Duration(time.Hour), 2
		})
	}
	first := sub("a,short,b")
	if j := h.job(first); j.State != spec.StateRunning || j.Partition != "a" || !slices.Equal(j.Partitions, []string{"a", "b"}) {
		t.Fatalf("job %d: %s in %q on %v, partitions %v; want running in a, choices [a b] (short admits no hour)", first, j.State, j.Partition, j.Nodes, j.Partitions)
	}
	second := sub("a,b")
	if j := h.job(second); j.State != spec.StateRunning || j.Partition != "b" || !slices.Equal(j.Nodes, []string{"n2"}) {
		t.Fatalf("job %d: %s in %q on %v; want running in b on n2 (a is full)", second, j.State, j.Partition, j.Nodes)
	}
	third := sub("a,b")
	if j := h.job(third); j.State != spec.StatePending || j.Partition != "a" {
		t.Fatalf("job %d: %s in %q; want pending in a (both full)", third, j.State, j.Partition)
	}
	if j := h.job(sub("b")); j.Partitions != nil {
		t.Errorf("a job of one partition lists partitions %v", j.Partitions)
	}
	// The pending job of a,b is listed under b too; the running job that
	// started in a is not.
	views, err := h.c.ListJobs(context.Background(), JobFilter{Partitions: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	var inB []spec.JobID
	for _, v := range views {
		inB = append(inB, v.Job().ID)
	}
	if !slices.Contains(inB, third) || slices.Contains(inB, first) || !slices.Contains(inB, second) {
		t.Errorf("jobs listed in partition b: %v; want %d (running there) and %d (pending, a or b), not %d (running in a)", inB, second, third, first)
	}
}

// TestPartitionList: sbatch -p a,b takes the first listed partition the
// job fits (here by time limit); an unknown GPU model names the cluster's.
func TestPartitionList(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.Partitions = []Partition{
			{Name: "short", Default: true, MaxTime: time.Hour},
			{Name: "long"},
		}
	})
	h.register("n1", 2)
	ctx := context.Background()
	for _, tc := range []struct {
		limit time.Duration
		parts string
		want  string
	}{
		{30 * time.Minute, "short,long", "short"},
		{2 * time.Hour, "short,long", "long"},
		{30 * time.Minute, "nosuch,long", "long"},
	} {
		id, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Partition: tc.parts, TimeLimit: spec.Duration(tc.limit)})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if got := h.job(id).Partition; got != tc.want {
			t.Errorf("%+v: partition %q, want %q", tc, got, tc.want)
		}
	}
	if _, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Partition: "short,long", TimeLimit: spec.Duration(time.Minute),
		Resources: spec.Resources{GPUsPerNode: 1, GPUModel: "v100"}}); err == nil || !strings.Contains(err.Error(), "has GPU model v100; this cluster has: h100") {
		t.Errorf("v100 job: %v, want the cluster's models named", err)
	}
}

// cycleCounter is an Observer that counts scheduling cycles.
type cycleCounter struct {
	nopObserver
	n atomic.Int64
}

func (c *cycleCounter) CycleDone(time.Duration) { c.n.Add(1) }

// TestHeldSubmitRunsNoCycle: a held job cannot start, so its submission
// runs no scheduling cycle (a full one walks every pending job: O(pending)
// for each sbatch --hold in a loop); its release runs one and it starts.
// Before submissions of held jobs stopped kicking a full cycle, each ran one.
func TestHeldSubmitRunsNoCycle(t *testing.T) {
	obs := &cycleCounter{}
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithObserver(obs))
	ctx := context.Background()
	h.register("n1", 0)
	h.settle()
	before := obs.n.Load()
	id := h.submit(alice, func(j *spec.JobSpec) { j.Hold = true })
	h.submit(alice, func(j *spec.JobSpec) { j.Hold = true })
	// The owner runs a due cycle right after a batch, before the next op.
	if err := h.c.query(ctx, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n := obs.n.Load() - before; n != 0 {
		t.Errorf("%d scheduling cycles after submitting two held jobs, want 0", n)
	}
	if j := h.job(id); j.State != spec.StatePending || j.Reason != spec.ReasonHeld {
		t.Fatalf("held job = %s/%s, want PENDING/%s", j.State, j.Reason, spec.ReasonHeld)
	}
	if _, err := h.c.JobAction(ctx, alice, id, ActionRelease, ""); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if j := h.job(id); j.State != spec.StateRunning {
		t.Fatalf("released job = %s/%s, want RUNNING", j.State, j.Reason)
	}
}
