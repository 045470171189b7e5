package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/gpud/api"
)

// Each member's own answer gives its row's state, term and indices; the
// membership and leader come from the leader's answer; an address that
// did not answer is warned of and its member shown unreachable (before:
// a killed member showed as "follower" with term 0).
func TestMergeControllers(t *testing.T) {
	view := func(self string, own api.ControllerMember) api.ControllersResponse {
		ms := []api.ControllerMember{
			{ID: "c1", APIAddress: "https://c1:6817", State: "follower", Voter: true},
			{ID: "c2", APIAddress: "https://c2:6817", State: "leader", Voter: true},
			{ID: "c3", APIAddress: "https://c3:6817", State: "follower", Voter: true},
		}
		for i := range ms {
			if ms[i].ID == self {
				ms[i] = own
			}
		}
		return api.ControllersResponse{Leader: "c2", Self: self, Members: ms}
	}
	c1 := api.ControllerMember{ID: "c1", APIAddress: "https://c1:6817", State: "follower", Voter: true, Term: 4, CommitIndex: 90, AppliedIndex: 88}
	c2 := api.ControllerMember{ID: "c2", APIAddress: "https://c2:6817", State: "leader", Voter: true, Term: 4, CommitIndex: 91, AppliedIndex: 91}
	got, warnings, err := mergeControllers([]api.MemberAnswer{
		{Addr: "https://c1:6817", Resp: view("c1", c1)},
		{Addr: "https://c2:6817", Resp: view("c2", c2)},
		{Addr: "https://c3:6817", Err: errors.New("connection refused")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := api.ControllersResponse{Leader: "c2", Self: "c2", Members: []api.ControllerMember{c1, c2,
		{ID: "c3", APIAddress: "https://c3:6817", State: "unreachable", Voter: true}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "https://c3:6817 did not answer") {
		t.Errorf("warnings %q; want one naming c3", warnings)
	}
	if _, _, err := mergeControllers([]api.MemberAnswer{{Addr: "https://c1:6817", Err: errors.New("refused")}}); err == nil {
		t.Errorf("no answer at all: no error")
	}
}
