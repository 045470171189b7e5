package node

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func TestExpandPattern(t *testing.T) {
	t.Parallel()
	plain := patternVars{JobID: 42, Name: "train", User: "alice", Node: "gpu-04", Rank: 3}
	array := plain
	array.ArrayJobID, array.ArrayTaskID = 40, 2
	tests := []struct {
		name    string
		pattern string
		vars    patternVars
		want    string
	}{
		{"default", "gpud-%j.out", plain, "gpud-42.out"},
		{"every letter", "%x-%u-%N-%n-%j.log", plain, "train-alice-gpu-04-3-42.log"},
		{"array", "gpud-%A_%a.out", array, "gpud-40_2.out"},
		{"not an array", "%A_%a", plain, "42_4294967294"},
		{"percent", "100%%-%j", plain, "100%-42"},
		{"padding", "%4a-%3j-%2n", array, "0002-042-03"},
		{"padding shorter than value", "%1j", plain, "42"},
		{"Slurm's %J %s %t (dask-jobqueue's workers)", "w-%J.%s.%t-%2t.out", plain, "w-42.batch.3-03.out"},
		{"unknown letter kept", "%q%5z", plain, "%q%5z"},
		{"trailing percent", "out%", plain, "out%"},
		{"trailing width", "out%12", plain, "out%12"},
		{"no pattern", "/abs/file", plain, "/abs/file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := expandPattern(tc.pattern, tc.vars); got != tc.want {
				t.Errorf("expandPattern(%q) = %q, want %q", tc.pattern, got, tc.want)
			}
		})
	}
}

func TestOutputPaths(t *testing.T) {
	t.Parallel()
	job := func(out, errp string, array bool) *spec.Job {
		j := &spec.Job{ID: 42, JobSpec: spec.JobSpec{Name: "x", WorkDir: "/home/a/w", Output: out, Error: errp}, User: "a"}
		if array {
			j.ArrayJobID, j.ArrayTaskID = 40, 2
		}
		return j
	}
	tests := []struct {
		name               string
		job                *spec.Job
		wantOut, wantError string
	}{
		{"defaults to work dir", job("", "", false), "/home/a/w/gpud-42.out", "/home/a/w/gpud-42.out"},
		{"array default", job("", "", true), "/home/a/w/gpud-40_2.out", "/home/a/w/gpud-40_2.out"},
		{"relative and absolute", job("o/%j.out", "/tmp/%N.err", false), "/home/a/w/o/42.out", "/tmp/n1.err"},
		{"cleaned", job("../logs/./%j.out", "", false), "/home/a/logs/42.out", "/home/a/logs/42.out"},
		{"/dev/null discards both", job("/dev/null", "", false), "", ""},
		{"/dev/null discards stderr only", job("%j.out", "/dev/null", false), "/home/a/w/42.out", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, errp := outputPaths(tc.job, "n1", 0)
			if diff := cmp.Diff([2]string{tc.wantOut, tc.wantError}, [2]string{out, errp}); diff != "" {
				t.Errorf("outputPaths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTaskOutputs: only the batch node writes the output files, which
// the first attempt's rank 0 truncates unless the job appends.
func TestTaskOutputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		rank        int
		attempt     int
		append      bool
		interactive bool
		want        taskOutput
	}{
		{name: "batch node, first attempt", want: taskOutput{stdout: "/w/gpud-42.out", stderr: "/w/gpud-42.out", truncate: true}},
		{name: "batch node, requeued: appends", attempt: 2, want: taskOutput{stdout: "/w/gpud-42.out", stderr: "/w/gpud-42.out"}},
		{name: "batch node, --open-mode=append", append: true, want: taskOutput{stdout: "/w/gpud-42.out", stderr: "/w/gpud-42.out"}},
		{name: "another node writes none", rank: 1, want: taskOutput{}},
		{name: "an interactive allocation writes none", interactive: true, want: taskOutput{truncate: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := spec.Job{ID: 42, JobSpec: spec.JobSpec{WorkDir: "/w", Interactive: tc.interactive}, Attempt: tc.attempt}
			if tc.append {
				job.OpenMode = spec.OpenAppend
			}
			in := taskInput{Asg: &api.Assignment{Job: job}, Self: spec.NodeAlloc{Rank: tc.rank}, NodeName: "n1"}
			if diff := cmp.Diff(tc.want, taskOutputs(&in), cmp.AllowUnexported(taskOutput{})); diff != "" {
				t.Errorf("taskOutputs (-want +got):\n%s", diff)
			}
		})
	}
}
