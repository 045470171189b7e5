package controller

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

type fakeObserver struct {
	mu       sync.Mutex
	cycles   int
	started  map[string]int
	ended    map[spec.JobState]int
	requeued map[string]int
	preempts map[string]int // by partition/mode
	backfill map[string]int
	idle     map[string]int // by partition/action
}

func (o *fakeObserver) JobBackfilled(p string) {
	o.mu.Lock()
	if o.backfill == nil {
		o.backfill = map[string]int{}
	}
	o.backfill[p]++
	o.mu.Unlock()
}

func (o *fakeObserver) JobIdle(p, a string) {
	o.mu.Lock()
	if o.idle == nil {
		o.idle = map[string]int{}
	}
	o.idle[p+"/"+a]++
	o.mu.Unlock()
}

func (o *fakeObserver) CycleDone(time.Duration) { o.mu.Lock(); o.cycles++; o.mu.Unlock() }
func (o *fakeObserver) JobStarted(p string)     { o.mu.Lock(); o.started[p]++; o.mu.Unlock() }
func (o *fakeObserver) JobEnded(_ string, s spec.JobState) {
	o.mu.Lock()
	o.ended[s]++
	o.mu.Unlock()
}
func (o *fakeObserver) JobRequeued(_, r string) { o.mu.Lock(); o.requeued[r]++; o.mu.Unlock() }
func (o *fakeObserver) JobPreempted(p, m string) {
	o.mu.Lock()
	if o.preempts == nil {
		o.preempts = map[string]int{}
	}
	o.preempts[p+"/"+m]++
	o.mu.Unlock()
}

func TestStatsAndObserver(t *testing.T) {
	obs := &fakeObserver{started: map[string]int{}, ended: map[spec.JobState]int{}, requeued: map[string]int{}}
	h := newHarnessAt(t, newFakeStore(), nil, t0, fullCyclesOnly) // pending reasons are a full cycle's
	// The owner reads c.obs only on its own goroutine, so setting it there
	// is what WithObserver would do.
	if err := h.c.query(context.Background(), func() error { h.c.obs = obs; return nil }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h.register("n1", 2)
	h.register("n2", 1)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2 })
	b := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if h.job(a).State != spec.StateRunning || h.job(b).State != spec.StateRunning {
		t.Fatal("jobs did not start")
	}
	if _, err := h.c.JobAction(ctx, alice, b, ActionRequeue, "move"); err != nil {
		t.Fatal(err)
	}
	h.exit("n2", h.job(b), spec.StateCancelled, 0) // requeued, runs again on n2
	h.exit("n1", h.job(a), spec.StateCompleted, 0) // the third job takes n1
	h.settle()
	got, err := h.c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{
		Jobs:    []JobCount{{State: spec.StateRunning, Partition: "batch", N: 2}},
		Pending: nil,
		Nodes:   []NodeCount{{State: spec.NodeAllocated, N: 1}, {State: spec.NodeMixed, N: 1}},
		GPUs:    []GPUCount{{Model: "h100", Total: 3, Allocated: 2}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2 })
	h.settle()
	got, err = h.c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantPending := []ReasonCount{{Reason: spec.ReasonResources, N: 1}}
	if diff := cmp.Diff(wantPending, got.Pending); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.cycles == 0 || obs.started["batch"] != 4 || obs.ended[spec.StateCompleted] != 1 || obs.requeued["move"] != 1 {
		t.Errorf("observer saw %d cycles, started %v, ended %v, requeued %v; want >0, 4 in batch, 1 COMPLETED, 1 move",
			obs.cycles, obs.started, obs.ended, obs.requeued)
	}
}
