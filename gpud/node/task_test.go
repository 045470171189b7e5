package node

import (
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
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

func TestContainerID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		job     spec.JobID
		attempt int
		node    string
		want    string
	}{
		{"plain", 7, 1, "gpu-04", "gpud-7-1-gpu-04"},
		{"dots and underscores kept", 7, 2, "gpu_04.rack1", "gpud-7-2-gpu_04.rack1"},
		{"odd characters", 7, 1, "gpu 04/@x", "gpud-7-1-gpu-04-x"},
		{"trailing junk", 7, 1, "n1--", "gpud-7-1-n1"},
		{"long name hashed", 7, 1, strings.Repeat("n", 100), "gpud-7-1-" + strings.Repeat("n", 58) + "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ContainerID(tc.job, tc.attempt, tc.node)
			if strings.HasSuffix(tc.want, "-") {
				if !strings.HasPrefix(got, tc.want) || len(got) != maxContainerID {
					t.Errorf("ContainerID = %q (len %d), want prefix %q and length %d", got, len(got), tc.want, maxContainerID)
				}
				return
			}
			if got != tc.want {
				t.Errorf("ContainerID = %q, want %q", got, tc.want)
			}
		})
	}
	if a, b := ContainerID(1, 1, strings.Repeat("n", 100)+"a"), ContainerID(1, 1, strings.Repeat("n", 100)+"b"); a == b {
		t.Errorf("long names collide: %q", a)
	}
}

func TestMergeEnv(t *testing.T) {
	t.Parallel()
	got := mergeEnv([]string{"A=1", "GPUD_JOB_ID=spoof", "B=2", "A=3", "EMPTY"}, []string{"GPUD_JOB_ID=9", "C=4"})
	want := []string{"A=3", "B=2", "EMPTY", "GPUD_JOB_ID=9", "C=4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeEnv (-want +got):\n%s", diff)
	}
}

func TestExitState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		st        runtime.ExitStatus
		stop      spec.JobState
		wantState spec.JobState
		wantWhy   string
	}{
		{"zero", runtime.ExitStatus{}, "", spec.StateCompleted, ""},
		{"code", runtime.ExitStatus{Code: 2}, "", spec.StateFailed, "NonZeroExitCode"},
		{"signal", runtime.ExitStatus{Code: 137, Signal: syscall.SIGKILL}, "", spec.StateFailed, "killed by signal SIGKILL"},
		{"oom", runtime.ExitStatus{Code: 137, OOMKilled: true}, "", spec.StateOutOfMemory, "out of memory: the job exceeded its memory limit"},
		{"stop wins", runtime.ExitStatus{Code: 0}, spec.StateCancelled, spec.StateCancelled, "why"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			state, why := exitState(tc.st, tc.stop, "why")
			if state != tc.wantState || why != tc.wantWhy {
				t.Errorf("exitState = %s %q, want %s %q", state, why, tc.wantState, tc.wantWhy)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	fc := newFakeController(t)
	_, err := New(Config{StateDir: "rel/dir", Inventory: spec.Inventory{GPUs: []spec.GPU{{}}}}, fc.Client, nil)
	if err == nil {
		t.Fatal("New with a bad config succeeded")
	}
	for _, want := range []string{"node name is empty", "is relative", "GPU 0 has no UUID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
