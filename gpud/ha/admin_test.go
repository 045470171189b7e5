package ha_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// scontrol update's live state travels through the log: every member's
// state.db holds it and a follower's controller runs with it.
func TestAdminStateReplicated(t *testing.T) {
	g := startGroup(t, 3, steady)
	l := g.leader(10 * time.Second)
	ctx := context.Background()
	ps, err := l.client().Partitions(ctx)
	if err != nil || len(ps) == 0 {
		t.Fatalf("partitions: %v %v", ps, err)
	}
	name := ps[0].Name
	down := "DOWN"
	res, err := l.client().UpdatePartition(ctx, spec.PartitionUpdate{Name: name, State: &down})
	if err != nil || len(res.Differences) != 1 {
		t.Fatalf("update partition %s: %v %v", name, res, err)
	}
	for _, m := range g.members {
		waitFor(t, 10*time.Second, "member "+m.id+" keeps partition "+name+" DOWN", func() bool {
			recs, err := m.st.LoadAdmin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Beside the group's controller identity (ident_test.go).
			var parts []spec.AdminRecord
			for _, r := range recs {
				if r.Kind != spec.AdminController {
					parts = append(parts, r)
				}
			}
			return len(parts) == 1 && parts[0].Kind == spec.AdminPartition && parts[0].Name == name
		})
		waitFor(t, 10*time.Second, "member "+m.id+" runs partition "+name+" DOWN", func() bool {
			// Through the API: a follower refreshes its view for reads.
			ps, err := m.client().Partitions(ctx)
			return err == nil && len(ps) > 0 && ps[0].State == down
		})
	}
}
