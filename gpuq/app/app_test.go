package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/spec"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, ctl *fakectl.Server, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := New()
	a.Writer, a.ErrWriter = &out, &errb
	code := exitcode.Main(context.Background(), a, append([]string{"gpuq", "--controller", ctl.Addr}, args...), &errb)
	return result{code, out.String(), errb.String()}
}

func fixture(t *testing.T) *fakectl.Server {
	ctl := fakectl.New(t)
	start := spec.NewTime(time.Now().Add(-time.Hour - 2*time.Minute - 3*time.Second))
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{
			{ID: 12, JobSpec: spec.JobSpec{Name: "train", Partition: "h100", Account: "ml", Resources: spec.Resources{Nodes: 2}},
				User: "alice", State: spec.StateRunning, StartTime: start, Nodes: []string{"gpu01", "gpu02"}},
			{ID: 9, JobSpec: spec.JobSpec{Name: "nb", Partition: "a100", Account: "edu", Resources: spec.Resources{Nodes: 1}},
				User: "bob", State: spec.StatePending, Reason: spec.ReasonPriority},
			{ID: 3, JobSpec: spec.JobSpec{Name: "old", Partition: "h100", Resources: spec.Resources{Nodes: 1}},
				User: "alice", State: spec.StateCompleted, Nodes: []string{"gpu03"}},
			{ID: 23, JobSpec: spec.JobSpec{Name: "sweep", Partition: "h100", Array: "0-3", Resources: spec.Resources{Nodes: 1}},
				User: "alice", State: spec.StatePending, Reason: spec.ReasonPriority, ArrayJobID: 20, ArrayTaskID: 3},
		}
		s.Nodes = []spec.Node{
			{Inventory: spec.Inventory{Name: "gpu01", CPUs: 64, MemMiB: 262144, GPUs: []spec.GPU{{UUID: "GPU-1", Model: "h100"}, {UUID: "GPU-2", Model: "h100"}}},
				State: spec.NodeMixed, AllocCPUs: 8, AllocMemMiB: 65536, AllocGPUs: []string{"GPU-1"}},
		}
	})
	return ctl
}

func TestList(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantQuery url.Values
	}{
		{
			name: "default squeue columns, sorted by id, ended jobs hidden",
			want: "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n" +
				"                 9      a100       nb      bob PD       0:00      1 (Priority)\n" +
				"                12      h100    train    alice  R    1:02:03      2 gpu[01-02]\n" +
				"              20_3      h100    sweep    alice PD       0:00      1 (Priority)\n",
			wantQuery: url.Values{"view": {"brief"}},
		},
		{
			name:      "filters and format",
			args:      []string{"-u", "alice", "-t", "all", "-p", "h100", "--noheader", "--format", "%i %A %F %K %t %N"},
			want:      "3 3 3 N/A CD gpu03\n12 12 12 N/A R gpu[01-02]\n20_3 23 20 3 PD\n",
			wantQuery: url.Values{"user": {"alice"}, "partition": {"h100"}, "all": {"1"}, "view": {"brief"}},
		},
		{
			name:      "states and ids",
			args:      []string{"-t", "pd,RUNNING", "-j", "9,12", "-A", "edu", "-o", "%i"},
			want:      "JOBID\n9\n",
			wantQuery: url.Values{"state": {"PENDING", "RUNNING"}, "id": {"9", "12"}, "account": {"edu"}, "view": {"brief"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fixture(t)
			got := run(t, ctl, tc.args...)
			if got.code != 0 {
				t.Fatalf("exit %d: %s", got.code, got.stderr)
			}
			if diff := cmp.Diff(tc.want, got.stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			reqs := ctl.Requests()
			q, _ := url.ParseQuery(reqs[len(reqs)-1].Query)
			if diff := cmp.Diff(tc.wantQuery, q); diff != "" {
				t.Errorf("query (-want +got):\n%s", diff)
			}
		})
	}
}

func TestListJSON(t *testing.T) {
	ctl := fixture(t)
	got := run(t, ctl, "--json")
	var jobs []spec.Job
	if err := json.Unmarshal([]byte(got.stdout), &jobs); err != nil {
		t.Fatalf("not JSON (%v): %s", err, got.stdout)
	}
	var ids []spec.JobID
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if diff := cmp.Diff([]spec.JobID{9, 12, 23}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	// --json prints whole jobs, so it asks for the full view.
	reqs := ctl.Requests()
	if q, _ := url.ParseQuery(reqs[len(reqs)-1].Query); q.Has("view") {
		t.Errorf("gpuq --json asked for view=%s; want the full view", q.Get("view"))
	}
	if !strings.Contains(got.stdout, `"exit_code": 0`) && !strings.Contains(got.stdout, `"exit_code":0`) {
		t.Errorf("gpuq --json output lacks exit_code: %s", got.stdout)
	}
}

func TestSubcommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantOut    string // substring of stdout
		wantErr    string // exact stderr
		wantPath   string // last request path
		wantBody   string
		actionErrs map[string]error
	}{
		{name: "show", args: []string{"show", "12"}, wantOut: "JobId=12 JobName=train\n   UserId=alice(0)", wantPath: "/v1/jobs/12"},
		{name: "show json", args: []string{"show", "9", "--json"}, wantOut: `"reason": "Priority"`, wantPath: "/v1/jobs/9"},
		{name: "show missing", args: []string{"show", "77"}, wantCode: 1, wantErr: "gpuq: show job 77: job 77 not found\n"},
		{name: "show bad id", args: []string{"show", "x1"}, wantCode: 2, wantErr: "gpuq: \"x1\" is not a job id; write a positive whole number (42) or an array task (42_7)\n"},
		{name: "show bad task", args: []string{"show", "12_x"}, wantCode: 2, wantErr: "gpuq: \"12_x\": array task \"x\" is not a whole number ≥ 0; write ARRAYID_TASK, e.g. 42_7\n"},
		{name: "hold one array task", args: []string{"hold", "20_3"}, wantPath: "/v1/jobs/20_3/hold", wantBody: `{}`},
		{name: "cancel with signal", args: []string{"cancel", "--signal", "USR1", "12"}, wantPath: "/v1/jobs/12/cancel", wantBody: `{"signal":"USR1"}`},
		{
			name: "cancel reports every failure", args: []string{"cancel", "12", "77", "9"}, wantCode: 3,
			actionErrs: map[string]error{"9": spec.Errorf(spec.ErrPermissionDenied, "job 9 belongs to bob; you may cancel only your own jobs")},
			wantErr:    "gpuq: cancel job 77: job 77 not found\ngpuq: cancel job 9: job 9 belongs to bob; you may cancel only your own jobs\n",
			wantPath:   "/v1/jobs/9/cancel",
		},
		{name: "hold", args: []string{"hold", "9"}, wantPath: "/v1/jobs/9/hold"},
		{name: "cancel signal after ids", args: []string{"cancel", "12", "--signal=TERM"}, wantPath: "/v1/jobs/12/cancel", wantBody: `{"signal":"TERM"}`},
		{name: "cancel a step", args: []string{"cancel", "12.1"}, wantPath: "/v1/jobs/12/cancel", wantBody: `{"step":"1"}`},
		{name: "signal a step", args: []string{"cancel", "-s", "USR1", "12.0"}, wantPath: "/v1/jobs/12/cancel", wantBody: `{"signal":"USR1","step":"0"}`},
		{name: "hold a step", args: []string{"hold", "12.0"}, wantCode: 2, wantErr: "gpuq: gpuq hold acts on jobs, not steps: \"12.0\" names step 0 of job 12\n"},
		{name: "trailing unknown flag", args: []string{"show", "12", "--bogus"}, wantCode: 2, wantErr: "gpuq: command line: flag provided but not defined: --bogus; see gpuq show --help\n"},
		{name: "release", args: []string{"release", "9"}, wantPath: "/v1/jobs/9/release"},
		{name: "requeue", args: []string{"requeue", "12"}, wantPath: "/v1/jobs/12/requeue"},
		{name: "requeue no id", args: []string{"requeue"}, wantCode: 2, wantErr: "gpuq: gpuq requeue needs at least one job id; e.g. gpuq requeue 42 43\n"},
		{name: "nodes", args: []string{"nodes"}, wantOut: "NODE   STATE  CPUS(A/T)  MEM(A/T)  GPUS(A/T)  REASON\ngpu01  MIXED  8/64       64G/256G  h100:1/2   none\n", wantPath: "/v1/nodes"},
		{name: "nodes json", args: []string{"nodes", "--json"}, wantOut: `"name": "gpu01"`},
		{name: "drain", args: []string{"drain", "gpu01", "--reason", "fan"}, wantPath: "/v1/nodes/gpu01/drain", wantBody: `{"reason":"fan"}`},
		{name: "drain needs reason", args: []string{"drain", "gpu01"}, wantCode: 2, wantErr: "gpuq: gpuq drain needs --reason (shown to users by gpuq nodes); e.g. --reason 'XID 79 on GPU 3'\n"},
		{name: "resume", args: []string{"resume", "gpu01"}, wantPath: "/v1/nodes/gpu01/resume"},
		{
			name: "resume refused", args: []string{"resume", "gpu01"}, wantCode: 3,
			actionErrs: map[string]error{"gpu01": spec.Errorf(spec.ErrPermissionDenied, "resume needs the operator role")},
			wantErr:    "gpuq: resume node gpu01: resume needs the operator role\n",
		},
		{name: "reconfigure", args: []string{"reconfigure"}, wantOut: "configuration reloaded\n", wantPath: "/v1/reconfigure"},
		{name: "bad state", args: []string{"-t", "zzz"}, wantCode: 2, wantErr: "gpuq: --states: unknown job state \"zzz\"; use one of PD/PENDING, R/RUNNING, S/SUSPENDED, CG/COMPLETING, CD/COMPLETED, F/FAILED, CA/CANCELLED, TO/TIMEOUT, PR/PREEMPTED, NF/NODE_FAIL, OOM/OUT_OF_MEMORY, RQ/REQUEUED, or all\n"},
		{name: "bad format", args: []string{"-o", "%Z"}, wantCode: 2},
		{name: "unknown flag", args: []string{"--bogus"}, wantCode: 2, wantErr: "gpuq: command line: flag provided but not defined: -bogus; see gpuq --help\n"},
		{name: "unknown command", args: []string{"frob"}, wantCode: 2, wantErr: "gpuq: unknown command \"frob\"; see gpuq --help\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fixture(t)
			ctl.Set(func(s *fakectl.Server) { s.ActionErr = tc.actionErrs })
			got := run(t, ctl, tc.args...)
			if got.code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr: %s", got.code, tc.wantCode, got.stderr)
			}
			if !strings.Contains(got.stdout, tc.wantOut) {
				t.Errorf("stdout %q does not contain %q", got.stdout, tc.wantOut)
			}
			if tc.wantErr != "" || tc.wantCode == 0 {
				if diff := cmp.Diff(tc.wantErr, got.stderr); diff != "" {
					t.Errorf("stderr (-want +got):\n%s", diff)
				}
			}
			reqs := ctl.Requests()
			if tc.wantPath != "" {
				if len(reqs) == 0 {
					t.Fatalf("no request, want %s", tc.wantPath)
				}
				last := reqs[len(reqs)-1]
				if last.Path != tc.wantPath {
					t.Errorf("last request %s, want %s", last.Path, tc.wantPath)
				}
				if tc.wantBody != "" && string(last.Body) != tc.wantBody {
					t.Errorf("body %s, want %s", last.Body, tc.wantBody)
				}
			}
		})
	}
}

// runAndCheckQuery runs gpuq with args, expects exit 0 and stdout want,
// and checks that its last request went to path with query wantQuery.
func runAndCheckQuery(t *testing.T, ctl *fakectl.Server, args []string, want, path string, wantQuery url.Values) {
	t.Helper()
	got := run(t, ctl, args...)
	if got.code != 0 {
		t.Fatalf("exit %d: %s", got.code, got.stderr)
	}
	if diff := cmp.Diff(want, got.stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	reqs := ctl.Requests()
	last := reqs[len(reqs)-1]
	if last.Path != path {
		t.Fatalf("request path %s, want %s", last.Path, path)
	}
	q, _ := url.ParseQuery(last.Query)
	if diff := cmp.Diff(wantQuery, q); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
}
