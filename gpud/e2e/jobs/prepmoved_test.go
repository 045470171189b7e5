package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
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
	c := e2etest.StartCluster(t, 1, "--node-config", path, "--kill-grace", "2s", "--log-level", "debug")
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
		all := e2etest.ListContainers(t, c.Dir)
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
	e2etest.WaitFor(t, time.Minute, "a container prepared for alice's image job", func() bool {
		return prepared() == 1 && preparedLogged(c, alice.UID) >= 1
	})
	// The same tag, once more: the prepared container serves it.
	if out := run(); !strings.HasPrefix(out, "one\n") || !strings.Contains(out, "gpud-prep-") {
		t.Fatalf("second job printed %q, want version one in the prepared container", out)
	}
	e2etest.WaitFor(t, time.Minute, "a container prepared again", func() bool { return prepared() == 1 && preparedLogged(c, alice.UID) >= 2 })
	push("two")
	if out := run(); !strings.HasPrefix(out, "two\n") || strings.Contains(out, "gpud-prep-") {
		t.Fatalf("job after the tag moved printed %q, want version two, started cold", out)
	}
}

// TestPreparedForExpectedImageJob: alice's image job queued behind her
// job on the node's only GPUs has its image prefetched and a container
// prepared for it (labelled with its ID) before the running job ends, and
// then starts in it, in the image.
func TestPreparedForExpectedImageJob(t *testing.T) {
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
	on = strings.Replace(on, "\nprepared_max_age = \"60s\"\n", "\nprepared_max_age = \"5s\"\n", 1) // heartbeats (1 s) renew an expected one
	if err := os.WriteFile(path, []byte(on), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(ctl, []byte("version = 1\n[controller]\nheartbeat_interval = \"1s\"\nnode_timeout = \"10s\"\n[scheduler]\ninterval = \"1s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--node-config", path, "--config", ctl, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	alice := homeUser(t, "a")
	writeAs(t, alice, ".config/enroot/.credentials", fmt.Sprintf("machine %s login %s password %s\n", reg.Host, regUser.Name, regUser.Password))
	reg.AppImage(t, "test/app:1")
	hold := filepath.Join(alice.Home, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	holder := submitAs(t, c, alice, "-G", "8", "--time", "5", "-o", "/dev/null", "--wrap", "while [ -e "+hold+" ]; do sleep 0.1; done")
	c.WaitState(holder, time.Minute, "RUNNING")
	id := submitAs(t, c, alice, "--image="+reg.EnrootRef("test/app:1"), "-G", "8", "--time", "2", "-o", "img-%j.out",
		"--wrap", "cat /etc/os-release; echo $GPUD_CHECKPOINT_DIR")
	prepared := func(label string) bool {
		all := e2etest.ListContainers(t, c.Dir)
		for _, ti := range all {
			if l := ti.Labels["gpud.prepared"]; l == label || label == "" && l != "" {
				return true
			}
		}
		return false
	}
	e2etest.WaitFor(t, time.Minute, "a container prepared for the queued image job "+id, func() bool { return prepared(id) })
	if st := c.ShowJob(id); st["state"] != "PENDING" {
		t.Fatalf("image job %s is %v, want PENDING behind the holder", id, st["state"])
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	if job := c.WaitState(id, 2*time.Minute, "COMPLETED", "FAILED"); job["state"] != "COMPLETED" {
		t.Fatalf("image job %s = %v (%v), want COMPLETED", id, job["state"], job["reason"])
	}
	out, err := os.ReadFile(filepath.Join(alice.Home, "img-"+id+".out"))
	if err != nil || !strings.Contains(string(out), `IMAGE="test/app:1"`) || !strings.Contains(string(out), "gpud-prep-") {
		t.Fatalf("image job output = %q, %v; want the image's /etc/os-release, in the container prepared for it", out, err)
	}
	// The one prepared after its start (the array's shape) ages out.
	e2etest.WaitFor(t, time.Minute, "no prepared container left", func() bool { return !prepared("") })
}
