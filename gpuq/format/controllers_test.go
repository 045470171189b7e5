package format

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

func TestWriteControllersGolden(t *testing.T) {
	res := api.ControllersResponse{Leader: "c2", Members: []api.ControllerMember{
		{ID: "c1", RaftAddress: "10.0.0.1:6818", APIAddress: "https://c1:6817", State: "follower", Voter: true, Term: 4, CommitIndex: 10423, AppliedIndex: 10421,
			LastContact: now.Add(-120 * time.Millisecond).Format(time.RFC3339Nano)},
		{ID: "c2", RaftAddress: "10.0.0.2:6818", APIAddress: "https://c2:6817", State: "leader", Voter: true, Term: 4, CommitIndex: 10423, AppliedIndex: 10423},
		{ID: "c3", RaftAddress: "10.0.0.3:6818", APIAddress: "https://c3:6817", State: "unreachable", Voter: true, Term: 3, CommitIndex: 9800, AppliedIndex: 9800,
			LastContact: now.Add(-2*time.Minute - 5*time.Second).Format(time.RFC3339)},
		{ID: "c4", State: "follower", Term: 4, CommitIndex: 10423, AppliedIndex: 10001},
	}}
	var b bytes.Buffer
	if err := WriteControllers(&b, res, now, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "controllers.golden", b.Bytes())
	b.Reset()
	if err := WriteControllers(&b, res, now, true); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); strings.Contains(got, "ADDRESS") || strings.Count(got, "\n") != 4 {
		t.Errorf("noheader:\n%s", got)
	}
}
