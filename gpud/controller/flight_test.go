package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// flightHarness is a harness whose full cycles (after the first) plan
// off the owner loop, each held on its goroutine until the test lets it
// go: planning says it has its snapshot, release lets it plan.
type flightHarness struct {
	*harness
	planning chan struct{}
	release  chan struct{}
}

func newFlightHarness(t *testing.T) *flightHarness {
	fh := &flightHarness{planning: make(chan struct{}, 1), release: make(chan struct{})}
	fh.harness = newHarnessAt(t, newFakeStore(), nil, t0, alwaysIncremental, func(c *Controller) {
		c.sched.asyncMin, c.sched.flyMinJobs = time.Nanosecond, 1
		c.sched.flightHook = func() {
			select {
			case fh.planning <- struct{}{}:
			default:
			}
			<-fh.release
		}
	})
	// After the harness's own clean-up is registered: runs before it, so
	// a flight still held plans and ends.
	t.Cleanup(func() { close(fh.release) })
	return fh
}

// flights returns how many flights have landed and the starts they
// planned that no longer held.
func (fh *flightHarness) flights() (landed, dropped int) {
	fh.t.Helper()
	if err := fh.c.query(context.Background(), func() error {
		landed, dropped = fh.c.sched.flights, fh.c.sched.flightDropped
		return nil
	}); err != nil {
		fh.t.Fatal(err)
	}
	return landed, dropped
}

// fly makes the next cycle a full one that the owner loop's pacing runs
// (a flight: the periodic cycle is due) and runs do, which gives the
// loop cause for that cycle; it returns once the flight has its snapshot.
func (fh *flightHarness) fly(do func()) {
	fh.t.Helper()
	if err := fh.c.query(context.Background(), func() error { fh.c.sched.stale = true; return nil }); err != nil {
		fh.t.Fatal(err)
	}
	do()
	select {
	case <-fh.planning:
	case <-time.After(30 * time.Second):
		fh.t.Fatal("no full cycle planned off the owner loop")
	}
}

// land lets the flight plan and waits until the owner loop has landed it.
func (fh *flightHarness) land(want int) {
	fh.t.Helper()
	fh.release <- struct{}{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, _ := fh.flights(); n >= want {
			return
		}
		if time.Now().After(deadline) {
			fh.t.Fatalf("flight %d not landed", want)
		}
	}
}

// noGPUTwice fails the test when two live jobs hold one GPU.
func (fh *flightHarness) noGPUTwice(ids ...spec.JobID) {
	fh.t.Helper()
	holder := map[string]spec.JobID{}
	for _, id := range ids {
		j := fh.job(id)
		if j.State != spec.StateRunning {
			continue
		}
		for _, g := range j.GPUs {
			if o, ok := holder[g]; ok {
				fh.t.Fatalf("jobs %d and %d both hold %s", o, id, g)
			}
			holder[g] = id
		}
	}
}

// TestFlightLandsWhatStillHolds: a full cycle planned off the owner loop
// while the last State answered a job end meanwhile. The plan's start on
// the GPU an earlier end freed is dropped when that job was started
// meanwhile elsewhere; the new State learns the end and the start since
// its snapshot and gives the freed GPU to the next job; no GPU is given
// twice. A node drained meanwhile: the plan's start there is dropped and
// a full cycle follows.
func TestFlightLandsWhatStillHolds(t *testing.T) {
	fh := newFlightHarness(t)
	fh.register("n1", 4)
	gpu := func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }
	var ids []spec.JobID
	for range 7 {
		ids = append(ids, fh.submit(alice, gpu))
	}
	a, b, c, e, f, g := fh.job(ids[0]), fh.job(ids[1]), fh.job(ids[2]), ids[4], ids[5], ids[6]
	for i, id := range ids {
		if want := map[bool]spec.JobState{true: spec.StateRunning, false: spec.StatePending}[i < 4]; fh.job(id).State != want {
			t.Fatalf("job %d %s, want %s", id, fh.job(id).State, want)
		}
	}
	// a ends with the periodic cycle due: a full cycle, off the loop.
	fh.fly(func() { fh.exit("n1", a, spec.StateCompleted, 0) })
	// Meanwhile b ends: the last State (which never saw a's end) starts e
	// on b's GPU.
	fh.exit("n1", b, spec.StateCompleted, 0)
	if je := fh.job(e); je.State != spec.StateRunning || je.GPUs[0] != b.GPUs[0] {
		t.Fatalf("job %d %s on %v while the cycle planned, want RUNNING on %s (job %d's)", e, je.State, je.GPUs, b.GPUs[0], b.ID)
	}
	// The plan started e on a's GPU: no longer pending, dropped; f takes
	// a's GPU once the new State knows a ended.
	fh.land(1)
	if _, dropped := fh.flights(); dropped != 1 {
		t.Fatalf("%d planned starts dropped, want 1 (job %d, started meanwhile)", dropped, e)
	}
	if jf := fh.job(f); jf.State != spec.StateRunning || jf.GPUs[0] != a.GPUs[0] {
		t.Fatalf("job %d %s on %v after the landing, want RUNNING on %s (job %d's)", f, jf.State, jf.GPUs, a.GPUs[0], a.ID)
	}
	if jg := fh.job(g); jg.State != spec.StatePending {
		t.Fatalf("job %d %s, want PENDING: no GPU is free", g, jg.State)
	}
	fh.noGPUTwice(ids...)

	// c ends with the periodic cycle due: the plan starts g on its GPU;
	// meanwhile n1 is drained: dropped, and a full cycle follows.
	full := fh.fullCycles()
	fh.fly(func() { fh.exit("n1", c, spec.StateCompleted, 0) })
	if _, err := fh.c.NodeAction(context.Background(), root, "n1", ActionDrain, "maint"); err != nil {
		t.Fatal(err)
	}
	fh.land(2)
	if _, dropped := fh.flights(); dropped != 2 {
		t.Fatalf("%d planned starts dropped, want 2 (job %d on a node drained meanwhile)", dropped, g)
	}
	if jg := fh.job(g); jg.State != spec.StatePending {
		t.Fatalf("job %d %s on %v, want PENDING: its node was drained while the cycle planned", g, jg.State, jg.GPUs)
	}
	if n := fh.fullCycles(); n < full+2 {
		t.Fatalf("%d full cycles since the drain's flight began, want the flight's and one after it", n-full)
	}
	fh.noGPUTwice(ids...)
}
