package accounting

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// The audit log's retention (issue 24, hole 4): it is kept for an age
// and up to a size ([accounting] audit_max_age, audit_max_size), and the
// API server makes it stop growing when the disk runs short
// (audit_min_free), so a flood of calls cannot take the space job state
// needs. The size is an estimate of what the rows take in the file,
// their text and indexes: auditRowBytes per row, kept in memory from one
// scan at the first call and the writes since.

// auditRowBytes is the SQL estimate of one audit row's bytes: its text
// fields, its actor name again in the actor index, and about 48 bytes of
// integers, row and index overhead.
const auditRowBytes = `(48 + 2*length(actor_name) + length(role) + length(origin) + length(action) + length(target) + length(result))`

// rowBytes is auditRowBytes of an entry being written.
func rowBytes(a AuditEntry) int64 {
	return int64(48 + 2*len(a.ActorName) + len(a.Role) + len(a.Origin) + len(a.Action) + len(a.Target) + len(a.Result))
}

// AuditBytes estimates what the audit log's rows take now.
func (db *DB) AuditBytes(ctx context.Context) (int64, error) {
	db.auditMu.Lock()
	defer db.auditMu.Unlock()
	if err := db.auditSizeLocked(ctx); err != nil {
		return 0, err
	}
	return db.auditBytes, nil
}

// auditSizeLocked scans the table once (auditMu held).
func (db *DB) auditSizeLocked(ctx context.Context) error {
	if db.auditSized {
		return nil
	}
	var n sql.NullInt64
	if err := db.r.QueryRowContext(ctx, `SELECT sum(`+auditRowBytes+`) FROM audit`).Scan(&n); err != nil {
		return fmt.Errorf("measure the audit log: %w", err)
	}
	db.auditBytes, db.auditSized = n.Int64, true
	return nil
}

// addAuditBytes counts n bytes written (or, negative, deleted) once the
// transaction that did it committed.
func (db *DB) addAuditBytes(n int64) {
	db.auditMu.Lock()
	if db.auditSized {
		db.auditBytes = max(db.auditBytes+n, 0)
	}
	db.auditMu.Unlock()
}

// PruneAudit deletes the audit entries older than before (zero: none by
// age), then the oldest ones until what the log takes is at most
// maxBytes (0: no size bound). It returns how many it deleted. Deleted
// rows free pages the next writes reuse: the file stops growing.
func (db *DB) PruneAudit(ctx context.Context, before time.Time, maxBytes int64) (int, error) {
	db.auditMu.Lock()
	defer db.auditMu.Unlock()
	if err := db.auditSizeLocked(ctx); err != nil {
		return 0, err
	}
	deleted := 0
	// In chunks, one transaction each, so a big first prune does not
	// hold the writer for long.
	const chunk = 2000
	if !before.IsZero() {
		for {
			n, freed, err := db.deleteAudit(ctx, `DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE time < ? ORDER BY id LIMIT ?) RETURNING `+auditRowBytes, before.Unix(), chunk)
			if err != nil {
				return deleted, fmt.Errorf("prune the audit log of entries before %s: %w", before.UTC().Format(time.RFC3339), err)
			}
			deleted += n
			db.auditBytes = max(db.auditBytes-freed, 0)
			if n < chunk {
				break
			}
		}
	}
	for maxBytes > 0 && db.auditBytes > maxBytes {
		n, freed, err := db.deleteOldest(ctx, db.auditBytes-maxBytes, chunk)
		if err != nil {
			return deleted, fmt.Errorf("prune the audit log to %d bytes: %w", maxBytes, err)
		}
		deleted += n
		db.auditBytes = max(db.auditBytes-freed, 0)
		if n < chunk && db.auditBytes > maxBytes {
			db.auditBytes = 0 // the table is empty: the estimate was off
		}
	}
	return deleted, nil
}

// deleteOldest deletes the oldest rows, in one transaction, until need
// bytes are freed or most rows are gone, a few at a time so that it
// does not delete many more than needed.
func (db *DB) deleteOldest(ctx context.Context, need int64, most int) (int, int64, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	n, freed := 0, int64(0)
	for freed < need && n < most {
		k, b, err := deleteRows(ctx, tx, `DELETE FROM audit WHERE id IN (SELECT id FROM audit ORDER BY id LIMIT 32) RETURNING `+auditRowBytes)
		if err != nil {
			return 0, 0, err
		}
		n, freed = n+k, freed+b
		if k < 32 {
			break
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return n, freed, nil
}

// deleteAudit runs one pruning statement q, which returns the bytes of
// each row it deletes, in its own transaction.
func (db *DB) deleteAudit(ctx context.Context, q string, args ...any) (int, int64, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback()
	n, freed, err := deleteRows(ctx, tx, q, args...)
	if err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, err
	}
	return n, freed, nil
}

// deleteRows runs q (a DELETE returning each row's bytes) in tx.
func deleteRows(ctx context.Context, tx *sql.Tx, q string, args ...any) (int, int64, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	n, freed := 0, int64(0)
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return 0, 0, err
		}
		n++
		freed += b
	}
	return n, freed, rows.Err()
}

// FreeBytes is the space left to unprivileged writers on the file
// system that holds the database (statfs of its directory).
func (db *DB) FreeBytes() (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(db.path), &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", filepath.Dir(db.path), err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}
