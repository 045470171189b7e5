package containerd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/containerdtest"
)

// TestHostJobCannotSeeContainerdState: containerd's root (meta.db) and
// state (each task's bundle) hold every job's OCI spec, environment
// included. DaemonDirs names them for a real (private) containerd, read
// from its command line and config file, and a job on the host's root
// with them hidden as the node agent hides them (runtime.Mount.Hide)
// lists nothing there and cannot read another job's config.json or
// meta.db by their paths, as root or as a user, while its own bound
// directory works. The same job as root without the hide lists them and
// reads the secret, so the test fails when the hide does nothing.
func TestHostJobCannotSeeContainerdState(t *testing.T) {
	t.Parallel()
	addr := containerdtest.Start(t)
	rt := newRuntime(t, addr)
	ctx := context.Background()

	// containerdtest's daemon keeps root/ and state/ beside its socket
	// (StartDaemon's config.toml).
	daemonDir := filepath.Dir(addr)
	root, state := filepath.Join(daemonDir, "root"), filepath.Join(daemonDir, "state")
	dirs, err := rt.DaemonDirs(ctx)
	if err != nil {
		t.Fatalf("DaemonDirs: %v", err)
	}
	for _, want := range []string{root, state} {
		if !slices.Contains(dirs, want) {
			t.Errorf("DaemonDirs = %q; want it to hold %s", dirs, want)
		}
	}
	// The node agent skips what does not exist (no mount point for it on
	// a read-only root); so does this test.
	dirs = slices.DeleteFunc(dirs, func(d string) bool {
		fi, err := os.Stat(d)
		return err != nil || !fi.IsDir()
	})

	// A running job with a secret in its environment.
	secret := "s3cret-" + testID(t)
	victim := hostTask(t, jobDir(t), "sleep", "600")
	victim.ID += "-victim"
	victim.Env = append(victim.Env, "GPUD_TEST_SECRET="+secret)
	if err := rt.Start(ctx, victim); err != nil {
		t.Fatalf("Start: %v", err)
	}
	bundle := filepath.Join(state, "io.containerd.runtime.v2.task", containerd.DefaultNamespace, victim.ID, "config.json")
	metaDB := filepath.Join(root, "io.containerd.metadata.v1.bolt", "meta.db")
	for _, f := range []string{bundle, metaDB} {
		if b, err := os.ReadFile(f); err != nil || !strings.Contains(string(b), secret) {
			t.Fatalf("%s on the host: %v, holds the secret: %v; the test reads the wrong files", f, err, strings.Contains(string(b), secret))
		}
	}

	// read runs a job that lists each directory and greps the two files,
	// printing "<dir> <entries>" and "read <file>" for each secret found.
	read := func(name string, uid uint32, hide bool) string {
		t.Helper()
		dir := jobDir(t)
		var script strings.Builder
		for _, d := range dirs {
			fmt.Fprintf(&script, "echo %s $(ls -A %s 2>/dev/null | wc -l)\n", d, d)
		}
		for _, f := range []string{bundle, metaDB} {
			fmt.Fprintf(&script, "grep -q %s %s 2>/dev/null && echo read %s\n", secret, f, f)
		}
		script.WriteString("echo ok > " + filepath.Join(dir, "own") + "\n")
		cfg := hostTask(t, dir, "/bin/sh", "-c", script.String())
		cfg.ID += "-" + name
		cfg.UID, cfg.GID = uid, uid
		cfg.Mounts = []runtime.Mount{{Source: dir, Dest: dir}}
		if hide {
			for _, d := range dirs {
				cfg.Mounts = append(cfg.Mounts, runtime.Mount{Dest: d, Hide: true})
			}
		}
		if err := rt.Start(ctx, cfg); err != nil {
			t.Fatalf("Start %s: %v", cfg.ID, err)
		}
		if es := wait(t, rt, cfg.ID); es.Code != 0 {
			t.Errorf("job %s: exit %+v; stderr %s", cfg.ID, es, readFile(t, cfg.StderrPath))
		}
		if err := rt.Delete(ctx, cfg.ID); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(dir, "own")); got != "ok\n" {
			t.Errorf("job %s wrote %q into its own bound directory, want ok", cfg.ID, got)
		}
		return readFile(t, cfg.StdoutPath)
	}
	seen := func(out string) bool {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); f[0] == "read" || f[len(f)-1] != "0" {
				return true
			}
		}
		return false
	}

	// Without the hide, root lists and reads it all (a user is kept out of
	// these by containerd's modes, which differ between its versions).
	if out := read("root-unhidden", 0, false); !seen(out) || !strings.Contains(out, "read "+bundle) || !strings.Contains(out, "read "+metaDB) {
		t.Errorf("root job without the hide found nothing; the test cannot fail:\n%s", out)
	}
	for _, tc := range []struct {
		name string
		uid  uint32
	}{{"root", 0}, {"user", nobody}} {
		if out := read(tc.name, tc.uid, true); seen(out) {
			t.Errorf("%s job on the host's root sees containerd's state through the hide:\n%s", tc.name, out)
		}
	}
}
