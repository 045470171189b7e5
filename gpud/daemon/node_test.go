package daemon

import (
	"slices"
	"testing"
)

// Every unix socket of a controller list stays visible to jobs.
func TestUnixSocketOfList(t *testing.T) {
	got := unixSocket("unix:///run/gpud/gpud.sock, https://c2:6817,unix:///run/gpud/b.sock")
	if want := []string{"/run/gpud/gpud.sock", "/run/gpud/b.sock"}; !slices.Equal(got, want) {
		t.Errorf("unixSocket = %q; want %q", got, want)
	}
	if got := unixSocket("https://c1:6817"); got != nil {
		t.Errorf("unixSocket(https) = %q; want none", got)
	}
}
