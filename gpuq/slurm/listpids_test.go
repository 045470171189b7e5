package slurm

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// TestPidRows: a container's processes sorted into Slurm's steps and
// tasks: the batch script is the oldest child of the output wrapper, a
// step's tasks are the processes started into the container (parent
// outside it), everything else is "-"; a node without the batch script
// shows its processes in the extern step.
func TestPidRows(t *testing.T) {
	step := func(id, local, global string) map[string]string {
		return map[string]string{"SLURM_STEP_ID": id, "SLURM_LOCALID": local, "SLURM_PROCID": global, "SLURM_SUBMIT_DIR": "/w"}
	}
	plain := map[string]string{"SLURM_SUBMIT_DIR": "/w"}
	ps := []procInfo{
		{pid: 100, ppid: 1, start: 10, env: plain},                 // the output wrapper (parent: the shim)
		{pid: 105, ppid: 100, start: 12, env: plain},               // a later child of the wrapper
		{pid: 101, ppid: 100, start: 11, env: plain},               // the batch script
		{pid: 102, ppid: 101, start: 13, env: plain},               // srun
		{pid: 201, ppid: 50, start: 20, env: step("0", "1", "1")},  // task 1
		{pid: 200, ppid: 50, start: 20, env: step("0", "0", "0")},  // task 0
		{pid: 202, ppid: 200, start: 21, env: step("0", "0", "0")}, // task 0's child
	}
	got := pidRows(ps, true)
	type r struct {
		Pid                 int
		Step, Local, Global string
	}
	var short []r
	for _, x := range got {
		short = append(short, r{x.pid, x.step, x.local, x.global})
	}
	want := []r{
		{100, "batch", "-", "-"}, {105, "batch", "-", "-"}, {101, "batch", "0", "0"}, {102, "batch", "-", "-"},
		{201, "0", "1", "1"}, {200, "0", "0", "0"}, {202, "0", "-", "-"},
	}
	if diff := cmp.Diff(want, short); diff != "" {
		t.Errorf("pidRows batch (-want +got):\n%s", diff)
	}
	for _, x := range pidRows(ps[:4], false) {
		if x.step != "extern" || x.local != "-" {
			t.Errorf("extern container row %+v", x)
		}
	}
	for _, tc := range []struct {
		ctr, node string
		want      bool
	}{
		{"node1", "node1", true}, {"node1-r2", "node1", true}, {"node10", "node1", false},
		{"gpu-01", "gpu_01", false}, {"gpu-01", "gpu 01", true}, {"node1-rx", "node1", false},
	} {
		if got := sameNode(tc.ctr, tc.node); got != tc.want {
			t.Errorf("sameNode(%q, %q) = %v", tc.ctr, tc.node, got)
		}
	}
}

// TestOfJobKeepsThisClustersProcesses: two clusters on one host both run
// a job 1 on a node1, in containers of the same name; the processes of
// this job are kept and the other cluster's dropped, whichever comes
// first (the group was judged by its first process: a full run's
// TestScontrolListpids saw its running job "not exist on this node").
func TestOfJobKeepsThisClustersProcesses(t *testing.T) {
	other := procInfo{pid: 10, env: map[string]string{"SLURM_SUBMIT_DIR": "/tmp/other"}}
	mine := procInfo{pid: 20, env: map[string]string{"SLURM_SUBMIT_DIR": "/tmp/mine"}}
	bare := procInfo{pid: 30, env: map[string]string{}}
	j := &spec.Job{JobSpec: spec.JobSpec{SubmitDir: "/tmp/mine"}}
	got := ofJob([]procInfo{other, mine, bare}, j, 1)
	if len(got) != 2 || got[0].pid != 20 || got[1].pid != 30 {
		t.Errorf("ofJob kept %+v; want pids 20 and 30", got)
	}
	j.Alloc = &spec.Alloc{Attempt: 2}
	if got := ofJob([]procInfo{mine}, j, 1); len(got) != 0 {
		t.Errorf("ofJob of attempt 1 for a job at attempt 2 kept %+v; want none", got)
	}
}
