package controller

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func resvReq(name string, start time.Time, d time.Duration, nodes []string, mod func(*spec.ReservationUpdate)) spec.ReservationUpdate {
	st, dd := spec.NewTime(start), spec.Duration(d)
	users := []string{"alice"}
	u := spec.ReservationUpdate{Name: name, StartTime: &st, Duration: &dd, Nodes: &nodes, Users: &users}
	if mod != nil {
		mod(&u)
	}
	return u
}

func TestReservationLifecycle(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ctx := context.Background()
	h.register("n1", 8)
	h.register("n2", 8)

	// Refusals, all problems at once.
	_, err := h.c.CreateReservation(ctx, root, spec.ReservationUpdate{})
	for _, want := range []string{"StartTime must be specified", "Duration or EndTime must be specified", "Nodes, NodeCnt or TRES=gres/gpu=N must be specified", "Either Users/Groups and/or Accounts must be specified"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("empty create: %v; want %q", err, want)
		}
	}
	if _, err := h.c.CreateReservation(ctx, alice, resvReq("x", t0, time.Hour, []string{"n1"}, nil)); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Errorf("alice created a reservation: %v", err)
	}
	_, err = h.c.CreateReservation(ctx, root, resvReq("x", t0, time.Hour, []string{"n9"}, func(u *spec.ReservationUpdate) { u.Flags = &[]string{"MAINT", "BOGUS", "DAILY", "WEEKLY"} }))
	for _, want := range []string{"Invalid node name specified: n9", "Invalid reservation flag: BOGUS", "DAILY and WEEKLY"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad create: %v; want %q", err, want)
		}
	}

	// A running job without a time limit makes n1 busy.
	long := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.Resources.NodeList = []string{"n1"} })
	if h.job(long).State != spec.StateRunning {
		t.Fatal("job not running")
	}
	_, err = h.c.CreateReservation(ctx, root, resvReq("maint", t0.Add(10*time.Minute), time.Hour, []string{"n1", "n2"}, func(u *spec.ReservationUpdate) { u.Flags = &[]string{"MAINT"} }))
	if err == nil || !strings.Contains(err.Error(), "Requested nodes are busy: n1") {
		t.Fatalf("busy nodes: %v", err)
	}
	name, err := h.c.CreateReservation(ctx, root, resvReq("maint", t0.Add(10*time.Minute), time.Hour, []string{"n1", "n2"}, func(u *spec.ReservationUpdate) {
		u.Flags = &[]string{"maint", "ignore_jobs"}
	}))
	if err != nil || name != "maint" {
		t.Fatalf("create: %q, %v", name, err)
	}
	if _, err := h.c.CreateReservation(ctx, root, resvReq("maint", t0, time.Hour, []string{"n2"}, nil)); !errors.Is(err, spec.ErrConflict) || !strings.Contains(err.Error(), "Duplicate reservation name") {
		t.Errorf("duplicate: %v", err)
	}
	// Overlap with another (non-MAINT) reservation needs OVERLAP.
	if _, err := h.c.CreateReservation(ctx, root, resvReq("", t0.Add(2*time.Hour), time.Hour, []string{"n2"}, nil)); err != nil {
		t.Fatalf("second reservation: %v", err)
	}
	_, err = h.c.CreateReservation(ctx, root, resvReq("", t0.Add(150*time.Minute), time.Hour, []string{"n2"}, nil))
	if err == nil || !strings.Contains(err.Error(), "overlaps with another reservation") {
		t.Errorf("overlap: %v", err)
	}

	// Jobs: a 30-minute job waits with Slurm's reason, a 5-minute one runs.
	j30 := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 8; j.TimeLimit = spec.Duration(30 * time.Minute) })
	j5 := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 8; j.TimeLimit = spec.Duration(5 * time.Minute) })
	if j := h.job(j30); j.State != spec.StatePending || j.Reason != spec.ReasonReservedMaint {
		t.Errorf("30-minute job: %s %q", j.State, j.Reason)
	}
	if j := h.job(j5); j.State != spec.StateRunning {
		t.Errorf("5-minute job: %s %q", j.State, j.Reason)
	}
	// --reservation: refused to who it does not admit, taken from who it does.
	_, err = h.c.Submit(ctx, bob, spec.JobSpec{Name: "j", Script: "#!/bin/sh\n", WorkDir: "/tmp", Reservation: "maint"})
	if !errors.Is(err, spec.ErrPermissionDenied) || !strings.Contains(err.Error(), "Access denied to requested reservation") {
		t.Errorf("bob in alice's reservation: %v", err)
	}
	_, err = h.c.Submit(ctx, alice, spec.JobSpec{Name: "j", Script: "#!/bin/sh\n", WorkDir: "/tmp", Reservation: "nope"})
	if err == nil || !strings.Contains(err.Error(), "Requested reservation is invalid") {
		t.Errorf("unknown reservation: %v", err)
	}
	in := h.submit(alice, func(j *spec.JobSpec) {
		j.Reservation = "maint"
		j.Resources.GPUsPerNode = 1
		j.TimeLimit = spec.Duration(10 * time.Minute)
	})
	if j := h.job(in); j.State != spec.StatePending || j.Reason != spec.ReasonReservation {
		t.Errorf("job before its reservation: %s %q", j.State, j.Reason)
	}

	// Durable: a restarted controller has it, and shows it.
	h.stop()
	h2 := newHarnessAt(t, store, nil, t0)
	vs, err := h2.c.Reservations(ctx)
	if err != nil || len(vs) != 2 || vs[0].Name != "alice_1" || vs[1].Name != "maint" || !vs[1].Has(spec.ResvMaint) || vs[1].State != "INACTIVE" {
		t.Fatalf("after restart: %+v, %v", vs, err)
	}
	// Its window opens: the job in it starts, on its nodes.
	h2.advance(11 * time.Minute)
	h2.register("n1", 8) // a restarted controller hears from its nodes again
	h2.register("n2", 8)
	h2.kickCycle()
	if j := h2.job(in); j.State != spec.StateRunning {
		t.Errorf("job in its open reservation: %s %q", j.State, j.Reason)
	}
	// Update and delete.
	nd := spec.Duration(2 * time.Hour)
	if err := h2.c.UpdateReservation(ctx, root, spec.ReservationUpdate{Name: "maint", Duration: &nd, FlagsAdd: []string{"FLEX"}}); err != nil {
		t.Fatal(err)
	}
	vs, _ = h2.c.Reservations(ctx)
	if got := vs[1].EndTime.Sub(vs[1].StartTime.Time); got != 2*time.Hour || !vs[1].Has(spec.ResvFlex) || !vs[1].Has(spec.ResvSpecNodes) {
		t.Errorf("after update: %v, flags %v", got, vs[1].Flags)
	}
	if err := h2.c.DeleteReservation(ctx, root, "nope"); !errors.Is(err, spec.ErrNotFound) {
		t.Errorf("delete unknown: %v", err)
	}
	if err := h2.c.DeleteReservation(ctx, root, "alice_1"); err != nil {
		t.Fatal(err)
	}
	if vs, _ := h2.c.Reservations(ctx); len(vs) != 1 {
		t.Errorf("after delete: %+v", vs)
	}
}

// kickCycle makes the next settle run a full cycle (as the periodic one
// does once SchedInterval has passed).
func (h *harness) kickCycle() {
	h.t.Helper()
	if err := h.c.query(context.Background(), func() error {
		h.c.sched.dirty, h.c.sched.full = true, true
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
}

// TestReservationExcludedUsers: Users=-name (Slurm's) admits every user
// but those named, within Accounts where it lists any; a list that mixes
// refused and admitted names is refused.
func TestReservationExcludedUsers(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 8)
	_, err := h.c.CreateReservation(ctx, root, resvReq("mixed", t0, time.Hour, []string{"n1"}, func(u *spec.ReservationUpdate) { u.Users = &[]string{"-alice", "bob"} }))
	if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "either every user is prefixed with '-'") {
		t.Fatalf("mixed users: %v", err)
	}
	name, err := h.c.CreateReservation(ctx, root, resvReq("", t0, time.Hour, []string{"n1"}, func(u *spec.ReservationUpdate) { u.Users = &[]string{"-alice"} }))
	if err != nil || name != "alice_1" {
		t.Fatalf("create Users=-alice: %q, %v", name, err)
	}
	in := func(j *spec.JobSpec) {
		j.Reservation = name
		j.Resources.GPUsPerNode = 1
		j.TimeLimit = spec.Duration(10 * time.Minute)
	}
	_, err = h.c.Submit(ctx, alice, spec.JobSpec{Name: "j", Script: "#!/bin/sh\n", WorkDir: "/tmp", Reservation: name})
	if !errors.Is(err, spec.ErrPermissionDenied) || !strings.Contains(err.Error(), "Access denied to requested reservation") {
		t.Fatalf("alice in a reservation that refuses her: %v", err)
	}
	b := h.submit(bob, in)
	if j := h.job(b); j.State != spec.StateRunning {
		t.Fatalf("bob's job in Users=-alice: %s %q", j.State, j.Reason)
	}
}

// TestGPUReservation: TRES=gres/gpu=4 picks four GPUs of a node that are
// free of jobs running past its start, holds only those (others' jobs
// run beside them), gives its members exactly those, and survives a
// restart; too many GPUs is Slurm's busy error.
func TestGPUReservation(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, nil)
	ctx := context.Background()
	h.register("n1", 8)
	gpus := func(n int) func(*spec.ReservationUpdate) {
		return func(u *spec.ReservationUpdate) { u.Nodes, u.GPUs = nil, &n }
	}
	// bob's job without a time limit holds GPUs 0 and 1 for good.
	long := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2 })
	if j := h.job(long); j.State != spec.StateRunning || j.Alloc == nil || len(j.Alloc.Nodes) != 1 || !slices.Equal(j.Alloc.Nodes[0].GPUs, []string{"GPU-n1-0", "GPU-n1-1"}) {
		t.Fatalf("long job: %s %+v", j.State, j.Alloc)
	}
	_, err := h.c.CreateReservation(ctx, root, resvReq("big", t0.Add(10*time.Minute), time.Hour, nil, gpus(7)))
	if !errors.Is(err, spec.ErrConflict) || !strings.Contains(err.Error(), "Requested nodes are busy: TRES=gres/gpu=7 but only 6 GPUs") {
		t.Fatalf("7 GPUs with 6 free: %v", err)
	}
	name, err := h.c.CreateReservation(ctx, root, resvReq("g", t0.Add(10*time.Minute), time.Hour, nil, gpus(4)))
	if err != nil || name != "g" {
		t.Fatalf("create: %q, %v", name, err)
	}
	vs, _ := h.c.Reservations(ctx)
	if len(vs) != 1 || !slices.Equal(vs[0].Nodes, []string{"n1"}) || !slices.Equal(vs[0].NodeGPUs["n1"], []int{2, 3, 4, 5}) || vs[0].GPUs != 4 {
		t.Fatalf("reservation: %+v", vs)
	}
	// Another GPU reservation at the same time takes other GPUs; a
	// whole-node one there overlaps.
	if _, err := h.c.CreateReservation(ctx, root, resvReq("g2", t0.Add(20*time.Minute), time.Hour, nil, gpus(2))); err != nil {
		t.Fatalf("second GPU reservation: %v", err)
	}
	vs, _ = h.c.Reservations(ctx)
	if !slices.Equal(vs[1].NodeGPUs["n1"], []int{6, 7}) {
		t.Errorf("second GPU reservation took %v, want 6,7", vs[1].NodeGPUs)
	}
	if _, err := h.c.CreateReservation(ctx, root, resvReq("w", t0.Add(20*time.Minute), time.Hour, []string{"n1"}, func(u *spec.ReservationUpdate) { u.Flags = &[]string{"IGNORE_JOBS"} })); err == nil || !strings.Contains(err.Error(), "overlaps with another reservation") {
		t.Errorf("whole-node reservation over GPU reservations: %v", err)
	}
	if err := h.c.DeleteReservation(ctx, root, "g2"); err != nil {
		t.Fatal(err)
	}
	// Before the window: a 2-hour job runs on the unreserved GPUs 6-7;
	// another finds only reserved ones and waits; alice's waits for it.
	beside := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 2; j.TimeLimit = spec.Duration(2 * time.Hour) })
	if j := h.job(beside); j.State != spec.StateRunning || !slices.Equal(j.Alloc.Nodes[0].GPUs, []string{"GPU-n1-6", "GPU-n1-7"}) {
		t.Fatalf("job beside the reservation: %s %q %+v", j.State, j.Reason, j.Alloc)
	}
	crossing := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1; j.TimeLimit = spec.Duration(2 * time.Hour) })
	if j := h.job(crossing); j.State != spec.StatePending || j.Reason != spec.ReasonReservation {
		t.Errorf("job that would cross the window on reserved GPUs: %s %q", j.State, j.Reason)
	}
	in := h.submit(alice, func(j *spec.JobSpec) {
		j.Reservation = "g"
		j.Resources.GPUsPerNode = 4
		j.TimeLimit = spec.Duration(10 * time.Minute)
	})
	if j := h.job(in); j.State != spec.StatePending || j.Reason != spec.ReasonReservation {
		t.Errorf("job before its window: %s %q", j.State, j.Reason)
	}
	// Restarted, the window open: alice's job gets exactly GPUs 2-5.
	h.stop()
	h2 := newHarnessAt(t, store, nil, t0)
	h2.advance(11 * time.Minute)
	h2.register("n1", 8)
	h2.kickCycle()
	if j := h2.job(in); j.State != spec.StateRunning || !slices.Equal(j.Alloc.Nodes[0].GPUs, []string{"GPU-n1-2", "GPU-n1-3", "GPU-n1-4", "GPU-n1-5"}) {
		t.Errorf("job in its window: %s %q %+v", j.State, j.Reason, j.Alloc)
	}
}

// resvRecorder is a Recorder that keeps reservation windows and says
// when a batch arrives.
type resvRecorder struct {
	fakeRecorder
	got chan spec.ResvRecord
}

func (r *resvRecorder) RecordReservations(_ context.Context, recs []spec.ResvRecord) error {
	for _, x := range recs {
		r.got <- x
	}
	return nil
}

// next waits for the next reservation window handed to the recorder.
func (r *resvRecorder) next(t *testing.T) spec.ResvRecord {
	t.Helper()
	select {
	case x := <-r.got:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("no reservation window recorded within 10s")
	}
	return spec.ResvRecord{}
}

// TestReservationRecords: accounting gets a reservation's window when it
// is made (with its reserved GPUs), each new occurrence of a recurring
// one, the removal of one deleted before it began and the end of one
// deleted while it holds.
func TestReservationRecords(t *testing.T) {
	rec := &resvRecorder{got: make(chan spec.ResvRecord, 16)}
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithRecorder(rec))
	ctx := context.Background()
	h.register("n1", 8)
	h.register("n2", 4)
	want := func(name string, s, e time.Time, gpus int, remove bool) {
		t.Helper()
		x := rec.next(t)
		if x.Name != name || !x.Start.Equal(s) || x.Remove != remove || !remove && (!x.End.Equal(e) || x.GPUs != gpus) {
			t.Errorf("recorded %+v; want %s %v-%v with %d GPUs (remove %v)", x, name, s, e, gpus, remove)
		}
	}
	if _, err := h.c.CreateReservation(ctx, root, resvReq("d", t0.Add(time.Hour), time.Hour, []string{"n1", "n2"}, func(u *spec.ReservationUpdate) { u.Flags = &[]string{"DAILY"} })); err != nil {
		t.Fatal(err)
	}
	want("d", t0.Add(time.Hour), t0.Add(2*time.Hour), 12, false)
	n := 3
	if _, err := h.c.CreateReservation(ctx, root, resvReq("g", t0, time.Hour, nil, func(u *spec.ReservationUpdate) { u.Nodes, u.GPUs = nil, &n })); err != nil {
		t.Fatal(err)
	}
	want("g", t0, t0.Add(time.Hour), 3, false)
	if _, err := h.c.CreateReservation(ctx, root, resvReq("x", t0.Add(3*time.Hour), time.Hour, []string{"n2"}, nil)); err != nil {
		t.Fatal(err)
	}
	want("x", t0.Add(3*time.Hour), t0.Add(4*time.Hour), 4, false)
	if err := h.c.DeleteReservation(ctx, root, "x"); err != nil {
		t.Fatal(err)
	}
	want("x", t0.Add(3*time.Hour), time.Time{}, 0, true)
	h.advance(10 * time.Minute)
	if err := h.c.DeleteReservation(ctx, root, "g"); err != nil {
		t.Fatal(err)
	}
	want("g", t0, t0.Add(10*time.Minute), 3, false)
	// Past d's first window: its next occurrence is recorded, by the
	// periodic housekeeping (nothing is pending, so no cycle runs).
	h.advance(2 * time.Hour)
	want("d", t0.Add(25*time.Hour), t0.Add(26*time.Hour), 12, false)
}

// TestReservationAccessFields: as Slurm, a job must be approved by each
// access field a reservation has (Users and Accounts: both), Groups=
// admits the members of its groups (the submitter's groups as the server
// resolved them, also when the scheduler decides), and Users with Groups
// is refused.
func TestReservationAccessFields(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	h.register("n1", 8)
	h.register("n2", 8)
	if _, err := h.c.CreateReservation(ctx, root, resvReq("both", t0, time.Hour, []string{"n1"}, func(u *spec.ReservationUpdate) {
		u.Groups = &[]string{"bio"}
	})); err == nil || !strings.Contains(err.Error(), "Users and Groups are mutually exclusive") {
		t.Fatalf("Users with Groups: %v", err)
	}
	if _, err := h.c.CreateReservation(ctx, root, resvReq("ua", t0, time.Hour, []string{"n1"}, func(u *spec.ReservationUpdate) {
		u.Accounts = &[]string{"physics"}
	})); err != nil {
		t.Fatal(err)
	}
	submit := func(who Caller, resv, account string) error {
		_, err := h.c.Submit(ctx, who, spec.JobSpec{Name: "j", Script: "#!/bin/sh\n", WorkDir: "/tmp", Reservation: resv, Account: account,
			TimeLimit: spec.Duration(10 * time.Minute), Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1}})
		return err
	}
	for _, tc := range []struct {
		who     Caller
		account string
		ok      bool
	}{
		{alice, "physics", true},
		{alice, "chem", false},  // her, but not the account
		{bob, "physics", false}, // the account, but not him
	} {
		if err := submit(tc.who, "ua", tc.account); (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "Access denied to requested reservation") {
			t.Errorf("%s with account %s in Users=alice Accounts=physics: %v; want ok %v", tc.who.User, tc.account, err, tc.ok)
		}
	}
	groups := func(u *spec.ReservationUpdate) { u.Users, u.Groups = nil, &[]string{"bio"} }
	name, err := h.c.CreateReservation(ctx, root, resvReq("", t0, time.Hour, []string{"n2"}, groups))
	if err != nil || name != "bio_1" {
		t.Fatalf("Groups=bio: %q, %v", name, err)
	}
	if vs, _ := h.c.Reservations(ctx); len(vs) != 2 || !slices.Equal(vs[0].Groups, []string{"bio"}) {
		t.Errorf("reservations: %+v", vs)
	}
	carol := Caller{UID: 1002, GID: 1002, User: "carol", Known: true, Groups: []string{"carol", "bio"}}
	dave := Caller{UID: 1003, GID: 1003, User: "dave", Known: true, Groups: []string{"dave", "chem"}}
	if err := submit(dave, name, ""); err == nil || !strings.Contains(err.Error(), "members of groups bio") {
		t.Errorf("dave (not in bio): %v", err)
	}
	id := h.submit(carol, func(j *spec.JobSpec) {
		j.Reservation, j.TimeLimit = name, spec.Duration(10*time.Minute)
		j.Resources.GPUsPerNode = 1
	})
	if j := h.job(id); j.State != spec.StateRunning || j.Alloc == nil || j.Alloc.Nodes[0].Node != "n2" {
		t.Errorf("carol's job in Groups=bio: %s %q %+v", j.State, j.Reason, j.Alloc)
	}
}
