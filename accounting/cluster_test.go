package accounting

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func TestClusterUsage(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(4 * 3600).Time }))
	ctx := context.Background()
	a100 := spec.Resources{Nodes: 1, CPUsPerNode: 1, GPUsPerNode: 1, GPUModel: "a100"}
	record(t, db,
		MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-1", "GPU-2")).End(3600, spec.StateCompleted).Obj(),
		MakeJob(2).Resources(a100).Ran(1, 7200, node("n2", 1, "GPU-9")).Obj(), // still running at now
		// Two 1g.10gb slices (1/7 of a GPU each) for an hour.
		MakeJob(3).Resources(spec.Resources{Nodes: 1, GPUsPerNode: 2, GPUModel: "h100", GPUProfile: "1g.10gb"}).
			Ran(1, 3600, node("n1", 1, "MIG-a", "MIG-b")).End(7200, spec.StateCompleted).Obj())
	if err := db.RecordUsageSamples(ctx, []UsageSample{
		{ID: "s1", JobID: 1, Attempt: 1, Node: "n1", Start: at(1800).Time, End: at(3600).Time, GPUs: 2, GPUUtilAvg: 1},
		{ID: "s2", JobID: 1, Attempt: 1, Node: "n1", Start: at(0).Time, End: at(1800).Time, GPUs: 2, GPUUtilAvg: 90},
		{ID: "s3", JobID: 3, Attempt: 1, Node: "n1", Start: at(3600).Time, End: at(7200).Time, GPUs: 2, GPUUtilAvg: 0},
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordNodeEvents(ctx, []spec.NodeEvent{
		{Time: at(-1000).Time, Node: "n1", Event: spec.NodeEventDown, Reason: "not responding", Actor: "gpud"},
		{Time: at(1800).Time, Node: "n1", Event: spec.NodeEventUp, Actor: "gpud"},
		{Time: at(3600).Time, Node: "n2", Event: spec.NodeEventDrain, Reason: "fan", Actor: "root"},
		{Time: at(4000).Time, Node: "n2", Event: spec.NodeEventDown, Actor: "gpud"}, // drained and down: counted once
		{Time: at(5400).Time, Node: "n2", Event: spec.NodeEventResume, Actor: "root"},
		{Time: at(3 * 3600).Time, Node: "gone", Event: spec.NodeEventDown, Actor: "gpud"}, // not in the inventory
		// Power saving: n2 powered down for the last hour, n1 for 10
		// minutes; neither is down time. n1 was also powered down from
		// before the window to 600 while DOWN (a failed resume, down~):
		// down time only, not counted twice.
		{Time: at(3 * 3600).Time, Node: "n2", Event: spec.NodeEventPowerDown, Actor: "gpud"},
		{Time: at(-600).Time, Node: "n1", Event: spec.NodeEventPowerDown, Actor: "gpud"},
		{Time: at(600).Time, Node: "n1", Event: spec.NodeEventPowerUp, Actor: "gpud"},
		{Time: at(2000).Time, Node: "n1", Event: spec.NodeEventPowerDown, Actor: "gpud"},
		{Time: at(2600).Time, Node: "n1", Event: spec.NodeEventPowerUp, Actor: "gpud"},
	}); err != nil {
		t.Fatal(err)
	}
	inv := []NodeGPUs{{Node: "n1", Model: "h100", GPUs: 4}, {Node: "n2", Model: "a100", GPUs: 2}}
	got, err := db.ClusterUsage(ctx, at(0).Time, at(4*3600).Time, time.Hour, inv)
	if err != nil {
		t.Fatal(err)
	}
	want := []ClusterRow{
		{Model: "a100", GPUs: 2, TotalGPUHours: 8, AllocatedGPUHours: 2, DownGPUHours: 1, PoweredDownGPUHours: 2},
		{Model: "h100", GPUs: 4, TotalGPUHours: 16, AllocatedGPUHours: 2 + 2.0/7, IdleGPUHours: 1 + 2.0/7, DownGPUHours: 2, PoweredDownGPUHours: 4 * 600.0 / 3600},
		{Model: "h100", Profile: "1g.10gb", AllocatedGPUHours: 2.0 / 7, IdleGPUHours: 2.0 / 7},
	}
	if len(got.Rows) != len(want) {
		t.Fatalf("rows = %+v, want %+v", got.Rows, want)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for i, w := range want {
		g := got.Rows[i]
		if g.Model != w.Model || g.Profile != w.Profile || g.GPUs != w.GPUs || !near(g.TotalGPUHours, w.TotalGPUHours) ||
			!near(g.AllocatedGPUHours, w.AllocatedGPUHours) || !near(g.IdleGPUHours, w.IdleGPUHours) || !near(g.DownGPUHours, w.DownGPUHours) ||
			!near(g.PoweredDownGPUHours, w.PoweredDownGPUHours) {
			t.Errorf("row %d = %+v, want %+v", i, g, w)
		}
	}
	wantSeries := []UtilPoint{
		{Time: at(0).Time, CapacityGPUHours: 6, AllocatedGPUHours: 2, DownGPUHours: 2},
		{Time: at(3600).Time, CapacityGPUHours: 6, AllocatedGPUHours: 2.0 / 7, DownGPUHours: 1},
		{Time: at(7200).Time, CapacityGPUHours: 6, AllocatedGPUHours: 1},
		{Time: at(10800).Time, CapacityGPUHours: 6, AllocatedGPUHours: 1},
	}
	if len(got.Series) != len(wantSeries) {
		t.Fatalf("series = %+v, want %+v", got.Series, wantSeries)
	}
	for i, w := range wantSeries {
		g := got.Series[i]
		if !g.Time.Equal(w.Time) || !near(g.CapacityGPUHours, w.CapacityGPUHours) || !near(g.AllocatedGPUHours, w.AllocatedGPUHours) || !near(g.DownGPUHours, w.DownGPUHours) {
			t.Errorf("bucket %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestClusterUsageRejectsBadWindows(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	for _, tc := range []struct {
		start, end time.Time
		bucket     time.Duration
	}{
		{at(0).Time, at(0).Time, time.Hour},
		{time.Time{}, at(10).Time, time.Hour},
		{at(0).Time, at(365 * 86400).Time, time.Minute},
		{at(0).Time, at(3600).Time, 0},
	} {
		if _, err := db.ClusterUsage(ctx, tc.start, tc.end, tc.bucket, nil); !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("ClusterUsage(%s, %s, %s) = %v, want ErrInvalid", tc.start, tc.end, tc.bucket, err)
		}
	}
}
