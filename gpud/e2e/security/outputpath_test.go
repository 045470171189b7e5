package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestOutputPathTraps is issue 24's hole 2 against a real `gpud
// standalone`, as two useradd users: bob writes his job's output into a
// directory both can write that is not sticky (a group's project
// directory; /tmp where fs.protected_symlinks is 0), and alice plants, for
// his next job, a symlink to bob's ~/important there, or a symlink to his
// home in place of the directory his output goes to. Before, the default
// truncate mode opened the path with a shell (`: >"$1"`) as bob, emptying
// his 18-byte file before the check refused it. Now the file is made and
// checked with bob's rights, nothing followed that alice could have
// planted, and nothing emptied before the check: the job fails naming
// the trap, ~/important keeps its 18 bytes, in truncate and append mode.
// bob's own symlinks still work, and a job without a trap runs.
func TestOutputPathTraps(t *testing.T) {
	t.Parallel()
	c := e2etest.OpenCluster(t, false)
	alice, bob := e2etest.AddUserTag(t, "oa"), e2etest.AddUserTag(t, "ob")
	shared := filepath.Join(e2etest.ShortTempDir(t), "project")
	if err := os.Chmod(filepath.Dir(shared), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // not sticky
		t.Fatal(err)
	}
	important := filepath.Join(bob.Home, "important")
	const precious = "bob's 18 bytes...\n"
	if err := os.WriteFile(important, []byte(precious), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(important, int(bob.UID), int(bob.GID)); err != nil {
		t.Fatal(err)
	}
	intact := func(what string) {
		t.Helper()
		if b, err := os.ReadFile(important); err != nil || string(b) != precious {
			t.Errorf("%s: bob's ~/important now holds %q (%v); want its %d bytes", what, b, err, len(precious))
		}
	}
	// held submits bob's job with output at pattern (%j: its id), held,
	// and returns its id.
	held := func(pattern string, extra ...string) string {
		t.Helper()
		args := append([]string{"--parsable", "--hold", "-o", filepath.Join(shared, pattern)}, extra...)
		r := c.As(bob, nil, "sbatch", append(args, "--wrap", "echo ran")...)
		if r.Code != 0 {
			t.Fatalf("bob's sbatch -o %s: exit %d %s", pattern, r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	release := func(id string) map[string]any {
		t.Helper()
		if r := c.As(bob, nil, "scontrol", "release", id); r.Code != 0 {
			t.Fatalf("scontrol release %s: exit %d %s", id, r.Code, r.Stderr)
		}
		return c.WaitState(id, 90*time.Second, "COMPLETED", "FAILED", "CANCELLED")
	}
	for _, tc := range []struct {
		name, pattern, plant string // plant: the name alice makes for job id %s
		link                 string // what it points to
		mode                 []string
		want                 string
	}{
		{"symlink as the file", "bobout-%j.out", "bobout-%s.out", important, nil, "is not a regular file (symlink)"},
		{"symlink as the file, append", "bobout-%j.out", "bobout-%s.out", important, []string{"--open-mode=append"}, "is not a regular file (symlink)"},
		{"symlink as the directory", "bobdir-%j/important", "bobdir-%s", bob.Home, nil, fmt.Sprintf("is a symlink of uid %d", alice.UID)},
		{"symlink as the directory, append", "bobdir-%j/important", "bobdir-%s", bob.Home, []string{"--open-mode=append"}, fmt.Sprintf("is a symlink of uid %d", alice.UID)},
	} {
		id := held(tc.pattern, tc.mode...)
		trap := filepath.Join(shared, fmt.Sprintf(tc.plant, id))
		if r := c.As(alice, nil, "/bin/ln", "-s", tc.link, trap); r.Code != 0 {
			t.Fatalf("%s: alice plants %s: exit %d %s", tc.name, trap, r.Code, r.Stderr)
		}
		j := release(id)
		reason, _ := j["reason"].(string)
		if j["state"] != "FAILED" || !strings.Contains(reason, tc.want) || !strings.Contains(reason, "choose") {
			t.Errorf("%s: bob's job %s is %v (%q); want FAILED saying %q and what to do", tc.name, id, j["state"], reason, tc.want)
		}
		intact(tc.name)
	}
	// bob's own symlink in the shared directory is his to follow; a job
	// without a trap runs and writes there.
	mine := filepath.Join(shared, "bob-logs")
	if r := c.As(bob, nil, "/bin/ln", "-s", bob.Home, mine); r.Code != 0 {
		t.Fatalf("bob's own symlink: exit %d %s", r.Code, r.Stderr)
	}
	for _, pattern := range []string{"bobout-%j.out", "bob-logs/job-%j.out"} {
		id := held(pattern)
		if j := release(id); j["state"] != "COMPLETED" {
			t.Errorf("bob's job with -o %s: %v (%v); want COMPLETED", pattern, j["state"], j["reason"])
			continue
		}
		out := filepath.Join(shared, strings.ReplaceAll(pattern, "%j", id))
		if b, err := os.ReadFile(out); err != nil || string(b) != "ran\n" {
			t.Errorf("bob's output %s: %q (%v); want ran", out, b, err)
		}
	}
	intact("bob's own jobs")
}
