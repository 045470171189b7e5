package app

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func auditFixture(t *testing.T) *fakectl.Server {
	t.Helper()
	ctl := acctFixture(t)
	t0 := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	ctl.Set(func(s *fakectl.Server) {
		s.Audit = []api.AuditEntry{
			{Time: t0, ActorUID: 1001, ActorName: "alice", Role: "user", Origin: "unix", Action: "POST /v1/jobs", Target: "job 7", Result: "200 ok"},
			{Time: t0.Add(time.Minute), ActorUID: 1002, ActorName: "bob", Role: "user", Origin: "10.0.0.7:51234", Action: "POST /v1/jobs/{id}/cancel", Target: "job 7", Result: "403 job 7 belongs to alice"},
			{Time: t0.Add(2 * time.Minute), ActorName: "root", Role: "admin", Origin: "unix", Action: "POST /v1/nodes/{name}/drain", Target: "node gpu01", Result: "200 ok"},
		}
	})
	return ctl
}

func TestAudit(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      string
		wantQuery url.Values
	}{
		{
			name: "all of today",
			args: []string{"audit"},
			want: "TIME                ACTOR ROLE  ORIGIN         ACTION                      TARGET     RESULT\n" +
				"------------------- ----- ----- -------------- --------------------------- ---------- --------------------------\n" +
				"2025-03-14T09:00:00 alice user  unix           POST /v1/jobs               job 7      200 ok\n" +
				"2025-03-14T09:01:00 bob   user  10.0.0.7:51234 POST /v1/jobs/{id}/cancel   job 7      403 job 7 belongs to alice\n" +
				"2025-03-14T09:02:00 root  admin unix           POST /v1/nodes/{name}/drain node gpu01 200 ok\n",
			wantQuery: url.Values{"start": {"2025-03-14T00:00:00Z"}, "end": {"2025-03-14T15:30:00Z"}},
		},
		{
			name:      "actor, action, window, no header",
			args:      []string{"audit", "-u", "bob", "--action", "cancel", "-S", "2025-03-01", "-E", "now-2hours", "--noheader"},
			want:      "2025-03-14T09:01:00 bob user 10.0.0.7:51234 POST /v1/jobs/{id}/cancel job 7 403 job 7 belongs to alice\n",
			wantQuery: url.Values{"actor": {"bob"}, "action": {"cancel"}, "start": {"2025-03-01T00:00:00Z"}, "end": {"2025-03-14T13:30:00Z"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := auditFixture(t)
			runAndCheckQuery(t, ctl, tc.args, tc.want, "/v1/audit", tc.wantQuery)
		})
	}
}

func TestAuditJSON(t *testing.T) {
	ctl := auditFixture(t)
	got := run(t, ctl, "audit", "--json", "--action", "/nodes/")
	var entries []api.AuditEntry
	if err := json.Unmarshal([]byte(got.stdout), &entries); err != nil || len(entries) != 1 || entries[0].Target != "node gpu01" {
		t.Fatalf("--json = %+v, %v; stdout %s", entries, err, got.stdout)
	}
}

func TestAuditErrors(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		ctlErr   error
		wantCode int
		wantErr  string
	}{
		{name: "argument", args: []string{"audit", "bob"}, wantCode: 2,
			wantErr: "gpuq: gpuq audit takes no arguments, got \"bob\"; filter with -u and --action\n"},
		{name: "end before start", args: []string{"audit", "-E", "2025-03-13"}, wantCode: 2,
			wantErr: "gpuq: --endtime 2025-03-13T00:00:00 is before the start of the window (2025-03-14T00:00:00); give a later --endtime or an earlier --starttime\n"},
		{name: "not an operator", args: []string{"audit"}, wantCode: 3,
			ctlErr:  spec.Errorf(spec.ErrPermissionDenied, "reading the audit log needs the operator role; user alice has role user"),
			wantErr: "gpuq: list the audit log: reading the audit log needs the operator role; user alice has role user\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := auditFixture(t)
			ctl.Set(func(s *fakectl.Server) { s.AuditErr = tc.ctlErr })
			got := run(t, ctl, tc.args...)
			if got.code != tc.wantCode || got.stderr != tc.wantErr {
				t.Errorf("exit %d stderr %q; want %d %q", got.code, got.stderr, tc.wantCode, tc.wantErr)
			}
		})
	}
}
