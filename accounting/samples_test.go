package accounting

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestUsageSamplesIntoRecords: samples give a job its mean GPU
// utilisation and energy; a re-delivered sample counts once; CO2 and cost
// follow the configured intensity and prices; MIG jobs have slice-hours;
// and Summary's totals are the sum of the records.
func TestUsageSamplesIntoRecords(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }),
		WithGridIntensity(400), WithPrices(func(m string) float64 { return map[string]float64{"h100": 3, "a100": 1}[m] }))
	ctx := context.Background()
	mig := spec.Resources{Nodes: 1, CPUsPerNode: 2, GPUsPerNode: 2, GPUModel: "a100", GPUProfile: "1g.10gb"}
	record(t, db,
		MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-1", "GPU-2")).End(3600, spec.StateCompleted).Obj(),
		MakeJob(2).User("bob").Resources(mig).Ran(1, 0, node("n2", 2, "MIG-1", "MIG-2")).End(1800, spec.StateCompleted).Obj(),
	)
	sample := func(id string, job spec.JobID, start, end int64, gpus int, util, powerW float64) UsageSample {
		return UsageSample{ID: id, JobID: job, Attempt: 1, Node: "n1", Start: at(start).Time, End: at(end).Time, GPUs: gpus,
			GPUUtilAvg: util, GPUUtilMax: util, PowerW: powerW, EnergyJ: powerW * float64(end-start)}
	}
	first := []UsageSample{sample("n1/a1/1", 1, 0, 1200, 2, 30, 600), sample("n1/a1/2", 1, 1200, 3600, 2, 60, 800)}
	for range 2 { // the second delivery is a retry: stored once
		if err := db.RecordUsageSamples(ctx, first); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.RecordUsageSamples(ctx, []UsageSample{sample("n2/a1/1", 2, 0, 1800, 2, 90, 100)}); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordUsageSamples(ctx, []UsageSample{{ID: "bad", JobID: 1, Node: "n1"}}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("sample without an interval: err = %v, want invalid", err)
	}
	rs := jobs(t, db, Filter{})
	if len(rs) != 2 {
		t.Fatalf("%d records, want 2", len(rs))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	r1, r2 := rs[0], rs[1]
	energy1 := (600*1200 + 800*2400) / 3.6e6
	if !near(r1.GPUUtil, (30*1200+60*2400)/3600.0) || !near(r1.EnergyKWh, energy1) || !near(r1.CO2Kg, energy1*0.4) ||
		!near(r1.Cost, 2*3) || r1.SliceHours != 0 {
		t.Errorf("job 1 = util %v energy %v co2 %v cost %v slices %v; want %v, %v, %v, 6, 0",
			r1.GPUUtil, r1.EnergyKWh, r1.CO2Kg, r1.Cost, r1.SliceHours, (30*1200+60*2400)/3600.0, energy1, energy1*0.4)
	}
	// Two 1g slices of an A100 for half an hour: 1 slice-hour, 1/7 GPU-hour.
	if !near(r2.SliceHours, 1) || !near(r2.GPUHours, 1.0/7) || !near(r2.Cost, 1.0/7) || !near(r2.GPUUtil, 90) {
		t.Errorf("MIG job = slices %v GPU-hours %v cost %v util %v; want 1, 1/7, 1/7, 90", r2.SliceHours, r2.GPUHours, r2.Cost, r2.GPUUtil)
	}
	sum, err := db.Summary(ctx, Filter{}, GroupByAccount)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 1 || sum[0].Jobs != 2 || !near(sum[0].GPUHours, r1.GPUHours+r2.GPUHours) || !near(sum[0].SliceHours, 1) ||
		!near(sum[0].EnergyKWh, r1.EnergyKWh+r2.EnergyKWh) || !near(sum[0].CO2Kg, r1.CO2Kg+r2.CO2Kg) || !near(sum[0].Cost, r1.Cost+r2.Cost) {
		t.Errorf("summary %+v is not the sum of %+v and %+v", sum, r1, r2)
	}
}

// TestIdleGPUHours: samples under IdleUtilPct count as allocated but idle
// in the summary of their job's user.
func TestIdleGPUHours(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	ctx := context.Background()
	record(t, db, MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-1", "GPU-2")).End(3600, spec.StateCompleted).Obj())
	s := func(id string, start, end int64, util float64) UsageSample {
		return UsageSample{ID: id, JobID: 1, Attempt: 1, Node: "n1", Start: at(start).Time, End: at(end).Time, GPUs: 2, GPUUtilAvg: util}
	}
	if err := db.RecordUsageSamples(ctx, []UsageSample{s("a", 0, 1800, 1), s("b", 1800, 3600, IdleUtilPct)}); err != nil {
		t.Fatal(err)
	}
	sum, err := db.Summary(ctx, Filter{}, GroupByUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum) != 1 || math.Abs(sum[0].IdleGPUHours-1) > 1e-9 {
		t.Errorf("summary %+v; want alice with 1 idle GPU-hour (2 GPUs × 30 min under %d%%)", sum, IdleUtilPct)
	}
}

// TestJobTotalsKept: an ended job's row carries the totals of all its
// attempts, and a requeued job (back to pending) none, since its next
// attempt will add to them.
func TestJobTotalsKept(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	totals := func(id spec.JobID) (g, c, s *float64) {
		t.Helper()
		if err := db.r.QueryRowContext(ctx, `SELECT gpu_seconds, cpu_seconds, slice_seconds FROM jobs WHERE id = ?`, int64(id)).Scan(&g, &c, &s); err != nil {
			t.Fatal(err)
		}
		return g, c, s
	}
	record(t, db, MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-1")).End(600, spec.StatePending).Obj())
	if g, _, _ := totals(1); g != nil {
		t.Errorf("requeued job: gpu_seconds %v, want NULL", *g)
	}
	record(t, db, MakeJob(1).Ran(2, 1000, node("n1", 8, "GPU-2", "GPU-3")).End(1300, spec.StateCompleted).Obj())
	if g, c, s := totals(1); g == nil || c == nil || s == nil || *g != 600+2*300 || *c != 8*600+8*300 || *s != 0 {
		t.Errorf("ended job totals = %v %v %v; want 1200 GPU-s, 7200 CPU-s, 0 slice-s", g, c, s)
	}
}

// TestMaxRSS: a job's MaxRSS is the highest memory peak its last
// attempt's nodes reported (a node's newest sample: the peak only grows),
// AveRSS the mean of the nodes' peaks, MaxRSSNode the node; an earlier
// attempt's samples and samples without a peak do not count.
func TestMaxRSS(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	ctx := context.Background()
	record(t, db,
		MakeJob(1).Ran(2, 0, node("n1", 2), node("n2", 2)).End(600, spec.StateCompleted).Obj(),
		MakeJob(2).Ran(1, 0, node("n1", 2)).End(600, spec.StateCompleted).Obj(),
	)
	peak := func(id string, job spec.JobID, attempt int, nd string, end int64, mib float64) UsageSample {
		return UsageSample{ID: id, JobID: job, Attempt: attempt, Node: nd, Start: at(end - 30).Time, End: at(end).Time, MemPeakMiB: mib}
	}
	if err := db.RecordUsageSamples(ctx, []UsageSample{
		peak("n1/a/1", 1, 2, "n1", 30, 100), peak("n1/a/2", 1, 2, "n1", 60, 300),
		peak("n2/a/1", 1, 2, "n2", 30, 500), peak("n2/a/2", 1, 2, "n2", 60, 0), // no peak read: not a drop
		peak("n1/old/1", 1, 1, "n1", 20, 9000), // the requeued attempt's
	}); err != nil {
		t.Fatal(err)
	}
	rs := jobs(t, db, Filter{})
	if r := rs[0]; r.MaxRSSMiB != 500 || r.AveRSSMiB != 400 || r.MaxRSSNode != "n2" {
		t.Errorf("job 1: MaxRSS %v AveRSS %v node %q; want 500, 400 (of n1's 300 and n2's 500), n2", r.MaxRSSMiB, r.AveRSSMiB, r.MaxRSSNode)
	}
	if r := rs[1]; r.MaxRSSMiB != 0 || r.AveRSSMiB != 0 || r.MaxRSSNode != "" {
		t.Errorf("job 2 without samples: MaxRSS %v AveRSS %v node %q; want none", r.MaxRSSMiB, r.AveRSSMiB, r.MaxRSSNode)
	}
	if r := jobs(t, db, Filter{NoUsage: true})[0]; r.MaxRSSMiB != 0 {
		t.Errorf("NoUsage read MaxRSS %v", r.MaxRSSMiB)
	}
}
