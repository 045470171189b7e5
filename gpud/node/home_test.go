package node

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestBuildTaskHome: a job on the host's root gets its user's home
// read-write (Snakemake's job writes ~/.cache; it failed with "Read-only
// file system" before), an image job does not, nor a home inside gpud's
// state.
func TestBuildTaskHome(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	jobDir := filepath.Join(state, "jobs", "j")
	work := filepath.Join(base, "work")
	in := func(home, image string) *taskInput {
		return &taskInput{
			Asg: &api.Assignment{
				Job:   spec.Job{ID: 7, UID: 1000, GID: 1000, JobSpec: spec.JobSpec{Script: "echo\n", WorkDir: work, SubmitDir: work, Image: image}},
				Alloc: spec.Alloc{ID: "a7", Nodes: []spec.NodeAlloc{{Node: "n1"}}},
			},
			Self: spec.NodeAlloc{Node: "n1"}, NodeName: "n1", DefaultImage: runtime.ImageHost,
			ContainerID: "j", JobDir: jobDir, ScriptPath: filepath.Join(jobDir, "script"),
			Hide: []string{state}, Home: home,
		}
	}
	has := func(ms []runtime.Mount, p string) bool {
		return slices.ContainsFunc(ms, func(m runtime.Mount) bool { return m.Source == p && m.Dest == p && !m.ReadOnly })
	}
	home := filepath.Join(base, "home", "alice")
	for _, tc := range []struct {
		home, image string
		want        bool
	}{
		{home, "", true},
		{home, "docker.io/library/busybox:latest", false},
		{filepath.Join(state, "alice"), "", false},
		{"", "", false},
	} {
		cfg, err := buildTask(in(tc.home, tc.image))
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.home != "" && has(cfg.Mounts, tc.home); got != tc.want {
			t.Errorf("home %q image %q: bound read-write %v, want %v (mounts %+v)", tc.home, tc.image, got, tc.want, cfg.Mounts)
		}
	}
	// The site's shared filesystems: read-write in host jobs, not in
	// image jobs, never inside gpud's state.
	scratch := filepath.Join(base, "scratch")
	withMounts := func(image string) *taskInput {
		x := in("", image)
		x.Mounts = []string{scratch, filepath.Join(state, "shared")}
		return x
	}
	cfg, err := buildTask(withMounts(""))
	if err != nil {
		t.Fatal(err)
	}
	if !has(cfg.Mounts, scratch) || has(cfg.Mounts, filepath.Join(state, "shared")) {
		t.Errorf("host job mounts %+v: want %s read-write and nothing inside the state", cfg.Mounts, scratch)
	}
	if cfg, err = buildTask(withMounts("docker.io/library/busybox:latest")); err != nil || has(cfg.Mounts, scratch) {
		t.Errorf("image job mounts %+v (%v): want no site mounts", cfg.Mounts, err)
	}
}
