package store

import (
	"context"
	"fmt"

	"github.com/gpud/gpud/gpud/spec"
)

// LoadAdmin returns every record of the live administration state (node
// and partition overrides, reservations), by kind and name.
func (s *Store) LoadAdmin(ctx context.Context) ([]spec.AdminRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows, err := s.db.QueryContext(ctx, `SELECT kind, name, data FROM admin ORDER BY kind, name`)
	if err != nil {
		return nil, fmt.Errorf("load admin state from %s: %w", s.path, err)
	}
	defer rows.Close()
	var out []spec.AdminRecord
	for rows.Next() {
		var r spec.AdminRecord
		var data string
		if err := rows.Scan(&r.Kind, &r.Name, &data); err != nil {
			return nil, fmt.Errorf("load admin state from %s: %w", s.path, err)
		}
		r.Data = []byte(data)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load admin state from %s: %w", s.path, err)
	}
	return out, nil
}

// ApplyAdmin upserts recs (a record with no Data is deleted) in one
// transaction.
func (s *Store) ApplyAdmin(ctx context.Context, recs []spec.AdminRecord) error {
	if len(recs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin admin state transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for _, r := range recs {
		if len(r.Data) == 0 {
			_, err = tx.ExecContext(ctx, `DELETE FROM admin WHERE kind = ? AND name = ?`, r.Kind, r.Name)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO admin (kind, name, data) VALUES (?, ?, ?)
				ON CONFLICT (kind, name) DO UPDATE SET data = excluded.data`, r.Kind, r.Name, string(r.Data))
		}
		if err != nil {
			return fmt.Errorf("store %s %s: %w", r.Kind, r.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit admin state transaction: %w", err)
	}
	return nil
}
