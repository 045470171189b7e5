package accounting

import (
	"context"
	"fmt"

	"github.com/gpud/gpud/gpud/statefile"
)

// Snapshot writes a consistent copy of the database to path (which must
// not exist): part of an HA group's Raft snapshot (gpud/ha).
func (db *DB) Snapshot(ctx context.Context, path string) error {
	if err := statefile.CopyOut(ctx, db.w, path); err != nil {
		return fmt.Errorf("snapshot accounting db %s: %w", db.path, err)
	}
	return nil
}

// Restore replaces the whole content of the database with that of the
// file at path (a Snapshot), in one transaction.
func (db *DB) Restore(ctx context.Context, path string) error {
	if err := statefile.CopyIn(ctx, db.w, path); err != nil {
		return fmt.Errorf("restore accounting db %s: %w", db.path, err)
	}
	return nil
}
