package node

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/gpu/nvml"
)

// BenchmarkStartGate is the start gate's cost per job start on a mock
// DGX H100 (8 GPUs; go-nvml's mock server behind the NVML backend, with
// the mock health hook read as on every sample): a fresh sample of the
// node's GPUs and the model's quick checks of a 2-GPU job's GPUs. The
// issue's aim is under 50 ms without DCGM.
func BenchmarkStartGate(b *testing.B) {
	ctx := context.Background()
	devs, err := nvml.Open(ctx, nvml.BackendDGXH100, nvml.WithMockSeed("bench"),
		nvml.WithMockHealthFile(filepath.Join(b.TempDir(), "mock-gpu-health.json")))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { devs.Close() })
	inv, err := devs.Inventory(ctx)
	if err != nil {
		b.Fatal(err)
	}
	a := &Agent{opts: options{healthSampler: devs.(gpu.Sampler)}}
	a.clock, a.log, a.gpus = realClock{}, discardLog(), map[string]spec.GPU{}
	for _, d := range inv {
		g := spec.GPU{Index: d.Index, UUID: d.UUID}
		a.cfg.Inventory.GPUs = append(a.cfg.Inventory.GPUs, g)
		a.gpus[d.UUID] = g
	}
	h := newHealthWatcher(a)
	h.check(ctx) // the agent's first sample
	want := []string{inv[2].UUID, inv[3].UUID}
	b.ReportAllocs()
	for b.Loop() {
		if fs := h.gateStart(ctx, want); len(fs) != 0 {
			b.Fatalf("healthy mock GPUs failed the gate: %v", fs)
		}
	}
}
