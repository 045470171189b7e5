package slurmrest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestSubmitReservation: job/submit's reservation is sbatch's
// --reservation (it was ignored while gpud had no reservations): a job in
// a reservation's access list is queued in it, one outside is refused in
// Slurm's words.
func TestSubmitReservation(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	ctx := context.Background()
	st, d := spec.NewTime(time.Now().Add(time.Hour)), spec.Duration(time.Hour)
	nodes, users := []string{"gpu01"}, []string{"alice"}
	if _, err := c.root.CreateReservation(ctx, spec.ReservationUpdate{Name: "lab", StartTime: &st, Duration: &d, Nodes: &nodes, Users: &users}); err != nil {
		t.Fatal(err)
	}
	a := c.call(t, c.token(t, alice), "POST", "/slurm/v0.0.45/job/submit", submitBody("in", map[string]any{"reservation": "lab"}))
	if a.status != 200 {
		t.Fatalf("alice's submit in lab: %d %s", a.status, a.raw)
	}
	id, err := strconv.ParseUint(fmt.Sprint(a.body["job_id"]), 10, 64)
	if err != nil {
		t.Fatalf("job_id %v: %v", a.body["job_id"], err)
	}
	j, err := c.root.Job(ctx, spec.JobID(id))
	if err != nil || j.Reservation != "lab" {
		t.Fatalf("alice's job: reservation %q (%v); want lab", j.Reservation, err)
	}
	b := c.call(t, c.token(t, bob), "POST", "/slurm/v0.0.45/job/submit", submitBody("out", map[string]any{"reservation": "lab"}))
	if b.status == 200 || !strings.Contains(strings.Join(b.errs(), " "), "Access denied to requested reservation") {
		t.Errorf("bob's submit in lab: %d %v; want refused with Slurm's words", b.status, b.errs())
	}
}
