package accounting

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkRecordJobs records batches of 1,000 new, ended two-GPU jobs, the
// shape of a controller flushing a busy minute of job ends.
func BenchmarkRecordJobs(b *testing.B) {
	db := openTest(b)
	ctx := context.Background()
	const batch = 1000
	next := spec.JobID(1)
	jobs := make([]spec.Job, batch)
	var recorded int
	for b.Loop() {
		for i := range jobs {
			jobs[i] = MakeJob(next).User(fmt.Sprintf("u%d", next%100)).
				Ran(1, 60, node(fmt.Sprintf("n%d", next%64), 8, fmt.Sprintf("GPU-%d-a", next), fmt.Sprintf("GPU-%d-b", next))).
				End(3660, spec.StateCompleted).Obj()
			next++
		}
		if err := db.RecordJobs(ctx, jobs); err != nil {
			b.Fatal(err)
		}
		recorded += batch
	}
	b.ReportMetric(float64(recorded)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkRecordJobsCancellable records batches of 100 started two-GPU
// jobs with a cancellable context, as the controller's recorder calls
// RecordJobs (its run's context): go-sqlite3 runs each statement given
// one on a goroutine of its own unless the transaction takes the
// cancellation off its statements (execCtx). cpu-µs/op is this process's
// CPU per job.
func BenchmarkRecordJobsCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchRecordBatches(b, ctx, func(id spec.JobID) spec.Job {
		return MakeJob(id).User(fmt.Sprintf("u%d", id%100)).
			Ran(1, 60, node(fmt.Sprintf("n%d", id%64), 8, fmt.Sprintf("GPU-%d-a", id), fmt.Sprintf("GPU-%d-b", id))).Obj()
	})
}

// benchRecordBatches records batches of 100 jobs made by mk (ids from 1)
// with ctx and reports this process's CPU per job recorded.
func benchRecordBatches(b *testing.B, ctx context.Context, mk func(spec.JobID) spec.Job) {
	db := openTest(b)
	const batch = 100
	next := spec.JobID(1)
	jobs := make([]spec.Job, batch)
	var recorded int
	cpu0 := processCPU(b)
	for b.Loop() {
		for i := range jobs {
			jobs[i] = mk(next)
			next++
		}
		if err := db.RecordJobs(ctx, jobs); err != nil {
			b.Fatal(err)
		}
		recorded += batch
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(recorded), "cpu-µs/job")
}

// bulkJobs is the number of jobs BenchmarkJobsUserFilter queries over, one
// user in 1,000 (so a query returns 1,000 records).
const bulkJobs, bulkUsers = 1_000_000, 1000

// bulkLoad fills db with n ended one-GPU jobs, their attempts and usage,
// generated inside SQLite: going through RecordJobs would take minutes.
func bulkLoad(b *testing.B, db *DB, n int) {
	b.Helper()
	base := t0.Unix()
	stmts := []string{
		`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < ?1)
		INSERT INTO jobs (id, name, user, uid, account, "partition", qos, state, submit_time, eligible_time,
			start_time, end_time, time_limit, nodes, gpus, gpu_count, gpu_model, cpus, mem_mib, attempts, work_dir)
		SELECT x, 'job', 'u' || (x % ?3), 1000 + x % ?3, 'acct' || (x % 50), 'gpu', 'normal', 'COMPLETED',
			?2 + x * 30, ?2 + x * 30, ?2 + x * 30 + 60, ?2 + x * 30 + 3660, 7200, 'n' || (x % 64), 'GPU-' || x,
			1, 'h100', 8, 1024, 1, '/home/u' FROM c`,
		`INSERT INTO attempts (job_id, attempt, alloc_id, nodes, cpus, mem_mib, start_time, end_time, state, reason)
		SELECT id, 1, 'a' || id, nodes, cpus, mem_mib, start_time, end_time, state, state FROM jobs`,
		`INSERT INTO usage (job_id, attempt, node, gpu_uuid, gpu_model, mig_profile, fraction, gpu_seconds,
			billed_units, start_time, end_time, account, user)
		SELECT id, 1, nodes, gpus, 'h100', '', 1, end_time - start_time, end_time - start_time, start_time, end_time,
			account, user FROM jobs`,
		// The totals RecordJobs keeps for ended jobs (migration 007).
		`UPDATE jobs SET gpu_seconds = end_time - start_time, cpu_seconds = (end_time - start_time) * cpus, slice_seconds = 0`,
	}
	tx, err := db.w.Begin()
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(s, n, base, bulkUsers); err != nil {
			_ = tx.Rollback()
			b.Fatalf("bulk load: %v", err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if _, err := db.w.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJobsUserFilter lists one user's jobs (sacct -u) out of a million.
func BenchmarkJobsUserFilter(b *testing.B) {
	db := openTest(b)
	start := time.Now()
	bulkLoad(b, db, bulkJobs)
	b.Logf("bulk loaded %d jobs in %v", bulkJobs, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	f := Filter{Users: []string{"u42"}}
	ops := 0
	for b.Loop() {
		rs, err := db.Jobs(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		if len(rs) != bulkJobs/bulkUsers || rs[0].GPUHours != 1 {
			b.Fatalf("Jobs(u42) = %d records (first %+v), want %d of 1 GPU-hour", len(rs), rs[0], bulkJobs/bulkUsers)
		}
		ops++
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(ops), "ms/op")
}

// BenchmarkJobsAll100k is the accounting part of sacct -P -a over 100,000
// ended jobs (issue 14; scripts/bench-slurm-vs.sh times the whole command):
// every record of the window, with its usage subqueries, read and scanned.
// The usage sub-view is what sacct asks for (Filter.NoUsage): its fields
// need none of the usage sums.
func BenchmarkJobsAll100k(b *testing.B) {
	const n = 100_000
	db := openTest(b)
	bulkLoad(b, db, n)
	ctx := context.Background()
	for _, bc := range []struct {
		name    string
		noUsage bool
	}{{"usage", false}, {"nousage", true}} {
		b.Run(bc.name, func(b *testing.B) {
			f := Filter{Start: t0, NoUsage: bc.noUsage}
			want := 1.0
			if bc.noUsage {
				want = 0
			}
			cpu0 := processCPU(b)
			for b.Loop() {
				rs, err := db.Jobs(ctx, f)
				if err != nil {
					b.Fatal(err)
				}
				if len(rs) != n || rs[n-1].GPUHours != want || rs[n-1].Elapsed == 0 {
					b.Fatalf("Jobs(all) = %d records, want %d of %v GPU-hour", len(rs), n, want)
				}
			}
			// CPU time (Go and SQLite share the process) varies less than
			// wall time on a loaded machine.
			b.ReportMetric(float64((processCPU(b)-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
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

// BenchmarkJobsWithAttempts is gpuq acct -u u42 -D over a million jobs:
// one user's 1,000 jobs, then their attempts.
func BenchmarkJobsWithAttempts(b *testing.B) {
	db := openTest(b)
	bulkLoad(b, db, bulkJobs)
	ctx := context.Background()
	f := Filter{Users: []string{"u42"}}
	for b.Loop() {
		rs, err := db.Jobs(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		ids := make([]spec.JobID, len(rs))
		for i := range rs {
			ids[i] = rs[i].ID
		}
		as, err := db.Attempts(ctx, ids)
		if err != nil {
			b.Fatal(err)
		}
		if len(as) != bulkJobs/bulkUsers || as[ids[0]][0].State != spec.StateCompleted {
			b.Fatalf("Attempts = %d jobs (first %+v), want %d COMPLETED", len(as), as[ids[0]], bulkJobs/bulkUsers)
		}
	}
}

// BenchmarkGPUUsageTotalsFull is the fairshare feed's full read (hourly,
// and at start) over a million ended jobs: daily totals per user.
func BenchmarkGPUUsageTotalsFull(b *testing.B) {
	db := openTest(b)
	bulkLoad(b, db, bulkJobs)
	ctx := context.Background()
	for b.Loop() {
		ts, err := db.GPUUsageTotals(ctx, time.Time{}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if len(ts) < bulkUsers {
			b.Fatalf("GPUUsageTotals = %d rows, want at least one per user", len(ts))
		}
	}
}

// BenchmarkRecordUsageSamples stores batches of 1,000 samples (a
// controller taking one 30 s round of samples from 125 eight-GPU nodes)
// and of 8 (one eight-GPU node's events request, as the controller records
// them, one call per request).
func BenchmarkRecordUsageSamples(b *testing.B) {
	for _, batch := range []int{8, 1000} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) {
			db := openTest(b)
			ctx := context.Background()
			samples := make([]UsageSample, batch)
			var n int64
			b.ReportAllocs()
			for b.Loop() {
				for i := range samples {
					n++
					end := t0.Add(time.Duration(n) * time.Second)
					samples[i] = UsageSample{ID: fmt.Sprintf("n%d/%d.1/%d", n%125, n/125, end.UnixNano()), JobID: spec.JobID(n/125 + 1),
						Attempt: 1, Node: fmt.Sprintf("n%d", n%125), Start: end.Add(-30 * time.Second), End: end, GPUs: 8,
						GPUUtilAvg: 55, GPUUtilMax: 90, GPUMemMiB: 8 * 40960, PowerW: 8 * 500, EnergyJ: 8 * 500 * 30, CPUSeconds: 30 * 16, MemMiB: 65536}
				}
				if err := db.RecordUsageSamples(ctx, samples); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkSummaryAll is gpuq report (by user) over a window holding a
// million jobs, the "month of 1,000,000 jobs": what the server
// does for it.
func BenchmarkSummaryAll(b *testing.B) {
	db := openTest(b)
	bulkLoad(b, db, bulkJobs)
	ctx := context.Background()
	for b.Loop() {
		rows, err := db.Summary(ctx, Filter{}, GroupByUser)
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) != bulkUsers {
			b.Fatalf("Summary = %d users, want %d", len(rows), bulkUsers)
		}
	}
}

// BenchmarkClusterUsage is gpuq report cluster (and --plot) over the whole
// span of a million jobs (~347 days, one-day buckets) and over one week:
// one scan of the usage rows overlapping the window.
func BenchmarkClusterUsage(b *testing.B) {
	db := openTest(b)
	bulkLoad(b, db, bulkJobs)
	ctx := context.Background()
	var inv []NodeGPUs
	for i := range 64 {
		inv = append(inv, NodeGPUs{Node: "n" + strconv.Itoa(i), Model: "h100", GPUs: 8})
	}
	start := t0
	end := t0.Add(bulkJobs * 30 * time.Second).Add(2 * time.Hour)
	for _, w := range []struct {
		name       string
		start, end time.Time
		bucket     time.Duration
	}{
		{"all_1M_jobs", start, end, 24 * time.Hour},
		{"one_week", end.Add(-7 * 24 * time.Hour), end, time.Hour},
	} {
		b.Run(w.name, func(b *testing.B) {
			for b.Loop() {
				u, err := db.ClusterUsage(ctx, w.start, w.end, w.bucket, inv)
				if err != nil {
					b.Fatal(err)
				}
				if len(u.Rows) != 1 || u.Rows[0].AllocatedGPUHours <= 0 {
					b.Fatalf("ClusterUsage = %+v", u.Rows)
				}
			}
		})
	}
}

// BenchmarkRecordJobsPerBatch records 40 ended one-GPU jobs per op, in
// transactions of 4 (what the controller's recorder wrote per owner commit
// in gpud loadtest's live burst when it flushed at every wake) or one of 40
// (with its 50 ms linger at ~400 ends/s), reporting the process's CPU time
// per job: a transaction's commit (one fsync) is most of a small batch's
// cost.
func BenchmarkRecordJobsPerBatch(b *testing.B) {
	const perOp = 40
	for _, batch := range []int{4, 40} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db := openTest(b)
			ctx := context.Background()
			next := spec.JobID(1)
			jobs := make([]spec.Job, batch)
			var recorded int
			cpu0 := processCPU(b)
			for b.Loop() {
				for range perOp / batch {
					for i := range jobs {
						jobs[i] = MakeJob(next).User(fmt.Sprintf("u%d", next%100)).
							Ran(1, 60, node(fmt.Sprintf("n%d", next%64), 8, fmt.Sprintf("GPU-%d-a", next))).
							End(65, spec.StateCompleted).Obj()
						next++
					}
					if err := db.RecordJobs(ctx, jobs); err != nil {
						b.Fatal(err)
					}
					recorded += batch
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(recorded), "cpu-µs/job")
		})
	}
}
