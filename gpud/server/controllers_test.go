package server_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/spec"
)

// A single controller (no [ha]) answers GET /v1/controllers with itself as
// the leader, at the address the caller reached it by; with a group the
// group's view is the answer.
func TestControllersSingle(t *testing.T) {
	s := secureServer(t)
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "controller"
	}
	got, err := client(t, s.unix).Controllers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := api.ControllersResponse{Leader: host, Members: []api.ControllerMember{{ID: host, APIAddress: s.unix, State: "leader", Voter: true}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("over the socket (-want +got):\n%s", diff)
	}
	alice := s.client(t, s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour))
	got, err = alice.Controllers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want.Members[0].APIAddress = s.https
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("over https (-want +got):\n%s", diff)
	}

	g := fakeGroup{res: api.ControllersResponse{Leader: "c2", Members: []api.ControllerMember{
		{ID: "c1", APIAddress: "https://c1:6817", State: "follower", Voter: true, Term: 3, CommitIndex: 10, AppliedIndex: 9},
		{ID: "c2", APIAddress: "https://c2:6817", State: "leader", Voter: true, Term: 3, CommitIndex: 10, AppliedIndex: 10},
	}}}
	s = secureServer(t, server.WithControllerGroup(g))
	got, err = client(t, s.unix).Controllers(ctxT(t))
	if diff := cmp.Diff(g.res, got); err != nil || diff != "" {
		t.Errorf("with a group: %v (-want +got):\n%s", err, diff)
	}
	g.err = spec.Errorf(spec.ErrUnavailable, "raft is shutting down")
	s = secureServer(t, server.WithControllerGroup(g))
	_, err = client(t, s.unix).Controllers(ctxT(t))
	wantStatus(t, "group error", err, 503, spec.ErrUnavailable, "raft is shutting down")
}

type fakeGroup struct {
	res api.ControllersResponse
	err error
}

func (g fakeGroup) Controllers(context.Context) (api.ControllersResponse, error) { return g.res, g.err }
