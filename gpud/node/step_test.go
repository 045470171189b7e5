package node

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestBatchOnFirstNode: the batch script runs on rank 0 only, with the
// job's output files and the tools on PATH; every other node runs the
// holder and writes no output file.
func TestBatchOnFirstNode(t *testing.T) {
	dir := t.TempDir()
	nodes := []spec.NodeAlloc{{Node: "n2", Rank: 1}, {Node: "n1", Rank: 0}}
	in := func(self int) *taskInput {
		return &taskInput{
			Asg: &api.Assignment{
				Job: spec.Job{ID: 7, JobSpec: spec.JobSpec{Script: "echo once\n", WorkDir: dir, SubmitDir: dir,
					Env: []string{"PATH=/opt/x:/usr/bin"}}},
				Alloc: spec.Alloc{ID: "a7", Nodes: nodes},
			},
			Self: nodes[self], NodeName: nodes[self].Node, DefaultImage: runtime.ImageHost,
			ContainerID: "c", JobDir: filepath.Join(dir, "job"), ScriptPath: filepath.Join(dir, "job", "script"),
			ToolsDir: "/opt/gpud/bin",
		}
	}
	first, err := buildTask(in(1))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(first.Args, []string{"/bin/sh", filepath.Join(dir, "job", "script")}) || first.StdoutPath == "" || !first.TruncateOutput {
		t.Errorf("rank 0 args %q stdout %q truncate %v; want the script with its output file", first.Args, first.StdoutPath, first.TruncateOutput)
	}
	if !slices.Contains(first.Env, "PATH=/opt/gpud/bin:/opt/x:/usr/bin") || !slices.Contains(first.Env, api.EnvStepSocket+"="+filepath.Join(dir, "job", "step.sock")) {
		t.Errorf("rank 0 env lacks the tools on PATH or the step socket: %q", first.Env)
	}
	if !slices.Contains(first.Mounts, runtime.Mount{Source: "/opt/gpud/bin", Dest: "/opt/gpud/bin", ReadOnly: true}) {
		t.Errorf("tools dir not mounted read-only: %+v", first.Mounts)
	}
	other, err := buildTask(in(0))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(other.Args, []string{"/bin/sh", "-c", step.HolderScript}) || other.StdoutPath != "" || other.TruncateOutput {
		t.Errorf("rank 1 args %q stdout %q; want the holder and no output file", other.Args, other.StdoutPath)
	}
}
