package statefile_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpud/gpud/gpud/statefile"
)

func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS parent (id INTEGER PRIMARY KEY, v TEXT)`,
		`CREATE TABLE IF NOT EXISTS child (id INTEGER PRIMARY KEY, parent INTEGER NOT NULL REFERENCES parent(id))`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// A copy taken with CopyOut is private (0600) and CopyIn puts exactly its
// rows back, replacing what the target held, foreign keys and all.
func TestCopyOutIn(t *testing.T) {
	dir := t.TempDir()
	src := openDB(t, filepath.Join(dir, "src.db"))
	for _, q := range []string{`INSERT INTO parent VALUES (1, 'a'), (2, 'b')`, `INSERT INTO child VALUES (10, 2)`} {
		if _, err := src.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	snap := filepath.Join(dir, "snap.db")
	if err := statefile.CopyOut(context.Background(), src, snap); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(snap); err != nil || fi.Mode().Perm() != statefile.FileMode {
		t.Fatalf("copy: %v, mode %v; want %v", err, fi.Mode().Perm(), statefile.FileMode)
	}
	if err := statefile.CopyOut(context.Background(), src, snap); err == nil {
		t.Error("CopyOut over an existing file succeeded")
	}

	dst := openDB(t, filepath.Join(dir, "dst.db"))
	for _, q := range []string{`INSERT INTO parent VALUES (3, 'c')`, `INSERT INTO child VALUES (11, 3)`} {
		if _, err := dst.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := statefile.CopyIn(context.Background(), dst, snap); err != nil {
		t.Fatal(err)
	}
	var got string
	rows, err := dst.Query(`SELECT p.id || p.v || COALESCE(c.id, '') FROM parent p LEFT JOIN child c ON c.parent = p.id ORDER BY p.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got += s + ";"
	}
	if got != "1a;2b10;" {
		t.Errorf("after CopyIn: %q; want the copy's rows only (1a;2b10;)", got)
	}
}
