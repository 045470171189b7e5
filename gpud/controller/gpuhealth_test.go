package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestGPUHealthDrainsOneGPUAndReadmits: XID 79 on GPU 3 of an 8-GPU node
// running a 2-GPU job on GPUs 2-3 requeues the job onto other GPUs of the
// same node, which keeps scheduling on its 7 healthy GPUs; the history
// reaches the recorder; a readmit event puts GPU 3 back.
func TestGPUHealthDrainsOneGPUAndReadmits(t *testing.T) {
	rec := &failingEvents{}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0, WithRecorder(rec))
	ctx := context.Background()
	registerDGX(h, "n1", 8)
	two := func(j *spec.JobSpec) { j.Requeue, j.Resources.GPUsPerNode = true, 2 }
	nodes, _ := h.c.Nodes(ctx)
	inv := nodes[0].GPUs
	// Fill GPUs 0-1 first so the 2-GPU job lands on 2-3.
	first := h.submit(alice, two)
	job := h.submit(alice, two)
	if got := h.job(job).GPUs; !slices.Equal(got, []string{inv[2].UUID, inv[3].UUID}) && !slices.Equal(got, []string{inv[3].UUID, inv[2].UUID}) {
		t.Fatalf("job on %v, want GPUs 2-3 (%s %s); first job on %v", got, inv[2].UUID, inv[3].UUID, h.job(first).GPUs)
	}
	xid := []spec.GPUProblem{{UUID: inv[3].UUID, Problem: "gpud:xid79 gpu3 XID 79 GPU has fallen off the bus", Code: "xid79", Class: "fatal", Action: "drain-gpu"}}
	evs := []spec.GPUEvent{{Time: spec.NewTime(h.clock()), UUID: inv[3].UUID, Kind: spec.GPUEventFault, Code: "xid79", Class: "fatal", Action: "drain-gpu", Detail: "XID 79"}}
	if err := h.c.GPUHealth(ctx, root, "n1", xid, evs); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", h.job(job), spec.StateRequeued, 0)
	got := h.job(job)
	if got.State != spec.StateRunning || slices.Contains(got.GPUs, inv[3].UUID) || got.Nodes[0] != "n1" {
		t.Fatalf("job %s on %v (%v), want RUNNING on n1 off GPU 3", got.State, got.GPUs, got.Nodes)
	}
	// The 7 other GPUs keep scheduling: three 1-GPU jobs fill the three
	// free healthy ones, and nothing lands on 3.
	var ones []spec.JobID
	for range 4 {
		ones = append(ones, h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }))
	}
	for i, id := range ones {
		j := h.job(id)
		if i < 3 && (j.State != spec.StateRunning || j.GPUs[0] == inv[3].UUID) {
			t.Errorf("1-GPU job %d: %s on %v, want RUNNING on a healthy GPU", i, j.State, j.GPUs)
		}
		if i == 3 && j.State != spec.StatePending {
			t.Errorf("fourth 1-GPU job %s on %v, want PENDING: only GPU 3 is free and it is drained", j.State, j.GPUs)
		}
	}
	nodes, _ = h.c.Nodes(ctx)
	if nodes[0].GPUs[3].Health != xid[0].Problem || !strings.Contains(nodes[0].Reason, "gpud:xid79 gpu3") || nodes[0].State == spec.NodeDrain {
		t.Errorf("node %s reason %q GPU 3 health %q; want the node up with GPU 3 marked", nodes[0].State, nodes[0].Reason, nodes[0].GPUs[3].Health)
	}
	if out, _ := h.c.GPUsOut(ctx, "n1"); len(out) != 1 || out[0].UUID != inv[3].UUID || out[0].Code != "xid79" {
		t.Errorf("GPUsOut %v, want GPU 3 with xid79", out)
	}
	readmit := []spec.GPUEvent{{Time: spec.NewTime(h.clock()), UUID: inv[3].UUID, Kind: spec.GPUEventReadmit, Code: "xid79", Detail: "clean probe"}}
	if err := h.c.GPUHealth(ctx, root, "n1", nil, readmit); err != nil {
		t.Fatal(err)
	}
	h.tick <- h.clock()
	if j := h.job(ones[3]); j.State != spec.StateRunning || j.GPUs[0] != inv[3].UUID {
		t.Errorf("after readmission the waiting job is %s on %v, want RUNNING on GPU 3", j.State, j.GPUs)
	}
	waitRecorded(t, rec, 2)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, kind := range []string{spec.GPUEventFault, spec.GPUEventReadmit} {
		e := rec.evs[i]
		if e.Event != spec.NodeEventGPU || e.GPU == nil || e.GPU.Kind != kind || e.GPU.GPU != 3 || e.GPU.Node != "n1" || e.GPU.Serial != inv[3].Serial {
			t.Errorf("recorded event %d = %+v (gpu %+v), want a %s of GPU 3 on n1", i, e, e.GPU, kind)
		}
	}
}

// registerDGX registers a node whose GPUs have indexes and serials.
func registerDGX(h *harness, name string, gpus int) {
	h.t.Helper()
	inv := spec.Inventory{Name: name, CPUs: 32, MemMiB: 100000}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Serial: fmt.Sprintf("1654%09d", i), Model: "h100"})
	}
	if _, err := h.c.Register(context.Background(), root, inv); err != nil {
		h.t.Fatal(err)
	}
}

func waitRecorded(t *testing.T, rec *failingEvents, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		rec.mu.Lock()
		got := len(rec.evs)
		rec.mu.Unlock()
		if got >= n {
			return
		}
	}
	t.Fatalf("fewer than %d events recorded", n)
}

// TestGPUHealthNeverOverwritesAPerson: a node-wide fault drains a node
// that runs, but a node a person drained keeps their reason; a readmit
// lifts only what gpud set.
func TestGPUHealthNeverOverwritesAPerson(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour })
	ctx := context.Background()
	registerDGX(h, "n1", 2)
	registerDGX(h, "n2", 2)
	nodes, _ := h.c.Nodes(ctx)
	g := func(n int) spec.GPU { return nodes[n].GPUs[0] }
	nvswitch := func(uuid string) []spec.GPUProblem {
		return []spec.GPUProblem{{UUID: uuid, Problem: "gpud:xid145 gpu0 NVSwitch", Code: "xid145", Class: "fatal", Action: "drain-node"}}
	}
	if _, err := h.c.NodeAction(ctx, root, "n2", ActionDrain, "bad fan, ticket 42"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []struct {
		node string
		uuid string
	}{{"n1", g(0).UUID}, {"n2", g(1).UUID}} {
		if err := h.c.GPUHealth(ctx, root, n.node, nvswitch(n.uuid), nil); err != nil {
			t.Fatal(err)
		}
	}
	nodes, _ = h.c.Nodes(ctx)
	if nodes[0].State != spec.NodeDrain || !strings.HasPrefix(nodes[0].Reason, "gpud:xid145 gpu0") {
		t.Errorf("n1 %s %q, want drained by gpud", nodes[0].State, nodes[0].Reason)
	}
	if !strings.HasPrefix(nodes[1].Reason, "bad fan, ticket 42") {
		t.Errorf("n2 reason %q, want the person's first", nodes[1].Reason)
	}
	for _, n := range []struct {
		node string
		uuid string
	}{{"n1", g(0).UUID}, {"n2", g(1).UUID}} {
		if err := h.c.GPUHealth(ctx, root, n.node, nil, []spec.GPUEvent{{UUID: n.uuid, Kind: spec.GPUEventReadmit}}); err != nil {
			t.Fatal(err)
		}
	}
	nodes, _ = h.c.Nodes(ctx)
	if nodes[0].State == spec.NodeDrain || nodes[0].Reason != "" {
		t.Errorf("n1 after readmission %s %q, want back in service", nodes[0].State, nodes[0].Reason)
	}
	if nodes[1].State != spec.NodeDrain || nodes[1].Reason != "bad fan, ticket 42" {
		t.Errorf("n2 after readmission %s %q, want still drained by the person", nodes[1].State, nodes[1].Reason)
	}
}

// TestExpediteRequeue: a job submitted with --requeue=expedite that a GPU
// fault requeues goes ahead of an older, higher-priority pending job, and
// the requeue is not charged to it; without expedite it queues behind.
func TestExpediteRequeue(t *testing.T) {
	for _, expedite := range []bool{true, false} {
		t.Run(fmt.Sprint("expedite=", expedite), func(t *testing.T) {
			h := newHarness(t, newFakeStore(), func(c *Config) { c.NodeTimeout, c.AllowRootJobs = time.Hour, true })
			ctx := context.Background()
			registerDGX(h, "n1", 2)
			victim := h.submit(alice, func(j *spec.JobSpec) {
				j.Requeue, j.RequeueExpedite, j.Resources.GPUsPerNode = true, expedite, 1
			})
			other := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
			if h.job(other).State != spec.StateRunning {
				t.Fatal("the second job should run on the second GPU")
			}
			waiting := h.submit(root, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Nice = -1000 })
			if h.job(waiting).State != spec.StatePending {
				t.Fatalf("the third job should wait: both GPUs are busy; %v %v / %v %v / %v %v", h.job(victim).State, h.job(victim).GPUs, h.job(other).State, h.job(other).GPUs, h.job(waiting).State, h.job(waiting).GPUs)
			}
			uuid := h.job(victim).GPUs[0]
			sick := []spec.GPUProblem{{UUID: uuid, Problem: "gpud:xid79 gpu0 XID 79", Code: "xid79", Action: "drain-gpu"}}
			if err := h.c.GPUHealth(ctx, root, "n1", sick, nil); err != nil {
				t.Fatal(err)
			}
			h.exit("n1", h.job(victim), spec.StateRequeued, 0)
			if j := h.job(victim); j.HWRequeues != 1 || j.Expedited != expedite {
				t.Fatalf("victim hw_requeues %d expedited %v, want 1 and %v", j.HWRequeues, j.Expedited, expedite)
			}
			// One healthy GPU frees: the expedited job takes it first.
			h.exit("n1", h.job(other), spec.StateCompleted, 0)
			first, second := victim, waiting
			if !expedite {
				first, second = waiting, victim
			}
			if j := h.job(first); j.State != spec.StateRunning {
				t.Errorf("job %d %s, want it RUNNING first", first, j.State)
			}
			if j := h.job(second); j.State != spec.StatePending {
				t.Errorf("job %d %s, want it still PENDING", second, j.State)
			}
			if j := h.job(victim); j.State == spec.StateRunning && (j.Expedited || j.Attempt != 2) {
				t.Errorf("restarted victim expedited %v attempt %d, want false and 2", j.Expedited, j.Attempt)
			}
		})
	}
}

// TestStartGateFailure: a node hands back a job whose GPU failed the start
// gate (an exit REQUEUED with GateFailed): the GPU goes out of service
// with the finding, the job is placed again at once on a healthy GPU,
// the requeue is a hardware one (not a restart), and assignments carry
// each partition's gate (quick by default, off where the partition says).
func TestStartGateFailure(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) {
		c.NodeTimeout = time.Hour
		c.Partitions = append(c.Partitions, Partition{Name: "nogate", StartGate: StartGateOff})
	}, t0)
	ctx := context.Background()
	registerDGX(h, "n1", 2)
	nodes, _ := h.c.Nodes(ctx)
	inv := nodes[0].GPUs
	job := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	j := h.job(job)
	if j.State != spec.StateRunning || len(j.GPUs) != 1 {
		t.Fatalf("job %s on %v, want RUNNING on one GPU", j.State, j.GPUs)
	}
	as := h.assignments("n1")
	if len(as) != 1 || as[0].Gate != StartGateQuick {
		t.Fatalf("assignments %+v, want one with gate %q", as, StartGateQuick)
	}
	bad := j.GPUs[0]
	idx := slices.IndexFunc(inv, func(g spec.GPU) bool { return g.UUID == bad })
	p := spec.GPUProblem{UUID: bad, Problem: fmt.Sprintf("gpud:xid79 gpu%d XID 79 GPU has fallen off the bus", idx), Code: "xid79", Class: "fatal", Action: "drain-gpu"}
	reason := "start gate on node n1: " + p.Problem
	if _, err := h.c.NodeEvents(ctx, root, "n1", []NodeEvent{{Seq: 1, AllocID: j.Alloc.ID, JobID: job, Kind: EventExited,
		State: spec.StateRequeued, Reason: reason, GateFailed: []spec.GPUProblem{p}}}); err != nil {
		t.Fatal(err)
	}
	h.tick <- h.clock()
	got := h.job(job)
	if got.State != spec.StateRunning || got.Attempt != 2 || slices.Contains(got.GPUs, bad) {
		t.Fatalf("after the gate: job %s attempt %d on %v, want RUNNING attempt 2 off %s", got.State, got.Attempt, got.GPUs, bad)
	}
	if got.HWRequeues != 1 {
		t.Errorf("hw_requeues %d, want 1: a job that never ran is not charged a restart", got.HWRequeues)
	}
	nodes, _ = h.c.Nodes(ctx)
	if nodes[0].GPUs[idx].Health != p.Problem || nodes[0].State == spec.NodeDrain {
		t.Errorf("node %s, GPU %d health %q; want the node up and the GPU marked %q", nodes[0].State, idx, nodes[0].GPUs[idx].Health, p.Problem)
	}
	other := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Partition = "nogate" })
	if j := h.job(other); j.State != spec.StatePending {
		t.Errorf("second job %s on %v, want PENDING: the only other GPU is out", j.State, j.GPUs)
	}
	h.exit("n1", got, spec.StateCompleted, 0)
	h.tick <- h.clock()
	gates := map[spec.JobID]string{}
	for _, a := range h.assignments("n1") {
		gates[a.Job.ID] = a.Gate
	}
	if g, ok := gates[other]; !ok || g != StartGateOff {
		t.Errorf("assignments' gates %v, want job %d (partition nogate) with gate %q", gates, other, StartGateOff)
	}
}
