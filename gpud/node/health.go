package node

import (
	"cmp"
	"context"
	"fmt"
	"maps"
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
	// DiagInterval is how often each idle GPU gets a background
	// diagnostic (0: never): the model's quick checks on a fresh sample,
	// then Diag where set. One GPU at a time, never on a GPU a job holds,
	// and a job placed on a GPU under diagnosis ends the diagnosis at once.
	DiagInterval time.Duration
	// Diag is the deep check of a background diagnostic (dcgmi diag at
	// [health] diag_level, at the lowest CPU priority); nil: quick checks.
	Diag GPUProber
	// NICs reads the node's RDMA NICs each sample (nil: not checked): by
	// name, "" for a usable NIC (a port ACTIVE, a verbs device) or what
	// is wrong ("port 1 DOWN"). A NIC registered usable that reads wrong
	// is reported out of service; it comes back after reading usable for
	// Limits.ProbeAfter.
	NICs func(ctx context.Context) (map[string]string, error)
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
	// held counts the runners holding each GPU (hold): no diagnostic
	// starts on a held GPU, and one running is ended.
	held map[string]int
	// diag is the background diagnostic under way (nil: none); lastDiag
	// when each GPU's last one ended (run loop only, but for diag,
	// which hold also reads under mu).
	diag     *diagRun
	lastDiag map[string]time.Time
	diagDone chan diagResult
	// nicOut: the RDMA NICs held out of service, by name, with their
	// reason; nicClean since when each has read usable again.
	nicOut   map[string]string
	nicClean map[string]time.Time
}

// diagRun is one GPU's background diagnostic under way.
type diagRun struct {
	uuid   string
	cancel context.CancelFunc
	done   chan struct{}
}

type diagResult struct {
	run  *diagRun
	err  error
	took time.Duration
	// ended: cut short (a job took the GPU, or the agent stops).
	ended bool
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
		probed: make(chan probeResult, 1), probing: map[string]bool{}, xidSeen: map[string]uint64{},
		held: map[string]int{}, lastDiag: map[string]time.Time{}, diagDone: make(chan diagResult, 1),
		nicOut: map[string]string{}, nicClean: map[string]time.Time{}}
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
		g := h.a.gpus[cmp.Or(p.GPU, p.UUID)] // a MIG instance's: its GPU's
		code, _, detail, ok := health.ParseReason(p.Problem)
		if !ok {
			code, detail = "held", p.Problem
		}
		h.model.Hold(health.Finding{GPU: g.Index, UUID: p.UUID, Parent: p.GPU, Code: cmp.Or(p.Code, code), Class: health.Class(p.Class),
			Action: health.Action(cmp.Or(p.Action, string(health.DrainGPU))), Detail: detail})
	}
	h.problems = problemsOf(h.model.Faults())
}

// run samples every Interval until ctx ends, and waits for its probes
// and diagnostics.
func (h *healthWatcher) run(ctx context.Context) {
	defer h.probes.Wait()
	for {
		h.check(ctx)
		h.startDiag(ctx)
		tick := h.clock.After(h.cfg.Interval)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case r := <-h.probed:
				h.probeDone(r)
			case r := <-h.diagDone:
				h.diagEnded(r)
			case <-tick:
				break wait
			}
		}
	}
}

// hold marks uuids as held by a job from now until release is called:
// a background diagnostic of one of them ends at once (hold waits for
// it, so the job never shares its GPU with one) and none starts. Real
// work always wins over diagnostics.
func (h *healthWatcher) holdGPUs(uuids []string) (release func()) {
	if h == nil || len(uuids) == 0 {
		return func() {}
	}
	h.mu.Lock()
	for _, u := range uuids {
		h.held[u]++
	}
	d := h.diag
	if d != nil && slices.Contains(uuids, d.uuid) {
		d.cancel()
	} else {
		d = nil
	}
	h.mu.Unlock()
	if d != nil {
		<-d.done
		h.a.log.Info("background GPU diagnostic ended: a job takes the GPU", "gpu_uuid", d.uuid)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, u := range uuids {
				if h.held[u]--; h.held[u] <= 0 {
					delete(h.held, u)
				}
			}
		})
	}
}

// startDiag starts the background diagnostic of the idle GPU whose last
// one is oldest, if it is due (DiagInterval) and none runs: a GPU no job
// holds, in service on this node (not faulted, not being probed).
func (h *healthWatcher) startDiag(ctx context.Context) {
	if h.cfg.DiagInterval <= 0 {
		return
	}
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.diag != nil {
		return
	}
	var pick string
	var index int
	// The inventory by UUID never changes (cfg.Inventory does, under
	// invMu, with the MIG layout); by index, so the order is stable.
	gpus := slices.SortedFunc(maps.Values(h.a.gpus), func(a, b spec.GPU) int { return cmp.Compare(a.Index, b.Index) })
	for _, g := range gpus {
		u := g.UUID
		last, ok := h.lastDiag[u]
		if h.held[u] > 0 || h.probing[u] || h.model.Faulted(u) || ok && now.Sub(last) < h.cfg.DiagInterval {
			continue
		}
		if pick == "" || last.Before(h.lastDiag[pick]) {
			pick, index = u, g.Index
		}
	}
	if pick == "" {
		return
	}
	dctx, cancel := context.WithCancel(ctx)
	d := &diagRun{uuid: pick, cancel: cancel, done: make(chan struct{})}
	h.diag = d
	h.probes.Add(1)
	go func() {
		defer h.probes.Done()
		defer close(d.done)
		defer cancel()
		began := time.Now()
		err := h.diagnose(dctx, index, pick)
		res := diagResult{run: d, err: err, took: time.Since(began), ended: dctx.Err() != nil}
		select {
		case h.diagDone <- res:
		case <-ctx.Done():
		}
	}()
}

// diagnose is one GPU's background diagnostic: the quick checks of a
// fresh sample, then the deep check (Diag) where configured.
func (h *healthWatcher) diagnose(ctx context.Context, index int, uuid string) error {
	if err := h.quickCheck(ctx, uuid); err != nil {
		return err
	}
	if h.cfg.Diag != nil {
		return h.cfg.Diag.Probe(ctx, index, uuid)
	}
	return nil
}

// diagEnded records a background diagnostic's result: a pass is a
// "diag" event in the GPU's history, a failure a diag-failed fault (the
// GPU leaves service and comes back after a clean probe); one a job
// evicted (or the agent's stop ended) records nothing and runs again
// when the GPU is next idle.
func (h *healthWatcher) diagEnded(r diagResult) {
	now := h.clock.Now()
	h.mu.Lock()
	h.diag = nil
	g := h.a.gpus[r.run.uuid]
	if r.ended {
		h.mu.Unlock()
		return
	}
	h.lastDiag[r.run.uuid] = now
	what := "quick checks"
	if d, ok := h.cfg.Diag.(fmt.Stringer); ok {
		what += " and " + d.String()
	}
	if r.err == nil {
		h.addEvent(now, spec.GPUEventDiag, health.Finding{GPU: g.Index, UUID: r.run.uuid, Code: spec.GPUEventDiag,
			Detail: fmt.Sprintf("passed %s in %s", what, r.took.Round(time.Millisecond))})
		h.mu.Unlock()
		h.a.log.Info("background GPU diagnostic passed", "gpu", g.Index, "gpu_uuid", r.run.uuid, "took", r.took)
		h.wake()
		return
	}
	f := h.model.DiagFailed(g.Index, r.run.uuid, r.err.Error())
	h.addEvent(now, spec.GPUEventFault, f)
	h.problems = problemsOf(h.model.Faults())
	h.mu.Unlock()
	h.a.log.Warn("background GPU diagnostic failed; taking the GPU out of service", "gpu", g.Index, "gpu_uuid", r.run.uuid, "err", r.err)
	h.wake()
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
	if h.checkNICs(ctx, now) || len(rep.New) > 0 {
		h.wake()
	}
}

// checkNICs reads the RDMA NICs and reports whether the NICs held out
// changed: a NIC registered usable that reads wrong goes out at once
// ("gpud:nic-down NAME what"), and one out that reads usable for
// ProbeAfter comes back (its reading is the probe: an ACTIVE port with
// its verbs device).
func (h *healthWatcher) checkNICs(ctx context.Context, now time.Time) bool {
	if h.cfg.NICs == nil {
		return false
	}
	states, err := h.cfg.NICs(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.a.log.Warn("read RDMA NIC health; keeping the last verdict", "err", err)
		}
		return false
	}
	probeAfter := h.cfg.Limits.ProbeAfter
	if probeAfter <= 0 {
		probeAfter = time.Minute
	}
	h.a.invMu.Lock()
	nics := slices.Clone(h.a.cfg.Inventory.NICs)
	h.a.invMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	for _, n := range nics {
		if !n.Active {
			continue // never usable here: nothing to take out
		}
		what, ok := states[n.Name]
		if !ok {
			what = "vanished from sysfs"
		}
		switch {
		case what != "":
			delete(h.nicClean, n.Name)
			if _, out := h.nicOut[n.Name]; !out {
				h.nicOut[n.Name] = health.ReasonPrefix + "nic-down " + n.Name + " " + what
				h.a.log.Warn("RDMA NIC out of service", "nic", n.Name, "problem", what)
				changed = true
			}
		case h.nicOut[n.Name] != "":
			since, ok := h.nicClean[n.Name]
			if !ok {
				h.nicClean[n.Name] = now
			} else if now.Sub(since) >= probeAfter {
				h.a.log.Info("RDMA NIC back in service after a clean probe", "nic", n.Name, "was", h.nicOut[n.Name])
				delete(h.nicOut, n.Name)
				delete(h.nicClean, n.Name)
				changed = true
			}
		}
	}
	return changed
}

// nicReport returns whether the agent checks its NICs and the ones it
// holds out of service now.
func (h *healthWatcher) nicReport() (bool, []spec.NICProblem) {
	if h == nil || h.cfg.NICs == nil {
		return false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []spec.NICProblem
	for _, name := range slices.Sorted(maps.Keys(h.nicOut)) {
		out = append(out, spec.NICProblem{Name: name, Problem: h.nicOut[name]})
	}
	return true, out
}

// startProbe probes a faulted GPU whose readings have been clean: a
// fresh sample must show it present and passing the gate's checks, then
// the deep check (if any) must pass.
func (h *healthWatcher) startProbe(ctx context.Context, uuid string) {
	h.mu.Lock()
	parent := h.model.Parent(uuid)
	h.mu.Unlock()
	g := h.a.gpus[cmp.Or(parent, uuid)]
	if parent != "" {
		// A MIG instance: the quick checks of its GPU (which must not be
		// faulted itself) and no XID attributed to it since; no deep
		// diagnostic, which needs the whole GPU while its other
		// instances run jobs.
		h.probes.Add(1)
		go func() {
			defer h.probes.Done()
			h.mu.Lock()
			faulted := h.model.Faulted(parent)
			h.mu.Unlock()
			err := h.quickCheck(ctx, parent)
			if err == nil && faulted {
				err = fmt.Errorf("its GPU %s is out of service", parent)
			}
			select {
			case h.probed <- probeResult{uuid: uuid, err: err}:
			case <-ctx.Done():
			}
		}()
		return
	}
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
	if err := h.quickCheck(ctx, uuid); err != nil {
		return err
	}
	if h.cfg.Prober != nil {
		return h.cfg.Prober.Probe(ctx, index, uuid)
	}
	return nil
}

// quickCheck judges a fresh sample of uuid with the start gate's checks,
// as if the GPU were sound (its latched faults left aside).
func (h *healthWatcher) quickCheck(ctx context.Context, uuid string) error {
	samples, err := h.sampler.Sample(ctx)
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	h.mu.Lock()
	readings := h.readings(samples, false)
	fs := health.New(h.cfg.Triage, h.cfg.Limits, nil).Gate([]string{uuid}, readings)
	h.mu.Unlock()
	if len(fs) > 0 {
		return fmt.Errorf("quick check: %s", fs[0].Reason())
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
	parent := h.model.Parent(r.uuid)
	cleared := h.model.Readmit(r.uuid)
	g := h.a.gpus[cmp.Or(parent, r.uuid)]
	var codes []string
	for _, f := range cleared {
		codes = append(codes, f.Code)
	}
	h.addEvent(now, spec.GPUEventReadmit, health.Finding{GPU: g.Index, UUID: r.uuid, Parent: parent, Code: strings.Join(codes, ","),
		Detail: "clean probe after " + strings.Join(codes, ", ")})
	h.problems = slices.DeleteFunc(h.problems, func(p spec.GPUProblem) bool { return p.UUID == r.uuid })
	h.mu.Unlock()
	h.a.log.Info("GPU passed its readmission probe", "gpu", g.Index, "gpu_uuid", r.uuid, "cleared", strings.Join(codes, ","))
	h.wake()
}

// addEvent queues a history event; callers hold mu.
func (h *healthWatcher) addEvent(now time.Time, kind string, f health.Finding) {
	g := h.a.gpus[cmp.Or(f.Parent, f.UUID)]
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
		out = append(out, spec.GPUProblem{UUID: f.UUID, GPU: f.Parent, Problem: f.Reason(), Code: f.Code, Class: string(f.Class), Action: string(f.Action)})
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
			switch {
			case x.Seq <= h.xidSeen[s.UUID]:
			case x.MIG != "":
				if out[i].MIGXIDs == nil {
					out[i].MIGXIDs = map[string][]int{}
				}
				out[i].MIGXIDs[x.MIG] = append(out[i].MIGXIDs[x.MIG], x.XID)
			default:
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
		RowRemapPending: s.RowRemapPending, RowRemapFailed: s.RowRemapFailed, RowsRemapped: uint64(s.RowsRemapped), HasRowRemap: s.HasRowRemap,
		NVLinkUp: s.NVLinkUp, NVLinkErrors: uint64(s.NVLinkErrors), HasNVLink: s.HasNVLink,
		PCIeWidth: s.PCIeWidth, PCIeMaxWidth: s.PCIeMaxWidth, PCIeGen: s.PCIeGen, PCIeMaxGen: s.PCIeMaxGen, HasPCIe: s.HasPCIe,
		Throttle: s.Throttle, HasThrottle: s.HasThrottle}
}
