package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// HealthConfig is node.toml's [health] as the agent uses it: how often
// GPUs are sampled, the triage table and thresholds of the health model
// (gpud/health), and the deep check of a readmission probe.
type HealthConfig struct {
	// Interval between samples; 0 means DefaultHealthInterval.
	Interval time.Duration
	// Triage classifies findings; nil means health.DefaultTriage().
	Triage health.Triage
	Limits health.Limits
	// Prober is the deep check of a readmission probe (dcgmi diag where
	// DCGM is installed); nil: the model's quick checks only.
	Prober GPUProber
}

// GPUProber checks one GPU in depth before it is readmitted.
type GPUProber interface {
	// Probe returns nil when the GPU passes. It may take minutes (dcgmi
	// diag -r 2) and must honour ctx.
	Probe(ctx context.Context, index int, uuid string) error
}

// DefaultHealthInterval is how often GPUs are sampled by default.
const DefaultHealthInterval = 10 * time.Second

// maxGPUEvents bounds the health events waiting for a heartbeat to carry
// them (a controller away for long loses the oldest, with a warning).
const maxGPUEvents = 512

// WithHealth has the agent sample its GPUs through the health model and
// report what it finds with its heartbeats: GPUs to take out of service
// (the controller moves their jobs away), the events of their history,
// and readmissions after a clean probe. Without it the agent reports no
// GPU problems.
func WithHealth(s gpu.Sampler, c HealthConfig) Option {
	return func(o *options) { o.healthSampler, o.health = s, c }
}

// healthWatcher samples the node's GPUs into the health model. Its run
// loop is the only sampler; the heartbeat loop and job gates read and
// take from it under mu.
type healthWatcher struct {
	sampler gpu.Sampler
	cfg     HealthConfig
	clock   Clock
	a       *Agent
	// changed wakes the heartbeat loop when there is news.
	changed chan struct{}
	// probed carries finished probes back to the run loop.
	probed chan probeResult
	probes sync.WaitGroup

	mu       sync.Mutex
	model    *health.Model
	problems []spec.GPUProblem
	events   []spec.GPUEvent
	// probing: GPUs with a probe under way (run loop only).
	probing map[string]bool
	// xidSeen is the last XID sequence number taken, by GPU.
	xidSeen map[string]uint64
}

type probeResult struct {
	uuid string
	err  error
}

func newHealthWatcher(a *Agent) *healthWatcher {
	c := a.opts.health
	if c.Interval <= 0 {
		c.Interval = DefaultHealthInterval
	}
	if c.Triage == nil {
		c.Triage = health.DefaultTriage()
	}
	inv := map[int]string{}
	a.invMu.Lock()
	for _, g := range a.cfg.Inventory.GPUs {
		inv[g.Index] = g.UUID
	}
	a.invMu.Unlock()
	return &healthWatcher{sampler: a.opts.healthSampler, cfg: c, clock: a.clock, a: a,
		model: health.New(c.Triage, c.Limits, inv), changed: make(chan struct{}, 1),
		probed: make(chan probeResult, 1), probing: map[string]bool{}, xidSeen: map[string]uint64{}}
}

// current returns the GPUs to keep out of service now (nil when all are
// healthy).
func (h *healthWatcher) current() []spec.GPUProblem {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.problems)
}

// pendingEvents returns the health events not yet delivered; after a
// heartbeat carrying them is answered, ackEvents(n) drops them.
func (h *healthWatcher) pendingEvents() []spec.GPUEvent {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func (h *healthWatcher) ackEvents(n int) {
	if h == nil || n == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = h.events[min(n, len(h.events)):]
}

// hold takes the GPUs the controller reports as held out by gpud into
// the model (at registration), so they are probed before they return.
func (h *healthWatcher) hold(out []spec.GPUProblem) {
	if h == nil || len(out) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range out {
		g := h.a.gpus[p.UUID]
		code, _, detail, ok := health.ParseReason(p.Problem)
		if !ok {
			code, detail = "held", p.Problem
		}
		h.model.Hold(health.Finding{GPU: g.Index, UUID: p.UUID, Code: cmp.Or(p.Code, code), Class: health.Class(p.Class),
			Action: health.Action(cmp.Or(p.Action, string(health.DrainGPU))), Detail: detail})
	}
	h.problems = problemsOf(h.model.Faults())
}

// run samples every Interval until ctx ends, and waits for its probes.
func (h *healthWatcher) run(ctx context.Context) {
	defer h.probes.Wait()
	for {
		h.check(ctx)
		tick := h.clock.After(h.cfg.Interval)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-h.probed:
				h.probeDone(r)
			case <-tick:
				break wait
			}
		}
	}
}

// check takes one sample into the model. A failed sample keeps the last
// verdict: not being able to read a GPU proves nothing either way (a GPU
// missing from a sample that succeeded does).
func (h *healthWatcher) check(ctx context.Context) {
	samples, err := h.sampler.Sample(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.a.log.Warn("sample GPU health; keeping the last verdict", "err", err)
		}
		return
	}
	now := h.clock.Now()
	h.mu.Lock()
	readings := h.readings(samples, true)
	rep := h.model.Observe(now, readings)
	h.problems = problemsOf(rep.Faults)
	for _, f := range rep.New {
		h.addEvent(now, spec.GPUEventFault, f)
	}
	var due []string
	for _, uuid := range rep.ProbeDue {
		if !h.probing[uuid] {
			h.probing[uuid] = true
			due = append(due, uuid)
		}
	}
	h.mu.Unlock()
	for _, f := range rep.New {
		h.a.log.Warn("GPU health finding", "gpu", f.GPU, "gpu_uuid", f.UUID, "code", f.Code, "class", f.Class, "action", f.Action, "detail", f.Detail)
	}
	for _, uuid := range due {
		h.startProbe(ctx, uuid)
	}
	if len(rep.New) > 0 {
		h.wake()
	}
}

// startProbe probes a faulted GPU whose readings have been clean: a
// fresh sample must show it present and passing the gate's checks, then
// the deep check (if any) must pass.
func (h *healthWatcher) startProbe(ctx context.Context, uuid string) {
	g := h.a.gpus[uuid]
	h.probes.Add(1)
	go func() {
		defer h.probes.Done()
		err := h.probe(ctx, g.Index, uuid)
		select {
		case h.probed <- probeResult{uuid: uuid, err: err}:
		case <-ctx.Done():
		}
	}()
}

func (h *healthWatcher) probe(ctx context.Context, index int, uuid string) error {
	samples, err := h.sampler.Sample(ctx)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	h.mu.Lock()
	readings := h.readings(samples, false)
	// The quick checks, as at a job's start, of a GPU taken as if sound.
	fs := health.New(h.cfg.Triage, h.cfg.Limits, nil).Gate([]string{uuid}, readings)
	h.mu.Unlock()
	if len(fs) > 0 {
		return fmt.Errorf("quick check: %s", fs[0].Reason())
	}
	if h.cfg.Prober != nil {
		return h.cfg.Prober.Probe(ctx, index, uuid)
	}
	return nil
}

// probeDone readmits a GPU whose probe passed, or keeps it out.
func (h *healthWatcher) probeDone(r probeResult) {
	now := h.clock.Now()
	h.mu.Lock()
	delete(h.probing, r.uuid)
	if r.err != nil {
		f := h.model.ProbeFailed(now, r.uuid, r.err.Error())
		h.addEvent(now, spec.GPUEventProbeFailed, f)
		h.mu.Unlock()
		h.a.log.Warn("GPU readmission probe failed; keeping it out of service", "gpu_uuid", r.uuid, "err", r.err)
		return
	}
	cleared := h.model.Readmit(r.uuid)
	g := h.a.gpus[r.uuid]
	var codes []string
	for _, f := range cleared {
		codes = append(codes, f.Code)
	}
	h.addEvent(now, spec.GPUEventReadmit, health.Finding{GPU: g.Index, UUID: r.uuid, Code: strings.Join(codes, ","),
		Detail: "clean probe after " + strings.Join(codes, ", ")})
	h.problems = slices.DeleteFunc(h.problems, func(p spec.GPUProblem) bool { return p.UUID == r.uuid })
	h.mu.Unlock()
	h.a.log.Info("GPU passed its readmission probe", "gpu", g.Index, "gpu_uuid", r.uuid, "cleared", strings.Join(codes, ","))
	h.wake()
}

// addEvent queues a history event; callers hold mu.
func (h *healthWatcher) addEvent(now time.Time, kind string, f health.Finding) {
	g := h.a.gpus[f.UUID]
	h.events = append(h.events, spec.GPUEvent{Time: spec.NewTime(now), Node: h.a.cfg.Name, GPU: f.GPU, UUID: f.UUID, Serial: g.Serial,
		Kind: kind, Code: f.Code, Class: string(f.Class), Action: string(f.Action), Detail: f.Detail})
	if over := len(h.events) - maxGPUEvents; over > 0 {
		h.a.log.Warn("GPU health events not delivered to the controller; dropping the oldest", "dropped", over)
		h.events = slices.Delete(h.events, 0, over)
	}
}

func (h *healthWatcher) wake() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

// gateStart is the start gate, run by a runner just before its job
// starts on uuids: a fresh sample judged by the model's quick checks
// (health.Model.Gate: a GPU the model holds faulted, an XID not yet
// taken, row remapping pending or failed, an NVLink down, new
// uncorrected ECC errors, a vanished GPU). Each drain-worthy finding is
// latched as a fault, as a sample would have, so the GPU goes out of
// service with the next heartbeat (woken at once) and is readmitted only
// after a clean probe; the runner hands the job back. A sample that fails
// proves nothing against the GPUs: the gate passes (logged).
func (h *healthWatcher) gateStart(ctx context.Context, uuids []string) []health.Finding {
	if h == nil || len(uuids) == 0 {
		return nil
	}
	samples, err := h.sampler.Sample(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.a.log.Warn("start gate: sample GPU health; passing the GPUs", "gpus", uuids, "err", err)
		}
		return nil
	}
	now := h.clock.Now()
	h.mu.Lock()
	fs := h.model.Gate(uuids, h.readings(samples, false))
	latched := false
	for _, f := range fs {
		if h.model.Latch(f) {
			f.Detail += " (start gate)"
			h.addEvent(now, spec.GPUEventFault, f)
			latched = true
		}
	}
	if latched {
		h.problems = problemsOf(h.model.Faults())
	}
	h.mu.Unlock()
	if latched {
		h.wake()
	}
	return fs
}

func problemsOf(fs []health.Finding) []spec.GPUProblem {
	var out []spec.GPUProblem
	for _, f := range fs {
		out = append(out, spec.GPUProblem{UUID: f.UUID, Problem: f.Reason(), Code: f.Code, Class: string(f.Class), Action: string(f.Action)})
	}
	return out
}

// readings converts a sample for the health model with the XIDs not
// seen before, marking them seen if take; callers hold mu.
func (h *healthWatcher) readings(samples []gpu.Sample, take bool) []health.Reading {
	out := make([]health.Reading, len(samples))
	for i, s := range samples {
		out[i] = reading(s)
		for _, x := range s.XIDs {
			if x.Seq > h.xidSeen[s.UUID] {
				out[i].XIDs = append(out[i].XIDs, x.XID)
			}
		}
		if n := len(s.XIDs); take && n > 0 {
			h.xidSeen[s.UUID] = max(h.xidSeen[s.UUID], s.XIDs[n-1].Seq)
		}
	}
	return out
}

// reading converts a backend sample for the health model (without XIDs:
// see readings).
func reading(s gpu.Sample) health.Reading {
	return health.Reading{Index: s.Index, UUID: s.UUID,
		TempC: s.TempC, PowerW: s.PowerW, UtilPct: s.UtilPct, HasTemp: s.HasTemp, HasPower: s.HasPower, HasUtil: s.HasUtil,
		ECCCorrected: uint64(s.ECCCorrected), ECCUncorrected: uint64(s.ECCUncorrected), HasECC: s.HasECC,
		RowRemapPending: s.RowRemapPending, RowRemapFailed: s.RowRemapFailed, HasRowRemap: s.HasRowRemap,
		NVLinkUp: s.NVLinkUp, NVLinkErrors: uint64(s.NVLinkErrors), HasNVLink: s.HasNVLink,
		PCIeWidth: s.PCIeWidth, PCIeMaxWidth: s.PCIeMaxWidth, PCIeGen: s.PCIeGen, PCIeMaxGen: s.PCIeMaxGen, HasPCIe: s.HasPCIe,
		Throttle: s.Throttle, HasThrottle: s.HasThrottle}
}
