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

// ReservedIdle is the reserved GPU-time within [start, end) that the
// reservations' own jobs left idle, in GPU-hours (each window clipped to
// the period and to now): of windows with MAINT (maint) and of the others
// (reserved). Windows with IGNORE_JOBS count in neither: Slurm's cluster
// utilization counts a reservation's idle time as Allocated, a MAINT
// one's as Planned Down, and leaves IGNORE_JOBS ones out.
func (db *DB) ReservedIdle(ctx context.Context, start, end time.Time) (reserved, maint float64, err error) {
	if start.IsZero() || end.IsZero() || !end.After(start) {
		return 0, 0, spec.Errorf(spec.ErrInvalid, "reserved idle time needs a window with a start before its end, got %s to %s", start, end)
	}
	now := db.opts.now().Unix()
	err = db.scan(ctx, `SELECT w.flags, w.gpus * MAX(0, w.b - w.a),
		COALESCE((SELECT SUM(MAX(0, MIN(COALESCE(u.end_time, ?1), w.b) - MAX(u.start_time, w.a)) * u.fraction)
			FROM jobs j JOIN usage u ON u.job_id = j.id
			WHERE j.reservation = w.name AND u.start_time < w.b AND (u.end_time IS NULL OR u.end_time > w.a)), 0)
		FROM (SELECT name, flags, gpus, MAX(start_time, ?2) AS a, MIN(end_time, ?3, ?1) AS b FROM reservations
			WHERE end_time > ?2 AND start_time < ?3 AND start_time < ?1) w`, []any{now, start.Unix(), end.Unix()},
		func(sc func(...any) error) error {
			var flags string
			var held, used float64
			if err := sc(&flags, &held, &used); err != nil {
				return err
			}
			fs := split(flags)
			idle := max(held-used, 0) / 3600
			switch {
			case slices.Contains(fs, spec.ResvIgnoreJobs):
			case slices.Contains(fs, spec.ResvMaint):
				maint += idle
			default:
				reserved += idle
			}
			return nil
		})
	if err != nil {
		return 0, 0, fmt.Errorf("reserved idle time: %w", err)
	}
	return reserved, maint, nil
}
