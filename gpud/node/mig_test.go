package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/gpu/nvml"
)

// migEnv is an agent whose GPU 0 and 1 are mock DGX H100 GPUs in dynamic
// MIG mode (go-nvml's mock, made to behave like hardware by
// runtime/gpu/nvml).
type migEnv struct {
	*env
	mig gpu.MIG
	gpu []gpu.Device
}

func newMIGEnv(t *testing.T) *migEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP (loud): mock MIG device nodes need root (mknod)")
	}
	ctx := context.Background()
	devs, err := nvml.Open(ctx, "mock:dgx-h100", nvml.WithMockSeed(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devs.Close() })
	inv, err := devs.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := devs.(gpu.MIG)
	e := &migEnv{env: &env{fc: newFakeController(t), rt: fake.New(), clock: newFakeClock(), dir: t.TempDir()}, mig: m, gpu: inv[:2]}
	e.rt.SetClock(e.clock.Now)
	devRoot, cdiDir := filepath.Join(e.dir, "dev"), filepath.Join(e.dir, "cdi")
	if err := gpu.MakeMockDeviceNodes(devRoot, inv); err != nil {
		t.Fatal(err)
	}
	modes := map[string]string{}
	var gpus []spec.GPU
	for _, d := range e.gpu {
		if err := m.SetMIGMode(ctx, d.UUID, true); err != nil {
			t.Fatal(err)
		}
		modes[d.UUID] = spec.MIGDynamic
		gpus = append(gpus, spec.GPU{Index: d.Index, UUID: d.UUID, Model: "h100", MIGEnabled: true, MIGMode: spec.MIGDynamic,
			CDIName: "nvidia.com/gpu=" + d.UUID})
	}
	mc := MIGConfig{MIG: m, Modes: modes, CDIDir: cdiDir, CDI: gpu.CDIOptions{Name: "node-1", DevRoot: devRoot}, MockDevices: true}
	e.agent, e.stop = startTestAgent(t, func(c *Config) {
		c.StateDir = e.dir
		c.Inventory.GPUs = gpus
	}, e.fc.Client, e.rt, WithClock(e.clock), WithMIG(mc))
	return e
}

func (e *migEnv) instances(t *testing.T, gpuUUID string) []gpu.MIGDevice {
	t.Helper()
	st, err := e.mig.MIGState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range st {
		if g.UUID == gpuUUID {
			return g.Instances
		}
	}
	return nil
}

// migAlloc is a single-node part holding slices.
func migAlloc(slices ...spec.MIGSlice) spec.NodeAlloc {
	return spec.NodeAlloc{Node: "node-1", CPUs: 1, MemMiB: 64, MIG: slices}
}

func TestMIGInstancesMadeForTheJobAndDestroyedAfter(t *testing.T) {
	e := newMIGEnv(t)
	g0 := e.gpu[0].UUID
	a := asg(7, e.home)
	a.Alloc.Nodes = []spec.NodeAlloc{migAlloc(
		spec.MIGSlice{GPU: g0, Profile: "1g.10gb", Placement: spec.MIGPlacement{Start: 6, Size: 1}},
		spec.MIGSlice{GPU: g0, Profile: "1g.10gb", Placement: spec.MIGPlacement{Start: 4, Size: 1}})}
	e.fc.Set(a)
	e.waitStarted(t, cid)

	insts := e.instances(t, g0)
	if len(insts) != 2 {
		t.Fatalf("GPU 0 has %d MIG instances while the job runs, want 2", len(insts))
	}
	cfg, _ := e.rt.Config(cid)
	var uuids []string
	for _, d := range insts {
		uuids = append(uuids, d.UUID)
		if !slices.Contains(cfg.CDIDevices, "nvidia.com/mig="+d.UUID) {
			t.Errorf("CDI devices %v lack nvidia.com/mig=%s", cfg.CDIDevices, d.UUID)
		}
	}
	if len(cfg.CDIDevices) != 2 {
		t.Errorf("CDI devices %v, want exactly the two MIG instances", cfg.CDIDevices)
	}
	var visible string
	for _, kv := range cfg.Env {
		if v, ok := strings.CutPrefix(kv, "CUDA_VISIBLE_DEVICES="); ok {
			visible = v
		}
	}
	got := strings.Split(visible, ",")
	slices.Sort(got)
	slices.Sort(uuids)
	if !slices.Equal(got, uuids) {
		t.Errorf("CUDA_VISIBLE_DEVICES=%s, want the MIG UUIDs %v", visible, uuids)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "cdi", "node-1.mig.json")); err != nil {
		t.Errorf("MIG CDI spec: %v", err)
	}

	e.rt.Exit(cid, runtime.ExitStatus{})
	if ev := e.waitExited(t, "a7"); ev.State != spec.StateCompleted {
		t.Fatalf("exit event %+v, want COMPLETED", ev)
	}
	waitFor(t, "instances destroyed", func() bool { return len(e.instances(t, g0)) == 0 }, e.on()...)
}

func TestMIGCreateFailureRequeues(t *testing.T) {
	e := newMIGEnv(t)
	g0 := e.gpu[0].UUID
	// An instance the controller does not know of sits where the plan
	// puts the job: the create fails with INSUFFICIENT_RESOURCES.
	foreign, err := e.mig.CreateMIG(context.Background(), g0, "1g.10gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	a := asg(7, e.home)
	a.Alloc.Nodes = []spec.NodeAlloc{migAlloc(
		spec.MIGSlice{GPU: g0, Profile: "1g.10gb", Placement: spec.MIGPlacement{Start: 6, Size: 1}},
		spec.MIGSlice{GPU: g0, Profile: "2g.20gb", Placement: spec.MIGPlacement{Start: 4, Size: 2}})}
	e.fc.Set(a)
	ev := e.waitExited(t, "a7")
	if ev.State != spec.StateRequeued || !strings.Contains(ev.Reason, "insufficient resources") {
		t.Fatalf("exit event %+v, want REQUEUED naming insufficient resources", ev)
	}
	if n := len(e.rt.Starts()); n != 0 {
		t.Errorf("%d containers started, want none", n)
	}
	// The slice it did create is gone again; the foreign one stays.
	insts := e.instances(t, g0)
	if len(insts) != 1 || insts[0].UUID != foreign.UUID {
		t.Errorf("GPU 0 instances after the failed start: %+v, want only %s", insts, foreign.UUID)
	}
	// The controller heard of the real layout before the requeue.
	regs := e.fc.Registered()
	last := regs[len(regs)-1]
	if got := last.GPUs[0].MIGSlices; len(got) != 1 || got[0].UUID != foreign.UUID || got[0].Placement.Start != 4 {
		t.Errorf("re-registered MIG layout %+v, want the foreign instance at 4", got)
	}
}

func TestMIGReusedRegisteredInstanceReportedGone(t *testing.T) {
	e := newMIGEnv(t)
	g0 := e.gpu[0].UUID
	// An instance the node registered at start (say, left from before)
	// is reused by a job and, the GPU being dynamic, destroyed after it:
	// the node registers its layout again so the controller forgets it.
	d, err := e.mig.CreateMIG(context.Background(), g0, "1g.10gb", 6)
	if err != nil {
		t.Fatal(err)
	}
	e.agent.refreshMIGLayout(context.Background(), e.agent.log)
	before := len(e.fc.Registered())
	a := asg(7, e.home)
	a.Alloc.Nodes = []spec.NodeAlloc{migAlloc(spec.MIGSlice{GPU: g0, Profile: "1g.10gb", Placement: spec.MIGPlacement{Start: 6, Size: 1}, UUID: d.UUID})}
	e.fc.Set(a)
	e.waitStarted(t, cid)
	if insts := e.instances(t, g0); len(insts) != 1 || insts[0].UUID != d.UUID {
		t.Fatalf("instances %+v, want the reused %s alone", insts, d.UUID)
	}
	e.rt.Exit(cid, runtime.ExitStatus{})
	e.waitExited(t, "a7")
	waitFor(t, "layout re-registered without the instance", func() bool {
		regs := e.fc.Registered()
		return len(regs) > before && len(regs[len(regs)-1].GPUs[0].MIGSlices) == 0
	}, e.on()...)
}
