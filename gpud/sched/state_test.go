package sched

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// The must-show scenario through the incremental API.
func TestStateSubmitAndEnd(t *testing.T) {
	t.Parallel()
	n := node("n1", 64, 100000, "h100", 8)
	for i := range 4 {
		n.GPUs[i].Free = false
	}
	n.FreeCPUs, n.Allocs = 60, 1
	snap := &Snapshot{Nodes: []Node{n},
		Running: []RunningJob{{ID: 1, Start: t0, TimeLimit: 10 * time.Minute,
			Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 4, GPUs: []string{"GPU-n1-0", "GPU-n1-1", "GPU-n1-2", "GPU-n1-3"}}}}},
		Jobs: []Job{job(2, 1, 8, func(j *Job) { j.TimeLimit = 30 * time.Minute })}}
	now := t0.Add(time.Minute)
	st, plan := NewState(snap, now, Config{})
	if err := VerifyPlan(snap, now, Config{}, plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Reservations) != 1 || !plan.Reservations[0].Start.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("reservations %+v, want job 2 at +10m", plan.Reservations)
	}
	p := st.Submit(job(3, 1, 2, func(j *Job) { j.TimeLimit = time.Minute; j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 || !p.Starts[0].Backfilled {
		t.Errorf("submit of a short job: %+v, want it started, backfilled under job 2's reservation", p)
	}
	p = st.Submit(job(4, 1, 2, func(j *Job) { j.TimeLimit = time.Hour; j.SubmitTime = now }), now)
	if len(p.Starts) != 0 || len(p.Pending) != 1 || p.Pending[0].Reason != spec.ReasonReservation {
		t.Errorf("submit of a long job: %+v, want pending with Reservation", p)
	}
	// Job 1 ends early: job 2 (8 GPUs) still waits for job 3; job 3 ends: 2 starts.
	p = st.End(1, now.Add(time.Second))
	if len(p.Starts) != 0 {
		t.Errorf("end of job 1 started %+v while job 3 holds 2 GPUs", p.Starts)
	}
	p = st.End(3, now.Add(2*time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 2 || len(p.Starts[0].Nodes[0].GPUs) != 8 || p.Starts[0].Backfilled {
		t.Errorf("end of job 3: %+v, want job 2 on 8 GPUs, not backfilled (its own reservation)", p)
	}
}

// Slurm's -p a,b through the incremental API: a submitted job that cannot
// start in its first partition starts in its alternative (Submit), and a
// waiting one starts in its alternative when a node there frees (End).
func TestStatePartitionAlternatives(t *testing.T) {
	t.Parallel()
	a, b := node("a1", 8, 1000, "h100", 2), node("b1", 8, 1000, "h100", 2)
	a.Partitions, b.Partitions = []string{"a"}, []string{"b"}
	inA := func(j *Job) { j.Partition, j.TimeLimit = "a", time.Hour }
	snap := &Snapshot{Nodes: []Node{a, b}, Jobs: []Job{job(1, 1, 2, inA), job(2, 1, 2, func(j *Job) { j.Partition, j.TimeLimit = "b", time.Hour })}}
	st, plan := NewState(snap, t0, Config{})
	if err := VerifyPlan(snap, t0, Config{}, plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Starts) != 2 {
		t.Fatalf("full cycle started %+v, want jobs 1 and 2", plan.Starts)
	}
	// Both nodes busy: job 3 (a,b) waits.
	now := t0.Add(time.Second)
	p := st.Submit(job(3, 1, 2, inA, func(j *Job) { j.Alternatives = []string{"b"}; j.SubmitTime = now }), now)
	if len(p.Starts) != 0 {
		t.Fatalf("job 3 started %+v with both nodes busy", p.Starts)
	}
	// Job 2 ends: b1 frees and job 3 starts there, in partition b.
	p = st.End(2, now.Add(time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 || p.Starts[0].Partition != "b" || p.Starts[0].Nodes[0].Node != "b1" {
		t.Fatalf("end of job 2: %+v, want job 3 on b1 in partition b", p.Starts)
	}
	// b1 busy again, a1 busy: job 4 (b,a) waits; job 1 ends and it starts in a.
	p = st.Submit(job(4, 1, 2, func(j *Job) {
		j.Partition, j.Alternatives, j.TimeLimit, j.SubmitTime = "b", []string{"a"}, time.Hour, now
	}), now.Add(2*time.Second))
	if len(p.Starts) != 0 {
		t.Fatalf("job 4 started %+v with both nodes busy", p.Starts)
	}
	p = st.End(1, now.Add(3*time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 4 || p.Starts[0].Partition != "a" {
		t.Fatalf("end of job 1: %+v, want job 4 in partition a", p.Starts)
	}
	// A submitted job that fits only in its alternative starts at once.
	c := node("c1", 8, 1000, "h100", 2)
	c.Partitions = []string{"c"}
	snap2 := &Snapshot{Nodes: []Node{a, c}, Jobs: []Job{job(1, 1, 2, inA)}}
	st2, _ := NewState(snap2, t0, Config{})
	p = st2.Submit(job(5, 1, 2, inA, func(j *Job) { j.Alternatives = []string{"c"}; j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].Partition != "c" {
		t.Fatalf("submit of job 5: %+v, want it started in partition c", p.Starts)
	}
}
