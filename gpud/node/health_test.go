package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// fakeSampler returns readings the test sets.
type fakeSampler struct {
	mu      sync.Mutex
	samples []gpu.Sample
}

func (f *fakeSampler) Sample(context.Context) ([]gpu.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.samples), nil
}

func (f *fakeSampler) set(i int, mod func(*gpu.Sample)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mod(&f.samples[i])
}

func healthySamples() []gpu.Sample {
	var out []gpu.Sample
	for i, u := range []string{"GPU-a", "GPU-b", "GPU-c"} {
		out = append(out, gpu.Sample{Index: i, UUID: u, TempC: 40, PowerW: 300, HasTemp: true, HasPower: true, HasXID: true, HasECC: true})
	}
	return out
}

// TestHealthReportsSustainedAndFatalProblems: a hot GPU is reported once
// it stayed hot for the sustain time, a fatal XID at once, and the
// heartbeats carry the current problems (none once the GPU cooled down).
func TestHealthReportsSustainedAndFatalProblems(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	limits := HealthLimits{Interval: 10 * time.Second, TempMaxC: 85, PowerMaxW: 700, Sustain: time.Minute, FatalXIDs: []int{79}}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, limits)} })
	lastProblems := func() []spec.GPUProblem {
		hbs := e.fc.Heartbeats()
		if len(hbs) == 0 {
			return nil
		}
		return hbs[len(hbs)-1].GPUProblems
	}
	waitFor(t, "first health sample", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	fs.set(0, func(s *gpu.Sample) { s.TempC = 90 })
	fs.set(1, func(s *gpu.Sample) { s.XID = 13 }) // not fatal here
	e.clock.Advance(10 * time.Second)             // hot since now
	waitFor(t, "second sample", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(50 * time.Second) // 50s hot: not yet
	waitFor(t, "third sample", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	if p := e.agent.health.current(); len(p) != 0 {
		t.Fatalf("problems after 50s hot = %v, want none before the 1m sustain", p)
	}
	fs.set(1, func(s *gpu.Sample) { s.XID = 79 })
	e.clock.Advance(10 * time.Second)
	want := []spec.GPUProblem{
		{UUID: "GPU-a", Problem: "temperature 90C at or above 85C for 1m0s"},
		{UUID: "GPU-b", Problem: "XID 79"},
	}
	waitFor(t, "heartbeat with both problems", func() bool { return cmp.Equal(want, lastProblems()) }, e.on()...)

	fs.set(0, func(s *gpu.Sample) { s.TempC = 60 })
	fs.set(1, func(s *gpu.Sample) { s.XID = 0 })
	waitFor(t, "next sample", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "heartbeat without problems", func() bool {
		hbs := e.fc.Heartbeats()
		return len(hbs) > 0 && len(hbs[len(hbs)-1].GPUProblems) == 0 && len(e.agent.health.current()) == 0
	}, e.on()...)
}

func TestHealthJudge(t *testing.T) {
	t.Parallel()
	limits := HealthLimits{TempMaxC: 85, PowerMaxW: 700, Sustain: 0, ECCUncorrectedMax: 0}
	for _, tc := range []struct {
		name string
		mod  func(*gpu.Sample)
		want []string
	}{
		{"healthy", func(*gpu.Sample) {}, nil},
		{"hot", func(s *gpu.Sample) { s.TempC = 85 }, []string{"temperature 85C at or above 85C for 0s"}},
		{"power", func(s *gpu.Sample) { s.PowerW = 701 }, []string{"power 701W above 700W for 0s"}},
		{"any xid when none listed", func(s *gpu.Sample) { s.XID = 48 }, []string{"XID 48"}},
		{"ecc", func(s *gpu.Sample) { s.ECCUncorrected = 1 }, []string{"1 uncorrected ECC errors"}},
		{"no reading", func(s *gpu.Sample) { s.TempC, s.HasTemp = 99, false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := &healthWatcher{limits: limits, over: map[string]time.Time{}}
			s := healthySamples()[0]
			tc.mod(&s)
			if diff := cmp.Diff(tc.want, h.judge(s, t0)); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}
