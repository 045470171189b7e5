package sim

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

func twinNodes(n, gpus int) []sched.Node {
	var out []sched.Node
	for i := range n {
		name := "n" + string(rune('1'+i))
		node := sched.Node{Name: name, CPUs: 64, MemMiB: 1 << 20, Partitions: []string{"gpu"}}
		for g := range gpus {
			node.GPUs = append(node.GPUs, sched.GPU{UUID: name + "-" + string(rune('0'+g)), Model: "h100"})
		}
		out = append(out, node)
	}
	return out
}

var twinT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func twinJob(id int, submit, run time.Duration, gpus int) TwinJob {
	return TwinJob{ID: spec.JobID(id), Name: "j", User: "u", Account: "a", QOS: "normal", Partition: "gpu",
		Submit: twinT0.Add(submit), Runtime: run, TimeLimit: 2 * run, Outcome: spec.StateCompleted,
		Req: spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: gpus}}
}

// The twin keeps a dependent job until its parent ends, lets no more
// than an array's %MAX tasks run at once, drops a job cancelled while it
// waited, and lets a high QOS preempt (requeue) a low one.
func TestTwinDependenciesArraysPreemption(t *testing.T) {
	jobs := []TwinJob{
		twinJob(1, 0, time.Hour, 4),
		twinJob(2, time.Second, 10*time.Minute, 1),
	}
	jobs[1].Depend = "afterok:1"
	for k := range 4 {
		j := twinJob(3+k, 2*time.Second, 30*time.Minute, 1)
		j.ArrayJobID, j.ArrayTaskID, j.ArrayMax = 3, k, 2
		jobs = append(jobs, j)
	}
	cancelled := twinJob(7, 3*time.Second, time.Minute, 8)
	cancelled.CancelAt = twinT0.Add(time.Minute)
	jobs = append(jobs, cancelled)
	urgent := twinJob(8, 2*time.Hour, time.Minute, 8)
	urgent.QOS = "high"
	low := twinJob(9, 90*time.Minute, 3*time.Hour, 8)
	jobs = append(jobs, low, urgent)
	pol := TwinPolicy{Interval: 5 * time.Second,
		QOS:          []sched.QOS{{Name: "normal", Priority: 0}, {Name: "high", Priority: 10, Preempt: []string{"normal"}, PreemptMode: "requeue"}},
		Partitions:   []sched.Partition{{Name: "gpu"}},
		BasePriority: func(q string, nice int) int64 { return map[string]int64{"high": 1000}[q] - int64(nice) }}
	r, err := RunTwin(jobs, TwinOptions{Nodes: twinNodes(1, 8), Policy: pol, Start: twinT0})
	if err != nil {
		t.Fatal(err)
	}
	at := func(id int) TwinJobResult {
		for i := range r.Jobs {
			if r.Jobs[i].ID == spec.JobID(id) {
				return r.Res[i]
			}
		}
		t.Fatalf("no job %d", id)
		return TwinJobResult{}
	}
	if s := at(2).Start; !s.Equal(twinT0.Add(time.Hour)) {
		t.Errorf("job 2 (afterok:1) started at %s, want when job 1 ended (1h)", s.Sub(twinT0))
	}
	for k := range 4 {
		want := twinT0.Add(2 * time.Second)
		if k >= 2 {
			want = want.Add(30 * time.Minute)
		}
		if s := at(3 + k).Start; !s.Equal(want) {
			t.Errorf("array task %d started at %s, want %s (%%2)", k, s.Sub(twinT0), want.Sub(twinT0))
		}
	}
	if c := at(7); c.Started || !c.Cancelled {
		t.Errorf("job 7 cancelled while waiting: %+v", c)
	}
	if l := at(9); l.Preempted != 1 || l.Attempts != 2 {
		t.Errorf("job 9 (normal, preempted by job 8 of QOS high): %+v, want preempted once and started twice", l)
	}
	if u := at(8); !u.Start.Equal(twinT0.Add(2 * time.Hour)) {
		t.Errorf("job 8 (high) started at %s, want at once (2h) by preempting", u.Start.Sub(twinT0))
	}
}

// The replay skips a periodic cycle only when it could decide nothing:
// on a congested cluster under fairshare and age priorities, with --begin
// times, multi-node jobs and cancellations, skipping gives every job the
// same start, end and attempts as running every cycle (OnPlan set turns
// skipping off), and skips most cycles.
func TestTwinSkipsOnlyIdleCycles(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var jobs []TwinJob
	for i := range 150 {
		gpus := []int{1, 2, 4, 8, 8}[rng.IntN(5)]
		j := twinJob(i+1, time.Duration(rng.IntN(2*3600))*time.Second, time.Duration(60+rng.IntN(3600))*time.Second, gpus)
		j.Account = []string{"a", "b"}[rng.IntN(2)]
		j.User = j.Account + string(rune('0'+rng.IntN(4)))
		switch rng.IntN(10) {
		case 0:
			j.Req.Nodes = 2
		case 1:
			j.Begin = j.Submit.Add(time.Duration(rng.IntN(7200)) * time.Second)
		case 2:
			j.CancelAt = j.Submit.Add(time.Duration(rng.IntN(3600)) * time.Second)
		}
		jobs = append(jobs, j)
	}
	pol := TwinPolicy{Interval: 5 * time.Second, Partitions: []sched.Partition{{Name: "gpu"}},
		QOS:       []sched.QOS{{Name: "normal"}},
		Accounts:  &fairshare.Tree{Accounts: []fairshare.Account{{Name: "a", Shares: 3}, {Name: "b", Shares: 1}}},
		Fairshare: fairshare.Config{HalfLife: time.Hour}}
	pol.Config.Priority.Weights = priority.Weights{Age: 100, Fairshare: 10000}
	run := func(onPlan func(time.Time, sched.Plan)) *TwinResult {
		r, err := RunTwin(slices.Clone(jobs), TwinOptions{Nodes: twinNodes(4, 8), Policy: pol, Start: twinT0, OnPlan: onPlan})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	skip, every := run(nil), run(func(time.Time, sched.Plan) {})
	if every.Skipped != 0 {
		t.Fatalf("with OnPlan set %d cycles were skipped", every.Skipped)
	}
	for i := range jobs {
		if skip.Res[i] != every.Res[i] {
			t.Errorf("job %d: skipping idle cycles %+v, every cycle %+v", jobs[i].ID, skip.Res[i], every.Res[i])
		}
	}
	if skip.Skipped < every.Cycles/2 {
		t.Errorf("skipped %d of %d cycles: the congested replay should skip most", skip.Skipped, every.Cycles)
	}
	t.Logf("every cycle: %d; skipping: %d run, %d skipped", every.Cycles, skip.Cycles, skip.Skipped)
}

// TestTwinOrdersOnlyAQueue: cycles with one job pending or none run
// without the fairshare report (nothing to order), and every job's
// result is the one with a report at every cycle (OnPlan set). The
// workload alternates quiet hours, where a submission finds an empty
// queue, and bursts that queue behind a congested cluster, where
// fairshare decides the order.
func TestTwinOrdersOnlyAQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	var jobs []TwinJob
	for i := range 200 {
		at := time.Duration(i/20)*2*time.Hour + time.Duration(rng.IntN(600))*time.Second
		if (i/20)%2 == 0 {
			at = time.Duration(i/20)*2*time.Hour + time.Duration(i%20)*5*time.Minute
		}
		j := twinJob(i+1, at, time.Duration(60+rng.IntN(1800))*time.Second, []int{1, 2, 4, 8}[rng.IntN(4)])
		j.Account = []string{"a", "b"}[rng.IntN(2)]
		j.User = j.Account + string(rune('0'+rng.IntN(3)))
		switch rng.IntN(10) {
		case 0:
			j.QOS = "high"
		case 1, 2, 3:
			j.QOS = "low"
		}
		jobs = append(jobs, j)
	}
	pol := TwinPolicy{Interval: 5 * time.Second, Partitions: []sched.Partition{{Name: "gpu"}},
		// A QOS that preempts another, as in the default configuration:
		// its jobs and their victims' need their priorities.
		QOS:       []sched.QOS{{Name: "normal"}, {Name: "high", Priority: 1000, Preempt: []string{"low"}, PreemptMode: "requeue"}, {Name: "low"}},
		Accounts:  &fairshare.Tree{Accounts: []fairshare.Account{{Name: "a", Shares: 4}, {Name: "b", Shares: 1}}},
		Fairshare: fairshare.Config{HalfLife: 30 * time.Minute}}
	pol.Config.Priority.Weights = priority.Weights{Age: 10, Fairshare: 100000, QOS: 100000}
	run := func(onPlan func(time.Time, sched.Plan)) *TwinResult {
		r, err := RunTwin(slices.Clone(jobs), TwinOptions{Nodes: twinNodes(3, 8), Policy: pol, Start: twinT0, OnPlan: onPlan})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	lean, every := run(nil), run(func(time.Time, sched.Plan) {})
	if every.Unordered != 0 {
		t.Fatalf("with OnPlan set %d cycles ran without a fairshare report", every.Unordered)
	}
	if lean.Unordered == 0 {
		t.Fatal("no cycle ran without a fairshare report: the quiet hours should have some")
	}
	for i := range jobs {
		if lean.Res[i] != every.Res[i] {
			t.Errorf("job %d: %+v, with a report every cycle %+v", jobs[i].ID, lean.Res[i], every.Res[i])
		}
	}
	if lean.Skipped == 0 || every.Preemptions == 0 {
		t.Errorf("%d cycles skipped, %d preemptions: the workload should have both", lean.Skipped, every.Preemptions)
	}
	t.Logf("%d cycles, %d skipped, %d without a report, %d preemptions", lean.Cycles, lean.Skipped, lean.Unordered, lean.Preemptions)
}

// A job alone in the queue still needs what preemption reads: a lone
// high-QOS job that may preempt only once its victim has run
// PreemptMinRuntime is answered by a periodic cycle (not skipped as
// idle), and it is let preempt on its priority with fairshare (without
// the report its priority is its QOS's alone, below the victim's).
func TestTwinLoneJobsThatPreempt(t *testing.T) {
	low := twinJob(1, 0, 3*time.Hour, 8)
	low.QOS, low.Account, low.User = "low", "b", "bob"
	high := twinJob(2, time.Minute, 10*time.Minute, 8)
	high.QOS, high.Account, high.User = "high", "a", "amy"
	pol := TwinPolicy{Interval: 5 * time.Second, Partitions: []sched.Partition{{Name: "gpu"}},
		QOS: []sched.QOS{{Name: "normal"}, {Name: "high", Priority: 1000, Preempt: []string{"low"}, PreemptMode: "requeue"},
			{Name: "low"}},
		Accounts:  &fairshare.Tree{Accounts: []fairshare.Account{{Name: "a", Shares: 1}, {Name: "b", Shares: 1}}},
		Fairshare: fairshare.Config{HalfLife: time.Hour}}
	pol.Config.Priority.Weights = priority.Weights{Fairshare: 100000, QOS: 1000}
	pol.Config.PreemptMinRuntime = 10 * time.Minute
	r, err := RunTwin([]TwinJob{low, high}, TwinOptions{Nodes: twinNodes(1, 8), Policy: pol, Start: twinT0})
	if err != nil {
		t.Fatal(err)
	}
	if r.Res[0].Preempted != 1 {
		t.Errorf("low job: %+v, want preempted once", r.Res[0])
	}
	want := twinT0.Add(10 * time.Minute)
	if s := r.Res[1].Start; s.Before(want) || s.After(want.Add(pol.Interval)) {
		t.Errorf("high job started at %s, want within an interval of the victim's 10 minutes", s.Sub(twinT0))
	}
}

// The cycles made from the twin's sched.Base decide as cycles built from
// the snapshot did: on a mixed workload — QOS preemption that requeues
// and cancels, fairshare and age priorities, arrays with %MAX,
// dependencies, cancellations, multi-node and fractional jobs, --begin,
// jobs running at the start, weighted nodes and an unhealthy GPU — every
// plan (starts with their nodes and devices, preemptions, reasons) is
// the same, and so is every job's outcome.
func TestTwinBaseDecidesAsFullSetup(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	nodes := twinNodes(6, 8)
	for i := range nodes {
		nodes[i].Weight = (i * 7) % 3
	}
	nodes[2].GPUs[5].Unhealthy = true
	var jobs []TwinJob
	for i := range 240 {
		at := time.Duration(i)*60*time.Second + time.Duration(rng.IntN(30))*time.Second
		j := twinJob(i+1, at, time.Duration(60+rng.IntN(2400))*time.Second, []int{1, 1, 2, 4, 8}[rng.IntN(5)])
		j.Account = []string{"a", "b", "c"}[rng.IntN(3)]
		j.User = j.Account + string(rune('0'+rng.IntN(3)))
		switch rng.IntN(12) {
		case 0:
			j.QOS = "high"
		case 1, 2:
			j.QOS = "low"
		case 3:
			j.QOS = "scav"
		}
		switch rng.IntN(14) {
		case 0:
			j.Req.Nodes, j.Req.GPUsPerNode = 2, 4
		case 1:
			j.Req.GPUsPerNode, j.Req.GPUFraction = 0, 0.5
		case 2:
			j.Depend = "afterok:" + strconv.Itoa(max(1, i-3))
		case 3:
			j.CancelAt = j.Submit.Add(10 * time.Minute)
		case 4:
			j.Begin = j.Submit.Add(20 * time.Minute)
		case 5:
			j.Depend = "afterany:" + strconv.Itoa(max(1, i-1))
		}
		if i >= 200 && i < 216 {
			j.ArrayJobID, j.ArrayTaskID, j.ArrayMax = 201, i-200, 3
		}
		j.Runtime = min(j.Runtime, j.TimeLimit)
		if i%50 == 7 {
			j.Runtime = 3 * j.TimeLimit // runs into its limit
		}
		jobs = append(jobs, j)
	}
	fixed := twinJob(1000, -time.Hour, 3*time.Hour, 2)
	fixed.Fixed, fixed.RealStart = true, twinT0.Add(-time.Hour)
	fixed.Alloc = []spec.NodeAlloc{{Node: nodes[0].Name, CPUs: 2, GPUs: []string{nodes[0].GPUs[0].UUID, nodes[0].GPUs[1].UUID}}}
	jobs = append(jobs, fixed)
	pol := TwinPolicy{Interval: 5 * time.Second, Partitions: []sched.Partition{{Name: "gpu"}},
		QOS: []sched.QOS{{Name: "normal"}, {Name: "high", Priority: 1000, Preempt: []string{"low", "scav"}, PreemptMode: "requeue"},
			{Name: "low"}, {Name: "scav", PreemptMode: "cancel"}},
		Accounts:  &fairshare.Tree{Accounts: []fairshare.Account{{Name: "a", Shares: 4}, {Name: "b", Shares: 2}, {Name: "c", Shares: 1}}},
		Fairshare: fairshare.Config{HalfLife: time.Hour}}
	pol.Config.Priority.Weights = priority.Weights{Age: 10, Fairshare: 100000, QOS: 100000}
	pol.Config.BackfillDepth = 50
	type planAt struct {
		at   time.Time
		plan sched.Plan
	}
	run := func(full bool) (*TwinResult, []planAt) {
		t.Helper()
		defer func(old bool) { twinFullSetup = old }(twinFullSetup)
		twinFullSetup = full
		var plans []planAt
		r, err := RunTwin(slices.Clone(jobs), TwinOptions{Nodes: nodes, Policy: pol, Start: twinT0,
			OnPlan: func(at time.Time, p sched.Plan) { plans = append(plans, planAt{at, p}) }})
		if err != nil {
			t.Fatal(err)
		}
		lean, err := RunTwin(slices.Clone(jobs), TwinOptions{Nodes: nodes, Policy: pol, Start: twinT0})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.Res, lean.Res) {
			t.Errorf("full setup %v: the outcomes with OnPlan set differ from those without", full)
		}
		return lean, plans
	}
	old, oldPlans := run(true)
	kept, keptPlans := run(false)
	if len(oldPlans) != len(keptPlans) {
		t.Fatalf("%d plans from the kept setup, %d built from the snapshot", len(keptPlans), len(oldPlans))
	}
	starts := 0
	for k := range oldPlans {
		if !reflect.DeepEqual(oldPlans[k], keptPlans[k]) {
			t.Fatalf("plan %d at %s: from the kept setup\n%+v\nbuilt from the snapshot\n%+v", k, keptPlans[k].at.Sub(twinT0),
				keptPlans[k].plan, oldPlans[k].plan)
		}
		starts += len(oldPlans[k].plan.Starts)
	}
	for i := range jobs {
		if old.Res[i] != kept.Res[i] {
			t.Errorf("job %d: %+v from the kept setup, %+v built from the snapshot", jobs[i].ID, kept.Res[i], old.Res[i])
		}
	}
	if old.Preemptions == 0 || old.Skipped == 0 || old.Unordered == 0 || starts < len(jobs)*9/10 {
		t.Errorf("%d preemptions, %d cycles skipped, %d without a fairshare report, %d starts: the workload should preempt, skip and order cycles and start most jobs",
			old.Preemptions, old.Skipped, old.Unordered, starts)
	}
	t.Logf("%d plans, %d starts, %d preemptions; without OnPlan %d cycles (%d skipped, %d without a report)", len(oldPlans), starts,
		old.Preemptions, old.Cycles, old.Skipped, old.Unordered)
}
