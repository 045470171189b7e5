package accounting

import (
	"context"
	"fmt"
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
