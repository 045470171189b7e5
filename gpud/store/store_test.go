package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestApplyLoadRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)

	submit := spec.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC))
	j1 := &spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "a", Script: "#!/bin/sh\necho hi\n", TimeLimit: spec.Duration(time.Hour)},
		User: "alice", UID: 1000, State: spec.StatePending, SubmitTime: submit}
	j2 := &spec.Job{ID: 2, JobSpec: spec.JobSpec{Name: "b", Script: "x"}, User: "bob", State: spec.StateRunning,
		Alloc: &spec.Alloc{ID: "2.1", JobID: 2, Attempt: 1, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 2, GPUs: []string{"GPU-1"}}}}}
	n1 := &spec.Node{Inventory: spec.Inventory{Name: "n1", CPUs: 8, MemMiB: 1024, GPUs: []spec.GPU{{UUID: "GPU-1", Model: "h100"}}},
		State: spec.NodeDrain, Reason: "maintenance"}
	if err := s.Apply(ctx, []*spec.Job{j1, j2}, []*spec.Node{n1}, 3); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// An update replaces the row.
	j1b := *j1
	j1b.State = spec.StateCancelled
	if err := s.Apply(ctx, []*spec.Job{&j1b}, nil, 0); err != nil {
		t.Fatalf("Apply update: %v", err)
	}
	s.Close()

	s2 := open(t, path)
	jobs, nodes, next, err := s2.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff([]spec.Job{j1b, *j2}, jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	wantNode := spec.Node{Inventory: n1.Inventory, State: spec.NodeDrain, Reason: "maintenance"}
	if diff := cmp.Diff([]spec.Node{wantNode}, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if next != 3 {
		t.Errorf("next job id = %d, want 3", next)
	}
}

func TestLoadEmptyAndCounterNeverBehindJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	jobs, nodes, next, err := s.Load(ctx)
	if err != nil || len(jobs) != 0 || len(nodes) != 0 || next != 1 {
		t.Fatalf("Load on empty db = %v, %v, %d, %v; want nothing and next id 1", jobs, nodes, next, err)
	}
	if err := s.Apply(ctx, []*spec.Job{{ID: 41, State: spec.StatePending}}, nil, 5); err != nil {
		t.Fatal(err)
	}
	if _, _, next, err := s.Load(ctx); err != nil || next != 42 {
		t.Fatalf("next id = %d (%v), want 42 (past the highest stored job)", next, err)
	}
}

func TestApplyIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.Apply(ctx, []*spec.Job{{ID: 1, State: spec.StatePending}}, nil, 2); err != nil {
		t.Fatal(err)
	}
	// A cancelled context fails the batch; nothing of it may be stored.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Apply(cctx, []*spec.Job{{ID: 2, State: spec.StatePending}, {ID: 3}}, nil, 4); err == nil {
		t.Fatal("Apply with a cancelled context succeeded")
	}
	jobs, _, next, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || next != 2 {
		t.Fatalf("after failed batch: %d jobs, next %d; want 1 job, next 2", len(jobs), next)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	if _, err := s.db.ExecContext(ctx, `UPDATE schema_version SET version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, path); err == nil {
		t.Fatal("Open accepted a database with a newer schema version")
	}
}

func TestDurabilityPragmas(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
}

func BenchmarkApply8(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id := spec.JobID(1)
	for b.Loop() {
		var batch []*spec.Job
		for range 8 {
			batch = append(batch, &spec.Job{ID: id, State: spec.StatePending, JobSpec: spec.JobSpec{Script: "#!/bin/sh\nsleep 1\n"}})
			id++
		}
		if err := s.Apply(ctx, batch, nil, id); err != nil {
			b.Fatal(err)
		}
	}
}

// arrayJobs makes an array of n tasks sharing one spec, as the controller
// does (the tasks share the script's and environment's memory).
func arrayJobs(first spec.JobID, n int, js spec.JobSpec) []*spec.Job {
	var out []*spec.Job
	for i := range n {
		out = append(out, &spec.Job{ID: first + spec.JobID(i), JobSpec: js, User: "alice", UID: 1000,
			State: spec.StatePending, ArrayJobID: first, ArrayTaskID: i})
	}
	return out
}

func dbBytes(t *testing.T, path string) int64 {
	t.Helper()
	var n int64
	for _, f := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// Issue 12 hole 4: an array stored a full copy of its script in every
// task's row (4 MiB × 500 tasks was 2 GB of state.db and a 4 GB WAL).
// The script is stored once per array; failed before the fix (1000 × 256
// KiB came to about 500 MiB), passes after it.
func TestArrayStoresPayloadOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	script := "#!/bin/sh\n" + strings.Repeat("echo some line of a long script\n", 8<<10) // 256 KiB
	env := []string{"HOME=/home/alice", "PATH=/usr/bin:/bin", "BIG=" + strings.Repeat("e", 32<<10)}
	jobs := arrayJobs(10, 1000, spec.JobSpec{Name: "a", Script: script, Env: env, Args: []string{"x"}, Comment: "c"})
	plain := &spec.Job{ID: 1010, JobSpec: spec.JobSpec{Name: "p", Script: script}, User: "bob", State: spec.StatePending}
	if err := s.Apply(ctx, append(jobs, plain), nil, 1011); err != nil {
		t.Fatal(err)
	}
	// A state change rewrites the row, not the script.
	started := *jobs[3]
	started.State, started.Attempt = spec.StateRunning, 1
	if err := s.Apply(ctx, []*spec.Job{&started}, nil, 0); err != nil {
		t.Fatal(err)
	}
	if n := dbBytes(t, path); n > 8<<20 {
		t.Errorf("state.db and its WAL hold %d MiB for 1000 tasks of a %d KiB script; the script must be stored once (want under 8 MiB)", n>>20, len(script)>>10)
	}
	var payloads int
	if err := s.db.QueryRow(`SELECT count(*) FROM payloads`).Scan(&payloads); err != nil || payloads != 2 {
		t.Errorf("payload rows = %d (%v), want 2 (the array's and the plain job's)", payloads, err)
	}
	s.Close()

	s2 := open(t, path)
	got, _, _, err := s2.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []spec.Job{}
	for _, j := range jobs {
		want = append(want, *j)
	}
	want[3] = started
	want = append(want, *plain)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("loaded jobs differ (-want +got):\n%s", diff)
	}
	// Loaded tasks share one copy in memory too.
	if unsafe.StringData(got[0].Script) != unsafe.StringData(got[999].Script) || &got[0].Env[0] != &got[999].Env[0] {
		t.Errorf("loaded tasks of one array hold separate copies of the script or environment")
	}
}

// A task whose payload differs from its array's (nothing does this today)
// keeps its own, rather than being silently given the array's.
func TestPayloadThatDiffersStaysWithItsJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	jobs := arrayJobs(1, 3, spec.JobSpec{Script: "A", Env: []string{"X=1"}})
	jobs[1].Script = "B"
	jobs[2].Env = []string{"X=2"}
	if err := s.Apply(ctx, jobs, nil, 4); err != nil {
		t.Fatal(err)
	}
	odd := *jobs[0]
	odd.Comment = "changed"
	if err := s.Apply(ctx, []*spec.Job{&odd}, nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, open(t, path)} {
		got, _, _, err := st.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]spec.Job{odd, *jobs[1], *jobs[2]}, got); diff != "" {
			t.Errorf("jobs (-want +got):\n%s", diff)
		}
	}
}

// Deleting jobs deletes their payload once no job refers to it.
func TestDeleteJobsDropsUnusedPayloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.Apply(ctx, arrayJobs(1, 3, spec.JobSpec{Script: "A"}), nil, 4); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM payloads`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := s.DeleteJobs(ctx, []spec.JobID{1, 2}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("payload rows after deleting 2 of 3 tasks = %d, want 1 (task 3 still needs it)", n)
	}
	if err := s.DeleteJobs(ctx, []spec.JobID{3}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("payload rows after deleting every task = %d, want 0", n)
	}
	// The array's own task (id 10, its payload's key) is the one left: it
	// is found by its id (jobs_shared_payload leaves it out). And a plain
	// job's payload goes with it.
	if err := s.Apply(ctx, append(arrayJobs(10, 3, spec.JobSpec{Script: "B"}),
		&spec.Job{ID: 13, User: "bob", State: spec.StatePending, JobSpec: spec.JobSpec{Script: "C"}}), nil, 14); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJobs(ctx, []spec.JobID{11, 12, 13}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("payload rows after deleting tasks 11 and 12 of array 10 and plain job 13 = %d, want 1 (task 10 still needs its array's)", n)
	}
	if err := s.DeleteJobs(ctx, []spec.JobID{10}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("payload rows after deleting every job = %d, want 0", n)
	}
	// A job saved again after its payload went is stored whole.
	j := arrayJobs(1, 1, spec.JobSpec{Script: "A"})[0]
	if err := s.Apply(ctx, []*spec.Job{j}, nil, 0); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := s.Load(ctx)
	if err != nil || len(got) != 1 || got[0].Script != "A" {
		t.Fatalf("Load = %+v, %v; want job 1 with its script", got, err)
	}
}

// A state.db written by schema 1 (every row holding its whole job) is
// upgraded in place: its rows load unchanged, and a row updated after the
// upgrade moves its payload out.
func TestMigrateSchema1(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	old := arrayJobs(7, 3, spec.JobSpec{Name: "old", Script: "#!/bin/sh\necho v1\n", Env: []string{"A=1"}, Comment: "from v1"})
	old = append(old, &spec.Job{ID: 10, JobSpec: spec.JobSpec{Name: "plain", Script: "plain"}, User: "bob", State: spec.StateCompleted})
	for _, stmt := range []string{
		`CREATE TABLE schema_version (version INTEGER NOT NULL)`, `INSERT INTO schema_version VALUES (1)`,
		`CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL, user TEXT NOT NULL, job TEXT NOT NULL)`,
		`CREATE INDEX jobs_state ON jobs(state)`,
		`CREATE TABLE nodes (name TEXT PRIMARY KEY, state TEXT NOT NULL, reason TEXT NOT NULL, inventory TEXT NOT NULL)`,
		`CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`, `INSERT INTO meta VALUES ('next_job_id', 11)`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(stmt, err)
		}
	}
	for _, j := range old {
		raw, _ := json.Marshal(j)
		if _, err := db.Exec(`INSERT INTO jobs VALUES (?, ?, ?, ?)`, int64(j.ID), string(j.State), j.User, raw); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	want := func() []spec.Job {
		var out []spec.Job
		for _, j := range old {
			out = append(out, *j)
		}
		return out
	}
	s := open(t, path)
	if has := hasIndex(t, s, "jobs_state"); has {
		t.Fatal("the upgraded state.db still has index jobs_state; want it dropped")
	}
	got, _, next, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load after upgrade: %v", err)
	}
	if diff := cmp.Diff(want(), got); diff != "" || next != 11 {
		t.Fatalf("schema-1 jobs after upgrade (next id %d, want 11) (-want +got):\n%s", next, diff)
	}
	var v int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("schema version = %d (%v), want %d", v, err, schemaVersion)
	}
	// Update one task: its row refers to the payload; the others stay inline.
	old[1].State = spec.StateRunning
	if err := s.Apply(ctx, []*spec.Job{old[1]}, nil, 0); err != nil {
		t.Fatal(err)
	}
	var raw string
	var key sql.NullInt64
	if err := s.db.QueryRow(`SELECT job, payload FROM jobs WHERE id = 8`).Scan(&raw, &key); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "echo v1") || key.Int64 != 7 {
		t.Errorf("updated schema-1 row: payload %v and job %s; want payload 7 and no script in the row", key, raw)
	}
	s.Close()
	got, _, _, err = open(t, path).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want(), got); diff != "" {
		t.Fatalf("jobs after update and reopen (-want +got):\n%s", diff)
	}
}

// An HA member writes the rows the leader encoded (Encode on one store,
// ApplyRows on another, several commits in one transaction): both load
// the same jobs, nodes and counter, payloads stored once.
func TestEncodedRowsApplyElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	leader := open(t, filepath.Join(t.TempDir(), "state.db"))
	replica := open(t, filepath.Join(t.TempDir(), "state.db"))
	arr := arrayJobs(1, 3, spec.JobSpec{Script: "A", Env: []string{"X=1"}})
	plain := &spec.Job{ID: 4, JobSpec: spec.JobSpec{Name: "p", Script: "B"}, User: "bob", State: spec.StatePending}
	n1 := &spec.Node{Inventory: spec.Inventory{Name: "n1", CPUs: 8}, State: spec.NodeIdle}
	var all []*Rows
	commit := func(jobs []*spec.Job, nodes []*spec.Node, next spec.JobID) {
		t.Helper()
		r, err := leader.Encode(jobs, nodes, next)
		if err != nil {
			t.Fatal(err)
		}
		if err := leader.ApplyRows(ctx, r); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	commit(append(arr, plain), []*spec.Node{n1}, 5)
	started := *arr[1]
	started.State = spec.StateRunning
	commit([]*spec.Job{&started}, nil, 0)
	if n := len(all[1].Payloads); n != 0 {
		t.Errorf("a task's update carries %d payload rows; its array's row exists (want 0)", n)
	}
	if all[1].Jobs[0].Payload != 1 {
		t.Errorf("a task's update refers to payload %d, want its array's (1)", all[1].Jobs[0].Payload)
	}
	if err := replica.ApplyRows(ctx, all...); err != nil {
		t.Fatal(err)
	}
	wj, wn, wnext, err := leader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gj, gn, gnext, err := replica.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wj, gj); diff != "" {
		t.Errorf("replica's jobs differ from the leader's (-leader +replica):\n%s", diff)
	}
	if diff := cmp.Diff(wn, gn); diff != "" || wnext != gnext || gnext != 5 {
		t.Errorf("replica's nodes or counter differ: %s, next %d vs %d (want 5)", diff, gnext, wnext)
	}
	if got := gj[1]; got.State != spec.StateRunning || got.Script != "A" {
		t.Errorf("replica's task 2 = %s %q; want RUNNING with its array's script", got.State, got.Script)
	}
	var payloads int
	if err := replica.db.QueryRow(`SELECT count(*) FROM payloads`).Scan(&payloads); err != nil || payloads != 2 {
		t.Errorf("replica's payload rows = %d (%v), want 2", payloads, err)
	}
}

// Rows that add a payloads row another payload already holds (no such
// rows today: a key names one job or array, whose payload never changes)
// keep that row, and store the jobs that refer to it with their own
// payload inline: Load returns what was encoded.
func TestApplyRowsKeepsADifferingPayloadInline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.Apply(ctx, arrayJobs(1, 1, spec.JobSpec{Script: "A"}), nil, 0); err != nil {
		t.Fatal(err)
	}
	other := open(t, filepath.Join(t.TempDir(), "state.db"))
	odd := arrayJobs(1, 2, spec.JobSpec{Script: "Z", Comment: "other"})
	r, err := other.Encode(odd, nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ApplyRows(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, _, _, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]spec.Job{*odd[0], *odd[1]}, got); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	var data string
	if err := s.db.QueryRow(`SELECT data FROM payloads WHERE id = 1`).Scan(&data); err != nil || !strings.Contains(data, `"A"`) {
		t.Errorf("payload row 1 = %q (%v); want the first payload kept", data, err)
	}
}

// Issue 24, hole 6: updating each task's comment of a 25-task array with
// one 4 MB script grew state.db and its WAL by about 4 MB per update (the
// comment was part of the shared payload, so each updated task kept the
// whole payload inline). The comment now lives in the task's own row: the
// payload stays shared, and 25 updates add next to nothing.
func TestCommentUpdatesKeepThePayloadShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	script := "#!/bin/sh\n" + strings.Repeat("# four megabytes of script\n", 4<<20/27)
	jobs := arrayJobs(1, 25, spec.JobSpec{Script: script, Comment: "shared"})
	if err := s.Apply(ctx, jobs, nil, 26); err != nil {
		t.Fatal(err)
	}
	before := dbBytes(t, path)
	for i, j := range jobs {
		j.Comment = fmt.Sprintf("task %d's own comment", i)
		if err := s.Apply(ctx, []*spec.Job{j}, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if grew := dbBytes(t, path) - before; grew > 1<<20 {
		t.Errorf("25 comment updates grew state.db and its WAL by %d KiB; want under 1 MiB (the 4 MB script stays stored once)", grew>>10)
	}
	var inline int
	if err := s.db.QueryRow(`SELECT count(*) FROM jobs WHERE payload IS NULL`).Scan(&inline); err != nil || inline != 0 {
		t.Errorf("%d task rows hold their own payload (%v); want 0", inline, err)
	}
	for _, st := range []*Store{s, open(t, path)} {
		got, _, _, err := st.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i, j := range got {
			if want := fmt.Sprintf("task %d's own comment", i); j.Comment != want || j.Script != script {
				t.Errorf("task %d: comment %q, script %d bytes; want %q and the array's script", i, j.Comment, len(j.Script), want)
			}
		}
	}
}

// A state.db written by schema 2 (comments in the payloads table) is
// upgraded: each job gets its payload's comment in its own row (one that
// has its own keeps it), and the payload loses it.
func TestMigrateSchema2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	jobs := arrayJobs(1, 3, spec.JobSpec{Script: "S", Env: []string{"A=1"}})
	if err := s.Apply(ctx, jobs, nil, 4); err != nil {
		t.Fatal(err)
	}
	// Make it what schema 2 wrote: the comment in the payload, none in
	// the rows but task 3's (a schema-2 task whose comment differed kept
	// it inline with its payload; here, its own row's comment).
	for _, stmt := range []string{
		`UPDATE payloads SET data = '{"script":"S","env":["A=1"],"comment":"array comment"}' WHERE id = 1`,
		`UPDATE jobs SET job = json_set(job, '$.comment', 'own') WHERE id = 3`,
		`UPDATE schema_version SET version = 2`,
	} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(stmt, err)
		}
	}
	s.Close()
	s = open(t, path)
	got, _, _, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"array comment", "array comment", "own"} {
		if got[i].Comment != want || got[i].Script != "S" {
			t.Errorf("job %d after the upgrade: comment %q script %q; want %q and S", got[i].ID, got[i].Comment, got[i].Script, want)
		}
	}
	var data string
	var v int
	if err := s.db.QueryRow(`SELECT data, (SELECT version FROM schema_version) FROM payloads WHERE id = 1`).Scan(&data, &v); err != nil ||
		strings.Contains(data, "comment") || v != schemaVersion {
		t.Errorf("payload after the upgrade %s, schema %d (%v); want no comment, version %d", data, v, err, schemaVersion)
	}
}

func hasIndex(t testing.TB, s *Store, name string) bool {
	t.Helper()
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestNoStateIndex: state.db has no index on jobs(state), which no query
// used and every state change of a job paid for in its commit (a fresh
// database, and one an older gpud made with it).
func TestNoStateIndex(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	if hasIndex(t, s, "jobs_state") {
		t.Fatal("a new state.db has index jobs_state")
	}
	if !hasIndex(t, s, "jobs_shared_payload") {
		t.Fatal("a new state.db lacks index jobs_shared_payload (DeleteJobs needs it)")
	}
	if hasIndex(t, s, "jobs_payload") {
		t.Fatal("a new state.db has index jobs_payload (every row's payload)")
	}
	for _, q := range []string{`CREATE INDEX jobs_state ON jobs(state)`, `CREATE INDEX jobs_payload ON jobs(payload)`} { // as an older gpud made them
		if _, err := s.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = open(t, path)
	if hasIndex(t, s, "jobs_state") {
		t.Fatal("reopened, a state.db with index jobs_state kept it; want it dropped")
	}
	if hasIndex(t, s, "jobs_payload") || !hasIndex(t, s, "jobs_shared_payload") {
		t.Fatal("reopened, a state.db with index jobs_payload kept it or lacks jobs_shared_payload; want it replaced")
	}
}

// TestDeletePayloadUsesIndexes: DeleteJobs' check that no job refers to a
// payloads row looks the rows up by id and by jobs_shared_payload, never
// by a scan of the jobs table.
func TestDeletePayloadUsesIndexes(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	rows, err := s.db.Query(`EXPLAIN QUERY PLAN `+deleteUnusedPayload, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan, "\n")
	if !strings.Contains(all, "INDEX jobs_shared_payload (payload=?)") || !strings.Contains(all, "SEARCH jobs USING INTEGER PRIMARY KEY") || strings.Contains(all, "SCAN jobs") {
		t.Fatalf("query plan of the payload delete:\n%s\nwant jobs searched by id and by jobs_shared_payload, not scanned", all)
	}
}

// BenchmarkCommitBytes commits what a live burst's batch holds for three
// jobs at once: one submitted and started (a new row and its payload), one
// started on its node (StartTime), one ended, with the job id counter;
// with the old jobs_state index ("state-index", as before session 11) and
// without it. It reports the bytes the process wrote per commit (WAL
// frames, checkpoints) and its CPU time per commit: fewer pages per commit
// is less to write and fsync.
func BenchmarkCommitBytes(b *testing.B) {
	for _, mode := range []string{"state-index", "now"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "state-index" {
				if _, err := s.db.Exec(`CREATE INDEX jobs_state ON jobs(state)`); err != nil {
					b.Fatal(err)
				}
			}
			env := []string{"HOME=/home/alice", "PATH=/usr/bin:/bin", "USER=alice"}
			jobs := map[spec.JobID]*spec.Job{}
			id := spec.JobID(1)
			cpu0, w0 := processCPU(b), written(b)
			for b.Loop() {
				j := &spec.Job{ID: id, User: "alice", UID: 1000, State: spec.StateRunning,
					JobSpec: spec.JobSpec{Name: fmt.Sprint("job", id), Script: "#!/bin/sh\nsleep 5\n", Env: env}}
				jobs[id] = j
				batch := []*spec.Job{j}
				if o := jobs[id-3]; o != nil {
					o.StartTime = spec.NewTime(time.Unix(int64(id), 0))
					batch = append(batch, o)
				}
				if o := jobs[id-6]; o != nil {
					o.State = spec.StateCompleted
					batch = append(batch, o)
					delete(jobs, id-6)
				}
				id++
				if err := s.Apply(ctx, batch, nil, id); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(written(b)-w0)/float64(b.N), "written-B/op")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// written is the bytes this process has written (/proc/self/io wchar).
func written(b *testing.B) int64 {
	raw, err := os.ReadFile("/proc/self/io")
	if err != nil {
		b.Fatal(err)
	}
	for l := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no wchar in /proc/self/io")
	return 0
}

// TestAuditedApplyKeepsEntriesUntilForgotten: ApplyAudited commits the
// calls' audit entries with the jobs (one transaction: a reopened store
// has both), numbers them in order and never twice, and drops those
// forgotten; a failed transaction keeps neither the jobs nor the entries.
func TestAuditedApplyKeepsEntriesUntilForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	j := &spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "a", Script: "x"}, User: "alice", State: spec.StatePending}
	seqs, err := s.ApplyAudited(ctx, []*spec.Job{j}, nil, 2, [][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`)}, nil)
	if err != nil || len(seqs) != 2 || seqs[1] <= seqs[0] {
		t.Fatalf("ApplyAudited = %v, %v; want two increasing numbers", seqs, err)
	}
	s.Close()
	s = open(t, path)
	jobs, _, next, err := s.Load(ctx)
	if err != nil || len(jobs) != 1 || next != 2 {
		t.Fatalf("Load after reopen: %d jobs, next %d, %v; want the job and counter", len(jobs), next, err)
	}
	got, entries, err := s.PendingAudits(ctx)
	if err != nil || !slices.Equal(got, seqs) || string(entries[0]) != `{"a":1}` || string(entries[1]) != `{"a":2}` {
		t.Fatalf("PendingAudits = %v %q, %v; want %v with both entries in order", got, entries, err, seqs)
	}
	// The first is forgotten with the next commit, the second on its own.
	third, err := s.ApplyAudited(ctx, nil, nil, 0, [][]byte{[]byte(`{"a":3}`)}, seqs[:1])
	if err != nil || third[0] <= seqs[1] {
		t.Fatalf("ApplyAudited = %v, %v; want a number after %d", third, err, seqs[1])
	}
	if err := s.ForgetAudits(ctx, seqs[1:]); err != nil {
		t.Fatal(err)
	}
	if got, _, err := s.PendingAudits(ctx); err != nil || !slices.Equal(got, third) {
		t.Fatalf("PendingAudits = %v, %v; want only %v", got, err, third)
	}
	// All or nothing: a job that cannot be stored takes its entry along.
	s.db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.id = 9 BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	bad := &spec.Job{ID: 9, JobSpec: spec.JobSpec{Name: "b", Script: "y"}, User: "bob", State: spec.StatePending}
	if _, err := s.ApplyAudited(ctx, []*spec.Job{bad}, nil, 10, [][]byte{[]byte(`{"a":9}`)}, third); err == nil {
		t.Fatal("ApplyAudited of a refused job succeeded")
	}
	if got, _, err := s.PendingAudits(ctx); err != nil || !slices.Equal(got, third) {
		t.Fatalf("PendingAudits after a failed commit = %v, %v; want %v as it was", got, err, third)
	}
}

// auditMark is the number sqlite_sequence holds for audit_pending.
func auditMark(t *testing.T, s *Store) int64 {
	t.Helper()
	var mark int64
	if err := s.db.QueryRow(`SELECT seq FROM sqlite_sequence WHERE name = 'audit_pending'`).Scan(&mark); err != nil {
		t.Fatalf("read audit_pending's sqlite_sequence row: %v", err)
	}
	return mark
}

// TestAuditNumbersNeverReused: the store numbers audit entries itself
// below the mark it keeps in sqlite_sequence (auditSeqs), so a store
// reopened after a stop or a kill (a second store on the same file, the
// first never closed), and an older gpud's AUTOINCREMENT insert, both
// go on above every number handed out, even with all entries forgotten;
// and a batch larger than a reservation raises the mark past it.
// TestAuditNumbersReadAgainAfterAFailure: a transaction that failed may
// have left rows under numbers the store believes free (a COMMIT whose
// fsync failed after its frames were written); here such a row is put
// in by hand. The failed transaction's retry must read the numbering
// again and succeed, not fail on the same number for ever.
func TestAuditNumbersReadAgainAfterAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	seqs, err := s.ApplyAudited(ctx, nil, nil, 0, [][]byte{[]byte(`{"n":1}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(`INSERT INTO audit_pending(seq, entry) VALUES (?, '{"left":1}')`, seqs[0]+1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyAudited(ctx, nil, nil, 0, [][]byte{[]byte(`{"n":2}`)}, nil); err == nil {
		t.Fatal("an entry under a number a row holds was stored; want the transaction refused")
	}
	again, err := s.ApplyAudited(ctx, nil, nil, 0, [][]byte{[]byte(`{"n":2}`)}, nil)
	if err != nil {
		t.Fatalf("the retry after a failed transaction: %v; want it numbered above the rows the file holds", err)
	}
	if again[0] <= seqs[0]+1 {
		t.Errorf("the retry's entry got %d; want above %d", again[0], seqs[0]+1)
	}
}

func TestAuditNumbersNeverReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	entries := func(n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte(fmt.Sprintf(`{"n":%d}`, i))
		}
		return out
	}
	s := open(t, path)
	seqs, err := s.ApplyAudited(ctx, nil, nil, 0, entries(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetAudits(ctx, seqs); err != nil {
		t.Fatal(err)
	}
	top := seqs[2]
	// A restart after a kill: the first store is left as it is.
	s2 := open(t, path)
	more, err := s2.ApplyAudited(ctx, nil, nil, 0, entries(auditReserve+5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if more[0] <= top {
		t.Fatalf("after a restart the first number is %d; want above %d, handed out before", more[0], top)
	}
	for i := 1; i < len(more); i++ {
		if more[i] != more[i-1]+1 {
			t.Fatalf("numbers %d and %d of one batch are %d and %d; want consecutive", i-1, i, more[i-1], more[i])
		}
	}
	last := more[len(more)-1]
	if m := auditMark(t, s2); m < last {
		t.Fatalf("sqlite_sequence holds %d for audit_pending; want at least %d, the highest number handed out", m, last)
	}
	if err := s2.ForgetAudits(ctx, more); err != nil {
		t.Fatal(err)
	}
	// An older gpud inserts with AUTOINCREMENT.
	res, err := s2.db.Exec(`INSERT INTO audit_pending(entry) VALUES ('{"old":1}')`)
	if err != nil {
		t.Fatal(err)
	}
	if old, err := res.LastInsertId(); err != nil || old <= last {
		t.Fatalf("an AUTOINCREMENT insert got %d, %v; want above %d, handed out before", old, err, last)
	}
}

// TestAuditMarkWrittenOncePerReserve: commits that carry audit entries
// leave sqlite_sequence alone while their numbers are below the stored
// mark, so its page is not in their WAL frames (BenchmarkLiveMixPhases:
// one frame in ten of a live submission's commit).
func TestAuditMarkWrittenOncePerReserve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	var first int64
	var forget []int64
	for i := range 10 {
		seqs, err := s.ApplyAudited(ctx, nil, nil, 0, [][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`), []byte(`{"a":3}`)}, forget)
		if err != nil {
			t.Fatal(err)
		}
		forget = seqs
		m := auditMark(t, s)
		if i == 0 {
			first = m
		}
		if m != first || m < seqs[2] {
			t.Fatalf("commit %d: sqlite_sequence holds %d for audit_pending (after the first commit %d), numbers up to %d; want it unchanged and at or above them", i, m, first, seqs[2])
		}
	}
}
