package accounting

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func TestOpenSetsDurableWAL(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/accounting.db"
	for range 2 { // the second Open finds everything migrated already
		db, err := Open(path)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		var mode string
		var sync int
		if err := db.w.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := db.w.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		v, err := schemaVersion(context.Background(), db.r)
		if err != nil {
			t.Fatal(err)
		}
		ms, _ := migrations()
		if mode != "wal" || sync != 2 || v != len(ms) {
			t.Errorf("journal_mode=%s synchronous=%d version=%d, want wal 2 %d", mode, sync, v, len(ms))
		}
		// Readers must not write, even by mistake.
		if _, err := db.r.Exec("DELETE FROM jobs"); err == nil {
			t.Error("reader pool accepted a write")
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", t.TempDir() + "/a?b.db"} {
		if _, err := Open(p); !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// v1Schema is migrations/001_jobs.sql as released, written out by hand so
// the test keeps checking upgrades of real v1 files even if someone edits
// the migration (which they must not).
const v1Schema = `
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
INSERT INTO schema_version VALUES (1, 'jobs', 1700000000);
CREATE TABLE jobs (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', user TEXT NOT NULL DEFAULT '',
    uid INTEGER NOT NULL DEFAULT 0, account TEXT NOT NULL DEFAULT '', "partition" TEXT NOT NULL DEFAULT '',
    qos TEXT NOT NULL DEFAULT '', state TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
    exit_code INTEGER NOT NULL DEFAULT 0, signal INTEGER NOT NULL DEFAULT 0, submit_time INTEGER,
    start_time INTEGER, end_time INTEGER, time_limit INTEGER NOT NULL DEFAULT 0,
    nodes TEXT NOT NULL DEFAULT '', gpus TEXT NOT NULL DEFAULT '', gpu_count INTEGER NOT NULL DEFAULT 0,
    gpu_model TEXT NOT NULL DEFAULT '', gpu_profile TEXT NOT NULL DEFAULT '',
    gpu_fraction REAL NOT NULL DEFAULT 0, cpus INTEGER NOT NULL DEFAULT 0, mem_mib INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0, work_dir TEXT NOT NULL DEFAULT '');
CREATE INDEX jobs_user ON jobs(user);
CREATE INDEX jobs_account ON jobs(account);
CREATE INDEX jobs_end_time ON jobs(end_time);
INSERT INTO jobs (id, name, user, account, "partition", state, submit_time, start_time, end_time,
    time_limit, nodes, gpus, gpu_count, gpu_model, cpus, attempts)
VALUES (7, 'old', 'carol', 'physics', 'gpu', 'COMPLETED', 1740787200, 1740787260, 1740790860,
    3600, 'n1', 'GPU-1', 1, 'a100', 4, 1);
`

func TestMigrateFromV1(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/accounting.db"
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(v1Schema); err != nil {
		t.Fatalf("create v1 database: %v", err)
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open v1 database: %v", err)
	}
	defer db.Close()
	v, err := schemaVersion(context.Background(), db.r)
	if err != nil {
		t.Fatal(err)
	}
	if ms, _ := migrations(); v != len(ms) {
		t.Errorf("schema version after migration = %d, want %d", v, len(ms))
	}
	got := jobs(t, db, Filter{Users: []string{"carol"}})
	want := []Record{{
		ID: 7, Name: "old", User: "carol", Account: "physics", Partition: "gpu", State: spec.StateCompleted,
		SubmitTime: at(0), EligibleTime: at(0), StartTime: at(60), EndTime: at(3660),
		TimeLimit: spec.Duration(3600e9), Nodes: []string{"n1"}, GPUs: []string{"GPU-1"}, GPUCount: 1,
		GPUModel: "a100", CPUs: 4, Attempts: 1, Elapsed: 3600,
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("v1 job after migration (-want +got):\n%s", diff)
	}
	// The new tables work on the migrated file.
	record(t, db, MakeJob(8).Ran(1, 0, node("n1", 8, "GPU-2")).End(3600, spec.StateCompleted).Obj())
	if got := jobs(t, db, Filter{IDs: []spec.JobID{8}}); len(got) != 1 || got[0].GPUHours != 1 {
		t.Errorf("job recorded after migration = %+v, want one with 1 GPU-hour", got)
	}
	if err := db.AddNodeEvent(context.Background(), NodeEvent{Time: t0, Node: "n1", Event: "drain"}); err != nil {
		t.Errorf("AddNodeEvent after migration: %v", err)
	}
}

// TestMigrateAttemptHistory upgrades a v7 database: a job requeued once
// then completed, and one requeued and pending again. Attempts before the
// last were requeued; the last takes the job's state, REQUEUED while the
// job waits; checkpoints and lost work were never kept.
func TestMigrateAttemptHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/accounting.db"
	raw, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:7] {
		if err := applyMigration(ctx, raw, m, 7); err != nil {
			t.Fatalf("build a v7 database: %v", err)
		}
	}
	s := t0.Unix()
	for _, q := range []string{
		`INSERT INTO jobs (id, user, state, reason, submit_time, attempts) VALUES
			(7, 'carol', 'COMPLETED', 'COMPLETED', ?1, 2), (8, 'carol', 'PENDING', 'preempted by job 9', ?1, 1)`,
		`INSERT INTO attempts (job_id, attempt, nodes, cpus, start_time, end_time) VALUES
			(7, 1, 'n1', 4, ?1, ?1 + 60), (7, 2, 'n2', 4, ?1 + 100, ?1 + 160), (8, 1, 'n1', 2, ?1, ?1 + 30)`,
	} {
		if _, err := raw.Exec(q, s); err != nil {
			t.Fatalf("fill the v7 database: %v", err)
		}
	}
	if err := raw.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := Open(path)
	if err != nil {
		t.Fatalf("Open v7 database: %v", err)
	}
	defer db.Close()
	got, err := db.Attempts(ctx, []spec.JobID{7, 8})
	if err != nil {
		t.Fatal(err)
	}
	type brief struct {
		Attempt       int
		State         spec.JobState
		Reason        string
		Elapsed       int64
		CheckpointSeq int
		LostWork      int64
	}
	var briefs []brief
	for _, id := range []spec.JobID{7, 8} {
		for _, a := range got[id] {
			briefs = append(briefs, brief{a.Attempt, a.State, a.Reason, a.Elapsed, a.CheckpointSeq, a.LostWork})
		}
	}
	want := []brief{
		{1, spec.StateRequeued, "", 60, 0, 0},
		{2, spec.StateCompleted, "COMPLETED", 60, 0, 0},
		{1, spec.StateRequeued, "preempted by job 9", 30, 0, 0},
	}
	if diff := cmp.Diff(want, briefs); diff != "" {
		t.Errorf("attempts after migration (-want +got):\n%s", diff)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/accounting.db"
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec(`INSERT INTO schema_version VALUES (99, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Open(path)
	if err == nil || !strings.Contains(err.Error(), "v99, newer than this gpud") {
		t.Errorf("Open of a v99 database = %v, want an error naming the newer schema", err)
	}
}

func TestParseMigrations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   []string
		want    []int
		wantErr string
	}{
		{name: "ordered", files: []string{"002_b.sql", "001_a.sql", "README"}, want: []int{1, 2}},
		{name: "gap", files: []string{"001_a.sql", "003_c.sql"}, wantErr: "found version 3 (c) where 2 was expected"},
		{name: "duplicate", files: []string{"001_a.sql", "001_b.sql"}, wantErr: "where 2 was expected"},
		{name: "no name", files: []string{"001.sql"}, wantErr: "must be NNN_name.sql"},
		{name: "not a number", files: []string{"one_a.sql"}, wantErr: "must be NNN_name.sql"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			for _, f := range tc.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("SELECT 1;")}
			}
			ms, err := parseMigrations(fsys, "m")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseMigrations = %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, m := range ms {
				got = append(got, m.version)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEmbeddedMigrationsParse(t *testing.T) {
	t.Parallel()
	ms, err := migrations()
	if err != nil || len(ms) < 3 {
		t.Fatalf("migrations() = %d, %v; want at least 3", len(ms), err)
	}
}
