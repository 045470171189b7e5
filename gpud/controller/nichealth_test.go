package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestNICHealthDrainsTheNIC: a NIC the agent reports down is left out of
// the scheduler's view of its node: the running job that uses it is
// requeued (a hardware requeue) and, with the node's only NIC out, jobs
// that need RDMA wait while others still start there; the reason shows
// on the node; the NIC comes back when the agent's list no longer has
// it, and a person's mark is never lifted by the agent.
func TestNICHealthDrainsTheNIC(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.NodeTimeout = time.Hour }, t0)
	ctx := context.Background()
	inv := spec.Inventory{Name: "n1", CPUs: 32, MemMiB: 100000,
		NICs: []spec.NIC{{Name: "mlx5_0", NUMANode: 0, Active: true}}}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-n1-%d", i), Model: "h100", NICs: []string{"mlx5_0"}})
	}
	if _, err := h.c.Register(ctx, root, inv); err != nil {
		t.Fatal(err)
	}
	rdma := func(j *spec.JobSpec) { j.Requeue, j.Resources.GPUsPerNode, j.Resources.RDMA = true, 1, spec.RDMAPaired }
	running := h.submit(alice, rdma)
	if j := h.job(running); j.State != spec.StateRunning {
		t.Fatalf("RDMA job %s, want RUNNING", j.State)
	}
	down := []spec.NICProblem{{Name: "mlx5_0", Problem: "gpud:nic-down mlx5_0 port 1 DOWN"}}
	if err := h.c.NICHealth(ctx, root, "n1", down); err != nil {
		t.Fatal(err)
	}
	if j := h.job(running); j.State != spec.StateCompleting || j.HWRequeues != 1 {
		t.Fatalf("RDMA job %s with %d hardware requeues, want COMPLETING to be requeued (1)", j.State, j.HWRequeues)
	}
	h.exit("n1", h.job(running), spec.StateRequeued, 0)
	if j := h.job(running); j.State != spec.StatePending {
		t.Fatalf("RDMA job %s after its stop, want PENDING (the node's only NIC is out)", j.State)
	}
	plain := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if j := h.job(plain); j.State != spec.StateRunning {
		t.Fatalf("job without RDMA %s, want RUNNING on the node", j.State)
	}
	nodes, _ := h.c.Nodes(ctx)
	if n := nodes[0]; !strings.Contains(n.Reason, "gpud:nic-down mlx5_0") || n.NICs[0].Health != down[0].Problem || n.State == spec.NodeDrain {
		t.Fatalf("node %s reason %q NIC health %q; want the node up, the NIC marked", n.State, n.Reason, n.NICs[0].Health)
	}
	// A repeat report changes nothing; an empty list readmits.
	if err := h.c.NICHealth(ctx, root, "n1", down); err != nil {
		t.Fatal(err)
	}
	if err := h.c.NICHealth(ctx, root, "n1", nil); err != nil {
		t.Fatal(err)
	}
	h.tick <- h.clock()
	if j := h.job(running); j.State != spec.StateRunning {
		t.Fatalf("RDMA job %s after the NIC's readmission, want RUNNING", j.State)
	}
	nodes, _ = h.c.Nodes(ctx)
	if n := nodes[0]; n.NICs[0].Health != "" || strings.Contains(n.Reason, "nic") {
		t.Fatalf("after readmission NIC health %q, reason %q", n.NICs[0].Health, n.Reason)
	}
	// A re-registration keeps gpud's mark until the agent's probe.
	if err := h.c.NICHealth(ctx, root, "n1", down); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Register(ctx, root, inv); err != nil {
		t.Fatal(err)
	}
	if nodes, _ = h.c.Nodes(ctx); nodes[0].NICs[0].Health == "" {
		t.Fatal("re-registration cleared the NIC's mark")
	}
	// Not root: refused.
	if err := h.c.NICHealth(ctx, alice, "n1", nil); err == nil {
		t.Fatal("a user reported NIC health")
	}
}
