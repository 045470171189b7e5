package node

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

func TestHiddenPaths(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	for _, d := range []string{filepath.Join(state, "node", "checkpoints"), filepath.Join(base, "scratch")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got := hiddenPaths([]string{filepath.Join(state, "node"), filepath.Join(state, "node", "checkpoints"), state + "/",
		filepath.Join(base, "missing"), "relative", "/", filepath.Join(base, "scratch"), state})
	want := []string{filepath.Join(base, "scratch"), state}
	if !slices.Equal(got, want) {
		t.Fatalf("hiddenPaths = %q, want %q (existing, absolute, not /, none below another)", got, want)
	}
}

// TestBuildTaskHidesState checks a job on the host's root gets the state
// dirs hidden, its own directories and the controller socket bound back,
// and that a non-root job may not name a directory inside the state.
func TestBuildTaskHidesState(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	jobDir := filepath.Join(state, "nodes", "n1", "jobs", "gpud-7-1-n1")
	ckpt := filepath.Join(state, "checkpoints", "7")
	sock := filepath.Join(state, "gpud.sock")
	home := filepath.Join(base, "home")
	link := filepath.Join(base, "link")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(state, "nodes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(state, "nodes"), link); err != nil {
		t.Fatal(err)
	}
	in := func(work string, uid uint32, image string) *taskInput {
		return &taskInput{
			Asg: &api.Assignment{
				Job:   spec.Job{ID: 7, UID: uid, GID: uid, JobSpec: spec.JobSpec{Script: "echo\n", WorkDir: work, SubmitDir: work, Image: image}},
				Alloc: spec.Alloc{ID: "a7", Nodes: []spec.NodeAlloc{{Node: "n1"}}},
			},
			Self: spec.NodeAlloc{Node: "n1"}, NodeName: "n1", DefaultImage: runtime.ImageHost,
			ContainerID: "gpud-7-1-n1", JobDir: jobDir, ScriptPath: filepath.Join(jobDir, "script"), CkptDir: ckpt,
			Hide: []string{state}, Show: []string{sock, "/elsewhere.sock"},
		}
	}
	cfg, err := buildTask(in(home, 1000, ""))
	if err != nil {
		t.Fatal(err)
	}
	want := []runtime.Mount{
		{Dest: state, Hide: true},
		{Source: sock, Dest: sock},
		{Source: home, Dest: home},
		{Source: jobDir, Dest: jobDir},
		{Source: filepath.Join(jobDir, "tmp"), Dest: "/tmp"},
		{Source: ckpt, Dest: ckpt},
	}
	if !slices.Equal(cfg.Mounts, want) {
		t.Errorf("mounts:\n got %+v\nwant %+v", cfg.Mounts, want)
	}
	// An image has its own root: nothing of the host's to hide.
	cfg, err = buildTask(in(home, 1000, "docker.io/library/busybox:latest"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(cfg.Mounts, func(m runtime.Mount) bool { return m.Hide || m.Source == sock }) {
		t.Errorf("image job mounts %+v: want no hidden dirs and no socket", cfg.Mounts)
	}
	for _, work := range []string{state, filepath.Join(state, "nodes"), filepath.Join(link, "n1")} {
		if _, err := buildTask(in(work, 1000, "")); err == nil || !strings.Contains(err.Error(), "jobs may not see") {
			t.Errorf("non-root job with work dir %s: err %v; want it refused", work, err)
		}
	}
	// Root may (it can read the state anyway); the bind lands on the tmpfs.
	if _, err := buildTask(in(state, 0, "")); err != nil {
		t.Errorf("root job with work dir in the state dir: %v", err)
	}
}

// TestHiddenFollowsChanges: the agent's hidden list (remembered between
// jobs) is made again when a path to hide appears, goes, becomes another
// directory or a link, so a job never gets a list made from what was
// there before.
func TestHiddenFollowsChanges(t *testing.T) {
	base := t.TempDir()
	state, ckpt := filepath.Join(base, "state"), filepath.Join(base, "ckpt")
	scratch, other := filepath.Join(base, "scratch"), filepath.Join(base, "other")
	for _, d := range []string{state, ckpt, other, filepath.Join(other, "inner")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := &runnerDeps{cfg: Config{StateDir: state, CheckpointRoot: ckpt, HidePaths: []string{scratch, filepath.Join(other, "inner")}}}
	check := func(step string, want ...string) {
		t.Helper()
		for range 2 { // made, then remembered
			got := d.hidden()
			if !slices.Equal(got, want) {
				t.Fatalf("%s: hidden = %q, want %q", step, got, want)
			}
			if fresh := hiddenPaths(append([]string{state, ckpt}, d.cfg.HidePaths...)); !slices.Equal(got, fresh) {
				t.Fatalf("%s: hidden = %q, hiddenPaths made now = %q", step, got, fresh)
			}
		}
	}
	check("start", ckpt, filepath.Join(other, "inner"), state)
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	check("scratch made", ckpt, filepath.Join(other, "inner"), scratch, state)
	// scratch becomes a link to other (both stay: a path is dropped only
	// when it resolves to below another as written).
	if err := os.Remove(scratch); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, scratch); err != nil {
		t.Fatal(err)
	}
	check("scratch a link to other", ckpt, filepath.Join(other, "inner"), scratch, state)
	if err := os.Remove(scratch); err != nil {
		t.Fatal(err)
	}
	check("scratch gone", ckpt, filepath.Join(other, "inner"), state)
	// A directory replaced by another at the same path.
	if err := os.Rename(state, filepath.Join(base, "old-state")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ckpt, state); err != nil {
		t.Fatal(err)
	}
	check("state a link to ckpt", ckpt, filepath.Join(other, "inner"))
}
