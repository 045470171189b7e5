package node

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
	"github.com/gpud/gpud/runtime/gpu"
)

// fixedSampler reads every GPU at the same values.
type fixedSampler struct{ samples []gpu.Sample }

func (s fixedSampler) Sample(context.Context) ([]gpu.Sample, error) { return s.samples, nil }

// cgroupRuntime is the fake runtime with a cgroup whose CPU time the test
// sets.
type cgroupRuntime struct {
	*fake.Runtime
	mu  sync.Mutex
	cpu float64
}

func (r *cgroupRuntime) TaskUsage(_ context.Context, id string) (runtime.TaskUsage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return runtime.TaskUsage{CPUSeconds: r.cpu, MemBytes: 512 << 20}, nil
}

func (r *cgroupRuntime) setCPU(v float64) { r.mu.Lock(); r.cpu = v; r.mu.Unlock() }

// TestUsageSamples: a running job is sampled into the outbox and
// delivered: its GPUs' utilisation (mean and max), memory and power, the
// energy over the interval, the cgroup's CPU time in the interval; each
// sample has its own ID, and samples stop when the job ends.
func TestUsageSamples(t *testing.T) {
	var crt *cgroupRuntime
	// Sampling rounds run when the test ticks: tick returns once the
	// round it started is over.
	ticks := make(chan time.Time)
	tick := func() { ticks <- time.Time{}; ticks <- time.Time{} }
	e := newEnv(t, func(e *env) {
		crt = &cgroupRuntime{Runtime: e.rt}
		e.rtOverride = crt
		e.opts = []Option{WithUsageTicks(ticks), WithGPUSampler(fixedSampler{[]gpu.Sample{
			{Index: 0, UUID: "GPU-a", UtilPct: 20, MemUsedMiB: 1000, PowerW: 100, HasUtil: true, HasMem: true, HasPower: true},
			{Index: 1, UUID: "GPU-b", UtilPct: 60, MemUsedMiB: 3000, PowerW: 300, HasUtil: true, HasMem: true, HasPower: true},
			{Index: 2, UUID: "GPU-c", UtilPct: 99, MemUsedMiB: 9, PowerW: 999, HasUtil: true, HasMem: true, HasPower: true},
		}})}
	})
	e.fc.Set(asg(7, e.home)) // GPU-a and GPU-b, started at t0
	e.waitStarted(t, cid)
	usage := func() []api.AllocEvent {
		var out []api.AllocEvent
		for _, ev := range e.eventsOf("a7") {
			if ev.Kind == api.EventUsage {
				out = append(out, ev)
			}
		}
		return out
	}
	crt.setCPU(30)
	e.clock.Advance(30 * time.Second)
	tick()
	waitFor(t, "first usage sample", func() bool { return len(usage()) == 1 }, e.on()...)
	crt.setCPU(40)
	e.clock.Advance(10 * time.Second)
	tick()
	waitFor(t, "second usage sample", func() bool { return len(usage()) == 2 }, e.on()...)

	got := usage()
	for i, want := range []struct {
		start, end time.Duration
		cpu        float64
	}{{0, 30 * time.Second, 30}, {30 * time.Second, 40 * time.Second, 10}} {
		u := got[i].Usage
		if u == nil {
			t.Fatalf("usage event %d has no sample", i)
		}
		secs := (want.end - want.start).Seconds()
		if !strings.HasPrefix(u.ID, "node-1/a7/") || u.Attempt != 1 || !u.Start.Equal(t0.Add(want.start)) || !u.End.Equal(t0.Add(want.end)) ||
			u.GPUs != 2 || u.GPUUtilAvg != 40 || u.GPUUtilMax != 60 || u.GPUMemMiB != 4000 || u.PowerW != 400 ||
			math.Abs(u.EnergyJ-400*secs) > 1e-9 || u.CPUSeconds != want.cpu || u.MemMiB != 512 {
			t.Errorf("sample %d = %+v; want %v-%v, 2 GPUs at 40%% avg 60%% max, 4000 MiB, 400 W, %v J, %v CPU-s, 512 MiB",
				i, *u, want.start, want.end, 400*secs, want.cpu)
		}
	}
	if got[0].Usage.ID == got[1].Usage.ID {
		t.Errorf("two samples share the ID %s", got[0].Usage.ID)
	}
	// The node's metrics read the last cgroup reading per running job.
	var seen []RunningJob
	for _, j := range e.agent.RunningJobs() {
		if j.AllocID == "a7" {
			seen = append(seen, j)
		}
	}
	if len(seen) != 1 || !seen[0].HasUsage || seen[0].CPUSeconds != 40 || seen[0].MemBytes != 512<<20 {
		t.Errorf("RunningJobs a7 = %+v; want the last cgroup reading, 40 CPU-s and 512 MiB", seen)
	}
	e.rt.Exit(cid, runtime.ExitStatus{Code: 0})
	e.waitExited(t, "a7")
	e.clock.Advance(10 * time.Second)
	tick() // a whole round after the end: nothing to sample
	// Events are delivered in outbox order: once a later event (a8's
	// start) has arrived, a sample of that round would have too.
	e.fc.Set(asg(8, e.dir))
	waitFor(t, "a8 started and reported", func() bool { return len(e.eventsOf("a8")) == 1 }, e.on()...)
	if n := len(usage()); n != 2 {
		t.Errorf("%d usage samples after the job ended, want still 2", n)
	}
}
