package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// multifactor is the default gpud.toml policy: QOS low, normal, high (high
// preempts low by requeue) and the multifactor weights.
func multifactor(c *Config) {
	c.QOS = []QOS{
		{Name: "low", PreemptMode: PreemptOff},
		{Name: "normal", Priority: 100, PreemptMode: PreemptOff},
		{Name: "high", Priority: 1000, Preempt: []string{"low"}, PreemptMode: PreemptRequeue},
	}
	c.Priority = PriorityWeights{Age: 1000, Fairshare: 10000, JobSize: 1000, Partition: 1000, QOS: 10000, MaxAge: 7 * 24 * time.Hour}
	c.NodeTimeout = time.Hour
}

func gpus(n int, limit time.Duration, qos string) func(*spec.JobSpec) {
	return func(j *spec.JobSpec) {
		j.Resources.GPUsPerNode = n
		j.TimeLimit = spec.Duration(limit)
		j.QOS = qos
	}
}

func TestHighQOSPreemptsLowByRequeue(t *testing.T) {
	h := newHarness(t, newFakeStore(), multifactor)
	obs := &fakeObserver{started: map[string]int{}, ended: map[spec.JobState]int{}, requeued: map[string]int{}}
	if err := h.c.query(context.Background(), func() error { h.c.obs = obs; return nil }); err != nil {
		t.Fatal(err)
	}
	h.register("n1", 8)
	low := h.submit(alice, gpus(8, time.Hour, "low"))
	lowJob := h.job(low)
	if lowJob.State != spec.StateRunning {
		t.Fatalf("low job is %s, want RUNNING", lowJob.State)
	}
	h.advance(time.Minute)
	high := h.submit(bob, gpus(8, 10*time.Minute, "high"))
	// Multifactor: the QOS factor (1 for high) weighs 10000, nice 0 adds
	// 10000, so high is at least 20000; low's QOS factor is 0.
	if p, lp := h.job(high).Priority, lowJob.Priority; p <= lp || p < 20000 {
		t.Errorf("priorities: high %d, low %d; want the multifactor value, high above low", p, lp)
	}
	got := h.job(low)
	wantReason := "preempted by job 2 (QOS high)"
	if got.State != spec.StateCompleting || got.StopState != spec.StatePreempted || got.Reason != wantReason || got.StopCheckpoint {
		t.Fatalf("victim = %s/%s %q checkpoint %v; want COMPLETING/PREEMPTED %q without checkpoint", got.State, got.StopState, got.Reason, got.StopCheckpoint, wantReason)
	}
	as := h.assignments("n1")
	if len(as) != 1 || !as[0].Stop || as[0].StopState != spec.StatePreempted {
		t.Fatalf("assignments = %+v, want the low job told to stop PREEMPTED", as)
	}
	obs.mu.Lock()
	if n := obs.preempts["batch/"+PreemptRequeue]; n != 1 {
		t.Errorf("observer saw preemptions %v, want 1 in batch by requeue", obs.preempts)
	}
	obs.mu.Unlock()
	// More cycles while the victim stops preempt nothing else and start
	// nothing on its GPUs.
	h.advance(10 * time.Second)
	if j := h.job(high); j.State != spec.StatePending {
		t.Fatalf("preemptor is %s before its victim stopped, want PENDING", j.State)
	}
	h.exit("n1", lowJob, spec.StatePreempted, 0)
	if j := h.job(high); j.State != spec.StateRunning {
		t.Fatalf("preemptor is %s after its victim stopped, want RUNNING", j.State)
	}
	got = h.job(low)
	if got.State != spec.StatePending || got.ID != low || !got.SubmitTime.Equal(lowJob.SubmitTime.Time) {
		t.Fatalf("victim = %d %s, want %d PENDING with its submit time", got.ID, got.State, low)
	}
	// It waits for the preemptor and expects to start when it ends.
	wantStart := h.job(high).StartTime.Add(10 * time.Minute)
	if got.Reason != spec.ReasonResources || !got.ExpectedStart.Equal(wantStart) {
		t.Errorf("victim waits: %s, expected start %v; want Resources at %v", got.Reason, got.ExpectedStart, wantStart)
	}
	h.exit("n1", h.job(high), spec.StateCompleted, 0)
	got = h.job(low)
	if got.State != spec.StateRunning || got.Attempt != 2 || got.Alloc.ID != "1.2" {
		t.Fatalf("victim after the preemptor ended: %s attempt %d, want RUNNING attempt 2", got.State, got.Attempt)
	}
	h.exit("n1", got, spec.StateCompleted, 0)
	if got := h.job(low); got.State != spec.StateCompleted {
		t.Fatalf("victim ended %s, want COMPLETED", got.State)
	}
}

func TestPreemptModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mode      string
		ckpt      bool
		wantStop  spec.JobState
		wantCkpt  bool
		wantFinal spec.JobState
	}{
		{name: "cancel", mode: PreemptCancel, ckpt: true, wantStop: spec.StateCancelled, wantFinal: spec.StateCancelled},
		{name: "checkpoint", mode: PreemptCheckpoint, ckpt: true, wantStop: spec.StatePreempted, wantCkpt: true, wantFinal: spec.StatePending},
		{name: "checkpoint, job does not checkpoint", mode: PreemptCheckpoint, wantStop: spec.StatePreempted, wantFinal: spec.StatePending},
		{name: "requeue", mode: PreemptRequeue, ckpt: true, wantStop: spec.StatePreempted, wantFinal: spec.StatePending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, newFakeStore(), func(c *Config) {
				multifactor(c)
				c.QOS[2].PreemptMode = tc.mode
			})
			h.register("n1", 8)
			low := h.submit(alice, func(j *spec.JobSpec) {
				gpus(8, time.Hour, "low")(j)
				if tc.ckpt {
					j.Ckpt = spec.Duration(10 * time.Minute)
				}
			})
			lowJob := h.job(low)
			h.submit(bob, gpus(8, time.Hour, "high"))
			got := h.job(low)
			if got.StopState != tc.wantStop || got.StopCheckpoint != tc.wantCkpt {
				t.Fatalf("victim stop %s checkpoint %v, want %s checkpoint %v", got.StopState, got.StopCheckpoint, tc.wantStop, tc.wantCkpt)
			}
			h.exit("n1", lowJob, tc.wantStop, 0)
			if got := h.job(low); got.State != tc.wantFinal {
				t.Fatalf("victim after it stopped: %s, want %s", got.State, tc.wantFinal)
			}
		})
	}
}

func TestPreemptMinRuntime(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		multifactor(c)
		c.PreemptMinRuntime = 5 * time.Minute
	})
	h.register("n1", 8)
	low := h.submit(alice, gpus(8, time.Hour, "low"))
	if got := h.job(low); got.State != spec.StateRunning {
		t.Fatalf("low job is %s, want RUNNING", got.State)
	}
	h.submit(bob, gpus(8, time.Hour, "high"))
	if got := h.job(low); got.State != spec.StateRunning || got.StopState != "" {
		t.Fatalf("victim preempted before the minimum run time: %s/%s", got.State, got.StopState)
	}
	h.advance(5 * time.Minute)
	if got := h.job(low); got.StopState != spec.StatePreempted {
		t.Fatalf("after the minimum run time the victim is %s/%s, want stopping PREEMPTED", got.State, got.StopState)
	}
}

func TestBackfillAndExpectedStart(t *testing.T) {
	h := newHarness(t, newFakeStore(), multifactor)
	ctx := context.Background()
	h.register("n1", 8)
	running := h.submit(alice, gpus(4, 10*time.Minute, ""))
	r := h.job(running)
	if r.State != spec.StateRunning {
		t.Fatalf("4-GPU job is %s, want RUNNING", r.State)
	}
	h.advance(time.Minute)
	big := h.submit(alice, gpus(8, time.Hour, ""))
	short := h.submit(bob, gpus(2, time.Minute, ""))
	long := h.submit(bob, gpus(2, time.Hour, ""))
	h.settle()
	type state struct {
		State  spec.JobState
		Reason string
		Start  time.Time
	}
	got := map[spec.JobID]state{}
	for _, id := range []spec.JobID{big, short, long} {
		j := h.job(id)
		got[id] = state{j.State, j.Reason, j.ExpectedStart.Time}
	}
	end := r.StartTime.Add(10 * time.Minute)
	want := map[spec.JobID]state{
		big:   {spec.StatePending, spec.ReasonResources, end},
		short: {spec.StateRunning, spec.ReasonNone, time.Time{}},
		// It would delay the 8-GPU job; it expects to start after it.
		long: {spec.StatePending, spec.ReasonReservation, end.Add(time.Hour)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("jobs (-want +got):\n%s", diff)
	}
	// The published view (gpuq, gpuq show) carries the expected start.
	views, err := h.c.ListJobs(ctx, JobFilter{IDs: []spec.JobID{big}})
	if err != nil || len(views) != 1 || !views[0].job.ExpectedStart.Equal(end) {
		t.Fatalf("published view of job %d: %+v, %v; want expected start %v", big, views, err, end)
	}
	// --test-only answers with the reservation's start.
	res, err := h.c.TestSubmit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/", Resources: spec.Resources{GPUsPerNode: 8}, TimeLimit: spec.Duration(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Start.IsZero() || res.Start.Before(end) {
		t.Errorf("test-only start = %v, want a reservation at or after %v", res.Start, end)
	}
	// ... and says why no node runs it now, per reason.
	if !strings.Contains(res.Message, "job would wait: ") || !strings.Contains(res.Message, "; 1 node: 1 ") {
		t.Errorf("test-only message = %q; want the wait and the node counts", res.Message)
	}
}

// TestWaitingPreemptorKeepsQOSLimits: a preemptor waiting for its victims
// to stop is held to its QOS's per-user limits like any job of that QOS,
// and its reasons name the QOS as configured. (It used to run under a
// renamed copy of the QOS, "high (awaiting preempted jobs)", whose
// per-user counters were empty: it started on other free GPUs past
// MaxJobsPerUser.)
func TestWaitingPreemptorKeepsQOSLimits(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) {
		multifactor(c)
		c.QOS[2].MaxJobsPerUser = 1
	}, t0, fullCyclesOnly) // see fullCyclesOnly
	h.register("n1", 8)
	lowJob := h.job(h.submit(alice, gpus(8, time.Hour, "low")))
	h.advance(time.Minute)
	a := h.submit(bob, gpus(8, 10*time.Minute, "high"))
	if got := h.job(lowJob.ID); got.StopState != spec.StatePreempted {
		t.Fatalf("low job stop state %q, want it preempted by job %d", got.StopState, a)
	}
	// While the victim stops, bob's second high job starts on a new node:
	// bob is at high's limit of 1 running job.
	h.register("n2", 1)
	b := h.submit(bob, gpus(1, 10*time.Minute, "high"))
	if j := h.job(b); j.State != spec.StateRunning {
		t.Fatalf("bob's second high job is %s (%s), want RUNNING", j.State, j.Reason)
	}
	// Room for the waiting preemptor appears elsewhere; the limit holds.
	h.register("n3", 8)
	h.advance(10 * time.Second)
	j := h.job(a)
	if j.State != spec.StatePending || j.Reason != spec.ReasonQOSLimit {
		t.Fatalf("waiting preemptor is %s (%s); want PENDING for %s: bob runs high's maximum of 1 job", j.State, j.Reason, spec.ReasonQOSLimit)
	}
	// Its victim has stopped and bob's other job ended: it starts.
	h.exit("n1", lowJob, spec.StatePreempted, 0)
	h.exit("n2", h.job(b), spec.StateCompleted, 0)
	if j := h.job(a); j.State != spec.StateRunning {
		t.Fatalf("preemptor is %s (%s) with its limit free, want RUNNING", j.State, j.Reason)
	}
}

// A pending job shown alone says why each node does not run it.
func TestPendingJobNodeReasons(t *testing.T) {
	h := newHarness(t, newFakeStore(), multifactor)
	h.register("n1", 8)
	h.register("n2", 8)
	h.submit(alice, gpus(8, time.Hour, "normal"))
	h.submit(alice, gpus(8, time.Hour, "normal"))
	h.settle() // alice's jobs run on n1 and n2 before the drain: n2 is DRAINING
	if _, err := h.c.NodeAction(context.Background(), root, "n2", "drain", "maint"); err != nil {
		t.Fatal(err)
	}
	id := h.submit(bob, gpus(4, time.Hour, "normal"))
	j := h.job(id)
	if want := "2 nodes: 1 draining, 1 insufficient free GPUs"; j.State != spec.StatePending || j.NodeReasons != want {
		t.Errorf("pending job: %s, node reasons %q; want PENDING, %q", j.State, j.NodeReasons, want)
	}
	if r := h.job(1); r.NodeReasons != "" {
		t.Errorf("running job has node reasons %q; want none", r.NodeReasons)
	}
}

// The cycle's node counts (sched.PlacementMetric) reach every pending
// job it could not place, in the listing too (squeue %r), and go when
// the job is held back before placement or starts.
func TestPendingJobNodeReasonsFromCycle(t *testing.T) {
	h := newHarness(t, newFakeStore(), multifactor)
	h.register("n1", 8)
	h.register("n2", 8)
	first := h.submit(alice, gpus(8, time.Hour, "normal"))
	h.submit(alice, gpus(8, time.Hour, "normal"))
	h.settle() // alice's jobs run on n1 and n2 before the drain: n2 is DRAINING
	if _, err := h.c.NodeAction(context.Background(), root, "n2", "drain", "maint"); err != nil {
		t.Fatal(err)
	}
	id := h.submit(bob, gpus(4, time.Hour, "normal"))
	full := func() { // a full cycle, on the owner
		h.t.Helper()
		if err := h.c.query(context.Background(), func() error { h.c.sched.dirty = true; return nil }); err != nil {
			t.Fatal(err)
		}
		h.settle()
	}
	full()
	views, err := h.c.ListJobs(context.Background(), JobFilter{IDs: []spec.JobID{id}})
	if err != nil || len(views) != 1 {
		t.Fatalf("ListJobs: %v, %d views", err, len(views))
	}
	if want := "2 nodes: 1 draining, 1 insufficient free GPUs"; views[0].job.NodeReasons != want {
		t.Errorf("listed pending job: node reasons %q; want %q", views[0].job.NodeReasons, want)
	}
	if _, err := h.c.JobAction(context.Background(), bob, id, "hold", ""); err != nil {
		t.Fatal(err)
	}
	full()
	if views, _ := h.c.ListJobs(context.Background(), JobFilter{IDs: []spec.JobID{id}}); views[0].job.NodeReasons != "" {
		t.Errorf("held job still lists node reasons %q", views[0].job.NodeReasons)
	}
	h.exit("n1", h.job(first), spec.StateCompleted, 0)
	if j := h.job(2); j.State != spec.StateRunning || j.NodeReasons != "" {
		t.Errorf("started job: %s, node reasons %q; want RUNNING without", j.State, j.NodeReasons)
	}
}
