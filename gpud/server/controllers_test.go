package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
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
	want := api.ControllersResponse{Leader: host, Self: host, Members: []api.ControllerMember{{ID: host, APIAddress: s.unix, State: "leader", Voter: true}}}
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

// A remote user's client over [follower, leader], both serving TLS with
// the cluster's certificate, reaches the real controller through the
// follower's not_leader answers: the submission is made once, reads and
// GET /v1/controllers answer, and the token goes only to the two
// configured addresses.
func TestClientFollowsLeaderOverTLS(t *testing.T) {
	files, tlsCfg, keys := testTLS(t)
	s := secure{ca: files.CA, keys: keys}
	servertest.Start(t, nil, servertestOptions(&s, tlsCfg))
	var mu sync.Mutex
	var seen []string
	f := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set(api.HeaderLeader, s.https)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMisdirectedRequest)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeNotLeader, Message: "not the leader"}})
	}))
	f.TLS = tlsCfg.Clone()
	f.StartTLS()
	t.Cleanup(f.Close)

	t.Setenv("HOME", t.TempDir())
	t.Setenv(api.EnvToken, "")
	tok := s.token(t, auth.Claims{User: "alice", UID: 1001, GID: 1001}, time.Hour)
	alice, err := api.NewClientWith(f.URL+","+s.https, api.ClientOptions{CAFile: s.ca, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	sub, err := alice.Submit(ctx, api.SubmitRequest{Job: jobSpec("ha")})
	if err != nil {
		t.Fatalf("submit through the follower: %v", err)
	}
	jobs, err := alice.Jobs(ctx, api.JobFilter{All: true})
	if err != nil || len(jobs) != 1 || jobs[0].ID != sub.ID {
		t.Fatalf("jobs: %v %v; want the one job %d", jobs, err, sub.ID)
	}
	res, err := alice.Controllers(ctx)
	if err != nil || res.Leader == "" || len(res.Members) != 1 || res.Members[0].APIAddress != s.https {
		t.Errorf("controllers: %+v %v; want the leader at %s", res, err, s.https)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0] != "Bearer "+tok {
		t.Errorf("the follower saw %q; want one call with the token (it is configured), then none (the leader is remembered)", seen)
	}
}

func servertestOptions(s *secure, tlsCfg *tls.Config) servertest.Options {
	return servertest.Options{
		ServerOptions: []server.Option{server.WithTokens(s.keys)},
		TLS:           tlsCfg, TLSAddr: &s.https, Server: &s.srv,
	}
}
