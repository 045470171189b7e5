package app

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

var acctNow = time.Date(2025, 3, 14, 15, 30, 0, 0, time.UTC)

func acctFixture(t *testing.T) *fakectl.Server {
	t.Helper()
	old := now
	now = func() time.Time { return acctNow }
	t.Cleanup(func() { now = old })
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) {
		s.Acct = []api.AcctJob{
			{AcctRecord: api.AcctRecord{ID: 7, Name: "train", User: "alice", Account: "ml", Partition: "h100", State: spec.StateCompleted,
				Nodes: []string{"gpu01", "gpu02"}, GPUCount: 16, Elapsed: 3723, GPUHours: 16.5, Attempts: 2}, AttemptHistory: []api.AcctAttempt{
				{Attempt: 1, State: spec.StateRequeued, Reason: "preempted by job 12", Nodes: []string{"gpu03"},
					StartTime: spec.NewTime(acctNow.Add(-3 * time.Hour)), EndTime: spec.NewTime(acctNow.Add(-2 * time.Hour)), Elapsed: 3600,
					CheckpointSeq: 4, CheckpointTime: spec.NewTime(acctNow.Add(-130 * time.Minute)), LostWork: 600},
				{Attempt: 2, State: spec.StateCompleted, Reason: "COMPLETED", Nodes: []string{"gpu01", "gpu02"},
					StartTime: spec.NewTime(acctNow.Add(-90 * time.Minute)), EndTime: spec.NewTime(acctNow.Add(-90*time.Minute + 3723*time.Second)), Elapsed: 3723},
			}},
			{AcctRecord: api.AcctRecord{ID: 8, Name: "nb", User: "bob", Account: "edu", Partition: "a100", State: spec.StateFailed, ExitCode: 2,
				GPUCount: 1, Elapsed: 59, GPUHours: 0.02}},
			{AcctRecord: api.AcctRecord{ID: 9, Name: "killed", User: "alice", Account: "ml", Partition: "h100", State: spec.StateCancelled, Signal: 15}},
		}
	})
	return ctl
}

func TestAcct(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantQuery url.Values
	}{
		{
			name: "default columns, window from midnight",
			args: []string{"acct"},
			want: "JobID JobName User  Account Partition State     ExitCode Elapsed  GPUs GPUHours\n" +
				"----- ------- ----- ------- --------- --------- -------- -------- ---- --------\n" +
				"7     train   alice ml      h100      COMPLETED 0:0      01:02:03 16   16.5000\n" +
				"8     nb      bob   edu     a100      FAILED    2:0      00:00:59 1    0.0200\n" +
				"9     killed  alice ml      h100      CANCELLED 0:15     00:00:00 0    0.0000\n",
			wantQuery: url.Values{"start": {"2025-03-14T00:00:00Z"}},
		},
		{
			name:      "filters, parsable, sacct short flags",
			args:      []string{"acct", "-u", "alice", "-A", "ml", "-r", "h100", "-s", "ca,CD", "-p", "-o", "JobID,State,ExitCode,NodeList", "-S", "2025-03-01", "-E", "now-2hours"},
			want:      "JobID|State|ExitCode|NodeList|\n7|COMPLETED|0:0|gpu[01-02]|\n9|CANCELLED|0:15|None assigned|\n",
			wantQuery: url.Values{"user": {"alice"}, "account": {"ml"}, "partition": {"h100"}, "state": {"CANCELLED", "COMPLETED"}, "start": {"2025-03-01T00:00:00Z"}, "end": {"2025-03-14T13:30:00Z"}},
		},
		{
			name:      "jobs drop the default start; csv without header",
			args:      []string{"acct", "-j", "8,7", "--csv", "--noheader", "--format", "jobid,gpu_hours"},
			want:      "7,16.5000\n8,0.0200\n",
			wantQuery: url.Values{"id": {"8", "7"}, "steps": {"true"}},
		},
		{
			name:      "allusers and time of day",
			args:      []string{"acct", "-a", "--starttime", "now-1day", "--endtime", "2025-03-14T12:00", "-o", "jobid", "-n"},
			want:      "7\n8\n9\n",
			wantQuery: url.Values{"start": {"2025-03-13T15:30:00Z"}, "end": {"2025-03-14T12:00:00Z"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := acctFixture(t)
			runAndCheckQuery(t, ctl, tc.args, tc.want, "/v1/accounting/jobs", tc.wantQuery)
		})
	}
}

func TestAcctJSON(t *testing.T) {
	ctl := acctFixture(t)
	got := run(t, ctl, "acct", "--json", "-u", "bob")
	var jobs []api.AcctJob
	if err := json.Unmarshal([]byte(got.stdout), &jobs); err != nil || len(jobs) != 1 || jobs[0].ID != 8 || jobs[0].ExitCode != 2 {
		t.Fatalf("--json = %+v, %v; stdout %s", jobs, err, got.stdout)
	}
	got = run(t, ctl, "acct", "--json", "-u", "nobody")
	if strings.TrimSpace(got.stdout) != "[]" {
		t.Errorf("empty --json = %q, want []", got.stdout)
	}
}

// TestAcctDuplicates: -D asks for the attempt history and prints a row
// per attempt, sacct --duplicates style, and one for a job waiting again;
// the attempt fields ask for the history without -D too.
func TestAcctDuplicates(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantQuery url.Values
	}{
		{
			name: "a row per attempt",
			args: []string{"acct", "-D", "-j", "7,8,10", "-o", "jobid,attempt,state,start,end,elapsed,nodelist,checkpoint,lost_work,reason"},
			want: "JobID Attempt State     Start               End                 Elapsed  NodeList      Checkpoint            LostWork Reason\n" +
				"----- ------- --------- ------------------- ------------------- -------- ------------- --------------------- -------- -------------------\n" +
				"7     1       REQUEUED  2025-03-14T12:30:00 2025-03-14T13:30:00 01:00:00 gpu03         4@2025-03-14T13:20:00 00:10:00 preempted by job 12\n" +
				"7     2       COMPLETED 2025-03-14T14:00:00 2025-03-14T15:02:03 01:02:03 gpu[01-02]    None                  00:00:00 COMPLETED\n" +
				"8     0       FAILED    Unknown             Unknown             00:00:59 None assigned None                  00:00:00 None\n" +
				"10    1       REQUEUED  2025-03-14T14:30:00 2025-03-14T15:00:00 00:30:00 gpu05         None                  00:30:00 NodeFail requeue\n" +
				"10    2       PENDING   Unknown             Unknown             00:00:00 None assigned None                  00:00:00 NodeFail requeue\n",
			wantQuery: url.Values{"id": {"7", "8", "10"}, "attempt_history": {"true"}},
		},
		{
			name:      "attempt fields without -D show the job's totals",
			args:      []string{"acct", "-j", "7", "-p", "-o", "jobid,state,attempt,checkpoint,lost_work"},
			want:      "JobID|State|Attempt|Checkpoint|LostWork|\n7|COMPLETED|2|4@2025-03-14T13:20:00|00:10:00|\n",
			wantQuery: url.Values{"id": {"7"}, "attempt_history": {"true"}, "steps": {"true"}},
		},
		{
			name:      "other fields do not ask for attempts",
			args:      []string{"acct", "-j", "7", "-p", "-o", "jobid,state"},
			want:      "JobID|State|\n7|COMPLETED|\n",
			wantQuery: url.Values{"id": {"7"}, "steps": {"true"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TZ", "UTC")
			ctl := acctFixture(t)
			ctl.Set(func(s *fakectl.Server) {
				s.Acct = append(s.Acct, api.AcctJob{AcctRecord: api.AcctRecord{ID: 10, Name: "waits", User: "carol", Account: "ml", Partition: "h100", State: spec.StatePending,
					Reason: "NodeFail requeue", Attempts: 1}, AttemptHistory: []api.AcctAttempt{
					{Attempt: 1, State: spec.StateRequeued, Reason: "NodeFail requeue", Nodes: []string{"gpu05"},
						StartTime: spec.NewTime(acctNow.Add(-time.Hour)), EndTime: spec.NewTime(acctNow.Add(-30 * time.Minute)), Elapsed: 1800, LostWork: 1800},
				}})
			})
			runAndCheckQuery(t, ctl, tc.args, tc.want, "/v1/accounting/jobs", tc.wantQuery)
		})
	}
}

func TestAcctDuplicatesJSON(t *testing.T) {
	ctl := acctFixture(t)
	var jobs []api.AcctJob
	got := run(t, ctl, "acct", "-D", "--json", "-j", "7")
	if err := json.Unmarshal([]byte(got.stdout), &jobs); err != nil || len(jobs) != 1 {
		t.Fatalf("-D --json = %+v, %v; stdout %s", jobs, err, got.stdout)
	}
	h := jobs[0].AttemptHistory
	if len(h) != 2 || h[0].State != spec.StateRequeued || h[0].CheckpointSeq != 4 || h[0].LostWork != 600 || h[1].State != spec.StateCompleted {
		t.Errorf("-D --json attempt_history = %+v; want attempt 1 REQUEUED at ckpt 4 with 600s lost, attempt 2 COMPLETED", h)
	}
	got = run(t, ctl, "acct", "--json", "-j", "7")
	if strings.Contains(got.stdout, "attempt_history") {
		t.Errorf("--json without -D shows attempt_history:\n%s", got.stdout)
	}
}

func TestAcctErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		ctlErr   error
		wantCode int
		wantErr  string
	}{
		{name: "bad start", args: []string{"acct", "-S", "yesterday"}, wantCode: 2,
			wantErr: "gpuq: --starttime: \"yesterday\" is not a time (\"yesterday\" is not a time word); use " + slurmtime.Forms + "\n"},
		{name: "bad unit", args: []string{"acct", "-E", "now-3fortnights"}, wantCode: 2,
			wantErr: "gpuq: --endtime: \"now-3fortnights\" is not a time (\"fortnights\" is not a unit of seconds, minutes, hours, days or weeks); use " + slurmtime.Forms + "\n"},
		{name: "end before start", args: []string{"acct", "-E", "2025-03-13"}, wantCode: 2,
			wantErr: "gpuq: --endtime 2025-03-13T00:00:00 is before the start of the window (2025-03-14T00:00:00); give a later --endtime or an earlier --starttime\n"},
		{name: "bad state", args: []string{"acct", "-s", "done"}, wantCode: 2},
		{name: "bad field", args: []string{"acct", "--format", "jobid,costs"}, wantCode: 2},
		{name: "two outputs", args: []string{"acct", "--csv", "--json"}, wantCode: 2, wantErr: "gpuq: choose one of --parsable, --csv and --json\n"},
		{name: "allusers and user", args: []string{"acct", "-a", "-u", "bob"}, wantCode: 2, wantErr: "gpuq: --allusers and --user contradict each other; give one\n"},
		{name: "positional", args: []string{"acct", "42"}, wantCode: 2, wantErr: "gpuq: gpuq acct takes no arguments, got \"42\"; select jobs with -j\n"},
		{name: "other user refused", args: []string{"acct", "-u", "bob"}, wantCode: 3,
			ctlErr:  spec.Errorf(spec.ErrPermissionDenied, "user alice may see only their own jobs, not those of user bob"),
			wantErr: "gpuq: list accounted jobs: user alice may see only their own jobs, not those of user bob\n"},
		{name: "no accounting", args: []string{"acct"}, wantCode: 1,
			ctlErr:  spec.Errorf(spec.ErrUnavailable, "this controller keeps no job accounting"),
			wantErr: "gpuq: list accounted jobs: this controller keeps no job accounting\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := acctFixture(t)
			ctl.Set(func(s *fakectl.Server) { s.AcctErr = tc.ctlErr })
			got := run(t, ctl, tc.args...)
			if got.code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr: %s", got.code, tc.wantCode, got.stderr)
			}
			if tc.wantErr != "" {
				if diff := cmp.Diff(tc.wantErr, got.stderr); diff != "" {
					t.Errorf("stderr (-want +got):\n%s", diff)
				}
			}
		})
	}
}
