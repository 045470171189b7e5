package accounting

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// TestGPUUsage: every ended attempt, at its fraction of a GPU, in the
// units Summary reports; running attempts and ones ended before since are
// left out.
func TestGPUUsage(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	mig := spec.Resources{Nodes: 1, CPUsPerNode: 2, GPUsPerNode: 2, GPUModel: "h100", GPUProfile: "3g.40gb"}
	// Job 7 ran twice: a requeued first attempt and a completed second.
	first := MakeJob(7).Ran(1, 1000, node("n1", 8, "GPU-1")).End(1600, spec.StatePending).Obj()
	record(t, db, history()...)
	record(t, db,
		first,
		MakeJob(7).Ran(2, 2000, node("n1", 8, "GPU-2")).End(2600, spec.StateCompleted).Obj(),
		MakeJob(8).User("bob").Resources(mig).Ran(1, 100, node("n2", 2, "MIG-1", "MIG-2")).End(800, spec.StateCompleted).Obj(),
	)
	got, err := db.GPUUsage(context.Background(), at(700).Time)
	if err != nil {
		t.Fatal(err)
	}
	u := func(id spec.JobID, attempt int, user, account, model string, gpus float64, start, end int64) spec.GPUUsage {
		return spec.GPUUsage{JobID: id, Attempt: attempt, Account: account, User: user, Model: model, GPUs: gpus, Start: at(start).Time, End: at(end).Time}
	}
	// Job 3 (CPU only) has no GPU usage, 5 still runs, 6 never started.
	want := map[[2]int64]spec.GPUUsage{
		{1, 100}:  u(1, 1, "alice", "ml", "h100", 2, 100, 3700),
		{2, 5000}: u(2, 1, "bob", "ml", "h100", 1, 5000, 8600),
		{7, 1000}: u(7, 1, "alice", "ml", "h100", 1, 1000, 1600),
		{7, 2000}: u(7, 2, "alice", "ml", "h100", 1, 2000, 2600),
		{8, 100}:  u(8, 1, "bob", "ml", "h100", 2*3.0/7, 100, 800),
	}
	gotBy := map[[2]int64]spec.GPUUsage{}
	var total float64
	for _, g := range got {
		gotBy[[2]int64{int64(g.JobID), int64(g.Start.Sub(t0) / time.Second)}] = g
		total += g.GPUs * g.End.Sub(g.Start).Seconds()
	}
	if diff := cmp.Diff(want, gotBy); diff != "" {
		t.Errorf("GPUUsage (-want +got):\n%s", diff)
	}
	// The same jobs' GPU-hours in the report (job 5 excluded: running).
	rows, err := db.Summary(context.Background(), Filter{States: []spec.JobState{spec.StateCompleted, spec.StateFailed}}, GroupByAccount)
	if err != nil {
		t.Fatal(err)
	}
	var report float64
	for _, r := range rows {
		report += r.GPUHours * 3600
	}
	if !near(report, total) {
		t.Errorf("report GPU-seconds %+v, fairshare feed %v: want equal", rows, total)
	}
	old, err := db.GPUUsage(context.Background(), at(3701).Time)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 1 || old[0].User != "bob" || !old[0].Start.Equal(at(5000).Time) {
		t.Errorf("GPUUsage since 3701 = %+v, want only bob's attempt ended at 8600", old)
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
