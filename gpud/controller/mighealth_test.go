package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestMIGInstanceHealth: a fault the node's health model attributes to
// one MIG instance of a static MIG GPU (drain-slice) takes that instance
// alone out of service: the job on it is requeued as a hardware requeue,
// the job on the GPU's other instance keeps running, nothing more is
// placed on the instance, the mark survives a re-registration and is
// listed for the agent's probe, and a readmission after the clean probe
// puts it back (the waiting job starts on it).
func TestMIGInstanceHealth(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0)
	ctx := context.Background()
	prof := spec.MIGProfile{Name: "3g.40gb", Slices: 3, MemMiB: 40960, MaxCount: 2,
		Placements: []spec.MIGPlacement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}}
	inv := spec.Inventory{Name: "n1", CPUs: 32, MemMiB: 100000, GPUs: []spec.GPU{{Index: 0, UUID: "GPU-0", Model: "h100",
		MIGEnabled: true, MIGMode: spec.MIGStatic, MIGProfiles: []spec.MIGProfile{prof}, Serial: "S0",
		MIGSlices: []spec.MIGSlice{
			{GPU: "GPU-0", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 0, Size: 3}, UUID: "MIG-a"},
			{GPU: "GPU-0", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: 4, Size: 3}, UUID: "MIG-b"},
		}}}}
	if _, err := h.c.Register(ctx, root, inv); err != nil {
		t.Fatal(err)
	}
	slice := func(j *spec.JobSpec) {
		j.Requeue, j.Resources.GPUsPerNode, j.Resources.GPUProfile = true, 1, "3g.40gb"
	}
	onSlice := map[string]spec.JobID{}
	for range 2 {
		id := h.submit(alice, slice)
		j := h.job(id)
		if j.State != spec.StateRunning || len(j.Alloc.Nodes) != 1 || len(j.Alloc.Nodes[0].MIG) != 1 {
			t.Fatalf("MIG job %d: %s %+v, want RUNNING on one instance", id, j.State, j.Alloc)
		}
		onSlice[j.Alloc.Nodes[0].MIG[0].UUID] = id
	}
	hit, other := onSlice["MIG-a"], onSlice["MIG-b"]
	if hit == 0 || other == 0 {
		t.Fatalf("jobs by instance %v, want one on each of MIG-a and MIG-b", onSlice)
	}
	reason := "gpud:xid94 gpu0 XID 94 contained ECC error on MIG instance MIG-a"
	p := []spec.GPUProblem{{UUID: "MIG-a", GPU: "GPU-0", Problem: reason, Code: "xid94", Class: "fatal", Action: "drain-slice"}}
	ev := []spec.GPUEvent{{UUID: "MIG-a", GPU: 0, Kind: spec.GPUEventFault, Code: "xid94", Detail: "XID 94 on MIG-a"}}
	if err := h.c.GPUHealth(ctx, root, "n1", p, ev); err != nil {
		t.Fatal(err)
	}
	if j := h.job(hit); j.State != spec.StateCompleting || j.HWRequeues != 1 {
		t.Fatalf("job on the faulted instance %s with %d hardware requeues, want COMPLETING to be requeued (1)", j.State, j.HWRequeues)
	}
	if j := h.job(other); j.State != spec.StateRunning {
		t.Fatalf("job on the GPU's other instance %s, want RUNNING", j.State)
	}
	h.exit("n1", h.job(hit), spec.StateRequeued, 0)
	if j := h.job(hit); j.State != spec.StatePending {
		t.Fatalf("requeued job %s, want PENDING (its instance is out, the other is held)", j.State)
	}
	nodes, _ := h.c.Nodes(ctx)
	g := nodes[0].GPUs[0]
	if g.Health != "" || g.MIGSlices[0].Health != reason || g.MIGSlices[1].Health != "" || nodes[0].State == spec.NodeDrain {
		t.Fatalf("node %s GPU health %q slices %+v; want only MIG-a marked", nodes[0].State, g.Health, g.MIGSlices)
	}
	if !strings.Contains(nodes[0].Reason, reason) {
		t.Errorf("node reason %q does not show the instance's %q (sinfo -R, gpuq nodes)", nodes[0].Reason, reason)
	}
	// The agent's restart: the mark stays and is listed for its probe.
	if _, err := h.c.Register(ctx, root, inv); err != nil {
		t.Fatal(err)
	}
	out, err := h.c.GPUsOut(ctx, "n1")
	if err != nil || len(out) != 1 || out[0].UUID != "MIG-a" || out[0].GPU != "GPU-0" || out[0].Problem != reason {
		t.Fatalf("GPUsOut after re-registration: %+v, %v; want MIG-a of GPU-0", out, err)
	}
	h.tick <- h.clock()
	if j := h.job(hit); j.State != spec.StatePending {
		t.Fatalf("job %s while its only possible instance is out, want PENDING", j.State)
	}
	// The clean probe readmits the instance; the waiting job gets it.
	readmit := []spec.GPUEvent{{UUID: "MIG-a", GPU: 0, Kind: spec.GPUEventReadmit, Code: "xid94", Detail: "clean probe"}}
	if err := h.c.GPUHealth(ctx, root, "n1", nil, readmit); err != nil {
		t.Fatal(err)
	}
	h.tick <- h.clock()
	j := h.job(hit)
	if j.State != spec.StateRunning || j.Alloc.Nodes[0].MIG[0].UUID != "MIG-a" {
		t.Fatalf("job %s on %+v after the readmission, want RUNNING on MIG-a", j.State, j.Alloc)
	}
	if nodes, _ = h.c.Nodes(ctx); strings.Contains(nodes[0].GPUs[0].MIGSlices[0].Health, "xid94") {
		t.Fatalf("MIG-a still marked after its readmission: %+v", nodes[0].GPUs[0].MIGSlices)
	}
}

// TestMIGDynamicInstanceHealth: on a dynamic MIG GPU the instances are
// made for their jobs and destroyed with them, so an instance's fault
// takes the GPU out instead (its mark names the instance): only the job
// on the faulted instance moves, the job on the GPU's other instance runs
// on, nothing new is placed on the GPU, and the instance's readmission
// puts the GPU back. A whole-GPU fault (xid79) of a MIG GPU moves the
// jobs on every instance of it.
func TestMIGDynamicInstanceHealth(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0)
	ctx := context.Background()
	prof := spec.MIGProfile{Name: "3g.40gb", Slices: 3, MemMiB: 40960, MaxCount: 2,
		Placements: []spec.MIGPlacement{{Start: 0, Size: 3}, {Start: 4, Size: 3}}}
	inv := spec.Inventory{Name: "n1", CPUs: 32, MemMiB: 100000, GPUs: []spec.GPU{{Index: 0, UUID: "GPU-0", Model: "h100",
		MIGEnabled: true, MIGMode: spec.MIGDynamic, MIGProfiles: []spec.MIGProfile{prof}, Serial: "S0"}}}
	if _, err := h.c.Register(ctx, root, inv); err != nil {
		t.Fatal(err)
	}
	slice := func(j *spec.JobSpec) {
		j.Requeue, j.Resources.GPUsPerNode, j.Resources.GPUProfile = true, 1, "3g.40gb"
	}
	var ids []spec.JobID
	for k := range 2 {
		id := h.submit(alice, slice)
		j := h.job(id)
		if j.State != spec.StateRunning || len(j.Alloc.Nodes) != 1 || len(j.Alloc.Nodes[0].MIG) != 1 {
			t.Fatalf("MIG job %d: %s %+v, want RUNNING on one instance", id, j.State, j.Alloc)
		}
		// The node made the instance and names it (api: mig_created).
		if _, err := h.c.NodeEvents(ctx, root, "n1", []NodeEvent{{Seq: uint64(k + 1), AllocID: j.Alloc.ID, JobID: id, Kind: EventStarted,
			Time: t0, MIG: []string{fmt.Sprintf("MIG-%d", k)}}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	reason := "gpud:xid94 gpu0 XID 94 contained ECC error on MIG instance MIG-0"
	p := []spec.GPUProblem{{UUID: "MIG-0", GPU: "GPU-0", Problem: reason, Code: "xid94", Class: "fatal", Action: "drain-slice"}}
	if err := h.c.GPUHealth(ctx, root, "n1", p, nil); err != nil {
		t.Fatal(err)
	}
	if j := h.job(ids[0]); j.State != spec.StateCompleting || j.HWRequeues != 1 {
		t.Fatalf("job on the faulted instance %s with %d hardware requeues, want COMPLETING to be requeued (1)", j.State, j.HWRequeues)
	}
	if j := h.job(ids[1]); j.State != spec.StateRunning {
		t.Fatalf("job on the GPU's other instance %s, want RUNNING", j.State)
	}
	nodes, _ := h.c.Nodes(ctx)
	if g := nodes[0].GPUs[0]; g.Health != reason {
		t.Fatalf("GPU health %q, want the instance's reason %q", g.Health, reason)
	}
	h.exit("n1", h.job(ids[0]), spec.StateRequeued, 0)
	h.tick <- h.clock()
	if j := h.job(ids[0]); j.State != spec.StatePending {
		t.Fatalf("requeued job %s, want PENDING (its GPU is out)", j.State)
	}
	readmit := []spec.GPUEvent{{UUID: "MIG-0", GPU: 0, Kind: spec.GPUEventReadmit, Code: "xid94", Detail: "clean probe"}}
	if err := h.c.GPUHealth(ctx, root, "n1", nil, readmit); err != nil {
		t.Fatal(err)
	}
	h.tick <- h.clock()
	if j := h.job(ids[0]); j.State != spec.StateRunning {
		t.Fatalf("job %s after the instance's readmission, want RUNNING", j.State)
	}
	if nodes, _ = h.c.Nodes(ctx); nodes[0].GPUs[0].Health != "" {
		t.Fatalf("GPU still out after the readmission: %q", nodes[0].GPUs[0].Health)
	}
	// XID 79: the GPU is gone, every instance's job moves.
	p = []spec.GPUProblem{{UUID: "GPU-0", Problem: "gpud:xid79 gpu0 XID 79 GPU has fallen off the bus", Code: "xid79", Class: "fatal", Action: "drain-gpu"}}
	if err := h.c.GPUHealth(ctx, root, "n1", p, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if j := h.job(id); j.State != spec.StateCompleting {
			t.Errorf("job %d on an instance of the GPU that fell off the bus: %s, want COMPLETING to be requeued", id, j.State)
		}
	}
}
