package schedtest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Explain counts the nodes per reason a pending job cannot start, from
// the placement filter and what is free now.
func TestExplainCountsNodesPerReason(t *testing.T) {
	t.Parallel()
	nodes := []sched.Node{MakeNode("ib1").GPUs(8).Features("ib").Obj(), MakeNode("ib2").GPUs(8).Features("ib").Obj()}
	for _, n := range []string{"a1", "a2", "a3"} {
		nodes = append(nodes, MakeNode(n).GPUs(8).Obj()) // no ib
	}
	nodes = append(nodes, MakeNode("d1").GPUs(8).Features("ib").State(spec.NodeDrain).Obj())
	nodes = append(nodes, MakeNode("small").GPUs(2).Features("ib").Obj())
	nodes = append(nodes, MakeNode("a100").Model("a100").GPUs(8).Features("ib").Obj())
	// ib1 and ib2 are busy: 6 of their GPUs are taken.
	for i := range 2 {
		for k := range 6 {
			nodes[i].GPUs[k].Free = false
		}
	}
	snap := &sched.Snapshot{Nodes: nodes}
	j := qjob(1, "normal", 4, 0).Obj()
	j.Req.GPUModel, j.Req.Constraint = "h100", "ib"
	got := sched.Explain(snap, j, T0)
	want := []sched.NodeCount{
		{Reason: "constraint ib", Nodes: 3},
		{Reason: "insufficient free h100 GPUs", Nodes: 2}, // equal counts by reason
		{Reason: "too few h100 GPUs", Nodes: 2},
		{Reason: "drain", Nodes: 1},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Explain (-want +got):\n%s", diff)
	}
	if s, w := sched.FormatNodeCounts(got), "8 nodes: 3 constraint ib, 2 insufficient free h100 GPUs, 2 too few h100 GPUs, 1 drain"; s != w {
		t.Errorf("FormatNodeCounts = %q, want %q", s, w)
	}
	// Free the GPUs: the two ib nodes fit now.
	for i := range 2 {
		for k := range 6 {
			nodes[i].GPUs[k].Free = true
		}
	}
	if got := sched.Explain(snap, j, T0); got[1] != (sched.NodeCount{Reason: "fits now", Nodes: 2}) {
		t.Errorf("Explain with the GPUs free = %+v; want 2 nodes that fit now", got)
	}
}
