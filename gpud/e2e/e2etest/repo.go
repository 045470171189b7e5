package e2etest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// NodeConfig writes etc/node.toml into dir as node.toml with each line
// pairs[i] replaced by pairs[i+1] (each old line with its newlines, e.g.
// "\nprepared_containers = 0\n"), and returns its path. A line the file
// lacks fails the test, naming every such line: a test must not run on
// the defaults it meant to change.
func NodeConfig(t testing.TB, dir string, pairs ...string) string {
	t.Helper()
	if len(pairs)%2 != 0 {
		t.Fatalf("NodeConfig: %d strings, want old/new pairs", len(pairs))
	}
	base, err := os.ReadFile(RepoPath(t, "etc/node.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	var missing []string
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(conf, pairs[i]) {
			missing = append(missing, strconv.Quote(pairs[i]))
			continue
		}
		conf = strings.Replace(conf, pairs[i], pairs[i+1], 1)
	}
	if len(missing) > 0 {
		t.Fatalf("etc/node.toml lacks %s", strings.Join(missing, ", "))
	}
	path := filepath.Join(dir, "node.toml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
