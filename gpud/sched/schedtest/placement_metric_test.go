package schedtest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// metricOf is the placement metric of job id in plan, or nil.
func metricOf(plan sched.Plan, id spec.JobID) *sched.PlacementMetric {
	for i := range plan.Placement {
		if plan.Placement[i].JobID == id {
			return &plan.Placement[i]
		}
	}
	return nil
}

// A cycle counts, for each job it could not place, the nodes per reason
// of the placement pipeline (filters.go), as Nomad's AllocMetric does:
// "10 nodes: 6 insufficient free h100 GPUs, 3 constraint ib, 1 drain".
func TestPlacementMetricCountsPerReason(t *testing.T) {
	t.Parallel()
	var nodes []sched.Node
	for _, n := range []string{"ib1", "ib2", "ib3", "ib4", "ib5", "ib6"} {
		nd := MakeNode(n).GPUs(8).Features("ib").Obj()
		for k := range 6 { // 6 of 8 GPUs held
			nd.GPUs[k].Free = false
		}
		nodes = append(nodes, nd)
	}
	for _, n := range []string{"eth1", "eth2", "eth3"} {
		nodes = append(nodes, MakeNode(n).GPUs(8).Obj())
	}
	nodes = append(nodes, MakeNode("d1").GPUs(8).Features("ib").State(spec.NodeDrain).Obj())
	j := MakeJob(1).GPUs(4).Model("h100").Partition("batch").Time(time.Hour).Obj()
	j.Req.Constraint = "ib"
	held := MakeJob(2).GPUs(1).Obj()
	held.Held = true
	plan := sched.Schedule(&sched.Snapshot{Nodes: nodes, Jobs: []sched.Job{j, held}}, T0, sched.Config{})
	m := metricOf(plan, 1)
	if m == nil {
		t.Fatalf("no placement metric for the waiting job: %+v", plan.Placement)
	}
	want := []sched.NodeCount{{Reason: "insufficient free h100 GPUs", Nodes: 6}, {Reason: "constraint ib", Nodes: 3}, {Reason: "drain", Nodes: 1}}
	if diff := cmp.Diff(want, m.Nodes); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if w := "10 nodes: 6 insufficient free h100 GPUs, 3 constraint ib, 1 drain"; m.Summary != w {
		t.Errorf("Summary = %q, want %q", m.Summary, w)
	}
	// A held job never reached placement: no metric.
	if m := metricOf(plan, 2); m != nil {
		t.Errorf("held job has a placement metric %+v", m)
	}
	// It is what Explain says for the job alone.
	if got := sched.Explain(&sched.Snapshot{Nodes: nodes}, j, T0); !cmp.Equal(got, m.Nodes) {
		t.Errorf("Explain = %v; the cycle counted %v", got, m.Nodes)
	}
}

// Nodes with room now that a reservation holds are counted as such, and
// the counts are made after the cycle's starts: a node the cycle filled
// counts as busy for the jobs still waiting.
func TestPlacementMetricAfterStartsAndReservations(t *testing.T) {
	t.Parallel()
	n := MakeNode("n1").GPUs(8).Obj()
	for k := range 4 {
		n.GPUs[k].Free = false
	}
	busy := MakeNode("n2").GPUs(8).Obj()
	snap := &sched.Snapshot{Nodes: []sched.Node{n, busy}, Running: []sched.RunningJob{{ID: 100,
		Nodes: []spec.NodeAlloc{{Node: "n1", GPUs: []string{"GPU-n1-0", "GPU-n1-1", "GPU-n1-2", "GPU-n1-3"}}}, Start: T0.Add(-time.Hour), TimeLimit: 2 * time.Hour}},
		Jobs: []sched.Job{
			MakeJob(1).GPUs(8).Priority(300).Time(time.Hour).Obj(), // starts on n2
			MakeJob(2).GPUs(8).Priority(200).Time(time.Hour).Obj(), // reserves n1 from T0+1h
			MakeJob(3).GPUs(2).Priority(100).Time(2 * time.Hour).Obj(),
		}}
	plan := sched.Schedule(snap, T0, sched.Config{})
	if len(plan.Starts) != 1 || plan.Starts[0].JobID != 1 || len(plan.Reservations) == 0 || plan.Reservations[0].JobID != 2 {
		t.Fatalf("plan: starts %+v reservations %+v; want job 1 started and job 2 reserved", plan.Starts, plan.Reservations)
	}
	for id, want := range map[spec.JobID]string{
		2: "2 nodes: 2 insufficient free GPUs",
		3: "2 nodes: 1 held for a reservation, 1 insufficient free GPUs",
	} {
		if m := metricOf(plan, id); m == nil || m.Summary != want {
			t.Errorf("job %d: metric %+v; want %q", id, m, want)
		}
	}
}

// An incremental submit carries its job's metric too.
func TestPlacementMetricIncrementalSubmit(t *testing.T) {
	t.Parallel()
	snap := &sched.Snapshot{Nodes: []sched.Node{MakeNode("n1").GPUs(8).Obj(), MakeNode("n2").Model("a100").GPUs(8).Obj()}}
	st, _ := sched.NewState(snap, T0, sched.Config{})
	plan := st.Submit(MakeJob(1).GPUs(8).Time(time.Hour).Obj(), T0)
	if len(plan.Starts) != 1 {
		t.Fatalf("first job did not start: %+v", plan)
	}
	plan = st.Submit(MakeJob(2).GPUs(4).Model("h100").Time(time.Hour).Obj(), T0.Add(time.Second))
	if m := metricOf(plan, 2); m == nil || m.Summary != "2 nodes: 1 insufficient free h100 GPUs, 1 too few h100 GPUs" {
		t.Errorf("metric %+v; want the a100 node too few h100 GPUs and n1 busy", m)
	}
}
