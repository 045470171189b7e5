package statefile_test

import (
	"bytes"
	"database/sql"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	_ "github.com/mattn/go-sqlite3"

	"github.com/gpud/gpud/gpud/statefile"
)

func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestDBCompanionsArePrivate: a database DB created is 0600, and so are
// the -wal and -shm SQLite makes next to it later, even under a umask
// that would leave them world-readable (SQLite's default for a file it
// creates itself is 0644).
func TestDBCompanionsArePrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "state.db")
	fixes, err := statefile.DB(path)
	if err != nil || len(fixes) != 0 {
		t.Fatalf("DB(new) = %v, %v; want no fixes, no error", fixes, err)
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('SECRET')`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s mode %#o, want 0600", filepath.Base(p), m)
		}
	}
}

// TestDBFixesExistingFiles: files an older gpud left 0644 are tightened
// to 0600 and reported, and the report is logged.
func TestDBFixesExistingFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "accounting.db")
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixes, err := statefile.DB(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(fixes) != 3 {
		t.Fatalf("fixes = %v, want the db, -wal and -shm", fixes)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s mode %#o after DB, want 0600", filepath.Base(p), m)
		}
	}
	var buf bytes.Buffer
	statefile.Log(slog.New(slog.NewTextHandler(&buf, nil)), fixes)
	if !strings.Contains(buf.String(), "made it private") || !strings.Contains(buf.String(), path+"-wal") || !strings.Contains(buf.String(), "old_mode=0644") {
		t.Errorf("log = %q; want a line per file naming it and its old mode", buf.String())
	}
	// A second start finds nothing to fix.
	if fixes, err := statefile.DB(path); err != nil || len(fixes) != 0 {
		t.Errorf("DB again = %v, %v; want nothing", fixes, err)
	}
}

// TestDBRefusesLinks: a symbolic link where a database or its WAL
// belongs is refused, never followed (its target keeps its mode).
func TestDBRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{"a.db", "b.db-wal"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := statefile.DB(filepath.Join(dir, "a.db")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("DB(link) = %v; want a refusal naming the link", err)
	}
	if _, err := statefile.DB(filepath.Join(dir, "b.db")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("DB(db whose -wal is a link) = %v; want a refusal", err)
	}
	if m := mode(t, target); m != 0o644 {
		t.Errorf("link target mode %#o; DB followed the link", m)
	}
}

// TestDir: a new directory gets exactly its mode whatever the umask; an
// existing looser one is tightened and reported; a tighter one is left.
func TestDir(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	sock := filepath.Join(root, "sockdir")
	if fixes, err := statefile.Dir(sock, 0o711); err != nil || len(fixes) != 0 {
		t.Fatalf("Dir(new) = %v, %v", fixes, err)
	}
	if m := mode(t, sock); m != 0o711 {
		t.Errorf("new socket dir mode %#o, want 0711 even under umask 077", m)
	}
	loose := filepath.Join(root, "state")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	fixes, err := statefile.Dir(loose, 0o700)
	if err != nil || len(fixes) != 1 || fixes[0].Old != 0o755 || fixes[0].New != 0o700 {
		t.Fatalf("Dir(0755 dir, 0700) = %v, %v; want one fix 0755 -> 0700", fixes, err)
	}
	if m := mode(t, loose); m != 0o700 {
		t.Errorf("state dir mode %#o after Dir, want 0700", m)
	}
	if fixes, err := statefile.Dir(loose, 0o711); err != nil || len(fixes) != 0 || mode(t, loose) != 0o700 {
		t.Errorf("Dir(0700 dir, 0711) = %v, %v, mode %#o; want it left tighter", fixes, err, mode(t, loose))
	}
}
