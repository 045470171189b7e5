package slurm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestSacctSteps: sacct lists an ended job's steps under it (N.batch,
// N.0, N.1) with their own state, N:S exit code, elapsed, nodes, tasks
// and TRES; -X hides them; -j N.S selects one step; a running job's steps
// come from the controller.
func TestSacctSteps(t *testing.T) {
	t.Setenv("TZ", "UTC")
	ctl := fixture(t)
	start := spec.NewTime(now.Add(-time.Hour))
	ctl.Set(func(s *fakectl.Server) {
		s.Acct = []api.AcctJob{{AcctRecord: api.AcctRecord{ID: 5, Name: "job", User: "alice", Account: "ml", Partition: "gpu", State: spec.StateFailed,
			ExitCode: 3, StartTime: start, EndTime: spec.NewTime(now), Elapsed: 3600, Nodes: []string{"gpu01", "gpu02"}, CPUs: 8, GPUCount: 2,
			MaxRSSMiB: 2015.25, AveRSSMiB: 2048, MaxRSSNode: "gpu02"}, Steps: []api.AcctStep{
			{Step: spec.Step{ID: "batch", Name: "batch", State: spec.StateFailed, ExitCode: 3, StartTime: start, EndTime: spec.NewTime(now), Nodes: []string{"gpu01"}, NTasks: 1, CPUs: 4, GPUs: 1}, Elapsed: 3600},
			{Step: spec.Step{ID: "0", Name: "hostname", State: spec.StateCompleted, StartTime: start, EndTime: spec.NewTime(now.Add(-59 * time.Minute)), Nodes: []string{"gpu01", "gpu02"}, NTasks: 2}, Elapsed: 60},
			{Step: spec.Step{ID: "1", Name: "python", State: spec.StateCancelled, Signal: 15, StartTime: start, EndTime: spec.NewTime(now.Add(-58 * time.Minute)), Nodes: []string{"gpu02"}, NTasks: 1, CPUs: 2, GPUs: 1}, Elapsed: 120},
		}}}
		s.Jobs[0].Steps = []spec.Step{
			{ID: "batch", Name: "batch", State: spec.StateRunning, StartTime: spec.NewTime(now.Add(-90 * time.Second)), Nodes: []string{"gpu01"}, NTasks: 1},
			{ID: "0", Name: "torchrun", State: spec.StateRunning, StartTime: spec.NewTime(now.Add(-60 * time.Second)), Nodes: []string{"gpu01", "gpu02"}, NTasks: 4},
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"steps under the job", []string{"-P", "-n", "-j", "5", "-o", "JobID,JobIDRaw,JobName,Partition,State,ExitCode,Elapsed,NodeList,NTasks,AllocTRES"},
			"5|5|job|gpu|FAILED|3:0|01:00:00|gpu[01-02]||billing=8,cpu=8,gres/gpu=2,node=2\n" +
				"5.batch|5.batch|batch||FAILED|3:0|01:00:00|gpu01|1|billing=4,cpu=4,gres/gpu=1,node=1\n" +
				"5.0|5.0|hostname||COMPLETED|0:0|00:01:00|gpu[01-02]|2|billing=8,cpu=8,node=2\n" +
				"5.1|5.1|python||CANCELLED|0:15|00:02:00|gpu02|1|billing=2,cpu=2,gres/gpu=1,node=1\n"},
		// The job's cgroup peak, in KiB as sacct prints it (converted only
		// where it divides exactly), on the job's row and its batch step's.
		{"memory peak", []string{"-P", "-n", "-j", "5", "-o", "JobID,MaxRSS,AveRSS,MaxRSSNode"},
			"5|2063616K|2G|gpu02\n5.batch|2063616K|2G|gpu02\n5.0|||\n5.1|||\n"},
		{"-X hides steps", []string{"-P", "-n", "-X", "-j", "5", "-o", "JobID,State"}, "5|FAILED\n"},
		{"one step", []string{"-P", "-n", "-j", "5.1", "-o", "JobID,State,ExitCode"}, "5.1|CANCELLED|0:15\n"},
		{"running job's steps", []string{"-P", "-n", "-j", "7", "-o", "JobID,JobName,State,NTasks"},
			"7|train|RUNNING|\n7.batch|batch|RUNNING|1\n7.0|torchrun|RUNNING|4\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := run(t, ctl, "sacct", tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("sacct %q (-want +got):\n%s", tc.args, diff)
			}
		})
	}
	out, errs, code := run(t, ctl, "squeue", "-s")
	want := "         STEPID     NAME PARTITION     USER      TIME NODELIST\n" +
		"        7.batch    batch       gpu    alice      1:30 gpu01\n" +
		"            7.0 torchrun       gpu    alice      1:00 gpu[01-02]\n"
	if code != 0 || out != want {
		t.Errorf("squeue -s: exit %d, %s\n%s\nwant:\n%s", code, errs, out, want)
	}
	out, _, code = run(t, ctl, "squeue", "-h", "--steps=7.0")
	if code != 0 || out != "            7.0 torchrun       gpu    alice      1:00 gpu[01-02]\n" {
		t.Errorf("squeue -h --steps=7.0: exit %d, %q", code, out)
	}
}

// TestSacctNeeds: every --format field prints the same from a record
// holding only the fields sacctNeeds lists for it (what the controller
// sends for fields=) as from the complete record, for a job and its step
// rows: a field missing from sacctNeeds would print as zero.
func TestSacctNeeds(t *testing.T) {
	full := api.AcctJob{AcctRecord: api.AcctRecord{ID: 42, Name: "train", User: "alice", UID: 1000, Account: "ml", Partition: "gpu", QOS: "high",
		State: spec.StateFailed, Reason: "NonZeroExitCode", ExitCode: 3, Signal: 0, SubmitTime: spec.NewTime(now.Add(-3 * time.Hour)),
		EligibleTime: spec.NewTime(now.Add(-2 * time.Hour)), StartTime: spec.NewTime(now.Add(-time.Hour)), EndTime: spec.NewTime(now),
		TimeLimit: spec.Duration(2 * time.Hour), Nodes: []string{"gpu01", "gpu02"}, GPUs: []string{"GPU-1"}, GPUCount: 2, GPUModel: "h100",
		CPUs: 16, MemMiB: 8192, Attempts: 2, WorkDir: "/home/alice", ArrayJobID: 40, ArrayTaskID: 2, HetJobID: 41, HetOffset: 1, WCKey: "k", NTasks: 4, Elapsed: 3600,
		GPUHours: 2, CPUHours: 16}, Steps: []api.AcctStep{{Step: spec.Step{ID: "batch", Name: "batch", State: spec.StateFailed, ExitCode: 3, Nodes: []string{"gpu01"},
		StartTime: spec.NewTime(now.Add(-time.Hour)), EndTime: spec.NewTime(now)}, Elapsed: 3600}},
	}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	for _, f := range sacctFields {
		cols := []sacctCol{{f: &f}}
		keep := map[string]json.RawMessage{"id": all["id"], "steps": all["steps"]}
		for _, k := range sacctFieldsOf(cols, false) {
			v, ok := all[k]
			if !ok {
				t.Fatalf("%s needs %q, which is not a key of api.AcctJob", f.name, k)
			}
			keep[k] = v
		}
		b, _ := json.Marshal(keep)
		var part api.AcctJob
		if err := json.Unmarshal(b, &part); err != nil {
			t.Fatal(err)
		}
		want, got := sacctRows([]api.AcctJob{full}, nil), sacctRows([]api.AcctJob{part}, nil)
		if len(want) != 2 || len(got) != 2 {
			t.Fatalf("rows: %d and %d, want a job and its step", len(want), len(got))
		}
		for i := range want {
			if w, g := f.value(&want[i]), f.value(&got[i]); w != g {
				t.Errorf("%s of row %d: %q from the fields sacct asks for, %q from the whole record; add the missing field to sacctNeeds", f.name, i, g, w)
			}
		}
	}
}

// TestSacctHetJob: a heterogeneous job's components show as N+K (their
// steps as N+K.S), and -j with the leader's id lists every component,
// ended (from accounting) or running (from the queue), as Slurm's sacct.
func TestSacctHetJob(t *testing.T) {
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{
			{ID: 30, JobSpec: spec.JobSpec{Name: "live", Partition: "cpu"}, User: "alice", State: spec.StateRunning, HetJobID: 30, HetOffset: 0, HetSize: 2},
			{ID: 31, JobSpec: spec.JobSpec{Name: "live", Partition: "gpu"}, User: "alice", State: spec.StateRunning, HetJobID: 30, HetOffset: 1, HetSize: 2},
			{ID: 32, JobSpec: spec.JobSpec{Name: "other"}, User: "alice", State: spec.StateRunning},
		}
		s.Acct = []api.AcctJob{
			{AcctRecord: api.AcctRecord{ID: 20, Name: "het", User: "alice", Partition: "cpu", State: spec.StateCompleted, HetJobID: 20},
				Steps: []api.AcctStep{{Step: spec.Step{ID: "batch", Name: "batch", State: spec.StateCompleted}}}},
			{AcctRecord: api.AcctRecord{ID: 21, Name: "het", User: "alice", Partition: "gpu", State: spec.StateCompleted, HetJobID: 20, HetOffset: 1},
				Steps: []api.AcctStep{{Step: spec.Step{ID: "0", Name: "bash", State: spec.StateCompleted}}}},
			{AcctRecord: api.AcctRecord{ID: 22, Name: "plain", User: "alice", State: spec.StateCompleted}},
		}
	})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-X", "-j", "20"}, "20+0|20|cpu|COMPLETED\n20+1|21|gpu|COMPLETED\n"},
		{[]string{"-X", "-j", "21"}, "20+1|21|gpu|COMPLETED\n"},
		{[]string{"-j", "20"}, "20+0|20|cpu|COMPLETED\n20+0.batch|20.batch||COMPLETED\n20+1|21|gpu|COMPLETED\n20+1.0|21.0||COMPLETED\n"},
		{[]string{"-X", "-j", "30"}, "30+0|30|cpu|RUNNING\n30+1|31|gpu|RUNNING\n"},
		{[]string{"-X", "-j", "22"}, "22|22||COMPLETED\n"},
		// N+K: that component alone (N+0 is not the whole job), ended or
		// running, with its steps; an id that is no component of N
		// selects nothing.
		{[]string{"-X", "-j", "20+1"}, "20+1|21|gpu|COMPLETED\n"},
		{[]string{"-X", "-j", "20+0"}, "20+0|20|cpu|COMPLETED\n"},
		{[]string{"-j", "20+1"}, "20+1|21|gpu|COMPLETED\n20+1.0|21.0||COMPLETED\n"},
		{[]string{"-X", "-j", "30+1"}, "30+1|31|gpu|RUNNING\n"},
		{[]string{"-X", "-j", "30+0,20+1"}, "20+1|21|gpu|COMPLETED\n30+0|30|cpu|RUNNING\n"},
		{[]string{"-X", "-j", "30+2"}, ""},
	} {
		args := append([]string{"-n", "-P", "-o", "JobID,JobIDRaw,Partition,State"}, tc.args...)
		out, errs, code := run(t, ctl, "sacct", args...)
		if code != 0 || out != tc.want {
			t.Errorf("sacct %v: exit %d, %q (%s), want %q", tc.args, code, out, errs, tc.want)
		}
	}
}

// squeue and scontrol take N+K too, and a malformed one says what the
// form is.
func TestHetSelectors(t *testing.T) {
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{
			{ID: 30, JobSpec: spec.JobSpec{Name: "live", Partition: "cpu"}, User: "alice", State: spec.StatePending, HetJobID: 30, HetOffset: 0, HetSize: 2},
			{ID: 31, JobSpec: spec.JobSpec{Name: "live", Partition: "gpu"}, User: "alice", State: spec.StatePending, HetJobID: 30, HetOffset: 1, HetSize: 2},
		}
	})
	out, errs, code := run(t, ctl, "squeue", "-h", "-j", "30+1", "-o", "%i %P")
	if code != 0 || out != "30+1 gpu\n" {
		t.Errorf("squeue -j 30+1: exit %d, %q (%s), want component 1 alone", code, out, errs)
	}
	for _, bad := range []string{"30+", "+1", "30+x", "0+1"} {
		_, errs, code := run(t, ctl, "squeue", "-j", bad)
		if code == 0 || !strings.Contains(errs, "LEADER+OFFSET") {
			t.Errorf("squeue -j %s: exit %d, %q; want the form named", bad, code, errs)
		}
	}
}
