package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// oneStatementTotals is what the totals were up to session 15: one
// UPDATE with the "ended" condition in a CASE for each column, NULL when
// it does not hold. Here as a SELECT of what it would set.
var oneStatementTotals = func() string {
	ended := `jobs.state IN ` + terminalStates + `
		AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.job_id = jobs.id AND a.end_time IS NULL)
		AND NOT EXISTS (SELECT 1 FROM usage u WHERE u.job_id = jobs.id AND u.end_time IS NULL)`
	return `SELECT id, gpu_seconds, cpu_seconds, slice_seconds,
	CASE WHEN ` + ended + ` THEN (SELECT COALESCE(SUM((u.end_time - u.start_time) * u.fraction), 0) FROM usage u WHERE u.job_id = jobs.id) END,
	CASE WHEN ` + ended + ` THEN (SELECT COALESCE(SUM((a.end_time - a.start_time) * a.cpus), 0) FROM attempts a WHERE a.job_id = jobs.id) END,
	CASE WHEN ` + ended + ` THEN (SELECT COALESCE(SUM(u.end_time - u.start_time), 0) FROM usage u WHERE u.job_id = jobs.id AND u.mig_profile != '') END
	FROM jobs ORDER BY id`
}()

// TestJobTotalsMatchOneStatement: after every RecordJobs of random
// records of a few jobs (attempts rising over the rounds, of whole GPUs, shares and MIG
// slices, running and ended, requeued to pending, terminal, stale ones
// after newer ones, a job requeued after it ended), every job's totals are
// what the one statement of before computed: the sums once the job has
// ended with nothing open, NULL otherwise.
func TestJobTotalsMatchOneStatement(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	r := rand.New(rand.NewPCG(15, 31))
	states := []spec.JobState{spec.StateCompleted, spec.StateFailed, spec.StateCancelled, spec.StatePending, spec.StateRunning, spec.StateTimeout}
	set, cleared, reopened := 0, 0, 0
	had := map[int64]bool{}
	for round := range 400 {
		var batch []spec.Job
		for range 1 + r.IntN(4) {
			id := spec.JobID(1 + r.IntN(6))
			attempt := 1 + round/50 + r.IntN(2) // later rounds requeue ended jobs
			start := int64(attempt*1000 + r.IntN(100))
			n := node(fmt.Sprintf("n%d", r.IntN(3)), 1+r.IntN(8))
			b := MakeJob(id)
			switch r.IntN(3) {
			case 0:
				n.GPUs = []string{fmt.Sprintf("GPU-%d", r.IntN(4)), fmt.Sprintf("GPU-%d", 4+r.IntN(4))}
			case 1:
				n.GPUs, n.GPUFraction = []string{"GPU-9"}, 0.25
			default:
				n.MIG = []spec.MIGSlice{{GPU: "GPU-7", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: r.IntN(2) * 4}}}
				b.Resources(spec.Resources{Nodes: 1, CPUsPerNode: 4, GPUProfile: "3g.40gb", GPUModel: "h100"})
			}
			b.Ran(attempt, start, n)
			if s := states[r.IntN(len(states))]; s != spec.StateRunning {
				b.End(start+int64(1+r.IntN(500)), s)
			}
			batch = append(batch, b.Obj())
		}
		recordAndCompareTotals(t, db, round, batch, func(id int64, g sql.NullFloat64) {
			if g.Valid {
				set++
			} else {
				cleared++
				if had[id] {
					reopened++
				}
			}
			had[id] = g.Valid
		})
	}
	if set < 100 || cleared < 50 || reopened < 5 {
		t.Fatalf("totals set %d times, NULL %d times (%d after being set) over the rounds; want each often", set, cleared, reopened)
	}
}

// BenchmarkRecordJobTotals: RecordJobs of 100 ended one-GPU jobs a
// batch, per job, with the totals as kept now; cpu-µs/job is this
// process's CPU (BenchmarkRecordJobsCancellable records started jobs).
func BenchmarkRecordJobTotals(b *testing.B) {
	benchRecordBatches(b, context.Background(), func(id spec.JobID) spec.Job {
		return MakeJob(id).User(fmt.Sprintf("u%d", id%100)).
			Ran(1, 60, node(fmt.Sprintf("n%d", id%64), 8, fmt.Sprintf("GPU-%d-a", id))).End(100, spec.StateCompleted).Obj()
	})
}

// TestNewJobTotalsMatchOneStatement: jobs recorded for the first time
// (as the controller records a job when it ends) get their totals from
// newTotals in the job row's insert, not from the statements; after each
// RecordJobs of random new jobs (whole GPUs, shares, MIG slices, CPU
// only, one or two nodes, running, pending, placed but not started,
// ended, an end before the start, no allocation), every job's totals are
// what the one statement of before computes. Both ways are taken often:
// totals computed here, and left to the statement (shared GPUs whose
// products are not whole numbers).
func TestNewJobTotalsMatchOneStatement(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	r := rand.New(rand.NewPCG(17, 31))
	states := []spec.JobState{spec.StateCompleted, spec.StateFailed, spec.StateCancelled, spec.StateTimeout,
		spec.StateNodeFail, spec.StateOutOfMemory, spec.StatePending, spec.StateRunning}
	next := spec.JobID(1)
	computed, left, nulls := 0, 0, 0
	for round := range 300 {
		var batch []spec.Job
		for range 1 + r.IntN(6) {
			b := MakeJob(next)
			next++
			start := int64(r.IntN(1000))
			var nodes []spec.NodeAlloc
			for k := range 1 + r.IntN(2) {
				n := node(fmt.Sprintf("n%d", k), 1+r.IntN(16))
				switch r.IntN(5) {
				case 0:
					for g := range 1 + r.IntN(3) {
						n.GPUs = append(n.GPUs, fmt.Sprintf("GPU-%d-%d", k, g))
					}
				case 1:
					n.GPUs, n.GPUFraction = []string{"GPU-9"}, []float64{0.25, 0.3, 0.5, 1.0 / 3}[r.IntN(4)]
					if r.IntN(2) == 0 {
						n.GPUs = append(n.GPUs, "GPU-8")
					}
				case 2:
					for m := range 1 + r.IntN(2) {
						n.MIG = append(n.MIG, spec.MIGSlice{GPU: "GPU-7", Profile: "3g.40gb", Placement: spec.MIGPlacement{Start: m * 4}})
					}
					b.Resources(spec.Resources{Nodes: 1, CPUsPerNode: 4, GPUProfile: "3g.40gb", GPUModel: "h100"})
				case 3:
					b.Resources(spec.Resources{Nodes: 1, CPUsPerNode: 4, GPUFraction: 0.5, GPUModel: "h100"})
					n.GPUs = []string{"GPU-6"}
				}
				nodes = append(nodes, n)
			}
			switch r.IntN(8) {
			case 0: // never placed
			case 1: // placed, not started
				b.Ran(1, start, nodes...)
				j := b.Obj()
				j.StartTime, j.Alloc.StartTime = spec.Time{}, spec.Time{}
				b = &jobBuilder{j: j}
			default:
				b.Ran(1, start, nodes...)
			}
			switch s := states[r.IntN(len(states))]; {
			case s == spec.StateRunning || s == spec.StatePending:
				b.State(s)
			case r.IntN(10) == 0:
				b.End(start-1-int64(r.IntN(5)), s) // an end before this attempt's start
			default:
				b.End(start+int64(r.IntN(5000)), s)
			}
			j := b.Obj()
			if tot := db.newTotals(&j, spanOf(&j), 0); !tot.exact {
				left++
			} else if tot.gpu.Valid {
				computed++
			} else {
				nulls++
			}
			batch = append(batch, j)
		}
		recordAndCompareTotals(t, db, round, batch, nil)
	}
	if computed < 200 || left < 30 || nulls < 100 {
		t.Fatalf("totals computed on insert %d times, left to the statement %d, NULL %d; want each often", computed, left, nulls)
	}
}

// recordAndCompareTotals records batch and fails unless every job's
// kept totals are what oneStatementTotals works out; each (nil: none) is
// given every job's ID and GPU total.
func recordAndCompareTotals(t *testing.T, db *DB, round int, batch []spec.Job, each func(id int64, g sql.NullFloat64)) {
	t.Helper()
	ctx := context.Background()
	if err := db.RecordJobs(ctx, batch); err != nil {
		t.Fatal(err)
	}
	rows, err := db.r.QueryContext(ctx, oneStatementTotals)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var g, c, s, wg, wc, ws sql.NullFloat64
		if err := rows.Scan(&id, &g, &c, &s, &wg, &wc, &ws); err != nil {
			t.Fatal(err)
		}
		if g != wg || c != wc || s != ws {
			t.Fatalf("round %d, job %d: totals %v %v %v; the one statement gives %v %v %v", round, id, g, c, s, wg, wc, ws)
		}
		if each != nil {
			each(id, g)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
