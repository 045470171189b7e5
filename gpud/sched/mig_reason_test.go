package sched

import (
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestMIGPendingNodeCounts: a MIG job that finds no room gets node
// counts that say so for its profile, beside the static filters'
// reasons (a drained node), not a bare "MIG".
func TestMIGPendingNodeCounts(t *testing.T) {
	full := migNode("m1", 1, true)
	drained := migNode("m2", 1, true)
	drained.State = spec.NodeDrain
	// m1's only GPU is taken by a 7g.80gb job.
	snap := &Snapshot{Nodes: []Node{full, drained}, Jobs: []Job{migJob(1, "7g.80gb", 1), migJob(2, "3g.40gb", 1)}}
	plan := scheduleOK(t, snap)
	var m *PlacementMetric
	for i := range plan.Placement {
		if plan.Placement[i].JobID == 2 {
			m = &plan.Placement[i]
		}
	}
	if m == nil {
		t.Fatalf("no placement metric for the pending MIG job: starts %v, placement %+v", slicesOf(plan), plan.Placement)
	}
	if want := "2 nodes: 1 drain, 1 no room for a 3g.40gb MIG job"; m.Summary != want {
		t.Errorf("Summary = %q, want %q", m.Summary, want)
	}
}
