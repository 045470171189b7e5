package sched

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// powered returns n in power state p; a powered-down node's GPUs are
// shown as its declaration gives them (all free).
func powered(n Node, p spec.PowerState) Node {
	n.Power = p
	return n
}

// The burst: two nodes always on (busy), four powered down; six
// 8-GPU jobs. Schedule starts nothing on the powered-down nodes; PlanPower
// powers up four for the four jobs that need them and no more (two jobs
// still wait for the busy nodes, which hold no power-up).
func TestPlanPowerBurst(t *testing.T) {
	t.Parallel()
	var nodes []Node
	for _, name := range []string{"a1", "a2"} {
		n := node(name, 64, 1000, "h100", 8)
		n.FreeCPUs = 0 // busy with work not in the snapshot
		for k := range n.GPUs {
			n.GPUs[k].Free = false
		}
		n.Allocs = 1
		nodes = append(nodes, n)
	}
	for _, name := range []string{"c1", "c2", "c3", "c4"} {
		nodes = append(nodes, powered(node(name, 64, 1000, "h100", 8), spec.PoweredDown))
	}
	var jobs []Job
	for id := range spec.JobID(6) {
		jobs = append(jobs, job(id+1, 8, 8))
	}
	snap := &Snapshot{Nodes: nodes, Jobs: jobs}
	if st := startsOf(Schedule(snap, t0, Config{})); len(st) != 0 {
		t.Fatalf("Schedule started jobs on powered-down nodes: %v", st)
	}
	p := PlanPower(snap, t0, Config{}, PowerConfig{MaxResume: -1, MaxSuspend: -1})
	if diff := cmp.Diff([]string{"c1", "c2", "c3", "c4"}, p.Resume); diff != "" {
		t.Errorf("Resume (-want +got):\n%s", diff)
	}
	var waiting []spec.JobID
	for _, w := range p.Waiting {
		waiting = append(waiting, w.JobID)
		if len(w.Coming) != 1 || !slices.Equal(w.Nodes, w.Coming) {
			t.Errorf("job %d waits for %v (nodes %v), want one powered-down node", w.JobID, w.Coming, w.Nodes)
		}
	}
	if diff := cmp.Diff([]spec.JobID{1, 2, 3, 4}, waiting); diff != "" {
		t.Errorf("Waiting jobs (-want +got):\n%s", diff)
	}

	// Next tick: the four are POWERING_UP. The same jobs wait for them;
	// nothing more is powered up.
	for i := 2; i < 6; i++ {
		nodes[i].Power = spec.PoweringUp
	}
	p = PlanPower(snap, t0.Add(time.Second), Config{}, PowerConfig{MaxResume: -1})
	if len(p.Resume) != 0 || len(p.Waiting) != 4 {
		t.Errorf("while powering up: Resume %v, %d waiting; want none and 4", p.Resume, len(p.Waiting))
	}

	// ResumeRate: a budget of 3 powers up three jobs' nodes.
	for i := 2; i < 6; i++ {
		nodes[i].Power = spec.PoweredDown
	}
	p = PlanPower(snap, t0, Config{}, PowerConfig{MaxResume: 3})
	if len(p.Resume) != 3 {
		t.Errorf("MaxResume 3 resumed %v", p.Resume)
	}
}

// A gang job powers up all of its nodes or none; a down~ node (resume
// failed) is not planned on; a job that fits on a powered-on node powers
// nothing up.
func TestPlanPowerGangAndDown(t *testing.T) {
	t.Parallel()
	on := node("a", 8, 1000, "h100", 2)
	c1 := powered(node("c1", 8, 1000, "h100", 8), spec.PoweredDown)
	c2 := powered(node("c2", 8, 1000, "h100", 8), spec.PoweredDown)
	c2.State = spec.NodeDown
	c3 := powered(node("c3", 8, 1000, "h100", 8), spec.PoweredDown)
	gang := job(1, 8, 8, func(j *Job) { j.Req.Nodes = 2 })
	small := job(2, 1, 1)
	snap := &Snapshot{Nodes: []Node{on, c1, c2, c3}, Jobs: []Job{gang, small}}
	p := PlanPower(snap, t0, Config{}, PowerConfig{MaxResume: -1})
	if diff := cmp.Diff([]string{"c1", "c3"}, p.Resume); diff != "" {
		t.Errorf("Resume (-want +got):\n%s", diff)
	}
	if len(p.Waiting) != 1 || p.Waiting[0].JobID != 1 {
		t.Errorf("Waiting %+v, want only the gang job", p.Waiting)
	}
	// Budget 1 < the gang's 2 nodes: nothing half-powered.
	if p := PlanPower(snap, t0, Config{}, PowerConfig{MaxResume: 1}); len(p.Resume) != 0 {
		t.Errorf("MaxResume 1 resumed %v for a 2-node gang", p.Resume)
	}
}

// Idle nodes power down after SuspendTime, exempt ones never, busy ones
// and those a waiting job needs never.
func TestPlanPowerSuspend(t *testing.T) {
	t.Parallel()
	idle := func(name string, since time.Duration) Node {
		n := node(name, 8, 1000, "h100", 8)
		n.IdleSince = t0.Add(-since)
		return n
	}
	busy := idle("busy", time.Hour)
	busy.Allocs = 1
	busy.State = spec.NodeMixed
	nodes := []Node{idle("long", 10*time.Minute), idle("short", time.Minute), idle("exempt", time.Hour), busy,
		idle("fresh", 0), powered(idle("off", time.Hour), spec.PoweredDown)}
	nodes[4].IdleSince = time.Time{} // unknown: not judged
	snap := &Snapshot{Nodes: nodes}
	pc := PowerConfig{SuspendTime: 5 * time.Minute, Exempt: []string{"exempt"}, MaxResume: -1, MaxSuspend: -1}
	if diff := cmp.Diff([]string{"long"}, PlanPower(snap, t0, Config{}, pc).Suspend); diff != "" {
		t.Errorf("Suspend (-want +got):\n%s", diff)
	}
	pc.MaxSuspend = 0
	if got := PlanPower(snap, t0, Config{}, pc).Suspend; len(got) != 0 {
		t.Errorf("MaxSuspend 0 suspended %v", got)
	}
	// A 5-node gang needs the four idle nodes and the powered-down one:
	// "long" stays on for it.
	pc.MaxSuspend = -1
	snap.Jobs = []Job{job(1, 8, 8, func(j *Job) { j.Req.Nodes = 5 })}
	p := PlanPower(snap, t0, Config{}, pc)
	if slices.Contains(p.Suspend, "long") || !slices.Contains(p.Resume, "off") {
		t.Errorf("gang waiting on long+off: Suspend %v Resume %v", p.Suspend, p.Resume)
	}
}
