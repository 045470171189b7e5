package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Step is one job step as accounting stores it (sacct's N.batch, N.0
// rows); it is the API's type.
type Step = api.AcctStep

// A step's row is replaced by a newer report of it, but an ended step is
// never reopened by a stale report of it running.
const upsertStepSQL = `INSERT INTO steps (job_id, attempt, step, name, state, exit_code, signal,
	start_time, end_time, nodes, ntasks, cpus, gpus, reason)
VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
ON CONFLICT(job_id, attempt, step) DO UPDATE SET name=excluded.name, state=excluded.state,
	exit_code=excluded.exit_code, signal=excluded.signal, start_time=excluded.start_time,
	end_time=excluded.end_time, nodes=excluded.nodes, ntasks=excluded.ntasks, cpus=excluded.cpus,
	gpus=excluded.gpus, reason=excluded.reason
WHERE NOT (steps.end_time IS NOT NULL AND excluded.end_time IS NULL)`

// RecordSteps writes steps (ended ones, as the controller hands them over
// when they end) in one transaction; it is an idempotent upsert.
func (db *DB) RecordSteps(ctx context.Context, steps []spec.JobSteps) (err error) {
	if len(steps) == 0 {
		return nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record steps: begin: %w", err)
	}
	ctx = execCtx(ctx) // the transaction still ends with ctx
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that made us roll back is the one to report
		}
	}()
	st, err := tx.PrepareContext(ctx, upsertStepSQL)
	if err != nil {
		return fmt.Errorf("record steps: prepare: %w", err)
	}
	defer st.Close()
	for _, js := range steps {
		if err := recordSteps(ctx, st, js.JobID, js.Attempt, js.Steps); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record steps: commit: %w", err)
	}
	return nil
}

func recordSteps(ctx context.Context, st *sql.Stmt, id spec.JobID, attempt int, steps []spec.Step) error {
	for i := range steps {
		s := &steps[i]
		if _, err := st.ExecContext(ctx, int64(id), int64(attempt), s.ID, s.Name, string(s.State), int64(s.ExitCode), int64(s.Signal),
			unixArg(s.StartTime.Time), unixArg(s.EndTime.Time), strings.Join(s.Nodes, ","), int64(s.NTasks),
			int64(s.CPUs), int64(s.GPUs), s.Reason); err != nil {
			return fmt.Errorf("record step %d.%s: %w", id, s.ID, err)
		}
	}
	return nil
}

// Steps returns the steps of each job of ids' last attempt, the batch
// step first and then by number.
func (db *DB) Steps(ctx context.Context, ids []spec.JobID) (map[spec.JobID][]Step, error) {
	out := make(map[spec.JobID][]Step)
	now := db.opts.now().Unix()
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), attemptsChunk)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = int64(id)
		}
		rows, err := db.r.QueryContext(ctx, `SELECT s.job_id, s.step, s.name, s.state, s.exit_code, s.signal,
			s.start_time, s.end_time, s.nodes, s.ntasks, s.cpus, s.gpus, s.reason
		FROM steps s JOIN jobs j ON j.id = s.job_id AND j.attempts = s.attempt
		WHERE s.job_id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(args)), ",")+`)
		ORDER BY s.job_id, s.step != 'batch', CAST(s.step AS INTEGER)`, args...)
		if err != nil {
			return nil, fmt.Errorf("list steps of %d jobs: %w", len(args), err)
		}
		for rows.Next() {
			var (
				s            Step
				id           int64
				state, nodes string
				start, end   sql.NullInt64
			)
			if err := rows.Scan(&id, &s.ID, &s.Name, &state, &s.ExitCode, &s.Signal, &start, &end, &nodes,
				&s.NTasks, &s.CPUs, &s.GPUs, &s.Reason); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list steps: read row: %w", err)
			}
			s.State, s.Nodes = spec.JobState(state), splitList(nodes)
			s.StartTime, s.EndTime = fromUnix(start), fromUnix(end)
			st := s.State
			if s.Running() {
				st = spec.StateRunning
			}
			s.Elapsed = elapsed(st, start, end, now)
			out[spec.JobID(id)] = append(out[spec.JobID(id)], s)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("list steps: %w", err)
		}
	}
	return out, nil
}
