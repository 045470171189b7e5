package slurm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
)

// scontrol ping prints Slurm's line per controller: the leader as the
// primary, the other members as backups in the group's order, a member the
// answering one cannot reach as DOWN; exit 1 only when none answers.
func TestScontrolPing(t *testing.T) {
	member := func(id, state string) api.ControllerMember {
		return api.ControllerMember{ID: id, APIAddress: "https://" + id + ".example:6817", State: state, Voter: true, Term: 2}
	}
	for _, tc := range []struct {
		name     string
		res      *api.ControllersResponse
		want     string
		wantCode int
	}{
		{"three, leader second", &api.ControllersResponse{Leader: "c2", Members: []api.ControllerMember{
			member("c1", "follower"), member("c2", "leader"), member("c3", "unreachable")}},
			"Slurmctld(primary) at c2.example is UP\nSlurmctld(backup1) at c1.example is UP\nSlurmctld(backup2) at c3.example is DOWN\n", 0},
		{"two", &api.ControllersResponse{Leader: "c1", Members: []api.ControllerMember{member("c1", "leader"), member("c2", "follower")}},
			"Slurmctld(primary) at c1.example is UP\nSlurmctld(backup) at c2.example is UP\n", 0},
		{"election: no primary", &api.ControllersResponse{Members: []api.ControllerMember{
			member("c1", "candidate"), member("c2", "follower"), member("c3", "unreachable")}},
			"Slurmctld(backup1) at c1.example is UP\nSlurmctld(backup2) at c2.example is UP\nSlurmctld(backup3) at c3.example is DOWN\n", 0},
		{"single controller over its socket", &api.ControllersResponse{Leader: "ctl01", Members: []api.ControllerMember{
			{ID: "ctl01", APIAddress: "unix:///run/gpud/gpud.sock", State: "leader", Voter: true}}},
			"Slurmctld(primary) at ctl01 is UP\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fakectl.New(t)
			ctl.Set(func(s *fakectl.Server) { s.Controllers = tc.res })
			out, errs, code := run(t, ctl, "scontrol", "ping")
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, errs)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("scontrol ping (-want +got):\n%s", diff)
			}
		})
	}

	// A controller without GET /v1/controllers answered: it is up.
	ctl := fakectl.New(t)
	out, errs, code := run(t, ctl, "scontrol", "ping")
	if want := "Slurmctld(primary) at " + ctl.Addr + " is UP\n"; code != 0 || out != want {
		t.Errorf("old controller: %d %q %q; want %q", code, out, errs, want)
	}
	// None answers: DOWN, exit 1, the reason on stderr.
	down := &fakectl.Server{Addr: "unix:///nonexistent/gpud.sock"}
	out, errs, code = run(t, down, "scontrol", "ping")
	if want := "Slurmctld(primary) at unix:///nonexistent/gpud.sock is DOWN\n"; code != 1 || out != want || errs == "" {
		t.Errorf("down: %d %q %q; want exit 1, %q and the reason", code, out, errs, want)
	}
}

// The Slurm names take GPUD_CONTROLLER's list too.
func TestControllerList(t *testing.T) {
	ctl := fixture(t)
	out, errs, code := run(t, &fakectl.Server{Addr: "unix:///nonexistent/gpud.sock," + ctl.Addr}, "squeue", "-h", "-o", "%i")
	if code != 0 || out != "8_1\n8_0\n7\n" {
		t.Errorf("squeue over [down, up]: exit %d, %q, %q", code, out, errs)
	}
}
