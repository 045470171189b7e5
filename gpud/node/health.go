package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// HealthLimits say when a GPU is unhealthy (node.toml [health]).
// Temperature and power must stay over their limit for Sustain; a fatal
// XID or uncorrected ECC errors count at once.
type HealthLimits struct {
	// Interval between samples; 0 means DefaultHealthInterval.
	Interval time.Duration
	// TempMaxC: at or above it for Sustain is unhealthy; 0: no limit.
	TempMaxC float64
	// PowerMaxW: above it for Sustain is unhealthy; 0: no limit.
	PowerMaxW float64
	Sustain   time.Duration
	// FatalXIDs are the XID errors that take a GPU out of service; empty
	// means every XID does.
	FatalXIDs []int
	// ECCUncorrectedMax: more uncorrected ECC errors than this is
	// unhealthy; negative: not checked.
	ECCUncorrectedMax float64
}

// DefaultHealthInterval is how often GPUs are sampled by default.
const DefaultHealthInterval = 10 * time.Second

// WithHealth has the agent sample its GPUs and report those over limits
// with its heartbeats (the controller moves their jobs away). Without it
// the agent reports no GPU problems.
func WithHealth(s gpu.Sampler, limits HealthLimits) Option {
	return func(o *options) { o.healthSampler, o.health = s, limits }
}

// healthWatcher samples the node's GPUs and keeps the current problems.
// Its run loop is the only writer; the heartbeat loop reads current.
type healthWatcher struct {
	sampler gpu.Sampler
	limits  HealthLimits
	clock   Clock
	a       *Agent
	// over is when each GPU's reading first went over a sustained limit,
	// by "uuid/temp" or "uuid/power"; run loop only.
	over map[string]time.Time
	// changed wakes the heartbeat loop when problems appear.
	changed chan struct{}

	mu       sync.Mutex
	problems []spec.GPUProblem
}

func newHealthWatcher(a *Agent) *healthWatcher {
	l := a.opts.health
	if l.Interval <= 0 {
		l.Interval = DefaultHealthInterval
	}
	return &healthWatcher{sampler: a.opts.healthSampler, limits: l, clock: a.clock, a: a,
		over: map[string]time.Time{}, changed: make(chan struct{}, 1)}
}

// current returns the GPUs over a limit now (nil when all are healthy).
func (h *healthWatcher) current() []spec.GPUProblem {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.problems)
}

// run samples every Interval until ctx ends.
func (h *healthWatcher) run(ctx context.Context) {
	for {
		h.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-h.clock.After(h.limits.Interval):
		}
	}
}

// check takes one sample and updates the problems. A failed sample keeps
// the last verdict: not being able to read a GPU proves nothing either way.
func (h *healthWatcher) check(ctx context.Context) {
	samples, err := h.sampler.Sample(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.a.log.Warn("sample GPU health; keeping the last verdict", "err", err)
		}
		return
	}
	now := h.clock.Now()
	var problems []spec.GPUProblem
	for _, s := range samples {
		if p := h.judge(s, now); len(p) > 0 {
			problems = append(problems, spec.GPUProblem{UUID: s.UUID, Problem: strings.Join(p, ", ")})
		}
	}
	h.mu.Lock()
	old := h.problems
	h.problems = problems
	h.mu.Unlock()
	known := map[string]bool{}
	for _, p := range old {
		known[p.UUID] = true
	}
	fresh := false
	for _, p := range problems {
		if !known[p.UUID] {
			fresh = true
			h.a.log.Warn("GPU unhealthy", "gpu_uuid", p.UUID, "problem", p.Problem)
		}
	}
	if fresh {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// judge returns what is wrong with one GPU's sample.
func (h *healthWatcher) judge(s gpu.Sample, now time.Time) []string {
	l := h.limits
	var out []string
	sustained := func(kind string, over bool, what string) {
		key := s.UUID + "/" + kind
		if !over {
			delete(h.over, key)
			return
		}
		since, ok := h.over[key]
		if !ok {
			since = now
			h.over[key] = now
		}
		if now.Sub(since) >= l.Sustain {
			out = append(out, fmt.Sprintf("%s for %s", what, l.Sustain))
		}
	}
	if l.TempMaxC > 0 && s.HasTemp {
		sustained("temp", s.TempC >= l.TempMaxC, fmt.Sprintf("temperature %.0fC at or above %.0fC", s.TempC, l.TempMaxC))
	}
	if l.PowerMaxW > 0 && s.HasPower {
		sustained("power", s.PowerW > l.PowerMaxW, fmt.Sprintf("power %.0fW above %.0fW", s.PowerW, l.PowerMaxW))
	}
	if s.HasXID && s.XID != 0 && (len(l.FatalXIDs) == 0 || slices.Contains(l.FatalXIDs, int(s.XID))) {
		out = append(out, fmt.Sprintf("XID %.0f", s.XID))
	}
	if l.ECCUncorrectedMax >= 0 && s.HasECC && s.ECCUncorrected > l.ECCUncorrectedMax {
		out = append(out, fmt.Sprintf("%.0f uncorrected ECC errors", s.ECCUncorrected))
	}
	return out
}
