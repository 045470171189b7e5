package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/runtime/containerd"
	"github.com/gpud/gpud/runtime/containerd/registrytest"
)

// TestPreparedContainerAfterTagMoved: a container prepared after alice's
// image job (prepared_containers = 1) holds the image as it was then; once
// the tag names other content, her next job of the tag runs the new
// content (its pull resolves the tag anew), not in the container made
// from the old one. It fails with the pool matching on the reference
// alone: the job then prints the old content.
func TestPreparedContainerAfterTagMoved(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	reg := registrytest.Start(t, regUser)
	dir := e2etest.ShortTempDir(t)
	path := nodeConfigWithCA(t, dir, reg.CAFile)
	conf, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	on := strings.Replace(string(conf), "\nprepared_containers = 0\n", "\nprepared_containers = 1\n", 1)
	if on == string(conf) {
		t.Fatal("etc/node.toml lacks prepared_containers = 0")
	}
	if err := os.WriteFile(path, []byte(on), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--node-config", path, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	alice := homeUser(t, "a")
	writeAs(t, alice, ".config/enroot/.credentials", fmt.Sprintf("machine %s login %s password %s\n", reg.Host, regUser.Name, regUser.Password))
	layers := t.TempDir()
	base := registrytest.FilesLayer(t, layers, registrytest.BusyboxFiles(t))
	push := func(version string) {
		t.Helper()
		v := registrytest.FilesLayer(t, layers, []registrytest.File{{Name: "version", Mode: 0o644, Data: []byte(version + "\n")}})
		reg.Push(t, "test/moving:1", registrytest.Config{WorkingDir: "/"}, base, v)
	}
	run := func() string {
		t.Helper()
		id := submitAs(t, c, alice, "--image="+reg.EnrootRef("test/moving:1"), "-o", "v-%j.out", "--wrap", "cat /version; echo $GPUD_CHECKPOINT_DIR")
		if job := c.WaitState(id, 3*time.Minute, "COMPLETED", "FAILED"); job["state"] != "COMPLETED" {
			t.Fatalf("alice's job %s = %v (%v), want COMPLETED", id, job["state"], job["reason"])
		}
		out, err := os.ReadFile(filepath.Join(alice.Home, "v-"+id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	prepared := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt, err := containerd.New(ctx, containerd.Options{Address: containerd.SocketPath(filepath.Join(c.Dir, "containerd"))})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		all, err := rt.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ti := range all {
			if ti.Labels["gpud.prepared"] != "" && ti.Labels["gpud.user"] == alice.Name {
				n++
			}
		}
		return n
	}

	push("one")
	if out := run(); !strings.HasPrefix(out, "one\n") {
		t.Fatalf("first job printed %q, want the image's version one", out)
	}
	e2etest.WaitFor(t, time.Minute, "a container prepared for alice's image job", func() bool { return prepared() == 1 })
	// The same tag, once more: the prepared container serves it.
	if out := run(); !strings.HasPrefix(out, "one\n") || !strings.Contains(out, "gpud-prep-") {
		t.Fatalf("second job printed %q, want version one in the prepared container", out)
	}
	e2etest.WaitFor(t, time.Minute, "a container prepared again", func() bool { return prepared() == 1 })
	push("two")
	if out := run(); !strings.HasPrefix(out, "two\n") || strings.Contains(out, "gpud-prep-") {
		t.Fatalf("job after the tag moved printed %q, want version two, started cold", out)
	}
}
