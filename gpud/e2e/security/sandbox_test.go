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

// TestSandboxMounts: on a node whose host root is read-only for jobs
// (node.toml host_root = "read-only"), a job on the host's root still
// writes where real jobs expect to: a site filesystem node.toml lists in
// mounts, its user's home (~/.cache, as XDG_CACHE_HOME defaults to), while
// a directory not listed stays read-only and /tmp stays private to the
// job. (The default, a writable root: TestHostFilesystem in e2e/steps.)
func TestSandboxMounts(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	site, err := os.MkdirTemp(wd, ".site-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(site) })
	scratch, other := filepath.Join(site, "scratch"), filepath.Join(site, "other")
	for _, d := range []string{scratch, other} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "/" {
		t.Skipf("SKIP: no home directory for this user (%v)", err)
	}
	conf := filepath.Join(t.TempDir(), "node.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("version = 1\n[node]\nhost_root = \"read-only\"\nmounts = [%q]\n", scratch)), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--node-config", conf)
	work := t.TempDir()
	tag := fmt.Sprintf("gpud-e2e-%d", time.Now().UnixNano())
	cache := filepath.Join(home, ".cache", tag)
	t.Cleanup(func() { os.RemoveAll(cache) })
	script := e2etest.WriteScript(t, work, "sandbox.sh", fmt.Sprintf(`#!/bin/sh
echo scratch > %[1]s/out && echo wrote scratch
echo other > %[2]s/out 2>/dev/null && echo wrote other
mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/%[3]s" && echo cached > "${XDG_CACHE_HOME:-$HOME/.cache}/%[3]s/x" && echo wrote cache
echo private > /tmp/%[3]s && echo wrote tmp
`, scratch, other, tag))
	r := c.CLI(work, "sbatch", "--parsable", "-o", filepath.Join(work, "out.txt"), script)
	if r.Code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "COMPLETED", "FAILED")
	out, _ := os.ReadFile(filepath.Join(work, "out.txt"))
	for _, want := range []string{"wrote scratch", "wrote cache", "wrote tmp"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("job output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "wrote other") {
		t.Errorf("the job wrote into %s, which node.toml does not list:\n%s", other, out)
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "out")); err != nil || string(b) != "scratch\n" {
		t.Errorf("site mount %s/out: %q, %v", scratch, b, err)
	}
	if b, err := os.ReadFile(filepath.Join(cache, "x")); err != nil || string(b) != "cached\n" {
		t.Errorf("%s/x: %q, %v", cache, b, err)
	}
	if _, err := os.Stat(filepath.Join("/tmp", tag)); err == nil {
		os.Remove(filepath.Join("/tmp", tag))
		t.Errorf("the job's /tmp/%s appeared in the host's /tmp", tag)
	}
}
