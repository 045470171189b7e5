package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// An asked-for empty attempt history is [] on the wire, not null.
func TestAcctAttemptsNeverNull(t *testing.T) {
	t.Parallel()
	if b, _ := json.Marshal(server.AcctAttempts(nil)); string(b) != "[]" {
		t.Errorf("no attempts encode as %s, want []", b)
	}
}

// sameWire fails t unless src (filled by fill) decodes strictly into W, the
// API's form of it, and W encodes back to the same JSON. It returns src's
// JSON.
func sameWire[W any](t *testing.T, src any) []byte {
	t.Helper()
	in, err := json.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	var wire W
	if err := dec.Decode(&wire); err != nil {
		t.Fatalf("%T does not decode into %T: %v; keep their fields and JSON tags in step", src, wire, err)
	}
	out, err := json.Marshal(wire)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(in), string(out)); diff != "" {
		t.Errorf("%T re-encodes %T differently (-source +wire):\n%s", wire, src, diff)
	}
	return in
}

// fill sets every field of v to a non-zero value, so an omitempty tag or a
// field missing from one side shows in the JSON.
func fill(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"x", "y"}))
		case reflect.Struct:
			t := time.Date(2025, 3, 14, 12, 0, i, 0, time.UTC)
			if f.Type() == reflect.TypeFor[time.Time]() {
				f.Set(reflect.ValueOf(t))
			} else {
				f.Set(reflect.ValueOf(spec.NewTime(t)))
			}
		default:
			panic("fill: add a case for " + f.Kind().String())
		}
	}
}

func openAcct(t *testing.T, jobs ...spec.Job) *accounting.DB {
	t.Helper()
	db, err := accounting.Open(filepath.Join(t.TempDir(), "accounting.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.RecordJobs(ctxT(t), jobs); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestAcctJobs(t *testing.T) {
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) spec.Time { return spec.NewTime(t0.Add(d)) }
	done := func(id spec.JobID, user, account string, state spec.JobState, start, end time.Duration) spec.Job {
		return spec.Job{ID: id, JobSpec: spec.JobSpec{Name: "j", Account: account, Partition: "h100"}, User: user, UID: 1000,
			State: state, SubmitTime: at(0), StartTime: at(start), EndTime: at(end), Attempt: 1, ExitCode: 3, Signal: 0,
			Alloc: &spec.Alloc{ID: "a", JobID: id, Attempt: 1, StartTime: at(start), Nodes: []spec.NodeAlloc{{Node: "gpu01", CPUs: 4, GPUs: []string{"GPU-1", "GPU-2"}}}}}
	}
	db := openAcct(t,
		done(1, "alice", "ml", spec.StateCompleted, time.Minute, time.Hour+time.Minute),
		done(2, "bob", "ml", spec.StateFailed, 2*time.Hour, 3*time.Hour),
		done(3, "alice", "physics", spec.StateCancelled, 5*time.Hour, 6*time.Hour),
	)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	c := client(t, addr)
	ctx := ctxT(t)

	tests := []struct {
		name string
		f    api.AcctFilter
		want []spec.JobID
	}{
		{"everything (root sees all users)", api.AcctFilter{}, []spec.JobID{1, 2, 3}},
		{"user", api.AcctFilter{Users: []string{"alice"}}, []spec.JobID{1, 3}},
		{"account and state", api.AcctFilter{Accounts: []string{"ml"}, States: []spec.JobState{spec.StateFailed}}, []spec.JobID{2}},
		{"ids", api.AcctFilter{IDs: []spec.JobID{3, 1}}, []spec.JobID{1, 3}},
		{"window", api.AcctFilter{Start: t0.Add(90 * time.Minute), End: t0.Add(4 * time.Hour)}, []spec.JobID{2, 3}},
		{"limit", api.AcctFilter{Limit: 1}, []spec.JobID{1}},
		{"no match", api.AcctFilter{Partitions: []string{"cpu"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.AcctJobs(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			var ids []spec.JobID
			for _, j := range got {
				ids = append(ids, j.ID)
			}
			if diff := cmp.Diff(tc.want, ids); diff != "" {
				t.Errorf("job IDs (-want +got):\n%s", diff)
			}
		})
	}

	got, err := c.AcctJobs(ctx, api.AcctFilter{IDs: []spec.JobID{1}})
	if err != nil || len(got) != 1 {
		t.Fatalf("AcctJobs(1) = %v, %v", got, err)
	}
	want := api.AcctJob{AcctRecord: api.AcctRecord{ID: 1, Name: "j", User: "alice", UID: 1000, Account: "ml", Partition: "h100", State: spec.StateCompleted,
		ExitCode: 3, SubmitTime: at(0), EligibleTime: at(0), StartTime: at(time.Minute), EndTime: at(time.Hour + time.Minute),
		Nodes: []string{"gpu01"}, GPUs: []string{"GPU-1", "GPU-2"}, GPUCount: 2, CPUs: 4, Attempts: 1, Elapsed: 3600, GPUHours: 2, CPUHours: 4,
		Request: &spec.Resources{}}} // the request as submitted (this job asked for nothing)
	if diff := cmp.Diff(want, got[0]); diff != "" {
		t.Errorf("job 1 (-want +got):\n%s", diff)
	}

	// fields= (sacct): only those fields, the rest zero; the usage sums
	// when asked for, and steps alongside.
	for _, tc := range []struct {
		fields []string
		want   api.AcctJob
	}{
		{[]string{"state", "nodes"}, api.AcctJob{AcctRecord: api.AcctRecord{ID: 1, State: spec.StateCompleted, Nodes: []string{"gpu01"}}}},
		{[]string{"user,gpu_hours", "elapsed"}, api.AcctJob{AcctRecord: api.AcctRecord{ID: 1, User: "alice", GPUHours: 2, Elapsed: 3600}}},
	} {
		got, err := c.AcctJobs(ctx, api.AcctFilter{IDs: []spec.JobID{1}, Fields: tc.fields, Steps: true})
		if err != nil || len(got) != 1 {
			t.Fatalf("AcctJobs(1, fields %q) = %v, %v", tc.fields, got, err)
		}
		tc.want.Steps = []api.AcctStep{}
		if diff := cmp.Diff(tc.want, got[0]); diff != "" {
			t.Errorf("job 1 with fields %q (-want +got):\n%s", tc.fields, diff)
		}
	}
}

// TestAcctJobsAttemptHistory: attempt_history=true adds each job's
// attempts, a requeued one and the one that completed; without it there
// is none.
func TestAcctJobsAttemptHistory(t *testing.T) {
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) spec.Time { return spec.NewTime(t0.Add(d)) }
	job := spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "j", Partition: "h100"}, User: "alice", UID: 1000,
		State: spec.StatePending, Reason: "preempted by job 5", SubmitTime: at(0), StartTime: at(0), EndTime: at(time.Hour),
		Attempt: 1, LastCheckpoint: spec.CheckpointRef{Attempt: 1, Seq: 3, Time: at(50 * time.Minute)},
		LostWork: spec.Duration(10 * time.Minute),
		Alloc:    &spec.Alloc{ID: "a1", JobID: 1, Attempt: 1, StartTime: at(0), Nodes: []spec.NodeAlloc{{Node: "gpu01", CPUs: 4, GPUs: []string{"GPU-1"}}}}}
	requeued := job
	job.State, job.Reason, job.Attempt = spec.StateCompleted, "COMPLETED", 2
	job.StartTime, job.EndTime = at(2*time.Hour), at(3*time.Hour)
	job.Alloc = &spec.Alloc{ID: "a2", JobID: 1, Attempt: 2, StartTime: at(2 * time.Hour), Nodes: []spec.NodeAlloc{{Node: "gpu02", CPUs: 4, GPUs: []string{"GPU-2"}}}}
	never := spec.Job{ID: 2, User: "alice", State: spec.StateCancelled, SubmitTime: at(0), EndTime: at(time.Minute)}
	db := openAcct(t, requeued, job, never)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	c := client(t, addr)

	got, err := c.AcctJobs(ctxT(t), api.AcctFilter{AttemptHistory: true})
	if err != nil || len(got) != 2 {
		t.Fatalf("AcctJobs = %v, %v; want 2 jobs", got, err)
	}
	want := []api.AcctAttempt{{
		Attempt: 1, AllocID: "a1", State: spec.StateRequeued, Reason: "preempted by job 5", Nodes: []string{"gpu01"}, CPUs: 4,
		StartTime: at(0), EndTime: at(time.Hour), Elapsed: 3600, CheckpointSeq: 3, CheckpointTime: at(50 * time.Minute), LostWork: 600,
	}, {
		Attempt: 2, AllocID: "a2", State: spec.StateCompleted, Reason: "COMPLETED", Nodes: []string{"gpu02"}, CPUs: 4,
		StartTime: at(2 * time.Hour), EndTime: at(3 * time.Hour), Elapsed: 3600,
	}}
	if diff := cmp.Diff(want, got[0].AttemptHistory); diff != "" {
		t.Errorf("attempts of job 1 (-want +got):\n%s", diff)
	}
	if h := got[1].AttemptHistory; h == nil || len(h) != 0 {
		t.Errorf("attempts of a job that never started = %#v, want empty", h)
	}
	plain, err := c.AcctJobs(ctxT(t), api.AcctFilter{IDs: []spec.JobID{1}})
	if err != nil || len(plain) != 1 || plain[0].AttemptHistory != nil {
		t.Errorf("AcctJobs without attempt_history = %+v, %v; want job 1 without attempts", plain, err)
	}
}

func TestAcctJobsErrors(t *testing.T) {
	db := openAcct(t)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	bare, _ := servertest.TestServer(t, nil)
	tests := []struct {
		name, addr, query string
		wantStatus        int
		wantCode, wantMsg string
	}{
		{"bad id", addr, "id=x", 400, api.CodeInvalid, `id="x"`},
		{"bad state", addr, "state=DONE", 400, api.CodeInvalid, `state="DONE"`},
		{"bad start", addr, "start=yesterday", 400, api.CodeInvalid, `start="yesterday"`},
		{"bad end", addr, "end=2025-03-14", 400, api.CodeInvalid, `end="2025-03-14"`},
		{"end before start", addr, "start=2025-03-14T10:00:00Z&end=2025-03-14T09:00:00Z", 400, api.CodeInvalid, "end=2025-03-14T09:00:00Z is before start"},
		{"bad limit", addr, "limit=-1", 400, api.CodeInvalid, `limit="-1"`},
		{"bad attempt_history", addr, "attempt_history=all", 400, api.CodeInvalid, `attempt_history="all" is not true or false`},
		{"bad fields", addr, "fields=state,bogus", 400, api.CodeInvalid, `fields: "bogus" is not a field`},
		{"no accounting", bare, "", 503, api.CodeUnavailable, "keeps no job accounting"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body api.ErrorBody
			status := getRaw(t, tc.addr, "/v1/accounting/jobs?"+tc.query, &body)
			if status != tc.wantStatus || body.Error.Code != tc.wantCode || !strings.Contains(body.Error.Message, tc.wantMsg) {
				t.Errorf("got %d %+v; want %d %s containing %q", status, body.Error, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
		})
	}
	_, err := client(t, bare).AcctJobs(ctxT(t), api.AcctFilter{})
	if !errors.Is(err, spec.ErrUnavailable) {
		t.Errorf("AcctJobs without accounting: %v, want an unavailable error", err)
	}
}

// getRaw GETs path from the server at a unix:// addr and decodes the JSON
// body into out, returning the status.
func getRaw(t *testing.T, addr, path string, out any) int {
	t.Helper()
	sock := strings.TrimPrefix(addr, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, "http://gpud"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("decode %s response: %v", path, err)
	}
	return resp.StatusCode
}

// TestAcctSummaryGroupsMatch keeps the API's summary group keys
// accounting's.
func TestAcctSummaryGroupsMatch(t *testing.T) {
	t.Parallel()
	groups := [][2]string{
		{api.GroupByUser, accounting.GroupByUser}, {api.GroupByAccount, accounting.GroupByAccount},
		{api.GroupByPartition, accounting.GroupByPartition}, {api.GroupByGPUModel, accounting.GroupByGPUModel},
	}
	for _, g := range groups {
		if g[0] != g[1] {
			t.Errorf("api group %q != accounting group %q", g[0], g[1])
		}
	}
}

func TestAcctSummary(t *testing.T) {
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) spec.Time { return spec.NewTime(t0.Add(d)) }
	done := func(id spec.JobID, user, account string, gpus int, start, end time.Duration) spec.Job {
		var uuids []string
		for i := range gpus {
			uuids = append(uuids, "GPU-"+string(rune('a'+i)))
		}
		return spec.Job{ID: id, JobSpec: spec.JobSpec{Name: "j", Account: account, Partition: "h100"}, User: user, UID: 1000,
			State: spec.StateCompleted, SubmitTime: at(0), StartTime: at(start), EndTime: at(end), Attempt: 1,
			Alloc: &spec.Alloc{ID: "a", JobID: id, Attempt: 1, StartTime: at(start), Nodes: []spec.NodeAlloc{{Node: "gpu01", CPUs: 2, GPUs: uuids}}}}
	}
	db := openAcct(t,
		done(1, "alice", "ml", 2, 0, time.Hour),
		done(2, "bob", "ml", 1, time.Hour, 3*time.Hour),
		done(3, "alice", "physics", 4, 2*time.Hour, 3*time.Hour),
	)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	c := client(t, addr)
	tests := []struct {
		name  string
		group string
		f     api.AcctFilter
		want  []api.AcctSummaryRow
	}{
		{"users", api.GroupByUser, api.AcctFilter{}, []api.AcctSummaryRow{
			{Group: "alice", Jobs: 2, GPUHours: 6, CPUHours: 4}, {Group: "bob", Jobs: 1, GPUHours: 2, CPUHours: 4}}},
		{"accounts in a window clip usage", api.GroupByAccount, api.AcctFilter{Start: t0.Add(30 * time.Minute), End: t0.Add(2 * time.Hour)},
			// Job 3 was eligible in the window (submitted at 0) but ran after it.
			[]api.AcctSummaryRow{{Group: "ml", Jobs: 2, GPUHours: 2, CPUHours: 3}, {Group: "physics", Jobs: 1}}},
		{"one user's accounts", api.GroupByAccount, api.AcctFilter{Users: []string{"alice"}}, []api.AcctSummaryRow{
			{Group: "ml", Jobs: 1, GPUHours: 2, CPUHours: 2}, {Group: "physics", Jobs: 1, GPUHours: 4, CPUHours: 2}}},
		{"no match", api.GroupByPartition, api.AcctFilter{Partitions: []string{"cpu"}}, []api.AcctSummaryRow{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.AcctSummary(ctxT(t), tc.group, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got.Group != tc.group || !got.Start.Equal(tc.f.Start) || !got.End.Equal(tc.f.End) {
				t.Errorf("response names group %q window %v-%v; want %q %v-%v", got.Group, got.Start, got.End, tc.group, tc.f.Start, tc.f.End)
			}
			if diff := cmp.Diff(tc.want, got.Rows); diff != "" {
				t.Errorf("rows (-want +got):\n%s", diff)
			}
		})
	}
	bare, _ := servertest.TestServer(t, nil)
	errs := []struct {
		name, addr, query string
		wantStatus        int
		wantCode, wantMsg string
	}{
		{"no group", addr, "", 400, api.CodeInvalid, `group=""`},
		{"bad group", addr, "group=qos", 400, api.CodeInvalid, `group="qos" is not one of user, account, partition, gpu_model`},
		{"ids not supported", addr, "group=user&id=1", 400, api.CodeInvalid, "query parameter id is not supported"},
		{"bad start", addr, "group=user&start=yesterday", 400, api.CodeInvalid, `start="yesterday"`},
		{"no accounting", bare, "group=user", 503, api.CodeUnavailable, "keeps no job accounting"},
	}
	for _, tc := range errs {
		t.Run(tc.name, func(t *testing.T) {
			var body api.ErrorBody
			status := getRaw(t, tc.addr, "/v1/accounting/summary?"+tc.query, &body)
			if status != tc.wantStatus || body.Error.Code != tc.wantCode || !strings.Contains(body.Error.Message, tc.wantMsg) {
				t.Errorf("got %d %+v; want %d %s containing %q", status, body.Error, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
		})
	}
}
