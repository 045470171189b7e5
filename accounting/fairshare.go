package accounting

import (
	"context"
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// GPUUsage lists the GPU use of every ended attempt that ended at or after
// since (zero: all of history), one entry per attempt and GPU model, for
// the controller's fairshare. GPUs count as billed here and in Summary: a
// MIG slice or a GPU share by its fraction, so the fairshare raw usage of
// an (account, user) equals its GPU-hours in gpuq report. Attempts still
// running are not listed: the controller knows those itself.
func (db *DB) GPUUsage(ctx context.Context, since time.Time) ([]spec.GPUUsage, error) {
	// A read of all history scans usage in key order (an attempt's devices
	// are adjacent) without the end-time index, which would cost a lookup
	// per row; a recent window uses the index. Devices are summed per
	// attempt and model here rather than by GROUP BY, which would sort.
	q := `SELECT u.job_id, u.attempt, u.gpu_model, u.fraction, u.start_time, u.end_time, j.account, j.user
		FROM usage u JOIN jobs j ON j.id = u.job_id `
	args := []any{}
	if since.IsZero() {
		q += `WHERE u.end_time + 0 IS NOT NULL`
	} else {
		q += `WHERE u.end_time >= ?`
		args = append(args, since.Unix())
	}
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read GPU usage since %v: %w", since, err)
	}
	defer rows.Close()
	type key struct {
		id      int64
		attempt int
		model   string
	}
	at := map[key]int{}
	var out []spec.GPUUsage
	for rows.Next() {
		var k key
		var frac float64
		var start, end int64
		var account, user string
		if err := rows.Scan(&k.id, &k.attempt, &k.model, &frac, &start, &end, &account, &user); err != nil {
			return nil, fmt.Errorf("read GPU usage: read row: %w", err)
		}
		if i, ok := at[k]; ok {
			out[i].GPUs += frac
			continue
		}
		at[k] = len(out)
		out = append(out, spec.GPUUsage{JobID: spec.JobID(k.id), Attempt: k.attempt, Account: account, User: user,
			Model: k.model, GPUs: frac, Start: time.Unix(start, 0).UTC(), End: time.Unix(end, 0).UTC()})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read GPU usage since %v: %w", since, err)
	}
	return out, nil
}
