package app

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
)

func TestControllers(t *testing.T) {
	res := &api.ControllersResponse{Leader: "c1", Members: []api.ControllerMember{
		{ID: "c1", APIAddress: "https://c1:6817", State: "leader", Voter: true, Term: 5, CommitIndex: 90, AppliedIndex: 90},
		{ID: "c2", APIAddress: "https://c2:6817", State: "follower", Voter: true, Term: 5, CommitIndex: 90, AppliedIndex: 88},
	}}
	ctl := fakectl.New(t)
	ctl.Set(func(s *fakectl.Server) { s.Controllers = res })
	r := run(t, ctl, "controllers")
	want := "" +
		"ID  ADDRESS          STATE     VOTER  TERM  COMMIT  APPLIED  CONTACT\n" +
		"c1  https://c1:6817  leader    yes    5     90      90       -\n" +
		"c2  https://c2:6817  follower  yes    5     90      88       -\n"
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if diff := cmp.Diff(want, r.stdout); diff != "" {
		t.Errorf("gpuq controllers (-want +got):\n%s", diff)
	}

	r = run(t, ctl, "controllers", "--json")
	var got api.ControllersResponse
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 {
		t.Fatalf("--json: %v %d %s", err, r.code, r.stdout)
	}
	if diff := cmp.Diff(*res, got); diff != "" {
		t.Errorf("--json (-want +got):\n%s", diff)
	}

	ctl.Set(func(s *fakectl.Server) { s.Controllers = &api.ControllersResponse{Members: res.Members} })
	r = run(t, ctl, "controllers", "--noheader")
	if r.code != 0 || !strings.Contains(r.stderr, "no leader") || strings.Contains(r.stdout, "ADDRESS") {
		t.Errorf("no leader: exit %d, stderr %q, stdout %q; want a warning and the members", r.code, r.stderr, r.stdout)
	}

	// A member that did not report its own term and indices (down, or a
	// single controller) shows -, not 0.
	ctl.Set(func(s *fakectl.Server) {
		s.Controllers = &api.ControllersResponse{Leader: "c1", Members: []api.ControllerMember{res.Members[0],
			{ID: "c2", APIAddress: "https://c2:6817", State: "unreachable", Voter: true}}}
	})
	r = run(t, ctl, "controllers", "--noheader")
	if want := "c2  https://c2:6817  unreachable  yes  -  -   -   -\n"; !strings.HasSuffix(r.stdout, want) {
		t.Errorf("unreachable member:\n%s\nwant its row %q", r.stdout, want)
	}

	if r = run(t, ctl, "controllers", "extra"); r.code != 2 {
		t.Errorf("with an argument: exit %d; want 2", r.code)
	}
}
