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
			Asg: api.Assignment{
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
