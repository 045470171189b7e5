package accounting

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func TestGPUAndCPUHours(t *testing.T) {
	t.Parallel()
	shared := func(n spec.NodeAlloc, f float64) spec.NodeAlloc { n.GPUFraction = f; return n }
	tests := []struct {
		name      string
		job       spec.Job
		now       int64 // seconds after t0 the clock reads
		wantGPUH  float64
		wantCPUH  float64
		wantElaps int64
	}{{
		name:     "whole GPUs: allocation × elapsed",
		job:      MakeJob(1).Ran(1, 100, node("n1", 16, "GPU-a", "GPU-b")).End(100+3*3600, spec.StateCompleted).Obj(),
		wantGPUH: 6, wantCPUH: 48, wantElaps: 3 * 3600,
	}, {
		name: "gang of two nodes",
		job: MakeJob(2).Ran(1, 0, node("n1", 4, "GPU-a", "GPU-b", "GPU-c", "GPU-d"), node("n2", 4, "GPU-e", "GPU-f", "GPU-g", "GPU-h")).
			End(1800, spec.StateFailed).Obj(),
		wantGPUH: 4, wantCPUH: 4, wantElaps: 1800,
	}, {
		name: "fraction of a shared GPU from the allocation",
		job: MakeJob(3).Resources(spec.Resources{Nodes: 1, GPUFraction: 0.25}).
			Ran(1, 0, shared(node("n1", 2, "GPU-a"), 0.25)).End(7200, spec.StateCompleted).Obj(),
		wantGPUH: 0.5, wantCPUH: 4, wantElaps: 7200,
	}, {
		name: "fraction from the request when the allocation omits it",
		job: MakeJob(4).Resources(spec.Resources{Nodes: 1, GPUFraction: 0.5}).
			Ran(1, 0, node("n1", 1, "GPU-a")).End(3600, spec.StateCompleted).Obj(),
		wantGPUH: 0.5, wantCPUH: 1, wantElaps: 3600,
	}, {
		name: "MIG slices count their share of the GPU",
		job: MakeJob(5).Resources(spec.Resources{Nodes: 1, GPUsPerNode: 2, GPUModel: "h100", GPUProfile: "1g.10gb"}).
			Ran(1, 0, node("n1", 1, "MIG-a", "MIG-b")).End(7*3600, spec.StateCompleted).Obj(),
		wantGPUH: 2, wantCPUH: 7, wantElaps: 7 * 3600,
	}, {
		name:     "running job counts up to now",
		job:      MakeJob(6).Ran(1, 0, node("n1", 2, "GPU-a", "GPU-b")).Obj(),
		now:      1800,
		wantGPUH: 1, wantCPUH: 1, wantElaps: 1800,
	}, {
		name: "CPU-only job",
		job: MakeJob(7).Resources(spec.Resources{Nodes: 1, CPUsPerNode: 3}).
			Ran(1, 0, node("n1", 3)).End(3600, spec.StateCompleted).Obj(),
		wantGPUH: 0, wantCPUH: 3, wantElaps: 3600,
	}, {
		name:     "pending job has used nothing",
		job:      MakeJob(8).Obj(),
		now:      5000,
		wantGPUH: 0, wantCPUH: 0, wantElaps: 0,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := openTest(t, WithClock(func() time.Time { return at(tc.now).Time }))
			record(t, db, tc.job)
			got := jobs(t, db, Filter{})
			if len(got) != 1 {
				t.Fatalf("Jobs = %d records, want 1", len(got))
			}
			type hours struct {
				GPU, CPU float64
				Elapsed  int64
			}
			want := hours{tc.wantGPUH, tc.wantCPUH, tc.wantElaps}
			if diff := cmp.Diff(want, hours{got[0].GPUHours, got[0].CPUHours, got[0].Elapsed}); diff != "" {
				t.Errorf("hours (-want +got):\n%s", diff)
			}
		})
	}
}

type usageRow struct {
	Attempt              int
	Node, UUID           string
	Model, Profile       string
	Fraction, GPUSeconds float64
	Billed               float64
	Start                int64
	End                  *int64
}

func usageRows(t *testing.T, db *DB, id spec.JobID) []usageRow {
	t.Helper()
	rows, err := db.r.Query(`SELECT attempt, node, gpu_uuid, gpu_model, mig_profile, fraction, gpu_seconds,
		billed_units, start_time, end_time FROM usage WHERE job_id = ? ORDER BY attempt, node, gpu_uuid`, int64(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []usageRow
	for rows.Next() {
		var u usageRow
		if err := rows.Scan(&u.Attempt, &u.Node, &u.UUID, &u.Model, &u.Profile, &u.Fraction, &u.GPUSeconds,
			&u.Billed, &u.Start, &u.End); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUsageRowsPerDevice(t *testing.T) {
	t.Parallel()
	models := map[string]string{"MIG-a30": "a30"}
	db := openTest(t,
		WithModelLookup(func(uuid string) string { return models[uuid] }),
		WithBillingWeight(func(model, profile string) float64 {
			if model == "a30" {
				return 0.5
			}
			return 2
		}))
	j := MakeJob(1).Resources(spec.Resources{Nodes: 2, GPUsPerNode: 1, GPUModel: "h100", GPUProfile: "2g.20gb"}).
		Ran(1, 0, node("n1", 1, "MIG-h100"), node("n2", 1, "MIG-a30")).End(1400, spec.StateCompleted).Obj()
	record(t, db, j)
	s, e := t0.Unix(), t0.Unix()+1400
	want := []usageRow{
		// 2g on a 7-slice H100 is 2/7; its model comes from the request.
		{Attempt: 1, Node: "n1", UUID: "MIG-h100", Model: "h100", Profile: "2g.20gb", Fraction: 2.0 / 7, GPUSeconds: 1400 * (2.0 / 7), Billed: 1400 * (2.0 / 7) * 2, Start: s, End: &e},
		// 2g on a 4-slice A30 (model from the lookup) is 1/2.
		{Attempt: 1, Node: "n2", UUID: "MIG-a30", Model: "a30", Profile: "2g.20gb", Fraction: 0.5, GPUSeconds: 700, Billed: 350, Start: s, End: &e},
	}
	if diff := cmp.Diff(want, usageRows(t, db, 1)); diff != "" {
		t.Errorf("usage rows (-want +got):\n%s", diff)
	}
}

func TestRecordJobsIsIdempotent(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	batch := []spec.Job{
		MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-a", "GPU-b")).End(3600, spec.StateCompleted).Obj(),
		MakeJob(2).User("bob").Ran(1, 60, node("n2", 8, "GPU-c")).End(3660, spec.StateFailed).Obj(),
		MakeJob(3).User("bob").Obj(),
	}
	record(t, db, batch...)
	first := jobs(t, db, Filter{})
	firstUsage := append(usageRows(t, db, 1), usageRows(t, db, 2)...)
	// A retried batch, the same batch twice in one call, and one job alone.
	record(t, db, batch...)
	record(t, db, append(batch, batch...)...)
	record(t, db, batch[0])
	if diff := cmp.Diff(first, jobs(t, db, Filter{})); diff != "" {
		t.Errorf("records after repeats (-first +now):\n%s", diff)
	}
	if diff := cmp.Diff(firstUsage, append(usageRows(t, db, 1), usageRows(t, db, 2)...)); diff != "" {
		t.Errorf("usage rows after repeats (-first +now):\n%s", diff)
	}
	if got := first[0].GPUHours + first[1].GPUHours; got != 3 {
		t.Errorf("total GPU-hours = %v, want 3", got)
	}
}

func TestStaleRecordDoesNotRollBack(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(100000).Time }))
	running := MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-a"))
	runningJob := running.Obj()
	done := running.End(3600, spec.StateCompleted).Obj()
	record(t, db, done)
	want := jobs(t, db, Filter{})
	record(t, db, runningJob) // the RUNNING record, retried late
	if diff := cmp.Diff(want, jobs(t, db, Filter{})); diff != "" {
		t.Errorf("after a stale RUNNING record (-want +got):\n%s", diff)
	}
}

func TestRequeuedJobSumsAttempts(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(100000).Time }))
	// Attempt 1 on n1 for an hour, requeued; attempt 2 on n2 for two hours.
	b := MakeJob(1)
	record(t, db, b.Ran(1, 0, node("n1", 4, "GPU-a", "GPU-b")).Obj())
	record(t, db, b.End(3600, spec.StateRequeued).Obj())
	pending := b.State(spec.StatePending).Obj()
	pending.Alloc, pending.StartTime, pending.EndTime = nil, spec.Time{}, spec.Time{}
	record(t, db, pending)
	record(t, db, b.Ran(2, 4000, node("n2", 4, "GPU-c")).Obj())
	// A late retry of attempt 1's end must not disturb attempt 2.
	first := MakeJob(1).Ran(1, 0, node("n1", 4, "GPU-a", "GPU-b")).End(3600, spec.StateRequeued).Obj()
	record(t, db, first)
	record(t, db, b.End(4000+7200, spec.StateCompleted).Obj())

	got := jobs(t, db, Filter{})
	if len(got) != 1 {
		t.Fatalf("Jobs = %d records, want 1", len(got))
	}
	r := got[0]
	type summary struct {
		State    spec.JobState
		Attempts int
		Nodes    []string
		Elapsed  int64
		GPUH     float64
		CPUH     float64
	}
	want := summary{spec.StateCompleted, 2, []string{"n2"}, 7200, 2*1 + 1*2, 4*1 + 4*2}
	if diff := cmp.Diff(want, summary{r.State, r.Attempts, r.Nodes, r.Elapsed, r.GPUHours, r.CPUHours}); diff != "" {
		t.Errorf("requeued job (-want +got):\n%s", diff)
	}
	if n := len(usageRows(t, db, 1)); n != 3 {
		t.Errorf("usage rows = %d, want 3 (2 devices in attempt 1, 1 in attempt 2)", n)
	}
}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	record(t, db, MakeJob(1).Obj())
	got := jobs(t, db, Filter{})
	b, err := json.Marshal(got[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// A pending job: times null, lists empty, computed fields present.
	for key, want := range map[string]any{
		"id": 1.0, "user": "alice", "state": "PENDING", "start_time": nil, "end_time": nil,
		"nodes": []any{}, "gpus": []any{}, "gpu_hours": 0.0, "cpu_hours": 0.0, "elapsed": 0.0,
		"time_limit": 3600.0, "gpu_count": 1.0, "cpus": 8.0, "submit_time": "2025-03-01T00:00:00Z",
	} {
		if diff := cmp.Diff(want, m[key]); diff != "" {
			t.Errorf("JSON %q (-want +got):\n%s", key, diff)
		}
	}
}

func TestDefaultSliceFraction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model, profile string
		want           float64
	}{
		{"h100", "1g.10gb", 1.0 / 7},
		{"a100", "3g.40gb", 3.0 / 7},
		{"h200", "7g.141gb", 1},
		{"a30", "2g.12gb", 0.5},
		{"NVIDIA A30", "4g.24gb", 1},
		{"h100", "1g.10gb+me", 1.0 / 7},
		{"h100", "weird", 1},
		{"h100", "0g.1gb", 1},
	}
	for _, tc := range tests {
		if got := DefaultSliceFraction(tc.model, tc.profile); got != tc.want {
			t.Errorf("DefaultSliceFraction(%q, %q) = %v, want %v", tc.model, tc.profile, got, tc.want)
		}
	}
}

func TestRecordJobsHonoursContext(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.RecordJobs(ctx, []spec.Job{MakeJob(1).Obj()}); err == nil {
		t.Error("RecordJobs with a cancelled context succeeded")
	}
	if got := jobs(t, db, Filter{}); len(got) != 0 {
		t.Errorf("cancelled RecordJobs left %d jobs", len(got))
	}
}

// TestUsageRunsFromContainerStart: an attempt is billed from the job's
// start (its container's) when it is this attempt's, so GPU-hours are the
// allocation × Elapsed, not from the placement a moment earlier.
func TestUsageRunsFromContainerStart(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	j := MakeJob(1).Ran(1, 100, node("n1", 8, "GPU-1", "GPU-2")).End(200, spec.StateCompleted).Obj()
	j.StartTime = at(103)
	record(t, db, j)
	r := jobs(t, db, Filter{})[0]
	if r.Elapsed != 97 || math.Abs(r.GPUHours*3600-2*97) > 1e-9 {
		t.Errorf("elapsed %ds, %v GPU-s; want 97s and 2 × 97", r.Elapsed, r.GPUHours*3600)
	}
}

// TestAttemptHistory: a checkpointed attempt requeued by a preemption,
// then a second that completes, keep each its own state, reason,
// checkpoint and lost work, as the controller records them (the requeued
// attempt with its job back to PENDING, LostWork left on the job).
func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(100000).Time }))
	b := MakeJob(1)
	b.Ran(1, 0, node("n1", 4, "GPU-a"))
	b.j.Checkpoints = 2
	b.j.LastCheckpoint = spec.CheckpointRef{Attempt: 1, Seq: 2, Time: at(3000), Bytes: 1 << 20}
	b.j.LostWork = spec.Duration(600 * time.Second)
	b.j.State, b.j.Reason, b.j.EndTime = spec.StatePending, "preempted by job 5", at(3600)
	requeued := b.Obj()
	record(t, db, requeued)
	// Attempt 2 resumes from ckpt 2 and completes without a checkpoint of
	// its own; LostWork and attempt 1's checkpoint stay on the job.
	b.Ran(2, 4000, node("n2", 4, "GPU-c"))
	b.j.Reason = ""
	record(t, db, b.End(5000, spec.StateCompleted).Obj())
	// A late retry of attempt 1's record changes nothing.
	record(t, db, requeued)

	got, err := db.Attempts(context.Background(), []spec.JobID{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[spec.JobID][]Attempt{1: {{
		Attempt: 1, AllocID: "a1", State: spec.StateRequeued, Reason: "preempted by job 5",
		Nodes: []string{"n1"}, CPUs: 4, MemMiB: 1024, StartTime: at(0), EndTime: at(3600), Elapsed: 3600,
		CheckpointSeq: 2, CheckpointTime: at(3000), LostWork: 600,
	}, {
		Attempt: 2, AllocID: "a2", State: spec.StateCompleted, Reason: "",
		Nodes: []string{"n2"}, CPUs: 4, MemMiB: 1024, StartTime: at(4000), EndTime: at(5000), Elapsed: 1000,
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
	// The job row is the last attempt's, totals still over both.
	r := jobs(t, db, Filter{})[0]
	if r.State != spec.StateCompleted || r.Attempts != 2 || r.GPUHours != 1+1000.0/3600 {
		t.Errorf("job = %s, %d attempts, %v GPU-h; want COMPLETED, 2, %v", r.State, r.Attempts, r.GPUHours, 1+1000.0/3600)
	}
}

// TestAttemptsRunningAndMany: a running attempt's elapsed counts up to now,
// and more ids than one query binds all come back.
func TestAttemptsRunningAndMany(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(900).Time }))
	var batch []spec.Job
	var ids []spec.JobID
	for id := spec.JobID(1); id <= attemptsChunk+3; id++ {
		batch = append(batch, MakeJob(id).Ran(1, 0, node("n1", 1, "GPU-a")).Obj())
		ids = append(ids, id)
	}
	record(t, db, batch...)
	got, err := db.Attempts(context.Background(), append(ids, 99999))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ids) {
		t.Fatalf("Attempts = %d jobs, want %d", len(got), len(ids))
	}
	last := got[spec.JobID(attemptsChunk+3)]
	if len(last) != 1 || last[0].State != spec.StateRunning || last[0].Elapsed != 900 || !last[0].EndTime.IsZero() {
		t.Errorf("running attempt = %+v, want RUNNING, 900s elapsed, no end", last)
	}
}

// TestImagePullCost: what a job's image cost before it started is kept
// per attempt and on the job's row for its last attempt: the slowest
// node's wait and the bytes of all its nodes (migration 015).
func TestImagePullCost(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(100000).Time }))
	pulled := func(n spec.NodeAlloc, ms, bytes int64) spec.NodeAlloc { n.PullMS, n.PullBytes = ms, bytes; return n }
	b := MakeJob(1)
	b.Ran(1, 0, pulled(node("n1", 4, "GPU-a"), 18250, 1<<30), pulled(node("n2", 4, "GPU-b"), 20500, 1<<30))
	b.j.State, b.j.Reason, b.j.EndTime = spec.StatePending, "node failure", at(3600)
	record(t, db, b.Obj())
	b.Ran(2, 4000, pulled(node("n1", 4, "GPU-a"), 40, 0), pulled(node("n3", 4, "GPU-c"), 19000, 1<<30))
	b.j.Reason = ""
	record(t, db, b.End(5000, spec.StateCompleted).Obj())

	got, err := db.Attempts(context.Background(), []spec.JobID{1})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[1]) != 2 {
		t.Fatalf("attempts = %+v, want 2", got[1])
	}
	for i, want := range []struct {
		s float64
		b int64
	}{{20.5, 2 << 30}, {19, 1 << 30}} {
		if a := got[1][i]; a.ImagePullSeconds != want.s || a.ImagePullBytes != want.b {
			t.Errorf("attempt %d: pull %vs, %d bytes; want %vs, %d", a.Attempt, a.ImagePullSeconds, a.ImagePullBytes, want.s, want.b)
		}
	}
	for _, f := range []Filter{{}, {NoUsage: true}} {
		r := jobs(t, db, f)[0]
		if r.ImagePullSeconds != 19 || r.ImagePullBytes != 1<<30 {
			t.Errorf("job row (NoUsage %v): pull %vs, %d bytes; want the last attempt's 19s, %d", f.NoUsage, r.ImagePullSeconds, r.ImagePullBytes, 1<<30)
		}
	}
}

// TestRequestIsMarshal: the request column holds the resources as
// json.Marshal writes them (request encodes them by hand).
func TestRequestIsMarshal(t *testing.T) {
	t.Parallel()
	for _, r := range []spec.Resources{
		{},
		{Nodes: 1, CPUsPerNode: 1, MemMiB: 1024, GPUsPerNode: 1},
		{Nodes: 2, MaxNodes: 4, CPUsPerNode: 8, MemMiB: 1 << 20, MemWholeNode: true, GPUsPerNode: 8, GPUModel: "H100 \"sxm\"",
			RDMA: 2, Exclusive: true, NodeList: []string{"n1", "n<2>"}, Exclude: []string{"n3"}, Constraint: "ib&nvlink"},
		{Nodes: 1, GPUProfile: "1g.10gb", TotalGPUs: 3},
		{Nodes: 1, GPUFraction: 0.25, GPUModel: "é\u2028"},
	} {
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := request(&r); got != string(want) {
			t.Errorf("request(%+v) = %s; want %s", r, got, want)
		}
	}
}
