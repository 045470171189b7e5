package statefile

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"syscall"
)

// CopyOut writes a consistent copy of the SQLite database db to path
// (VACUUM INTO: a compact file, taken in one read transaction, so a
// writer on another connection never sees it half done). path must not
// exist; it is made 0600 like every state file.
func CopyOut(ctx context.Context, db *sql.DB, path string) error {
	// An empty 0600 file first (VACUUM INTO fills an empty file and
	// would make a new one with the umask's mode).
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FileMode)
	if err != nil {
		return fmt.Errorf("copy database to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("copy database to %s: %w", path, err)
	}
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("copy database to %s: %w", path, err)
	}
	return nil
}

// CopyIn replaces every table of db with the same table of the SQLite
// file at path (written by CopyOut from a database of the same schema),
// in one transaction: a reader sees the old content or the new one.
// Tables of db that path lacks are emptied.
func CopyIn(ctx context.Context, db *sql.DB, path string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("restore database from %s: %w", path, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS snap`, path); err != nil {
		return fmt.Errorf("restore database from %s: %w", path, err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `DETACH DATABASE snap`) //nolint:errcheck // the connection is closed next
	tables := func(schema string) (map[string]bool, error) {
		rows, err := conn.QueryContext(ctx, `SELECT name FROM `+schema+`.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		names := map[string]bool{}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return nil, err
			}
			names[n] = true
		}
		return names, rows.Err()
	}
	mine, err := tables("main")
	if err != nil {
		return fmt.Errorf("restore database from %s: list tables: %w", path, err)
	}
	theirs, err := tables("snap")
	if err != nil {
		return fmt.Errorf("restore database from %s: list its tables: %w", path, err)
	}
	// The copy is consistent as a whole, not table by table: foreign keys
	// are off while the tables are replaced (the pragma is per connection
	// and must be set outside a transaction), then as they were.
	var fk int
	if err := conn.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
		return fmt.Errorf("restore database from %s: %w", path, err)
	}
	if fk != 0 {
		if _, err := conn.ExecContext(ctx, `PRAGMA foreign_keys = OFF`); err != nil {
			return fmt.Errorf("restore database from %s: %w", path, err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA foreign_keys = ON`) //nolint:errcheck // runs before DETACH; a failure leaves a closed connection
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("restore database from %s: %w", path, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	for t := range mine {
		q := `"` + t + `"`
		if _, err := tx.ExecContext(ctx, `DELETE FROM main.`+q); err != nil {
			return fmt.Errorf("restore table %s from %s: %w", t, path, err)
		}
		if !theirs[t] {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO main.`+q+` SELECT * FROM snap.`+q); err != nil {
			return fmt.Errorf("restore table %s from %s: %w", t, path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("restore database from %s: %w", path, err)
	}
	return nil
}
