package sched

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestVictimSearch: the preemption search offers, for a preemptor, the
// node whose victims cost least (lowest priority first, then least work
// lost), leaves alone jobs of QOS it may not preempt and jobs younger
// than PreemptMinRuntime, and changes nothing in the cycle.
func TestVictimSearch(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", 16, 1000, "h100", 8), node("b", 16, 1000, "h100", 8), node("c", 16, 1000, "h100", 8)}
	var running []RunningJob
	hold := func(id spec.JobID, n int, qos string, prio int64, age time.Duration) {
		var uuids []string
		for k := range 8 {
			nodes[n].GPUs[k].Free = false
			uuids = append(uuids, nodes[n].GPUs[k].UUID)
		}
		running = append(running, RunningJob{ID: id, QOS: qos, Priority: prio, Start: t0.Add(-age), TimeLimit: 10 * time.Hour,
			Nodes: []spec.NodeAlloc{{Node: nodes[n].Name, CPUs: 1, GPUs: uuids}}})
	}
	hold(10, 0, "low", 5, 2*time.Hour)    // a: low priority 5, 2 h of work
	hold(11, 1, "low", 5, time.Hour)      // b: same priority, 1 h of work: cheapest
	hold(12, 2, "normal", 1, time.Minute) // c: a QOS high may not preempt
	snap := &Snapshot{Nodes: nodes, Running: running, QOS: []QOS{{Name: "low", Priority: 0}, {Name: "normal", Priority: 100},
		{Name: "high", Priority: 1000, Preempt: []string{"low"}}}}
	c := newCycle(snap, t0, Config{})
	j := job(1, 1, 8, func(j *Job) { j.QOS = "high"; j.TimeLimit = time.Hour })
	opts := c.victims.search(c, &j, c.qos["high"], 1000, int64(time.Hour), 0)
	if len(opts) != 1 || c.nodes[opts[0].node].n.Name != "b" || len(opts[0].victims) != 1 || opts[0].victims[0].ID != 11 {
		t.Fatalf("search = %+v; want node b with job 11 as the only victim", opts)
	}
	for i := range c.running {
		if c.running[i].gone {
			t.Errorf("search marked running job %d gone", c.running[i].r.ID)
		}
	}
	if len(c.plan.Preemptions) != 0 || len(c.plan.Reservations) != 0 {
		t.Errorf("search changed the plan: %+v", c.plan)
	}
	// A gang of two takes both low nodes.
	gang := job(2, 1, 8, func(j *Job) { j.QOS = "high"; j.TimeLimit = time.Hour; j.Req.Nodes = 2 })
	if opts := c.victims.search(c, &gang, c.qos["high"], 1000, int64(time.Hour), 0); len(opts) != 2 ||
		c.nodes[opts[0].node].n.Name != "b" || c.nodes[opts[1].node].n.Name != "a" {
		t.Errorf("gang search = %+v; want b then a", opts)
	}
	// Jobs younger than PreemptMinRuntime are protected.
	c = newCycle(snap, t0, Config{PreemptMinRuntime: 3 * time.Hour})
	if opts := c.victims.search(c, &j, c.qos["high"], 1000, int64(time.Hour), 0); len(opts) != 0 {
		t.Errorf("search with every victim under PreemptMinRuntime = %+v; want none", opts)
	}
}

// TestVictimFreesPastItsEnd: a victim's GPUs are free for its preemptor
// beyond the victim's own expected end. Free GPUs are a bit mask in the
// profile, so releasing them from now on (a no-op past the victim's end,
// where they were free already) and holding them again from its end on
// left them taken forever after it: the preemptor's reservation, whose
// time limit outlasted its victim's remaining time, held none of them.
func TestVictimFreesPastItsEnd(t *testing.T) {
	t.Parallel()
	n := node("a", 16, 1000, "h100", 8)
	var uuids []string
	for k := range 8 {
		n.GPUs[k].Free = false
		uuids = append(uuids, n.GPUs[k].UUID)
	}
	n.FreeCPUs, n.Allocs = 15, 1
	// 9 h into a 10 h limit: expected to end in an hour.
	running := []RunningJob{{ID: 10, QOS: "low", Priority: 5, Start: t0.Add(-9 * time.Hour), TimeLimit: 10 * time.Hour,
		Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: uuids}}}}
	qos := []QOS{{Name: "low"}, {Name: "high", Priority: 1000, Preempt: []string{"low"}}}
	hi := job(1, 1, 8, func(j *Job) { j.QOS, j.TimeLimit, j.Priority = "high", 2*time.Hour, 100 })
	p := Schedule(&Snapshot{Nodes: []Node{n}, Running: running, QOS: qos, Jobs: []Job{hi}}, t0, Config{})
	if len(p.Preemptions) != 1 || p.Preemptions[0].Victim != 10 {
		t.Fatalf("preemptions %+v; want job 10", p.Preemptions)
	}
	if len(p.Reservations) != 1 || len(p.Reservations[0].Nodes) != 1 || len(p.Reservations[0].Nodes[0].GPUs) != 8 {
		t.Errorf("the preemptor's reservation %+v; want the victim's 8 GPUs on node a for its 2 h", p.Reservations)
	}
}
