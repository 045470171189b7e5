package accounting

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpud/gpud/gpud/spec"
)

// history is a small cluster's day, in seconds after t0:
//
//	1 alice/ml/gpu     submit 0,   ran 100-3700, 2 GPUs, COMPLETED
//	2 bob/ml/gpu       submit 0,   ran 5000-8600, 1 GPU, FAILED
//	3 bob/physics/cpu  submit 200, ran 300-900, CPU only, COMPLETED
//	4 carol/physics/gpu submit 0,  --begin 9000, still PENDING
//	5 alice/ml/gpu     submit 7000, running since 8000 on 4 GPUs (a100)
//	6 carol/physics/gpu submit 50, CANCELLED at 60 while pending
func history() []spec.Job {
	a100 := spec.Resources{Nodes: 1, CPUsPerNode: 8, GPUsPerNode: 4, GPUModel: "a100"}
	cpu := spec.Resources{Nodes: 1, CPUsPerNode: 2}
	return []spec.Job{
		MakeJob(1).Ran(1, 100, node("n1", 8, "GPU-1", "GPU-2")).End(3700, spec.StateCompleted).Obj(),
		MakeJob(2).User("bob").Ran(1, 5000, node("n1", 4, "GPU-3")).End(8600, spec.StateFailed).Obj(),
		MakeJob(3).User("bob").Account("physics").Partition("cpu").Resources(cpu).Submit(200).
			Ran(1, 300, node("c1", 2)).End(900, spec.StateCompleted).Obj(),
		MakeJob(4).User("carol").Account("physics").Begin(9000).Obj(),
		MakeJob(5).Resources(a100).Submit(7000).Ran(1, 8000, node("n2", 8, "GPU-5", "GPU-6", "GPU-7", "GPU-8")).Obj(),
		MakeJob(6).User("carol").Account("physics").Submit(50).End(60, spec.StateCancelled).Obj(),
	}
}

func ids(rs []Record) []spec.JobID {
	out := []spec.JobID{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

func TestJobsFilter(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	record(t, db, history()...)
	tests := []struct {
		name   string
		filter Filter
		want   []spec.JobID
	}{
		{name: "everything", filter: Filter{}, want: []spec.JobID{1, 2, 3, 4, 5, 6}},
		{name: "ids", filter: Filter{IDs: []spec.JobID{5, 2, 99}}, want: []spec.JobID{2, 5}},
		{name: "user", filter: Filter{Users: []string{"bob"}}, want: []spec.JobID{2, 3}},
		{name: "users", filter: Filter{Users: []string{"bob", "carol"}}, want: []spec.JobID{2, 3, 4, 6}},
		{name: "account", filter: Filter{Accounts: []string{"physics"}}, want: []spec.JobID{3, 4, 6}},
		{name: "partition", filter: Filter{Partitions: []string{"cpu"}}, want: []spec.JobID{3}},
		{name: "states", filter: Filter{States: []spec.JobState{spec.StateCompleted, spec.StateRunning}}, want: []spec.JobID{1, 3, 5}},
		{name: "combined", filter: Filter{Users: []string{"bob"}, Accounts: []string{"ml"}}, want: []spec.JobID{2}},
		{name: "limit", filter: Filter{Limit: 2}, want: []spec.JobID{1, 2}},
		{name: "no match", filter: Filter{Users: []string{"nobody"}}, want: []spec.JobID{}},
		// Jobs eligible or running at some instant of the window.
		{name: "window in the first hour", filter: Filter{Start: at(1000).Time, End: at(2000).Time}, want: []spec.JobID{1, 2}},
		{name: "window edges are inclusive", filter: Filter{Start: at(3700).Time, End: at(3700).Time}, want: []spec.JobID{1, 2}},
		{name: "window after job 1 ended", filter: Filter{Start: at(3701).Time, End: at(4000).Time}, want: []spec.JobID{2}},
		{name: "running and begin-time jobs late", filter: Filter{Start: at(9500).Time}, want: []spec.JobID{4, 5}},
		{name: "before --begin is not eligible", filter: Filter{Start: at(8700).Time, End: at(8800).Time}, want: []spec.JobID{5}},
		{name: "end only", filter: Filter{End: at(100).Time}, want: []spec.JobID{1, 2, 6}},
		{name: "cancelled while pending", filter: Filter{Start: at(55).Time, End: at(58).Time}, want: []spec.JobID{1, 2, 6}},
		{name: "window with user", filter: Filter{Users: []string{"alice"}, Start: at(9000).Time}, want: []spec.JobID{5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, ids(jobs(t, db, tc.filter))); diff != "" {
				t.Errorf("job IDs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobsRecordFields(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	record(t, db, history()...)
	got := jobs(t, db, Filter{IDs: []spec.JobID{5}})
	want := []Record{{
		ID: 5, Name: "train", User: "alice", UID: 1000, Account: "ml", Partition: "gpu", QOS: "normal",
		State: spec.StateRunning, SubmitTime: at(7000), EligibleTime: at(7000), StartTime: at(8000),
		TimeLimit: spec.Duration(time.Hour), Nodes: []string{"n2"}, GPUs: []string{"GPU-5", "GPU-6", "GPU-7", "GPU-8"},
		GPUCount: 4, GPUModel: "a100", CPUs: 8, MemMiB: 1024, Attempts: 1, WorkDir: "/home/alice",
		Request: &spec.Resources{Nodes: 1, CPUsPerNode: 8, GPUsPerNode: 4, GPUModel: "a100"},
		Elapsed: 2000, GPUHours: 4 * 2000.0 / 3600, CPUHours: 8 * 2000.0 / 3600,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("running job record (-want +got):\n%s", diff)
	}
}

// What gpud simulate --from-accounting replays besides the allocation: the
// request as submitted (a pending job's too), the dependency, the nice
// and the array's %MAX.
func TestJobsReplayFields(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	req := spec.Resources{Nodes: 2, CPUsPerNode: 4, GPUsPerNode: 8, GPUModel: "h100", Exclusive: true, Constraint: "ib"}
	j := MakeJob(7).Resources(req).Submit(100).Obj()
	j.Depend, j.Nice, j.ArrayJobID, j.ArrayTaskID, j.Array = "afterok:3:4,singleton", 5, 7, 0, "0-9%2"
	record(t, db, j)
	got := jobs(t, db, Filter{IDs: []spec.JobID{7}})
	if len(got) != 1 {
		t.Fatalf("got %d records, want 1", len(got))
	}
	r := got[0]
	if diff := cmp.Diff(&req, r.Request); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	if r.Dependency != j.Depend || r.Nice != 5 || r.ArrayMax != 2 {
		t.Errorf("dependency %q, nice %d, array max %d; want %q, 5, 2", r.Dependency, r.Nice, r.ArrayMax, j.Depend)
	}
}

// TestJobsNoUsage: Filter.NoUsage (sacct's query) returns the same jobs
// with the same fields, the usage sums left zero, under every kind of
// filter (its placeholders are numbered from ?1 then, not ?4).
func TestJobsNoUsage(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	record(t, db, history()...)
	for _, f := range []Filter{{}, {IDs: []spec.JobID{5, 2}}, {Users: []string{"bob"}, Accounts: []string{"ml"}},
		{Start: at(1000).Time, End: at(2000).Time}, {States: []spec.JobState{spec.StateRunning}, Limit: 1}} {
		want := jobs(t, db, f)
		used := false
		for i := range want {
			r := &want[i]
			used = used || r.GPUHours != 0
			r.GPUHours, r.CPUHours, r.SliceHours, r.GPUUtil, r.EnergyKWh, r.CO2Kg, r.Cost = 0, 0, 0, 0, 0, 0, 0
		}
		f.NoUsage = true
		if diff := cmp.Diff(want, jobs(t, db, f)); diff != "" {
			t.Errorf("Jobs(%+v) (-want +got):\n%s", f, diff)
		}
		if len(f.IDs) == 2 && !used {
			t.Errorf("Jobs(%+v): the fixture's jobs 2 and 5 have no GPU-hours; the test compares nothing", f)
		}
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	record(t, db, history()...)
	tests := []struct {
		name    string
		filter  Filter
		groupBy string
		want    []SummaryRow
	}{{
		name: "by user, all time", groupBy: GroupByUser,
		want: []SummaryRow{
			// 1: 2 GPUs × 1h, 8 CPUs × 1h; 5: 4 GPUs × 2000s so far, 8 CPUs.
			{Group: "alice", Jobs: 2, GPUHours: 2 + 4*2000.0/3600, CPUHours: 8 + 8*2000.0/3600},
			// 2: 1 GPU × 1h, 4 CPUs; 3: 2 CPUs × 600s.
			{Group: "bob", Jobs: 2, GPUHours: 1, CPUHours: 4 + 2*600.0/3600},
			{Group: "carol", Jobs: 2},
		},
	}, {
		name: "by account", groupBy: GroupByAccount,
		want: []SummaryRow{
			{Group: "ml", Jobs: 3, GPUHours: 3 + 4*2000.0/3600, CPUHours: 12 + 8*2000.0/3600},
			{Group: "physics", Jobs: 3, CPUHours: 2 * 600.0 / 3600},
		},
	}, {
		name: "by partition", groupBy: GroupByPartition, filter: Filter{States: []spec.JobState{spec.StateCompleted}},
		want: []SummaryRow{
			{Group: "cpu", Jobs: 1, CPUHours: 2 * 600.0 / 3600},
			{Group: "gpu", Jobs: 1, GPUHours: 2, CPUHours: 8},
		},
	}, {
		name: "by GPU model", groupBy: GroupByGPUModel, filter: Filter{Accounts: []string{"ml"}},
		want: []SummaryRow{
			{Group: "a100", Jobs: 1, GPUHours: 4 * 2000.0 / 3600, CPUHours: 8 * 2000.0 / 3600},
			{Group: "h100", Jobs: 2, GPUHours: 3, CPUHours: 12},
		},
	}, {
		// Usage clipped to [1900, 5900]: job 1 contributes 1800s of its
		// hour, job 2 900s; job 3 ended before the window.
		name: "window clips usage", groupBy: GroupByUser, filter: Filter{Start: at(1900).Time, End: at(5900).Time},
		want: []SummaryRow{
			{Group: "alice", Jobs: 1, GPUHours: 2 * 1800.0 / 3600, CPUHours: 8 * 1800.0 / 3600},
			{Group: "bob", Jobs: 1, GPUHours: 900.0 / 3600, CPUHours: 4 * 900.0 / 3600},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := db.Summary(context.Background(), tc.filter, tc.groupBy)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSummaryRejectsUnknownGroup(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	if _, err := db.Summary(context.Background(), Filter{}, "qos; DROP TABLE jobs"); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("Summary with a bad group = %v, want ErrInvalid", err)
	}
}

func TestNodeEventsAndAudit(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	events := []NodeEvent{
		{Time: at(10).Time, Node: "n1", Event: "drain", Reason: "XID 79", Actor: "gpud"},
		{Time: at(20).Time, Node: "n2", Event: "down", Reason: "missed heartbeats", Actor: "gpud"},
		{Time: at(30).Time, Node: "n1", Event: "resume", Actor: "root"},
	}
	for _, e := range events {
		if err := db.AddNodeEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.NodeEvents(ctx, "n1", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]NodeEvent{events[0], events[2]}, got); diff != "" {
		t.Errorf("node events of n1 (-want +got):\n%s", diff)
	}
	got, err = db.NodeEvents(ctx, "", at(15).Time, at(30).Time)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(events[1:], got); diff != "" {
		t.Errorf("node events in [15, 30] (-want +got):\n%s", diff)
	}

	entries := []AuditEntry{
		{Time: at(5).Time, ActorUID: 0, ActorName: "root", Origin: "unix", Action: "node.drain", Target: "n1", Result: "ok"},
		{Time: at(5).Time, ActorUID: 1001, ActorName: "bob", Origin: "10.0.0.7", Action: "job.cancel", Target: "12", Result: "permission denied"},
	}
	for _, a := range entries {
		if err := db.AddAudit(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	gotA, err := db.Audit(ctx, at(0).Time, at(5).Time)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(entries, gotA); diff != "" {
		t.Errorf("audit entries (-want +got):\n%s", diff)
	}

	if err := db.AddNodeEvent(ctx, NodeEvent{Time: t0, Event: "drain"}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("AddNodeEvent without a node = %v, want ErrInvalid", err)
	}
	if err := db.AddAudit(ctx, AuditEntry{Action: "x"}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("AddAudit without a time = %v, want ErrInvalid", err)
	}
}

// TestReadersWhileWriting records batches while readers list jobs: readers
// never fail with SQLITE_BUSY and only ever see whole batches.
func TestReadersWhileWriting(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	const batches, perBatch, readers = 40, 25, 3
	ctx := context.Background()
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, readers+1)
	wg.Go(func() {
		defer close(done)
		for b := range batches {
			var js []spec.Job
			for i := range perBatch {
				id := spec.JobID(b*perBatch + i + 1)
				js = append(js, MakeJob(id).Ran(1, 0, node("n1", 1, "GPU-a")).End(3600, spec.StateCompleted).Obj())
			}
			if err := db.RecordJobs(ctx, js); err != nil {
				errs <- err
				return
			}
		}
	})
	for range readers {
		wg.Go(func() {
			last := 0
			for reads := 0; ; reads++ {
				select {
				case <-done:
					if reads > 0 {
						return
					}
				default:
				}
				rs, err := db.Jobs(ctx, Filter{Users: []string{"alice"}})
				if err != nil {
					errs <- err
					return
				}
				if len(rs)%perBatch != 0 || len(rs) < last {
					errs <- errors.New("reader saw a partial or shrinking history")
					return
				}
				for _, r := range rs {
					if r.GPUHours != 1 {
						errs <- errors.New("reader saw a job without its usage")
						return
					}
				}
				last = len(rs)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(jobs(t, db, Filter{})); n != batches*perBatch {
		t.Errorf("jobs after writing = %d, want %d", n, batches*perBatch)
	}
}

// TestSummaryTotalsMatchJobs checks that gpuq report's totals are the sum
// of gpuq acct's GPU- and CPU-hours over the same jobs, for every grouping,
// requeued attempts included. The window covers every attempt (Summary
// clips to it; Jobs reports whole jobs, so the two agree only then).
func TestSummaryTotalsMatchJobs(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(20000).Time }))
	record(t, db, history()...)
	// Job 7: attempt 1 ended by a requeue (recorded as the controller
	// does, PENDING with that attempt's allocation), attempt 2 completed.
	b := MakeJob(7).User("dave").Account("physics")
	first := b.Ran(1, 1000, node("n3", 4, "GPU-x", "GPU-y")).End(4600, spec.StatePending).Obj()
	record(t, db, first)
	record(t, db, MakeJob(7).User("dave").Account("physics").Ran(2, 5000, node("n3", 4, "GPU-x")).End(12200, spec.StateCompleted).Obj())
	for _, f := range []Filter{{}, {Start: at(0).Time, End: at(20000).Time}, {Users: []string{"alice", "dave"}}} {
		recs := jobs(t, db, f)
		var gpu, cpu float64
		for _, r := range recs {
			gpu += r.GPUHours
			cpu += r.CPUHours
		}
		if r := recs[len(recs)-1]; r.ID == 7 && r.GPUHours != 2+2 {
			t.Errorf("job 7 = %v GPU-hours, want 4 (2 GPUs × 1h, then 1 GPU × 2h)", r.GPUHours)
		}
		for _, g := range []string{GroupByUser, GroupByAccount, GroupByPartition, GroupByGPUModel} {
			rows, err := db.Summary(context.Background(), f, g)
			if err != nil {
				t.Fatal(err)
			}
			var sg, sc float64
			n := 0
			for _, r := range rows {
				sg += r.GPUHours
				sc += r.CPUHours
				n += r.Jobs
			}
			if n != len(recs) || math.Abs(sg-gpu) > 1e-9 || math.Abs(sc-cpu) > 1e-9 {
				t.Errorf("filter %+v by %s: summary %d jobs %v GPU-h %v CPU-h; jobs %d, %v, %v", f, g, n, sg, sc, len(recs), gpu, cpu)
			}
		}
	}
}

func TestAddAuditsAndFilter(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	entries := []AuditEntry{
		{Time: at(1).Time, ActorUID: 1000, ActorName: "alice", Role: "user", Origin: "unix", Action: "POST /v1/jobs", Target: "1", Result: "200 ok"},
		{Time: at(2).Time, ActorUID: 1001, ActorName: "bob", Role: "user", Origin: "unix", Action: "POST /v1/jobs/{id}/cancel", Target: "1", Result: "403 permission denied"},
		{Time: at(3).Time, ActorUID: 0, ActorName: "root", Role: "admin", Origin: "10.0.0.7:5555", Action: "POST /v1/jobs/{id}/cancel", Target: "1", Result: "200 ok"},
		{Time: at(4).Time, ActorUID: 0, ActorName: "root", Role: "admin", Origin: "unix", Action: "POST /v1/nodes/{name}/drain", Target: "n1", Result: "200 ok"},
	}
	if err := db.AddAudits(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if err := db.AddAudits(ctx, []AuditEntry{{Time: at(5).Time, Action: "x"}, {Action: "y"}}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("AddAudits with an entry without a time = %v, want ErrInvalid", err)
	}
	for _, tc := range []struct {
		name string
		f    AuditFilter
		want []AuditEntry
	}{
		{"all", AuditFilter{}, entries},
		{"actor name", AuditFilter{Actor: "bob"}, entries[1:2]},
		{"actor uid", AuditFilter{Actor: "0"}, entries[2:]},
		{"action substring", AuditFilter{Action: "cancel"}, entries[1:3]},
		{"window", AuditFilter{Start: at(2).Time, End: at(3).Time}, entries[1:3]},
		{"limit keeps newest", AuditFilter{Limit: 2}, entries[2:]},
		{"combined", AuditFilter{Actor: "root", Action: "cancel", Limit: 5}, entries[2:3]},
	} {
		got, err := db.AuditLog(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestJobsSlurmFields: an array task's ids, --wckey and the task count
// are kept for sacct (JobID A_T, WCKey, NTasks).
func TestJobsSlurmFields(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	j := MakeJob(7).Obj()
	j.ArrayJobID, j.ArrayTaskID, j.WCKey = 5, 2, "proj-x"
	j.Tasks = spec.Tasks{NTasksPerNode: 4}
	j.Resources.Nodes = 2
	record(t, db, j)
	rs, err := db.Jobs(context.Background(), Filter{IDs: []spec.JobID{7}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].ArrayJobID != 5 || rs[0].ArrayTaskID != 2 || rs[0].WCKey != "proj-x" || rs[0].NTasks != 8 {
		t.Errorf("record %+v, want array 5_2, wckey proj-x, 8 tasks", rs)
	}
}

// TestWriteAudits: an entry written before its call, then its outcome;
// an outcome for no entry fails the whole transaction.
func TestWriteAudits(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	ws := []AuditWrite{
		{Entry: AuditEntry{Time: at(1).Time, ActorName: "alice", Action: "POST /v1/jobs", Result: "in progress"}},
		{Entry: AuditEntry{Time: at(1).Time, ActorName: "bob", Action: "POST /v1/jobs/{id}/{action}", Target: "job 1", Result: "in progress"}},
	}
	if err := db.WriteAudits(ctx, ws); err != nil {
		t.Fatal(err)
	}
	if ws[0].ID == 0 || ws[1].ID == 0 || ws[0].ID == ws[1].ID {
		t.Fatalf("ids %d, %d; want two distinct rows", ws[0].ID, ws[1].ID)
	}
	out := []AuditWrite{{ID: ws[1].ID, Entry: AuditEntry{ActorName: "bob", Action: "POST /v1/jobs/{id}/cancel", Target: "job 1", Result: "200 ok"}}}
	if err := db.WriteAudits(ctx, out); err != nil {
		t.Fatal(err)
	}
	bad := []AuditWrite{
		{Entry: AuditEntry{Time: at(2).Time, Action: "POST /v1/jobs"}},
		{ID: 9999, Entry: AuditEntry{Action: "x", Result: "200 ok"}},
	}
	if err := db.WriteAudits(ctx, bad); err == nil || !strings.Contains(err.Error(), "no such entry") {
		t.Errorf("outcome of a missing entry = %v, want an error saying so", err)
	}
	got, err := db.AuditLog(ctx, AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Result != "in progress" || got[1].Action != "POST /v1/jobs/{id}/cancel" || got[1].Result != "200 ok" || got[1].Time.IsZero() {
		t.Errorf("audit log = %+v; want alice's in progress, bob's cancel done (and nothing of the failed write)", got)
	}
}

// TestJobsHetFields: a heterogeneous job's component keeps its leader's
// id and its offset (sacct's JobID N+K).
func TestJobsHetFields(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10000).Time }))
	j := MakeJob(8).Obj()
	j.HetJobID, j.HetOffset, j.HetSize = 7, 1, 2
	record(t, db, j)
	record(t, db, MakeJob(9).Obj())
	rs, err := db.Jobs(context.Background(), Filter{IDs: []spec.JobID{8, 9}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].HetJobID != 7 || rs[0].HetOffset != 1 || rs[1].HetJobID != 0 || rs[1].HetOffset != 0 {
		t.Errorf("records %+v, want job 8 as component 7+1 and job 9 as no component", rs)
	}
}
