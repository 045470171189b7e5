package server_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server/servertest"
)

// A single controller (no [ha]) lists itself as the leader, serves
// writes without HA headers, and refuses membership changes.
func TestHASingleControllerAnswers(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	sock := strings.TrimPrefix(addr, "unix://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://gpud/v1/controllers")
	if err != nil {
		t.Fatal(err)
	}
	var cs api.ControllersResponse
	err = json.NewDecoder(resp.Body).Decode(&cs)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/controllers: %d %v", resp.StatusCode, err)
	}
	if len(cs.Members) != 1 || cs.Members[0].ID != cs.Leader || cs.Members[0].State != "leader" || !cs.Members[0].Voter {
		t.Errorf("GET /v1/controllers = %+v; want one member, the leader", cs)
	}
	if _, err := client(t, addr).Submit(ctxT(t), api.SubmitRequest{Job: jobSpec("x")}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	resp, err = hc.Get("http://gpud/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(api.HeaderStale) != "" || resp.Header.Get(api.HeaderLeader) != "" {
		t.Errorf("a single controller's read carries HA headers: %v", resp.Header)
	}
	resp, err = hc.Post("http://gpud/v1/controllers", "application/json", strings.NewReader(`{"id":"c2","raft_address":"h:1","api_address":"https://h:2"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /v1/controllers on a single controller: %d; want 400", resp.StatusCode)
	}
}
