package e2etest

import (
	"os"
	"path/filepath"
	"testing"
)

// RepoPath is rel (say etc/gpud.toml) in the checkout the tests run
// from: the first directory up from the package's that holds go.mod, so
// a test reads the repository's files wherever its package sits.
func RepoPath(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, rel)
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s: run the tests from a checkout", dir)
		}
	}
}
