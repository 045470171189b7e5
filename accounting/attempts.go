package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Attempt is one start of a job as accounting remembers it (sacct
// --duplicates): a requeued job has one per start. It is the API's type,
// so accounting and the wire cannot drift apart.
type Attempt = api.AcctAttempt

// attemptsChunk bounds the job ids of one query, under SQLite's limit on
// bound parameters.
const attemptsChunk = 500

// Attempts returns the attempts of the jobs ids, by job, each job's in
// attempt order. A job with none (never started, or unknown) has no entry.
func (db *DB) Attempts(ctx context.Context, ids []spec.JobID) (map[spec.JobID][]Attempt, error) {
	out := make(map[spec.JobID][]Attempt)
	now := db.opts.now().Unix()
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), attemptsChunk)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = int64(id)
		}
		if err := db.readAttempts(ctx, now, args, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (db *DB) readAttempts(ctx context.Context, now int64, ids []any, out map[spec.JobID][]Attempt) error {
	rows, err := db.r.QueryContext(ctx, `SELECT job_id, attempt, alloc_id, state, reason, nodes, cpus, mem_mib,
		start_time, end_time, checkpoint_seq, checkpoint_time, lost_work, pull_ms, pull_bytes
	FROM attempts WHERE job_id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)
	ORDER BY job_id, attempt`, ids...)
	if err != nil {
		return fmt.Errorf("list attempts of %d jobs: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			a                  Attempt
			id, start          int64
			state, nodes       string
			end, seq, ckptTime sql.NullInt64
			pullMS             int64
		)
		if err := rows.Scan(&id, &a.Attempt, &a.AllocID, &state, &a.Reason, &nodes, &a.CPUs, &a.MemMiB,
			&start, &end, &seq, &ckptTime, &a.LostWork, &pullMS, &a.ImagePullBytes); err != nil {
			return fmt.Errorf("list attempts: read row: %w", err)
		}
		a.State, a.Nodes = spec.JobState(state), splitList(nodes)
		startV := sql.NullInt64{Int64: start, Valid: true}
		a.StartTime, a.EndTime = fromUnix(startV), fromUnix(end)
		a.Elapsed = elapsed(a.State, startV, end, now)
		a.CheckpointSeq, a.CheckpointTime = int(seq.Int64), fromUnix(ckptTime)
		a.ImagePullSeconds = float64(pullMS) / 1000
		out[spec.JobID(id)] = append(out[spec.JobID(id)], a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list attempts: %w", err)
	}
	return nil
}
