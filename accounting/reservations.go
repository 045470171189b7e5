package accounting

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// RecordReservations keeps reservation windows (spec.ResvRecord) in one
// transaction: an upsert by name and start, or, with Remove, the
// window's deletion. The controller records a window when it is made,
// changed, begins or is cut short by a delete.
func (db *DB) RecordReservations(ctx context.Context, recs []spec.ResvRecord) (err error) {
	if len(recs) == 0 {
		return nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record %d reservation windows: begin: %w", len(recs), err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, r := range recs {
		if r.Name == "" || r.Start.IsZero() {
			return spec.Errorf(spec.ErrInvalid, "record reservation window %+v: a name and a start are required", r)
		}
		if r.Remove {
			if _, err := tx.ExecContext(ctx, `DELETE FROM reservations WHERE name = ? AND start_time = ?`, r.Name, r.Start.Unix()); err != nil {
				return fmt.Errorf("remove reservation %s window at %s: %w", r.Name, r.Start.Time, err)
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO reservations (name, start_time, end_time, nodes, gpus, flags, users, accounts)
			VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(name, start_time) DO UPDATE SET end_time=excluded.end_time, nodes=excluded.nodes,
			gpus=excluded.gpus, flags=excluded.flags, users=excluded.users, accounts=excluded.accounts`,
			r.Name, r.Start.Unix(), r.End.Unix(), strings.Join(r.Nodes, ","), r.GPUs, strings.Join(r.Flags, ","),
			strings.Join(r.Users, ","), strings.Join(r.Accounts, ",")); err != nil {
			return fmt.Errorf("record reservation %s window at %s: %w", r.Name, r.Start.Time, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record %d reservation windows: commit: %w", len(recs), err)
	}
	return nil
}

// ReservationUsage is sreport reservation utilization: every window (of
// the reservations in names; all when empty) that held at any time in
// [start, end), whole, with the GPU-seconds its jobs used within it
// (their devices' time inside the window, a running one's up to now)
// and the reserved GPU-seconds they left idle. A window that still holds
// counts up to now. By start, then name.
func (db *DB) ReservationUsage(ctx context.Context, start, end time.Time, names []string) ([]api.AcctResvRow, error) {
	if start.IsZero() || end.IsZero() || !end.After(start) {
		return nil, spec.Errorf(spec.ErrInvalid, "reservation usage needs a window with a start before its end, got %s to %s", start, end)
	}
	now := db.opts.now().Unix()
	var out []api.AcctResvRow
	err := db.scan(ctx, `SELECT r.name, r.start_time, r.end_time, r.nodes, r.gpus, r.flags, r.users, r.accounts,
		COALESCE((SELECT SUM(MAX(0, MIN(COALESCE(u.end_time, ?1), r.end_time, ?1) - MAX(u.start_time, r.start_time)) * u.fraction)
			FROM jobs j JOIN usage u ON u.job_id = j.id
			WHERE j.reservation = r.name AND u.start_time < r.end_time AND (u.end_time IS NULL OR u.end_time > r.start_time)), 0)
		FROM reservations r WHERE r.end_time > ?2 AND r.start_time < ?3 AND r.start_time <= ?1
		ORDER BY r.start_time, r.name`, []any{now, start.Unix(), end.Unix()}, func(sc func(...any) error) error {
		var row api.AcctResvRow
		var s, e int64
		var nodes, flags, users, accounts string
		if err := sc(&row.Name, &s, &e, &nodes, &row.GPUs, &flags, &users, &accounts, &row.AllocGPUSeconds); err != nil {
			return err
		}
		if len(names) > 0 && !slices.Contains(names, row.Name) {
			return nil
		}
		row.Start, row.End = spec.NewTime(time.Unix(s, 0)), spec.NewTime(time.Unix(e, 0))
		row.Nodes, row.Flags, row.Users, row.Accounts = split(nodes), split(flags), split(users), split(accounts)
		row.TotalSeconds = min(e, now) - s
		row.IdleGPUSeconds = max(float64(row.GPUs)*float64(row.TotalSeconds)-row.AllocGPUSeconds, 0)
		out = append(out, row)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reservation usage: %w", err)
	}
	return out, nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
