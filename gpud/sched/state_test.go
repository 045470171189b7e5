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
