package accounting

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// GPUUsage lists the GPU use of every ended attempt that ended at or after
// since (zero: all of history), one entry per attempt, for
// the controller's fairshare. GPUs count as billed here and in Summary: a
// MIG slice or a GPU share by its fraction, so the fairshare raw usage of
// an (account, user) equals its GPU-hours in gpuq report. Attempts still
// running are not listed: the controller knows those itself.
func (db *DB) GPUUsage(ctx context.Context, since time.Time) ([]spec.GPUUsage, error) {
	// One table, no join: a usage row carries its job's account and user.
	// A read of all history scans usage in key order, where an attempt's
	// devices are adjacent, so GROUP BY streams; "+ 0" keeps the planner
	// off the end-time index, which would cost a lookup per row. A recent
	// window uses the index.
	cond, args := `end_time + 0 IS NOT NULL`, []any{}
	if !since.IsZero() {
		cond, args = `end_time >= ?`, append(args, since.Unix())
	}
	// Grouped by the key's prefix only, so the scan streams without a
	// sort; an attempt's devices are of one model.
	rows, err := db.r.QueryContext(ctx, `SELECT job_id, attempt, MIN(gpu_model), SUM(fraction), MIN(start_time),
		MAX(end_time), MIN(account), MIN(user) FROM usage WHERE `+cond+` GROUP BY job_id, attempt`, args...)
	if err != nil {
		return nil, fmt.Errorf("read GPU usage since %v: %w", since, err)
	}
	defer rows.Close()
	var out []spec.GPUUsage
	for rows.Next() {
		var u spec.GPUUsage
		var id, start, end int64
		if err := rows.Scan(&id, &u.Attempt, &u.Model, &u.GPUs, &start, &end, &u.Account, &u.User); err != nil {
			return nil, fmt.Errorf("read GPU usage: read row: %w", err)
		}
		u.JobID = spec.JobID(id)
		u.Start, u.End = time.Unix(start, 0).UTC(), time.Unix(end, 0).UTC()
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read GPU usage since %v: %w", since, err)
	}
	return out, nil
}

// usageBucket is the span of end times GPUUsageTotals sums together.
const usageBucket = 24 * time.Hour

// GPUUsageTotals sums the GPU use of the attempts that ended in [since,
// before) (zero since: from the start) per account, user, model and day
// of end, for the controller's fairshare: a million attempts are read as
// a few thousand rows, summed inside SQLite. Each total carries the
// GPU-second-weighted midpoint of its attempts; decaying a day's usage
// from it instead of from each attempt errs by under 0.1% at a half-life
// of a week. It scans the table rather than the end-time index: it is
// meant for (nearly) all of it, where a lookup per row costs more.
func (db *DB) GPUUsageTotals(ctx context.Context, since, before time.Time) ([]spec.GPUUsageTotal, error) {
	s, b := bounds(since, before)
	rows, err := db.r.QueryContext(ctx, `SELECT account, user, gpu_model, SUM(gs), SUM(gs * mid) / SUM(gs) FROM (
			SELECT account, user, gpu_model, end_time / ?3 AS day, fraction * (end_time - start_time) AS gs,
				(start_time + end_time) / 2.0 AS mid
			FROM usage WHERE end_time + 0 >= ?1 AND end_time + 0 < ?2 AND end_time > start_time)
		GROUP BY account, user, gpu_model, day`, s, b, int64(usageBucket/time.Second))
	if err != nil {
		return nil, fmt.Errorf("sum GPU usage before %v: %w", before, err)
	}
	defer rows.Close()
	var out []spec.GPUUsageTotal
	for rows.Next() {
		var u spec.GPUUsageTotal
		var mid float64
		if err := rows.Scan(&u.Account, &u.User, &u.Model, &u.GPUSeconds, &mid); err != nil {
			return nil, fmt.Errorf("sum GPU usage: read row: %w", err)
		}
		u.Mid = time.Unix(0, int64(mid*1e9)).UTC()
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sum GPU usage before %v: %w", before, err)
	}
	return out, nil
}

// RecordedTerminal returns, of ids, the jobs recorded in a terminal state,
// with their recorded attempt: the controller checks at start that every
// ended job it remembers reached accounting.
func (db *DB) RecordedTerminal(ctx context.Context, ids []spec.JobID) (map[spec.JobID]int, error) {
	out := make(map[spec.JobID]int, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = int64(id)
	}
	rows, err := db.r.QueryContext(ctx, `SELECT id, attempts FROM jobs WHERE state IN `+terminalStates+
		` AND id IN (`+strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",")+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("check recorded jobs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var att int
		if err := rows.Scan(&id, &att); err != nil {
			return nil, fmt.Errorf("check recorded jobs: read row: %w", err)
		}
		out[spec.JobID(id)] = att
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check recorded jobs: %w", err)
	}
	return out, nil
}
