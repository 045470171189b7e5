package node

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// TestBatchOnFirstNode: the batch script runs on rank 0 only, with the
// job's output files and the tools on PATH; every other node runs the
// holder and writes no output file.
func TestBatchOnFirstNode(t *testing.T) {
	dir := t.TempDir()
	nodes := []spec.NodeAlloc{{Node: "n2", Rank: 1}, {Node: "n1", Rank: 0}}
	in := func(self int) taskInput {
		return taskInput{
			Asg: api.Assignment{
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
	if !slices.Equal(other.Args, []string{"/bin/sh", "-c", holderScript}) || other.StdoutPath != "" || other.TruncateOutput {
		t.Errorf("rank 1 args %q stdout %q; want the holder and no output file", other.Args, other.StdoutPath)
	}
}

func TestStepLayout(t *testing.T) {
	alloc := []spec.NodeAlloc{
		{Node: "b", Rank: 1, CPUs: 8, GPUs: []string{"g3", "g4"}},
		{Node: "a", Rank: 0, CPUs: 8, GPUs: []string{"g1", "g2"}},
	}
	for _, tc := range []struct {
		req   api.StepRequest
		nodes []string
		tasks [][]int
		tpn   string
		err   string
	}{
		{req: api.StepRequest{}, nodes: []string{"a", "b"}, tasks: [][]int{{0}, {1}}, tpn: "1(x2)"},
		{req: api.StepRequest{NTasks: 1}, nodes: []string{"a"}, tasks: [][]int{{0}}, tpn: "1"},
		{req: api.StepRequest{NTasksPerNode: 2, GPUsPerTask: 1}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 1}, {2, 3}}, tpn: "2(x2)"},
		{req: api.StepRequest{NTasks: 3}, nodes: []string{"a", "b"}, tasks: [][]int{{0, 1}, {2}}, tpn: "2,1"},
		{req: api.StepRequest{NTasks: 4, Nodes: 1, CPUsPerTask: 2}, nodes: []string{"a"}, tasks: [][]int{{0, 1, 2, 3}}, tpn: "4"},
		{req: api.StepRequest{Nodes: 3}, err: "asks for 3 nodes but the allocation has 2 node(s): a (8 CPUs, 2 GPUs), b (8 CPUs, 2 GPUs)"},
		{req: api.StepRequest{NTasksPerNode: 3, GPUsPerTask: 1}, err: "needs 3 GPUs on node a"},
		{req: api.StepRequest{NTasks: 1, Nodes: 1, CPUsPerTask: 9}, err: "needs 9 CPUs on node a"},
		{req: api.StepRequest{NTasks: 1, Nodes: 2}, err: "each node needs at least one task"},
	} {
		l, err := stepLayout(alloc, tc.req)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: err %v, want %q", tc.req, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%+v: %v", tc.req, err)
			continue
		}
		var names []string
		for _, n := range l.nodes {
			names = append(names, n.Node)
		}
		if !slices.Equal(names, tc.nodes) || len(l.tasks) != len(tc.tasks) || tasksPerNode(l) != tc.tpn {
			t.Errorf("%+v: nodes %v tasks %v tpn %q; want %v %v %q", tc.req, names, l.tasks, tasksPerNode(l), tc.nodes, tc.tasks, tc.tpn)
			continue
		}
		for i := range l.tasks {
			if !slices.Equal(l.tasks[i], tc.tasks[i]) {
				t.Errorf("%+v: tasks %v, want %v", tc.req, l.tasks, tc.tasks)
			}
		}
	}
}
