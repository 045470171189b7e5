// Command acctfill fills a gpud accounting database with ended jobs, for
// scripts/bench-slurm-vs.sh's sacct figure (issue 14): sacct -P over 100,000
// jobs. The rows are generated inside SQLite in one transaction (the SQL of
// accounting's bulkLoad benchmark helper): going through RecordJobs one job
// at a time would take minutes.
//
//	go run ./scripts/acctfill -db STATE/accounting.db -jobs 100000 -start 2026-01-02
package main

import (
	"database/sql"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gpud/gpud/accounting"
	_ "github.com/mattn/go-sqlite3"
)

func main() {
	path := flag.String("db", "", "accounting.db to create or extend (gpud must not have it open)")
	n := flag.Int("jobs", 100_000, "ended jobs to add")
	users := flag.Int("users", 1000, "distinct users the jobs belong to")
	start := flag.String("start", "2026-01-02", "submit time of the first job (YYYY-MM-DD, UTC); one job every 30 s after it")
	flag.Parse()
	if *path == "" || *n <= 0 || *users <= 0 {
		fmt.Fprintln(os.Stderr, "acctfill: usage: acctfill -db PATH [-jobs N] [-users N] [-start YYYY-MM-DD]")
		os.Exit(2)
	}
	base, err := time.Parse(time.DateOnly, *start)
	if err != nil {
		fmt.Fprintf(os.Stderr, "acctfill: -start %q: want YYYY-MM-DD: %v\n", *start, err)
		os.Exit(2)
	}
	if err := fill(*path, *n, *users, base.Unix()); err != nil {
		fmt.Fprintf(os.Stderr, "acctfill: %v\n", err)
		os.Exit(1)
	}
}

func fill(path string, n, users int, base int64) error {
	// accounting.Open creates the file and applies every migration, so the
	// rows below land in the schema gpud expects.
	adb, err := accounting.Open(path)
	if err != nil {
		return err
	}
	if err := adb.Close(); err != nil {
		return err
	}
	db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_synchronous=FULL&_busy_timeout=5000&_foreign_keys=1")
	if err != nil {
		return err
	}
	defer db.Close()
	var first int64
	if err := db.QueryRow(`SELECT COALESCE(MAX(id), 0) FROM jobs`).Scan(&first); err != nil {
		return fmt.Errorf("read the newest job id of %s: %w", path, err)
	}
	stmts := []string{
		`WITH RECURSIVE c(x) AS (SELECT ?4 + 1 UNION ALL SELECT x+1 FROM c WHERE x < ?4 + ?1)
		INSERT INTO jobs (id, name, user, uid, account, "partition", qos, state, submit_time, eligible_time,
			start_time, end_time, time_limit, nodes, gpus, gpu_count, gpu_model, cpus, mem_mib, attempts, work_dir)
		SELECT x, 'job', 'u' || (x % ?3), 1000 + x % ?3, 'acct' || (x % 50), 'gpu', 'normal',
			CASE WHEN x % 10 = 0 THEN 'FAILED' WHEN x % 10 = 1 THEN 'CANCELLED' ELSE 'COMPLETED' END,
			?2 + x * 30, ?2 + x * 30, ?2 + x * 30 + 60, ?2 + x * 30 + 3660, 7200, 'n' || (x % 64), 'GPU-' || x,
			1, 'h100', 8, 1024, 1, '/home/u' FROM c`,
		`INSERT INTO attempts (job_id, attempt, alloc_id, nodes, cpus, mem_mib, start_time, end_time, state, reason)
		SELECT id, 1, 'a' || id, nodes, cpus, mem_mib, start_time, end_time, state, state FROM jobs WHERE id > ?4`,
		`INSERT INTO usage (job_id, attempt, node, gpu_uuid, gpu_model, mig_profile, fraction, gpu_seconds,
			billed_units, start_time, end_time, account, user)
		SELECT id, 1, nodes, gpus, 'h100', '', 1, end_time - start_time, end_time - start_time, start_time, end_time,
			account, user FROM jobs WHERE id > ?4`,
		// The totals RecordJobs keeps for ended jobs (migration 007).
		`UPDATE jobs SET gpu_seconds = end_time - start_time, cpu_seconds = (end_time - start_time) * cpus, slice_seconds = 0
		WHERE id > ?4`,
	}
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s, n, base, users, first); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("bulk insert into %s: %w", path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = db.Exec(`ANALYZE`)
	return err
}
