package sim

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/sched"
)

// faultJobs are n 1-GPU jobs of 2 days each, all submitted at once, and
// one 16-GPU two-node job.
func faultJobs(n int) []Job {
	var jobs []Job
	for i := range n {
		jobs = append(jobs, Job{Name: fmt.Sprint(i), Submit: time.Duration(i) * time.Second, Runtime: 48 * time.Hour, Nodes: 1, GPUsPerNode: 1})
	}
	jobs = append(jobs, Job{Name: "big", Submit: time.Duration(n) * time.Second, Runtime: 24 * time.Hour, Nodes: 2, GPUsPerNode: 8})
	return jobs
}

func schedPolicy(t *testing.T) Policy {
	t.Helper()
	// Later jobs rank higher: a requeued job (which keeps its submit
	// time) would wait behind the whole queue unless expedited.
	p, err := Named("sched", sched.Config{}, func(j *Job, _ time.Duration) int64 { return int64(j.Submit / time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func faultRun(t *testing.T, jobs []Job, nodes []NodeSpec, f *Faults) *Result {
	t.Helper()
	r, err := Run(jobs, Options{Nodes: nodes, Policy: schedPolicy(t), Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// gpuOnly is a mix of one GPU cause: an XID 79.
func gpuOnly() []Cause {
	return []Cause{{Name: "xid79", Count: 1, Scope: ScopeGPU, Fault: func(r *health.Reading, _ *rand.Rand) { r.XIDs = append(r.XIDs, 79) }}}
}

func TestFaultsZeroRateChangesNothing(t *testing.T) {
	nodes, _ := ParseCluster("4x8")
	jobs := faultJobs(24)
	plain := faultRun(t, jobs, nodes, nil)
	with := faultRun(t, jobs, nodes, &Faults{PerGPUHour: 0, Causes: MetaCauses(), Triage: health.DefaultTriage(), CheckpointEvery: time.Hour})
	if !reflect.DeepEqual(plain.Res, with.Res) {
		t.Fatal("a replay with a zero failure rate differs from one without failures")
	}
	if g := with.Faults.Goodput(); g != 1 {
		t.Fatalf("goodput without failures = %v, want 1", g)
	}
}

// TestFaultsPerGPUVersusWholeNode: the same failures (same seed) cost the
// whole-node policy more interrupted attempts and more lost work, and
// only the health model's triage table differs between the two.
func TestFaultsPerGPUVersusWholeNode(t *testing.T) {
	nodes, _ := ParseCluster("4x8")
	jobs := faultJobs(24)
	whole, err := WholeNode(health.DefaultTriage())
	if err != nil {
		t.Fatal(err)
	}
	if r := whole.Lookup("xid79"); r.Action != health.DrainNode || r.Class != health.Fatal {
		t.Fatalf("WholeNode's xid79 = %+v, want fatal drain-node", r)
	}
	base := Faults{PerGPUHour: 0.003, Causes: gpuOnly(), Seed: 7, CheckpointEvery: time.Hour, CheckpointCost: time.Minute,
		RestartCost: 5 * time.Minute, GPURepair: 6 * time.Hour, NodeRepair: 2 * time.Hour}
	gpud, baseline := base, base
	gpud.Triage, gpud.Expedite, gpud.CheckpointFirst = health.DefaultTriage(), true, true
	baseline.Triage = whole
	a := faultRun(t, jobs, nodes, &gpud)
	b := faultRun(t, jobs, nodes, &baseline)
	sa, sb := a.Faults, b.Faults
	t.Logf("per-GPU: %+v goodput %.4f", *sa, sa.Goodput())
	t.Logf("whole-node: %+v goodput %.4f", *sb, sb.Goodput())
	if sa.Injected["xid79"] < 3 || sb.Injected["xid79"] < 3 {
		t.Fatalf("injected %d and %d XIDs; want at least 3", sa.Injected["xid79"], sb.Injected["xid79"])
	}
	if sa.NodeDrains != 0 || sa.GPUDrains == 0 || sb.GPUDrains != 0 || sb.NodeDrains == 0 {
		t.Fatalf("drains: per-GPU %d GPU %d node, whole-node %d GPU %d node", sa.GPUDrains, sa.NodeDrains, sb.GPUDrains, sb.NodeDrains)
	}
	if sa.Readmitted == 0 || sb.Readmitted == 0 {
		t.Fatal("nothing readmitted after a repair")
	}
	if sa.Interruptions >= sb.Interruptions || sa.Lost >= sb.Lost || sa.Goodput() <= sb.Goodput() {
		t.Fatalf("per-GPU drain cost %d interruptions, %.0f lost GPU-s (goodput %.4f); whole-node %d, %.0f (%.4f): want per-GPU cheaper",
			sa.Interruptions, sa.Lost, sa.Goodput(), sb.Interruptions, sb.Lost, sb.Goodput())
	}
	for _, r := range []*Result{a, b} {
		if r.NeverStarted != 0 {
			t.Fatalf("%d jobs never finished", r.NeverStarted)
		}
		if s := r.Faults; s.Useful/3600 != 24*48+16*24 {
			t.Fatalf("useful GPU-hours %.1f, want every job's run time once (%d)", s.Useful/3600, 24*48+16*24)
		}
		// Every allocated second is useful, lost or overhead.
		if s := r.Faults; abs(s.Allocated-s.Useful-s.Lost-s.Overhead) > 1 {
			t.Fatalf("allocated %.0f != useful %.0f + lost %.0f + overhead %.0f", s.Allocated, s.Useful, s.Lost, s.Overhead)
		}
	}
	// Deterministic with a seed.
	again := faultRun(t, jobs, nodes, &gpud)
	if !reflect.DeepEqual(again.Res, a.Res) || !reflect.DeepEqual(*again.Faults, *sa) {
		t.Fatal("two runs with the same seed differ")
	}
	other := gpud
	other.Seed = 8
	if c := faultRun(t, jobs, nodes, &other); reflect.DeepEqual(c.Res, a.Res) {
		t.Fatal("another seed gave the same run")
	}
}

// TestFaultsCheckpointFirst: jobs moved off a node drained for
// maintenance keep their progress when they checkpoint first, and lose
// up to a checkpoint interval each when they do not.
func TestFaultsCheckpointFirst(t *testing.T) {
	nodes, _ := ParseCluster("4x8")
	jobs := faultJobs(24)
	f := Faults{PerGPUHour: 0.002, Causes: []Cause{{Name: "maintenance", Count: 1, Scope: ScopeNodeDrain}}, Seed: 3,
		Triage: health.DefaultTriage(), CheckpointEvery: 4 * time.Hour, NodeRepair: time.Hour}
	ckpt := f
	ckpt.CheckpointFirst = true
	with, without := faultRun(t, jobs, nodes, &ckpt).Faults, faultRun(t, jobs, nodes, &f).Faults
	if with.Interruptions == 0 || with.Lost != 0 {
		t.Fatalf("checkpoint-first: %d interruptions, %.0f GPU-s lost; want some, none lost", with.Interruptions, with.Lost)
	}
	if without.Lost == 0 {
		t.Fatal("without checkpoint-first nothing was lost")
	}
}

// TestFaultsExpedite: a job requeued by a GPU fault on a full cluster
// starts before the queue's older jobs when it is expedited.
func TestFaultsExpedite(t *testing.T) {
	nodes, _ := ParseCluster("2x8")
	var jobs []Job
	for i := range 160 { // ten times the cluster: a queue all along
		jobs = append(jobs, Job{Name: fmt.Sprint(i), Submit: time.Duration(i) * time.Second, Runtime: 12 * time.Hour, Nodes: 1, GPUsPerNode: 1})
	}
	f := Faults{PerGPUHour: 0.01, Causes: gpuOnly(), Seed: 5, Triage: health.DefaultTriage(), CheckpointEvery: time.Hour, GPURepair: time.Hour}
	exp := f
	exp.Expedite = true
	a, b := faultRun(t, jobs, nodes, &exp).Faults, faultRun(t, jobs, nodes, &f).Faults
	t.Logf("expedited: %+v\nordinary: %+v", *a, *b)
	if a.Expedited == 0 || b.Expedited != 0 {
		t.Fatalf("expedited requeues: %d with, %d without", a.Expedited, b.Expedited)
	}
	if a.RequeueWait >= b.RequeueWait {
		t.Fatalf("requeue wait %s expedited, %s not: want shorter", a.RequeueWait, b.RequeueWait)
	}
}

func abs(x float64) float64 { return max(x, -x) }
