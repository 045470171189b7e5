package controller

import (
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/sched"
)

// gpud/config validates placement names without importing the scheduler;
// its list must be the scheduler's.
func TestConfigPlacementsAreSchedulers(t *testing.T) {
	var names []string
	for _, p := range sched.Placements {
		names = append(names, string(p))
	}
	if !slices.Equal(config.Placements, names) {
		t.Fatalf("config.Placements = %q, sched.Placements = %q; keep them equal", config.Placements, names)
	}
}

// FromConfig carries every scheduler setting of the file into the one
// sched mapping.
func TestFromConfigSchedPolicy(t *testing.T) {
	c := config.Defaults()
	c.Scheduler.BackfillDepth = 7
	c.Scheduler.MaxJobsPerCycle = 9
	c.Scheduler.PreemptMinRuntime = "5m"
	c.Scheduler.CheckpointGrace = "2m"
	c.Partitions[0].Placement = "spread"
	c.Partitions[0].PriorityTier = 3
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	cc, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	sp := cc.SchedPolicy()
	sc := sp.Config
	if sc.BackfillDepth != 7 || sc.MaxStartsPerCycle != 9 || sc.PreemptMinRuntime.Minutes() != 5 || sc.CheckpointGrace.Minutes() != 2 {
		t.Errorf("sched.Config = %+v, want the file's backfill depth, starts per cycle and preemption settings", sc)
	}
	if sc.Priority.Weights.Nice != 2*maxNice || sc.Priority.Weights.QOS != 10000 {
		t.Errorf("priority weights = %+v, want the file's and the nice weight", sc.Priority.Weights)
	}
	if len(sp.Partitions) != 1 || sp.Partitions[0].Placement != sched.PlaceSpread || sp.Partitions[0].Tier != 3 || sp.JobPartition != "gpu" {
		t.Errorf("partitions = %+v (job partition %q), want gpu, spread, tier 3", sp.Partitions, sp.JobPartition)
	}
	var high sched.QOS
	for _, q := range sp.QOS {
		if q.Name == "high" {
			high = q
		}
	}
	if high.PreemptMode != PreemptRequeue || !slices.Equal(high.Preempt, []string{"low"}) || sp.JobQOS != "normal" || sp.JobPriority != 100*qosWeight {
		t.Errorf("QOS high = %+v, job QOS %q priority %d; want preemption of low, normal, %d", high, sp.JobQOS, sp.JobPriority, 100*qosWeight)
	}
}
