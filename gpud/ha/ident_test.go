package ha_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// replicaIdentity is the controller identity m's own state.db holds
// ("" if none).
func replicaIdentity(t testing.TB, m *member) string {
	t.Helper()
	recs, err := m.st.LoadAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Kind == spec.AdminController {
			var id string
			if err := json.Unmarshal(r.Data, &id); err != nil {
				t.Fatal(err)
			}
			return id
		}
	}
	return ""
}

// TestIdentityIsTheGroups: the controller identity is the group's, made
// once through its log: every member's state.db holds the leader's, the
// leader's answers to a node say it, and after the leader dies the next
// leader says the same (a change of leader is not a reset: node agents
// keep their jobs running); the old leader, back, has it too.
func TestIdentityIsTheGroups(t *testing.T) {
	// steady: a loaded machine must not depose the first leader before
	// the test kills it (the failover is the test's, not the load's).
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	id := l.ctrl.Identity()
	if len(id) != 32 {
		t.Fatalf("the leader's identity is %q; want 32 hex digits", id)
	}
	for _, m := range g.members {
		waitFor(t, 5*time.Second, "member "+m.id+" holds the identity", func() bool { return replicaIdentity(t, m) == id })
	}
	reg, err := l.client().Register(context.Background(), spec.Inventory{Name: "n1", Addr: "10.0.0.1", CPUs: 8, MemMiB: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if reg.ControllerID != id {
		t.Fatalf("the leader's register answer says identity %q, want %q", reg.ControllerID, id)
	}
	submit(t, l, 3)

	l.stop()
	nl := g.leader(15 * time.Second)
	if got := nl.ctrl.Identity(); got != id {
		t.Fatalf("the new leader %s has identity %q, the group's is %q: a change of leader would look like a reset to every node", nl.id, got, id)
	}
	asg, err := nl.client().PollAssignments(context.Background(), "n1", api.AssignmentsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if asg.ControllerID != id {
		t.Fatalf("the new leader's assignments answer says identity %q, want %q", asg.ControllerID, id)
	}
	// Back, it replays the log (or installs a snapshot) into an
	// emptied state.db.
	l.start()
	waitFor(t, 10*time.Second, "the old leader, back, holds the identity", func() bool { return replicaIdentity(t, l) == id })
}
