package node

import (
	"strings"
	"syscall"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

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
