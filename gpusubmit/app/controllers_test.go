package app

import (
	"testing"

	"github.com/gpud/gpud/cli/fakectl"
)

// --controller takes a controller group's list: a member that is down is
// skipped (the dial failed, nothing was sent), and the job is submitted
// once.
func TestControllerList(t *testing.T) {
	ctl := fakectl.New(t)
	r := run(t, &fakectl.Server{Addr: "unix:///nonexistent/gpud.sock, " + ctl.Addr}, "--wrap", "true")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if n := len(ctl.Submitted(t)); n != 1 {
		t.Errorf("%d submissions reached the controller; want 1", n)
	}
}
