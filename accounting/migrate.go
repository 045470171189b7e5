package accounting

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// migrationFiles are the schema changes, one numbered file each
// (NNN_name.sql). A released file is never edited: a change is a new file,
// because databases in the field already ran the old one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in order, checking they are
// numbered 1, 2, 3, ... without gaps or duplicates.
func migrations() ([]migration, error) {
	return parseMigrations(migrationFiles, "migrations")
}

func parseMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || name == "" {
			return nil, fmt.Errorf("read migration %s: name must be NNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	// ReadDir sorts by name and the numbers are zero-padded, so the order is
	// already numeric; check it is also contiguous.
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("read migrations: found version %d (%s) where %d was expected", m.version, m.name, i+1)
		}
	}
	return ms, nil
}

// migrate brings db to the newest schema, one transaction per migration so
// a failure leaves the database at the last complete version. Each step
// re-reads the version inside its write transaction, so two processes
// opening the same file at once do not both apply a step.
func migrate(ctx context.Context, db *sql.DB) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	for _, m := range ms {
		if err := applyMigration(ctx, db, m, len(ms)); err != nil {
			return err
		}
	}
	return nil
}

func applyMigration(ctx context.Context, db *sql.DB, m migration, newest int) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("apply migration %d %s: begin: %w", m.version, m.name, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that made us roll back is the one to report
		}
	}()
	cur, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if cur > newest {
		return fmt.Errorf("database schema is v%d, newer than this gpud knows (v%d); run a gpud at least as new as the one that wrote it", cur, newest)
	}
	if cur >= m.version {
		return tx.Rollback()
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return fmt.Errorf("apply migration %d %s: %w", m.version, m.name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)`,
		m.version, m.name, time.Now().Unix()); err != nil {
		return fmt.Errorf("apply migration %d %s: record version: %w", m.version, m.name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("apply migration %d %s: commit: %w", m.version, m.name, err)
	}
	return nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaVersion is the newest migration applied, 0 for a new database.
func schemaVersion(ctx context.Context, q queryer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}
