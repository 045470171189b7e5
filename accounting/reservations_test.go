package accounting

import (
	"context"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestReservationUsage: a reservation of 4 GPUs for two hours whose jobs
// used 2 GPUs for an hour inside it (and one GPU-hour before it, which is
// not its) reports 2 allocated and 6 idle GPU-hours; a second window of
// a recurring one that still holds counts up to now; a removed window and
// one outside the period are not reported; jobs of other reservations
// and of none do not count.
func TestReservationUsage(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10 * 3600).Time }))
	ctx := context.Background()
	in := func(b *jobBuilder, resv string) spec.Job { j := b.Obj(); j.Reservation = resv; return j }
	record(t, db,
		// In "lab": one GPU from an hour before its window to an hour in,
		// another for the window's first hour.
		in(MakeJob(1).Ran(1, 0, node("n1", 1, "GPU-1")).End(2*3600, spec.StateCompleted), "lab"),
		in(MakeJob(2).Ran(1, 3600, node("n1", 1, "GPU-2")).End(2*3600, spec.StateCompleted), "lab"),
		// Outside it, on the same node and time.
		MakeJob(3).Ran(1, 3600, node("n1", 1, "GPU-5")).End(3*3600, spec.StateCompleted).Obj(),
		// In "daily": running since 9h (now is 10h).
		in(MakeJob(4).Ran(1, 9*3600, node("n2", 1, "GPU-9")), "daily"),
	)
	recs := []spec.ResvRecord{
		{Name: "lab", Start: at(3600), End: at(3 * 3600), Nodes: []string{"n1"}, GPUs: 4, Users: []string{"alice"}},
		{Name: "daily", Start: at(-20 * 3600), End: at(-19 * 3600), Nodes: []string{"n2"}, GPUs: 2, Flags: []string{"DAILY"}},
		{Name: "daily", Start: at(9 * 3600), End: at(11 * 3600), Nodes: []string{"n2"}, GPUs: 1, Flags: []string{"DAILY"}},
		{Name: "gone", Start: at(3600), End: at(2 * 3600), GPUs: 8},
	}
	if err := db.RecordReservations(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// Recorded again with a new end (an update), and "gone" removed.
	recs[2].GPUs = 2
	if err := db.RecordReservations(ctx, []spec.ResvRecord{recs[2], {Name: "gone", Start: at(3600), Remove: true}}); err != nil {
		t.Fatal(err)
	}
	rows, err := db.ReservationUsage(ctx, at(0).Time, at(10*3600).Time, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("rows = %+v; want lab and today's daily window", rows)
	}
	lab, daily := rows[0], rows[1]
	if lab.Name != "lab" || lab.TotalSeconds != 2*3600 || lab.AllocGPUSeconds != 2*3600 || lab.IdleGPUSeconds != 6*3600 ||
		len(lab.Users) != 1 || lab.Users[0] != "alice" {
		t.Errorf("lab = %+v; want 2h, 2 allocated and 6 idle GPU-hours", lab)
	}
	if daily.Name != "daily" || daily.TotalSeconds != 3600 || daily.GPUs != 2 || daily.AllocGPUSeconds != 3600 || daily.IdleGPUSeconds != 3600 {
		t.Errorf("daily = %+v; want up to now (1h) of 2 GPUs: 1 allocated, 1 idle GPU-hour", daily)
	}
	if rows, _ := db.ReservationUsage(ctx, at(0).Time, at(10*3600).Time, []string{"daily"}); len(rows) != 1 || rows[0].Name != "daily" {
		t.Errorf("names=daily: %+v", rows)
	}
	if _, err := db.ReservationUsage(ctx, at(1).Time, at(0).Time, nil); err == nil {
		t.Error("an empty period was accepted")
	}
}

// TestReservedIdle: the idle reserved GPU-time within a period, clipped
// to it: a plain reservation's in reserved, a MAINT one's in maint, an
// IGNORE_JOBS one's in neither.
func TestReservedIdle(t *testing.T) {
	t.Parallel()
	db := openTest(t, WithClock(func() time.Time { return at(10 * 3600).Time }))
	ctx := context.Background()
	j := MakeJob(1).Ran(1, 3600, node("n1", 1, "GPU-1")).End(2*3600, spec.StateCompleted).Obj()
	j.Reservation = "lab"
	record(t, db, j)
	if err := db.RecordReservations(ctx, []spec.ResvRecord{
		// 4 GPUs 1h-3h, one used 1h-2h: 7 idle GPU-hours; from 1.5h on,
		// 6 held and 0.5 used: 5.5.
		{Name: "lab", Start: at(3600), End: at(3 * 3600), GPUs: 4},
		{Name: "fix", Start: at(0), End: at(3600), GPUs: 8, Flags: []string{"MAINT", "SPEC_NODES"}},
		{Name: "ign", Start: at(0), End: at(4 * 3600), GPUs: 8, Flags: []string{"IGNORE_JOBS", "MAINT"}},
	}); err != nil {
		t.Fatal(err)
	}
	r, m, err := db.ReservedIdle(ctx, at(0).Time, at(5*3600).Time)
	if err != nil || r != 7 || m != 8 {
		t.Errorf("ReservedIdle over 0-5h = %v, %v, %v; want 7 reserved, 8 maint", r, m, err)
	}
	r, m, err = db.ReservedIdle(ctx, at(5400).Time, at(5*3600).Time)
	if err != nil || r != 4*1.5-0.5 || m != 0 {
		t.Errorf("ReservedIdle over 1.5h-5h = %v, %v, %v; want 5.5 reserved, 0 maint", r, m, err)
	}
}
