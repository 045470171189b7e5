package schedtest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/preempt"
	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

// The must-show: an 8-GPU node with a 4-GPU 10-minute job
// running; an 8-GPU job waits (Resources, expected start at the running
// job's end), a 2-GPU 1-minute job backfills, a 2-GPU 60-minute job waits
// (Reservation: it would delay the 8-GPU job).
func TestBackfillMustShow(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(8).Obj())
	h.Submit(MakeJob(1).GPUs(4).Time(10 * time.Minute).Obj())
	if first := h.Cycle(); len(first.Starts) != 1 || first.Starts[0].Backfilled {
		t.Errorf("first cycle starts %+v; want job 1, not backfilled (no reservation held)", first.Starts)
	}
	if !h.IsRunning(1) {
		t.Fatal("job 1 did not start")
	}
	h.Advance(time.Minute)
	h.Submit(MakeJob(2).GPUs(8).Time(30*time.Minute).Obj(), MakeJob(3).GPUs(2).Time(time.Minute).Obj(),
		MakeJob(4).GPUs(2).Time(60*time.Minute).Obj())
	plan := h.Cycle()
	if got, want := h.Reason(2), spec.ReasonResources; got != want {
		t.Errorf("job 2 reason = %q, want %q", got, want)
	}
	if got, want := h.ExpectedStart(2), T0.Add(10*time.Minute); !got.Equal(want) {
		t.Errorf("job 2 expected start = %s, want %s (job 1's end)", got, want)
	}
	if !h.IsRunning(3) {
		t.Errorf("job 3 (2 GPUs, 1 min) did not backfill; plan %+v", plan)
	}
	for _, s := range plan.Starts {
		if !s.Backfilled || s.JobID != 3 {
			t.Errorf("start %d: Backfilled = %v; want only job 3's start, made under job 2's reservation", s.JobID, s.Backfilled)
		}
	}
	if got, want := h.Reason(4), spec.ReasonReservation; got != want {
		t.Errorf("job 4 reason = %q, want %q", got, want)
	}
	// Job 4 gets its own reservation after job 2.
	if got, want := h.ExpectedStart(4), T0.Add(40*time.Minute); !got.Equal(want) {
		t.Errorf("job 4 expected start = %s, want %s", got, want)
	}
	h.Advance(9 * time.Minute) // job 1 ends at 10 min, job 3 at 2 min
	h.Cycle()
	if !h.IsRunning(2) || h.IsRunning(4) {
		t.Fatalf("at 10 min: running %v, want [2]", h.RunningIDs())
	}
	h.Run(time.Minute, 200)
	if diff := cmp.Diff([]spec.JobID{3, 1, 2, 4}, h.Finished); diff != "" {
		t.Errorf("finish order (-want +got):\n%s", diff)
	}
}

func qosSet() []sched.QOS {
	return []sched.QOS{
		{Name: "low", Priority: 0},
		{Name: "normal", Priority: 100},
		{Name: "high", Priority: 1000, Preempt: []string{"low"}, PreemptMode: preempt.ModeRequeue},
	}
}

// The controller's priority today: QOS priority × 100000 − nice.
func qjob(id spec.JobID, qos string, gpus int, d time.Duration) *JobBuilder {
	p := map[string]int64{"low": 0, "normal": 100, "high": 1000}[qos] * 100000
	return MakeJob(id).QOS(qos).GPUs(gpus).Time(d).Priority(p)
}

func TestPreemptHighQOSRequeuesLow(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(8).Obj())
	h.QOS = qosSet()
	h.Submit(qjob(1, "low", 8, 2*time.Hour).Obj())
	h.SubmitRuns(qjob(3, "low", 2, 2*time.Hour).Obj(), time.Hour)
	h.Cycle()
	h.Advance(10 * time.Minute)
	h.Submit(qjob(2, "high", 4, 30*time.Minute).Obj())
	plan := h.Cycle()
	want := []sched.Preemption{{Victim: 1, Preemptor: 2, Mode: preempt.ModeRequeue, Reason: "preempted by job 2 (QOS high)"}}
	if diff := cmp.Diff(want, plan.Preemptions); diff != "" {
		t.Fatalf("preemptions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]spec.JobID{1, 2, 3}, h.Pending()); diff != "" {
		t.Errorf("pending after the requeue (-want +got):\n%s", diff)
	}
	h.Cycle()
	if !h.IsRunning(2) {
		t.Fatalf("job 2 not running after its victim was stopped; running %v pending %v", h.RunningIDs(), h.Pending())
	}
	h.Run(10*time.Minute, 100)
	if got := h.Attempts(1); got != 2 {
		t.Errorf("job 1 started %d times, want 2 (requeued with the same id)", got)
	}
	if len(h.Pending()) != 0 {
		t.Errorf("still pending: %v", h.Pending())
	}
}

func TestPreemptRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		victimQOS  string
		minRuntime time.Duration
		mode       string
		wantVictim bool
	}{
		{name: "lower listed QOS is preempted", victimQOS: "low", wantVictim: true},
		{name: "equal QOS is never preempted", victimQOS: "high"},
		{name: "unlisted QOS is not preempted", victimQOS: "normal"},
		{name: "minimum run time protects", victimQOS: "low", minRuntime: time.Hour},
		{name: "cancel mode", victimQOS: "low", mode: preempt.ModeCancel, wantVictim: true},
		{name: "checkpoint mode waits the grace time", victimQOS: "low", mode: preempt.ModeCheckpoint, wantVictim: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := New(t, MakeNode("n1").GPUs(8).Obj())
			h.QOS = qosSet()
			h.QOS[2].Preempt = []string{"low", "high"} // listing an equal QOS is still refused
			if tc.mode != "" {
				h.QOS[2].PreemptMode = tc.mode
			}
			h.Cfg.PreemptMinRuntime = tc.minRuntime
			h.Cfg.CheckpointGrace = 2 * time.Minute
			h.Submit(qjob(1, tc.victimQOS, 8, 2*time.Hour).Priority(0).Obj())
			h.Cycle()
			h.Advance(10 * time.Minute)
			h.Submit(qjob(2, "high", 4, 30*time.Minute).Obj())
			plan := h.Cycle()
			if got := len(plan.Preemptions) == 1; got != tc.wantVictim {
				t.Fatalf("preempted = %v, want %v: %+v", got, tc.wantVictim, plan.Preemptions)
			}
			if !tc.wantVictim {
				if got := h.ExpectedStart(2); !got.Equal(T0.Add(2 * time.Hour)) {
					t.Errorf("job 2 expected start %s, want the victim's end", got)
				}
				return
			}
			wantStart := h.Now
			if tc.mode == preempt.ModeCheckpoint {
				wantStart = h.Now.Add(2 * time.Minute)
			}
			if got := h.ExpectedStart(2); !got.Equal(wantStart) {
				t.Errorf("job 2 expected start %s, want %s", got, wantStart)
			}
			if tc.mode == preempt.ModeCancel && len(h.Cancelled) != 1 {
				t.Errorf("cancelled %v, want [1]", h.Cancelled)
			}
		})
	}
}

// Least lost work: of two low jobs, the one that checkpointed most
// recently (then the one that ran least) is the victim.
func TestPreemptVictimChoice(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(4).Obj(), MakeNode("n2").GPUs(4).Obj())
	h.QOS = qosSet()
	h.Submit(qjob(1, "low", 4, 5*time.Hour).Obj())
	h.Cycle()
	h.Advance(time.Hour)
	h.Submit(qjob(3, "low", 4, 5*time.Hour).Obj())
	h.Cycle()
	h.Advance(time.Hour)
	h.Submit(qjob(2, "high", 2, time.Hour).Obj())
	plan := h.Cycle()
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].Victim != 3 {
		t.Fatalf("victims %+v, want job 3 (ran least)", plan.Preemptions)
	}
	// Now a checkpoint makes job 1 the cheaper victim.
	h2 := New(t, MakeNode("n1").GPUs(4).Obj(), MakeNode("n2").GPUs(4).Obj())
	h2.QOS = qosSet()
	h2.Submit(qjob(1, "low", 4, 5*time.Hour).Obj())
	h2.Cycle()
	h2.Advance(time.Hour)
	h2.Submit(qjob(3, "low", 4, 5*time.Hour).Obj())
	h2.Cycle()
	h2.Advance(time.Hour)
	h2.Job(1).LastCheckpoint = h2.Now.Add(-time.Minute)
	h2.Submit(qjob(2, "high", 2, time.Hour).Obj())
	plan = h2.Cycle()
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].Victim != 1 {
		t.Fatalf("victims %+v, want job 1 (checkpointed a minute ago)", plan.Preemptions)
	}
}

// Two accounts with equal shares: the one with heavy past GPU usage is
// ordered second.
func TestFairshareOrdersLightAccountFirst(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(8).Obj())
	h.Accounts = fairshare.Tree{Accounts: []fairshare.Account{
		{Name: "heavy", Shares: 1, Users: []fairshare.User{{Name: "alice", Shares: 1}}},
		{Name: "light", Shares: 1, Users: []fairshare.User{{Name: "bob", Shares: 1}}},
	}}
	h.Usage = []fairshare.Usage{{Account: "heavy", User: "alice", Start: T0.Add(-48 * time.Hour), End: T0.Add(-24 * time.Hour), GPUs: 8, Model: "h100"},
		{Account: "light", User: "bob", Start: T0.Add(-48 * time.Hour), End: T0.Add(-47 * time.Hour), GPUs: 1, Model: "h100"}}
	h.Cfg.Priority = priority.Config{Weights: priority.Weights{Age: 1000, Fairshare: 10000, QOS: 1000}}
	h.Cfg.Fairshare = fairshare.Config{HalfLife: 7 * 24 * time.Hour}
	// alice submitted first: only fairshare can put bob ahead.
	h.Submit(MakeJob(1).Account("heavy", "alice").GPUs(8).Time(time.Hour).Submit(T0.Add(-time.Minute)).Obj(),
		MakeJob(2).Account("light", "bob").GPUs(8).Time(time.Hour).Obj())
	prios := sched.Priorities(h.Snapshot(), h.Now, h.Cfg)
	if prios[0].JobID != 2 || prios[0].Factors.Fairshare <= prios[1].Factors.Fairshare {
		t.Errorf("priority order %+v, want job 2 (light) first with the higher fairshare factor", prios)
	}
	h.Cycle()
	if !h.IsRunning(2) || h.IsRunning(1) {
		t.Errorf("running %v, want [2]", h.RunningIDs())
	}
	rep := fairshare.Compute(&h.Accounts, h.Usage, h.Now, h.Cfg.Fairshare)
	if rep.Factor("light", "bob") <= rep.Factor("heavy", "alice") {
		t.Errorf("factors light %v heavy %v: want light higher\n%+v", rep.Factor("light", "bob"), rep.Factor("heavy", "alice"), rep.Rows)
	}
}

func TestGangReservesAllNodes(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("a").GPUs(8).Obj(), MakeNode("b").GPUs(8).Obj(), MakeNode("c").GPUs(8).Obj())
	h.Submit(MakeJob(1).GPUs(4).Time(20*time.Minute).Obj(), MakeJob(2).GPUs(4).Time(40*time.Minute).Obj())
	h.Cycle()
	h.Submit(MakeJob(3).Nodes(3).GPUs(8).Time(time.Hour).Obj(), MakeJob(4).GPUs(8).Time(10*time.Minute).Obj(),
		MakeJob(5).GPUs(4).Time(30*time.Minute).Obj())
	plan := h.Cycle()
	if len(plan.Reservations) == 0 || plan.Reservations[0].JobID != 3 || len(plan.Reservations[0].Nodes) != 3 {
		t.Fatalf("reservations %+v, want job 3 on 3 nodes", plan.Reservations)
	}
	if got := h.ExpectedStart(3); !got.Equal(T0.Add(40 * time.Minute)) {
		t.Errorf("gang expected start %s, want +40m", got)
	}
	if !h.IsRunning(4) || !h.IsRunning(5) {
		t.Errorf("running %v; want 4 (10 min on c) and 5 (30 min beside job 1/2) backfilled", h.RunningIDs())
	}
	h.Run(5*time.Minute, 100)
	if len(h.Pending()) != 0 {
		t.Errorf("pending %v", h.Pending())
	}
}

func TestPendingReasons(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(8).Obj())
	h.QOS = []sched.QOS{{Name: "normal", Priority: 1, MaxGPUsPerUser: 4, MaxJobsPerAccount: 2}}
	h.Submit(
		MakeJob(1).Held().Obj(),
		MakeJob(2).Begin(T0.Add(time.Hour)).Obj(),
		MakeJob(3).DependencyPending().Obj(),
		MakeJob(4).DependencyNeverSatisfied().Obj(),
		MakeJob(5).QOS("normal").Account("a", "u").GPUs(3).Obj(),
		MakeJob(6).QOS("normal").Account("a", "u").GPUs(3).Obj(),
		MakeJob(7).QOS("normal").Account("a", "v").GPUs(1).Obj(),
		MakeJob(8).QOS("normal").Account("a", "w").GPUs(1).Obj(),
		func() sched.Job { j := MakeJob(9).Obj(); j.PartitionDown = true; return j }(),
	)
	h.Cycle()
	want := map[spec.JobID]string{1: spec.ReasonHeld, 2: spec.ReasonBeginTime, 3: spec.ReasonDependency,
		4: spec.ReasonDependencyNeverSatisfied, 6: spec.ReasonQOSLimit, 8: spec.ReasonAccountLimit, 9: spec.ReasonPartitionDown}
	got := map[spec.JobID]string{}
	for _, id := range h.Pending() {
		got[id] = h.Reason(id)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reasons (-want +got):\n%s", diff)
	}
}

// A preemptor awaiting the victims it stopped preempts no more, whatever
// its QOS allows; it keeps its QOS otherwise.
func TestAwaitingVictimsPreemptsNoMore(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("n1").GPUs(8).Obj())
	h.QOS = qosSet()
	h.Submit(qjob(1, "low", 8, 2*time.Hour).Obj())
	h.Cycle()
	h.Advance(10 * time.Minute)
	j := qjob(2, "high", 4, 30*time.Minute).Obj()
	j.AwaitingVictims = true
	h.Submit(j)
	if plan := h.Cycle(); len(plan.Preemptions) != 0 {
		t.Fatalf("preemptions %+v by a job awaiting its victims; want none", plan.Preemptions)
	}
	if got := h.Reason(2); got != spec.ReasonResources {
		t.Errorf("job 2 reason %q, want %q", got, spec.ReasonResources)
	}
}

// TestPartitionAlternatives: Slurm's sbatch -p a,b. A job that cannot
// start now in its first partition starts in the first of its others that
// can start it now, and the Start names it; one that can start in its
// first stays there; a partition whose maximum time the job exceeds is
// skipped; with none able to start it, it waits in its first partition.
// Every plan passes sched.Verify, which checks that each node is in the
// partition the job starts in.
func TestPartitionAlternatives(t *testing.T) {
	t.Parallel()
	h := New(t, MakeNode("a1").GPUs(4).Partitions("a").Obj(), MakeNode("b1").GPUs(4).Partitions("b").Obj(),
		MakeNode("c1").GPUs(8).Partitions("c").Obj())
	h.Partitions = []sched.Partition{{Name: "a"}, {Name: "b"}, {Name: "c", MaxTime: 10 * time.Minute}}
	h.Submit(MakeJob(1).GPUs(4).Time(time.Hour).Partition("a").Obj())
	h.Cycle()
	if !h.IsRunning(1) {
		t.Fatal("job 1 did not start in partition a")
	}
	// a is full: job 2 (a,c,b) starts in b; c admits no hour-long job.
	h.Submit(MakeJob(2).GPUs(4).Time(time.Hour).Partition("a").Alternatives("c", "b").Obj())
	plan := h.Cycle()
	if len(plan.Starts) != 1 || plan.Starts[0].Partition != "b" || plan.Starts[0].Nodes[0].Node != "b1" {
		t.Fatalf("job 2 starts %+v, want one start in partition b on b1", plan.Starts)
	}
	if got := h.Job(2).Partition; got != "b" {
		t.Errorf("job 2 runs in partition %q, want b", got)
	}
	// Both full: job 3 (a,b) waits in a, for Resources.
	h.Submit(MakeJob(3).GPUs(4).Time(time.Hour).Partition("a").Alternatives("b").Obj())
	h.Cycle()
	if h.IsRunning(3) || h.Reason(3) != spec.ReasonResources {
		t.Fatalf("job 3: running %v, reason %q; want pending for Resources", h.IsRunning(3), h.Reason(3))
	}
	// A short job listing c last still starts in c, the one that can.
	h.Submit(MakeJob(4).GPUs(4).Time(5*time.Minute).Partition("a").Alternatives("b", "c").Obj())
	plan = h.Cycle()
	if len(plan.Starts) != 1 || plan.Starts[0].JobID != 4 || plan.Starts[0].Partition != "c" {
		t.Fatalf("job 4 starts %+v, want one start in partition c", plan.Starts)
	}
	// A job whose first partition can start it stays there: the Start
	// names no alternative.
	h2 := New(t, MakeNode("a1").GPUs(4).Partitions("a").Obj(), MakeNode("b1").GPUs(4).Partitions("b").Obj())
	h2.Submit(MakeJob(5).GPUs(2).Time(time.Hour).Partition("a").Alternatives("b").Obj())
	plan = h2.Cycle()
	if len(plan.Starts) != 1 || plan.Starts[0].Partition != "" || plan.Starts[0].Nodes[0].Node != "a1" {
		t.Fatalf("job 5 starts %+v, want one start on a1 in its own partition", plan.Starts)
	}
}
