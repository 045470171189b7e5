package node

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// fakeSampler returns readings the test sets, with an XID log like the
// NVML backend's.
type fakeSampler struct {
	mu      sync.Mutex
	samples []gpu.Sample
	seq     uint64
}

func (f *fakeSampler) Sample(context.Context) ([]gpu.Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []gpu.Sample
	for _, s := range f.samples {
		if s.UUID != "" {
			s.XIDs = slices.Clone(s.XIDs)
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakeSampler) set(i int, mod func(*gpu.Sample)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mod(&f.samples[i])
}

// xid raises an XID on GPU i.
func (f *fakeSampler) xid(i, x int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.samples[i].XIDs = append(f.samples[i].XIDs, gpu.XIDEvent{Seq: f.seq, XID: x})
}

func healthySamples() []gpu.Sample {
	var out []gpu.Sample
	for i, u := range []string{"GPU-a", "GPU-b", "GPU-c"} {
		out = append(out, gpu.Sample{Index: i, UUID: u, TempC: 40, PowerW: 300, HasTemp: true, HasPower: true, HasXID: true, HasECC: true,
			NVLinkUp: 18, HasNVLink: true, HasRowRemap: true})
	}
	return out
}

// fakeProber fails while err is set and counts its probes.
type fakeProber struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (p *fakeProber) Probe(context.Context, int, string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return p.err
}

func (p *fakeProber) setErr(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

func lastBeat(e *env) ([]spec.GPUProblem, []spec.GPUEvent) {
	hbs := e.fc.Heartbeats()
	var evs []spec.GPUEvent
	for _, hb := range hbs {
		evs = append(evs, hb.GPUEvents...)
	}
	if len(hbs) == 0 {
		return nil, nil
	}
	return hbs[len(hbs)-1].GPUProblems, evs
}

func kinds(evs []spec.GPUEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind+":"+e.Code+"@"+e.UUID)
	}
	return out
}

// TestHealthFaultProbeReadmit: a hot GPU is reported once it stayed hot
// for the sustain time and an XID 79 at once, each with its triage; an
// application XID only in the history of nothing (ignored). Once the
// readings are clean for probe_after, a failed probe keeps the GPU out
// and a clean one readmits it, every step in the heartbeats' events.
func TestHealthFaultProbeReadmit(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	prober := &fakeProber{err: errors.New("dcgmi diag: memory test failed")}
	cfg := HealthConfig{Interval: 10 * time.Second, Triage: health.DefaultTriage(), Prober: prober,
		Limits: health.Limits{TempMaxC: 85, PowerMaxW: 700, Sustain: time.Minute, ProbeAfter: 20 * time.Second, ECCUncorrectedMax: 0}}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, cfg)} })
	sampled := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	}
	sampled("first health sample")
	fs.set(0, func(s *gpu.Sample) { s.TempC = 90 })
	fs.xid(1, 13)                     // the application's: ignored
	e.clock.Advance(10 * time.Second) // hot since now
	sampled("second sample")
	e.clock.Advance(50 * time.Second) // 50s hot: not yet
	sampled("third sample")
	if p := e.agent.health.current(); len(p) != 0 {
		t.Fatalf("problems after 50s hot = %v, want none before the 1m sustain", p)
	}
	fs.xid(1, 79)
	e.clock.Advance(10 * time.Second)
	want := []spec.GPUProblem{
		{UUID: "GPU-a", Problem: "gpud:temp gpu0 temperature 90C at or above 85C for 1m0s", Code: "temp", Class: "fatal", Action: "drain-gpu"},
		{UUID: "GPU-b", Problem: "gpud:xid79 gpu1 XID 79 GPU has fallen off the bus", Code: "xid79", Class: "fatal", Action: "drain-gpu"},
	}
	waitFor(t, "heartbeat with both problems", func() bool { p, _ := lastBeat(e); return cmp.Equal(want, p) }, e.on()...)

	// Cooled down, no more XIDs: still out until a probe passes.
	fs.set(0, func(s *gpu.Sample) { s.TempC = 60 })
	sampled("next sample")
	e.clock.Advance(10 * time.Second) // clean since now
	sampled("clean sample")
	e.clock.Advance(10 * time.Second)
	sampled("clean 10s")
	if p := e.agent.health.current(); len(p) != 2 {
		t.Fatalf("problems %v after 10s clean, want both still out (probe after 20s)", p)
	}
	e.clock.Advance(10 * time.Second) // 20s clean: probes run, and fail
	waitFor(t, "probes failed", func() bool {
		_, evs := lastBeat(e)
		return slices.Contains(kinds(evs), "probe-failed:probe-failed@GPU-a") && slices.Contains(kinds(evs), "probe-failed:probe-failed@GPU-b")
	}, e.on()...)
	prober.setErr(nil)
	for range 3 { // another 20s clean: probes pass
		sampled("sample after the failed probe")
		e.clock.Advance(10 * time.Second)
	}
	waitFor(t, "readmitted, no problems left", func() bool {
		p, evs := lastBeat(e)
		return len(p) == 0 && slices.Contains(kinds(evs), "readmit:probe-failed,temp@GPU-a") && slices.Contains(kinds(evs), "readmit:probe-failed,xid79@GPU-b")
	}, e.on()...)
	_, evs := lastBeat(e)
	wantKinds := []string{"fault:temp@GPU-a", "fault:xid79@GPU-b", "probe-failed:probe-failed@GPU-a", "probe-failed:probe-failed@GPU-b",
		"readmit:probe-failed,temp@GPU-a", "readmit:probe-failed,xid79@GPU-b"}
	if diff := cmp.Diff(wantKinds, kinds(evs), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("health events, each delivered once (-want +got):\n%s", diff)
	}
}

// TestHealthHoldsWhatTheControllerHoldsOut: an agent that (re)starts
// while the controller holds a GPU out for gpud probes it before it
// comes back, rather than forgetting it; a vanished GPU is a fault.
func TestHealthHoldsWhatTheControllerHoldsOut(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	cfg := HealthConfig{Interval: 10 * time.Second, Limits: health.Limits{ProbeAfter: 15 * time.Second}}
	e := newEnv(t, func(e *env) {
		e.fc.gpusOut = []spec.GPUProblem{{UUID: "GPU-c", Problem: "gpud:xid79 gpu2 XID 79", Code: "xid79", Action: "drain-gpu"}}
		e.opts = []Option{WithHealth(fs, cfg)}
	})
	waitFor(t, "GPU-c held", func() bool {
		p, _ := lastBeat(e) // the agent's fields are its own until a heartbeat shows them
		return len(p) == 1 && p[0].UUID == "GPU-c"
	}, e.on()...)
	fs.set(0, func(s *gpu.Sample) { s.UUID = "" }) // GPU-a vanishes
	for range 3 {
		waitFor(t, "sample", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
		e.clock.Advance(10 * time.Second)
	}
	waitFor(t, "GPU-c readmitted, GPU-a out", func() bool {
		p, evs := lastBeat(e)
		return len(p) == 1 && p[0].Code == "gpu-missing" && slices.Contains(kinds(evs), "readmit:xid79@GPU-c")
	}, e.on()...)
}

// TestStartGate: a job whose partition asks for the quick start gate does
// not start on a GPU whose fresh reading shows a fault the samples have
// not yet taken (an XID raised since): the job is handed back REQUEUED
// with the GPU in GateFailed, nothing is started, and the GPU is latched
// out (the heartbeat's problems and a "start gate" fault in its history).
// A job on healthy GPUs passes it and starts; with the gate off a job
// starts whatever the reading.
func TestStartGate(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	cfg := HealthConfig{Interval: time.Hour, Limits: health.Limits{ProbeAfter: time.Hour}}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, cfg)} })
	waitFor(t, "first health sample", func() bool { return e.clock.Waiters() >= 1 }, e.on()...)
	fs.xid(1, 79) // GPU-b falls off the bus after the sample
	one := func(id spec.JobID, gate string, gpus ...string) api.Assignment {
		a := asg(id, e.home)
		a.Alloc.Nodes = []spec.NodeAlloc{{Node: "node-1", Rank: 0, CPUs: 1, MemMiB: 1024, GPUs: gpus}}
		a.Gate = gate
		return a
	}
	gated := one(7, gateQuick, "GPU-a", "GPU-b")
	e.setAndWait(t, gated)
	ev := e.waitExited(t, gated.Alloc.ID)
	wantProblem := spec.GPUProblem{UUID: "GPU-b", Problem: "gpud:xid79 gpu1 XID 79 GPU has fallen off the bus", Code: "xid79", Class: "fatal", Action: "drain-gpu"}
	if ev.State != spec.StateRequeued || !strings.Contains(ev.Reason, "start gate on node") || !cmp.Equal([]spec.GPUProblem{wantProblem}, ev.GateFailed) {
		t.Fatalf("exit event %+v, want REQUEUED by the start gate with GPU-b failed", ev)
	}
	if _, ok := e.rt.Status(ContainerID(7, 1, e.agent.cfg.Name)); ok {
		t.Error("the gated job's container was created")
	}
	waitFor(t, "heartbeat with GPU-b out", func() bool {
		p, evs := lastBeat(e)
		return cmp.Equal([]spec.GPUProblem{wantProblem}, p) && slices.Contains(kinds(evs), "fault:xid79@GPU-b")
	}, e.on()...)
	_, evs := lastBeat(e)
	if !strings.HasSuffix(evs[len(evs)-1].Detail, "(start gate)") {
		t.Errorf("history event %+v, want its detail to say the start gate found it", evs[len(evs)-1])
	}

	healthy := one(8, gateQuick, "GPU-a", "GPU-c")
	off := one(9, "off", "GPU-b")
	e.setAndWait(t, healthy, off)
	e.waitStarted(t, ContainerID(8, 1, e.agent.cfg.Name))
	e.waitStarted(t, ContainerID(9, 1, e.agent.cfg.Name))
}

// blockProber blocks until its ctx ends, telling which GPU it started on.
type blockProber struct{ started chan string }

func (p *blockProber) Probe(ctx context.Context, _ int, uuid string) error {
	p.started <- uuid
	<-ctx.Done()
	return ctx.Err()
}

// TestBackgroundDiag: idle GPUs are diagnosed one at a time, each once
// per diag interval: a pass is a "diag" event in the history, a failure a
// diag-failed fault that takes the GPU out.
func TestBackgroundDiag(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	prober := &fakeProber{}
	cfg := HealthConfig{Interval: 10 * time.Second, Limits: health.Limits{ProbeAfter: time.Hour}, DiagInterval: time.Hour, Diag: prober}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, cfg)} })
	diagOf := func(uuid string) func() bool {
		return func() bool { _, evs := lastBeat(e); return slices.Contains(kinds(evs), "diag:diag@"+uuid) }
	}
	waitFor(t, "GPU-a diagnosed", diagOf("GPU-a"), e.on()...)
	prober.setErr(errors.New("dcgmi diag -r 1 -i 1: exit status 226: Memory test failed"))
	waitFor(t, "loop waiting", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "GPU-b failed its diagnostic and is out", func() bool {
		p, evs := lastBeat(e)
		return len(p) == 1 && p[0].UUID == "GPU-b" && p[0].Code == "diag-failed" && slices.Contains(kinds(evs), "fault:diag-failed@GPU-b")
	}, e.on()...)
	prober.setErr(nil)
	waitFor(t, "loop waiting", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(10 * time.Second)
	waitFor(t, "GPU-c diagnosed", diagOf("GPU-c"), e.on()...)
	for range 3 { // nothing more is due within the hour: GPU-b is out, the others done
		waitFor(t, "loop waiting", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
		e.clock.Advance(10 * time.Second)
	}
	waitFor(t, "loop waiting", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	prober.mu.Lock()
	calls := prober.calls
	prober.mu.Unlock()
	if calls != 3 {
		t.Errorf("%d diagnostics within the hour, want 3 (one per GPU)", calls)
	}
}

// TestBackgroundDiagEvictedByJob: a job placed on a GPU under diagnosis
// ends the diagnostic at once (no result recorded) and starts; the next
// diagnostic goes to an idle GPU, never the held one.
func TestBackgroundDiagEvictedByJob(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	bp := &blockProber{started: make(chan string, 4)}
	cfg := HealthConfig{Interval: 10 * time.Second, Limits: health.Limits{ProbeAfter: time.Hour}, DiagInterval: time.Hour, Diag: bp}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, cfg)} })
	if got := <-bp.started; got != "GPU-a" {
		t.Fatalf("first diagnostic on %s, want GPU-a", got)
	}
	a := asg(7, e.home)
	a.Alloc.Nodes = []spec.NodeAlloc{{Node: "node-1", Rank: 0, CPUs: 1, MemMiB: 1024, GPUs: []string{"GPU-a"}}}
	a.Gate = gateQuick
	// No time limit: the job's deadline would be a second timer on the
	// fake clock, armed just after its container starts, and the wait
	// below for the loop's tick alone then failed whenever the runner
	// armed it first (2 runs in 50 under -race).
	a.Job.TimeLimit = 0
	e.setAndWait(t, a)
	e.waitStarted(t, ContainerID(7, 1, e.agent.cfg.Name))
	waitFor(t, "loop waiting", func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	e.clock.Advance(10 * time.Second)
	select {
	case got := <-bp.started:
		if got != "GPU-b" {
			t.Errorf("diagnostic after the job took GPU-a on %s, want GPU-b", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no diagnostic on an idle GPU after the eviction")
	}
	if _, evs := lastBeat(e); slices.ContainsFunc(evs, func(ev spec.GPUEvent) bool { return ev.UUID == "GPU-a" }) {
		t.Errorf("history %v: the evicted diagnostic of GPU-a recorded something", kinds(evs))
	}
}

// TestHealthNICDownAndBack: an RDMA NIC registered usable whose port goes
// down is reported out of service with the next heartbeat (the whole list,
// nic_report set); it comes back once it has read usable for ProbeAfter.
func TestHealthNICDownAndBack(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	var mu sync.Mutex
	state := map[string]string{"mlx5_0": "", "mlx5_1": ""}
	nics := func(context.Context) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(state), nil
	}
	set := func(name, what string) {
		mu.Lock()
		defer mu.Unlock()
		state[name] = what
	}
	cfg := HealthConfig{Interval: 10 * time.Second, Triage: health.DefaultTriage(), NICs: nics,
		Limits: health.Limits{ProbeAfter: 20 * time.Second, ECCUncorrectedMax: 0}}
	e := newEnv(t, func(e *env) {
		e.opts = []Option{WithHealth(fs, cfg)}
		e.cfgExtra = func(c *Config) {
			c.Inventory.NICs = []spec.NIC{{Name: "mlx5_0", Active: true}, {Name: "mlx5_1", Active: true}, {Name: "mlx5_2"}}
		}
	})
	sampled := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	}
	nicBeat := func() (bool, []spec.NICProblem) {
		hbs := e.fc.Heartbeats()
		if len(hbs) == 0 {
			return false, nil
		}
		return hbs[len(hbs)-1].NICReport, hbs[len(hbs)-1].NICProblems
	}
	sampled("first health sample")
	if ok, p := e.agent.health.nicReport(); !ok || len(p) != 0 {
		t.Fatalf("healthy NICs: report %v problems %v, want a report of none", ok, p)
	}
	set("mlx5_1", "port 1 DOWN")
	e.clock.Advance(10 * time.Second)
	want := []spec.NICProblem{{Name: "mlx5_1", Problem: "gpud:nic-down mlx5_1 port 1 DOWN"}}
	waitFor(t, "heartbeat with the NIC out", func() bool { ok, p := nicBeat(); return ok && cmp.Equal(want, p) }, e.on()...)

	set("mlx5_1", "")
	sampled("next sample")
	e.clock.Advance(10 * time.Second) // clean since now
	sampled("clean sample")
	e.clock.Advance(10 * time.Second)
	sampled("clean 10s")
	if _, p := e.agent.health.nicReport(); len(p) != 1 {
		t.Fatalf("NIC problems %v after 10s clean, want still out (probe after 20s)", p)
	}
	e.clock.Advance(10 * time.Second)
	waitFor(t, "heartbeat with the NIC back", func() bool { ok, p := nicBeat(); return ok && len(p) == 0 && len(e.fc.Heartbeats()) > 1 }, e.on()...)
	// A NIC that vanishes from sysfs goes out too; one never usable here
	// (mlx5_2) is not reported.
	set("mlx5_0", "")
	mu.Lock()
	delete(state, "mlx5_0")
	mu.Unlock()
	sampled("sample before the NIC vanishes")
	e.clock.Advance(10 * time.Second)
	waitFor(t, "heartbeat with the vanished NIC", func() bool {
		_, p := nicBeat()
		return len(p) == 1 && p[0].Name == "mlx5_0" && strings.Contains(p[0].Problem, "vanished")
	}, e.on()...)
}

// TestHealthMIGInstance: an XID 94 the backend attributes to a MIG
// instance of GPU 1 takes that instance alone out (the problem names the
// instance and its GPU; the GPU is no problem and a job on it passes its
// gate), its event is in the GPU's history by serial; after probe_after
// clean, the instance's probe (its GPU's quick checks; no deep
// diagnostic, the prober is never called) readmits it.
func TestHealthMIGInstance(t *testing.T) {
	fs := &fakeSampler{samples: healthySamples()}
	prober := &fakeProber{err: errors.New("a deep diagnostic ran on a GPU whose other instances run jobs")}
	cfg := HealthConfig{Interval: 10 * time.Second, Triage: health.DefaultTriage(), Prober: prober,
		Limits: health.Limits{TempMaxC: 85, Sustain: time.Minute, ProbeAfter: 20 * time.Second}}
	e := newEnv(t, func(e *env) { e.opts = []Option{WithHealth(fs, cfg)} })
	sampled := func(what string) {
		t.Helper()
		waitFor(t, what, func() bool { return e.clock.Waiters() == 1 }, e.on()...)
	}
	sampled("first health sample")
	fs.mu.Lock()
	fs.seq++
	fs.samples[1].XIDs = append(fs.samples[1].XIDs, gpu.XIDEvent{Seq: fs.seq, XID: 94, MIG: "MIG-b1"})
	fs.mu.Unlock()
	e.clock.Advance(10 * time.Second)
	want := []spec.GPUProblem{{UUID: "MIG-b1", GPU: "GPU-b", Problem: "gpud:xid94 gpu1 XID 94 contained ECC error on MIG instance MIG-b1",
		Code: "xid94", Class: "fatal", Action: "drain-slice"}}
	waitFor(t, "heartbeat with the instance's problem", func() bool { p, _ := lastBeat(e); return cmp.Equal(want, p) }, e.on()...)
	if fs := e.agent.health.gateStart(context.Background(), []string{"GPU-b"}); len(fs) != 0 {
		t.Fatalf("gate of the faulted instance's GPU: %+v, want it passing (its other instances take jobs)", fs)
	}
	for range 3 { // 20s clean: the instance's probe passes
		sampled("clean sample")
		e.clock.Advance(10 * time.Second)
	}
	waitFor(t, "the instance readmitted", func() bool {
		p, evs := lastBeat(e)
		return len(p) == 0 && slices.Contains(kinds(evs), "readmit:xid94@MIG-b1")
	}, e.on()...)
	_, evs := lastBeat(e)
	if diff := cmp.Diff([]string{"fault:xid94@MIG-b1", "readmit:xid94@MIG-b1"}, kinds(evs)); diff != "" {
		t.Errorf("health events (-want +got):\n%s", diff)
	}
	for _, ev := range evs {
		if ev.GPU != 1 {
			t.Errorf("event %s of MIG-b1 names GPU %d, want its GPU 1", ev.Kind, ev.GPU)
		}
	}
	prober.mu.Lock()
	defer prober.mu.Unlock()
	if prober.calls != 0 {
		t.Errorf("the deep prober ran %d times for a MIG instance's probe, want none", prober.calls)
	}
}
