package app

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

func TestReport(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantQuery url.Values
	}{
		{
			name: "users by default, window from midnight to now",
			args: []string{"report"},
			want: "User  Jobs GPUHours GPUShare% CPUHours IdleGPUHours SliceHours EnergyKWh CO2kg  Cost\n" +
				"----- ---- -------- --------- -------- ------------ ---------- --------- ------ ----\n" +
				"alice 2    16.5000  99.9      0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
				"bob   1    0.0200   0.1       0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
				"TOTAL 3    16.5200  100.0     0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n",
			wantQuery: url.Values{"group": {"user"}, "start": {"2025-03-14T00:00:00Z"}, "end": {"2025-03-14T15:30:00Z"}},
		},
		{
			name: "accounts, filters, parsable",
			args: []string{"report", "accounts", "-u", "alice", "-r", "h100", "-S", "2025-03-01", "-E", "now-2hours", "-p"},
			want: "Account|Jobs|GPUHours|GPUShare%|CPUHours|IdleGPUHours|SliceHours|EnergyKWh|CO2kg|Cost|\n" +
				"ml|2|16.5000|100.0|0.0000|0.0000|0.0000|0.0000|0.0000|0.00|\nTOTAL|2|16.5000|100.0|0.0000|0.0000|0.0000|0.0000|0.0000|0.00|\n",
			wantQuery: url.Values{"group": {"account"}, "user": {"alice"}, "partition": {"h100"}, "start": {"2025-03-01T00:00:00Z"}, "end": {"2025-03-14T13:30:00Z"}},
		},
		{
			name: "partitions as csv without header",
			args: []string{"report", "partitions", "--csv", "-n"},
			want: "a100,1,0.0200,0.1,0.0000,0.0000,0.0000,0.0000,0.0000,0.00\n" +
				"h100,2,16.5000,99.9,0.0000,0.0000,0.0000,0.0000,0.0000,0.00\nTOTAL,3,16.5200,100.0,0.0000,0.0000,0.0000,0.0000,0.0000,0.00\n",
			wantQuery: url.Values{"group": {"partition"}, "start": {"2025-03-14T00:00:00Z"}, "end": {"2025-03-14T15:30:00Z"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := acctFixture(t)
			runAndCheckQuery(t, ctl, tc.args, tc.want, "/v1/accounting/summary", tc.wantQuery)
		})
	}
}

func TestReportJSON(t *testing.T) {
	ctl := acctFixture(t)
	got := run(t, ctl, "report", "models", "--json")
	var r format.Report
	if err := json.Unmarshal([]byte(got.stdout), &r); err != nil || r.Group != "gpu_model" || r.Total.Jobs != 3 || r.Total.GPUHours != 16.52 {
		t.Fatalf("--json = %+v, %v; stdout %s", r, err, got.stdout)
	}
}

func TestReportErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		ctlErr   error
		wantCode int
		wantErr  string
	}{
		{name: "bad group", args: []string{"report", "qos"}, wantCode: 2,
			wantErr: "gpuq: gpuq report has no view \"qos\"; use users, accounts, partitions, models, cluster or tree\n"},
		{name: "end before start", args: []string{"report", "-E", "2025-03-13"}, wantCode: 2,
			wantErr: "gpuq: --endtime 2025-03-13T00:00:00 is before the start of the window (2025-03-14T00:00:00); give a later --endtime or an earlier --starttime\n"},
		{name: "two outputs", args: []string{"report", "--csv", "--json"}, wantCode: 2, wantErr: "gpuq: choose one of --parsable, --csv and --json\n"},
		{name: "other user refused", args: []string{"report", "-u", "bob"}, wantCode: 3,
			ctlErr:  spec.Errorf(spec.ErrPermissionDenied, "user alice may see only their own jobs, not those of user bob"),
			wantErr: "gpuq: summarise accounting: user alice may see only their own jobs, not those of user bob\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := acctFixture(t)
			ctl.Set(func(s *fakectl.Server) { s.AcctErr = tc.ctlErr })
			got := run(t, ctl, tc.args...)
			if got.code != tc.wantCode || got.stderr != tc.wantErr {
				t.Errorf("exit %d stderr %q; want %d %q", got.code, got.stderr, tc.wantCode, tc.wantErr)
			}
		})
	}
}
