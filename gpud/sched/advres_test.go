package sched

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func startsOf(p Plan) map[spec.JobID][]string {
	out := map[spec.JobID][]string{}
	for _, s := range p.Starts {
		for _, a := range s.Nodes {
			out[s.JobID] = append(out[s.JobID], a.Node)
		}
	}
	return out
}

func pendingOf(p Plan, id spec.JobID) Pending {
	for _, q := range p.Pending {
		if q.JobID == id {
			return q
		}
	}
	return Pending{}
}

// A MAINT reservation in 10 minutes on two nodes of three: a 30-minute
// job is not started there, a 5-minute one is; one that needs both
// nodes for 30 minutes waits with Slurm's maintenance reason.
func TestAdvanceReservationMaint(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", 8, 1000, "h100", 8), node("b", 8, 1000, "h100", 8), node("c", 8, 1000, "h100", 8)}
	// c is busy for good.
	nodes[2].FreeCPUs = 0
	maint := AdvanceReservation{Name: "maint", Start: t0.Add(10 * time.Minute), End: t0.Add(70 * time.Minute), Nodes: []string{"a", "b"}, Maint: true}
	snap := &Snapshot{Nodes: nodes, AdvanceReservations: []AdvanceReservation{maint}, Jobs: []Job{
		job(1, 1, 8, func(j *Job) { j.TimeLimit = 30 * time.Minute }),
		job(2, 1, 8, func(j *Job) { j.TimeLimit = 5 * time.Minute }),
		job(3, 1, 8, func(j *Job) { j.TimeLimit = 0 }),
	}}
	p := Schedule(snap, t0, Config{})
	st := startsOf(p)
	if _, ok := st[1]; ok {
		t.Fatalf("30-minute job started across the maintenance window: %v", st)
	}
	if len(st[2]) != 1 {
		t.Fatalf("5-minute job not started: %v; pending %+v", st, p.Pending)
	}
	if _, ok := st[3]; ok {
		t.Fatalf("a job without a time limit started on a node with a maintenance window ahead: %v", st)
	}
	if r := pendingOf(p, 1); r.Reason != spec.ReasonReservedMaint {
		t.Errorf("30-minute job waits with %q (%s), want %q", r.Reason, r.Detail, spec.ReasonReservedMaint)
	}
	if r := pendingOf(p, 1); !r.ExpectedStart.Equal(t0.Add(70 * time.Minute)) {
		t.Errorf("30-minute job expected at %v, want the window's end %v", r.ExpectedStart, t0.Add(70*time.Minute))
	}
	// During the window nothing outside the reservation starts there.
	p = Schedule(&Snapshot{Nodes: nodes, AdvanceReservations: []AdvanceReservation{maint}, Jobs: []Job{job(4, 1, 1, func(j *Job) { j.TimeLimit = time.Minute })}}, t0.Add(20*time.Minute), Config{})
	if len(p.Starts) != 0 {
		t.Fatalf("a job started inside an active maintenance window: %+v", p.Starts)
	}
}

// Only users inside a reservation use its nodes, and only with
// --reservation; those jobs stay on its nodes.
func TestAdvanceReservationAccess(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", 8, 1000, "h100", 8), node("b", 8, 1000, "h100", 8)}
	r := AdvanceReservation{Name: "class", Start: t0.Add(-time.Minute), End: t0.Add(time.Hour), Nodes: []string{"a"}, Users: []string{"alice"}}
	in := func(user string) func(*Job) {
		return func(j *Job) { j.User, j.Reservation, j.TimeLimit = user, "class", 10*time.Minute }
	}
	snap := &Snapshot{Nodes: nodes, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{
		job(1, 1, 8, func(j *Job) { j.User, j.TimeLimit = "bob", 10*time.Minute }),
		job(2, 1, 8, func(j *Job) { j.User, j.TimeLimit = "carol", 10*time.Minute }),
		job(3, 1, 8, in("alice")),
		job(4, 1, 8, in("bob")),
		job(5, 1, 8, in("alice")),
	}}
	p := Schedule(snap, t0, Config{})
	st := startsOf(p)
	if got := st[1]; len(got) != 1 || got[0] != "b" {
		t.Errorf("bob's plain job: %v, want b", got)
	}
	if _, ok := st[2]; ok {
		t.Errorf("carol's plain job started on a reserved node: %v", st)
	}
	if got := st[3]; len(got) != 1 || got[0] != "a" {
		t.Errorf("alice's job in the reservation: %v, want a; pending %+v", got, pendingOf(p, 3))
	}
	if _, ok := st[4]; ok {
		t.Errorf("bob used a reservation that does not admit him")
	}
	if q := pendingOf(p, 4); q.Reason != spec.ReasonReservation {
		t.Errorf("bob's job in the reservation waits with %q", q.Reason)
	}
	if _, ok := st[5]; ok {
		t.Errorf("a second job in the reservation started beyond its nodes: %v", st)
	}
	// A job naming a reservation that does not exist waits.
	p = Schedule(&Snapshot{Nodes: nodes, Jobs: []Job{job(6, 1, 1, in("alice"))}}, t0, Config{})
	if q := pendingOf(p, 6); q.Reason != spec.ReasonReservationDeleted {
		t.Errorf("job of a missing reservation: %q", q.Reason)
	}
}

// A job in a reservation that has not begun is reserved from its start.
func TestAdvanceReservationWaitsForWindow(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", 8, 1000, "h100", 8)}
	r := AdvanceReservation{Name: "later", Start: t0.Add(time.Hour), End: t0.Add(2 * time.Hour), Nodes: []string{"a"}, Accounts: []string{"physics"}}
	snap := &Snapshot{Nodes: nodes, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{
		job(1, 1, 8, func(j *Job) { j.Account, j.Reservation, j.TimeLimit = "physics", "later", 10*time.Minute }),
	}}
	p := Schedule(snap, t0, Config{})
	if len(p.Starts) != 0 {
		t.Fatalf("started before the reservation: %+v", p.Starts)
	}
	q := pendingOf(p, 1)
	if q.Reason != spec.ReasonReservation || !q.ExpectedStart.Equal(t0.Add(time.Hour)) {
		t.Fatalf("pending %+v, want Reservation expected at %v", q, t0.Add(time.Hour))
	}
	if p := Schedule(snap, t0.Add(61*time.Minute), Config{}); len(p.Starts) != 1 {
		t.Fatalf("not started inside its window: %+v", p.Pending)
	}
}

// Weekly and daily reservations recur; weekday ones skip weekends.
func TestAdvanceReservationRecurs(t *testing.T) {
	t.Parallel()
	mon := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC) // a Monday
	r := AdvanceReservation{Name: "class", Start: mon, End: mon.Add(2 * time.Hour), Recur: RecurWeekly}
	for _, tc := range []struct {
		at   time.Time
		want time.Time
		act  bool
	}{
		{mon.Add(-time.Hour), mon, false},
		{mon.Add(time.Hour), mon, true},
		{mon.Add(3 * time.Hour), mon.AddDate(0, 0, 7), false},
		{mon.AddDate(0, 0, 7*52).Add(time.Minute), mon.AddDate(0, 0, 7*52), true},
	} {
		s, _, ok := r.Next(tc.at)
		if !ok || !s.Equal(tc.want) || r.Active(tc.at) != tc.act {
			t.Errorf("weekly at %v: next %v (%v), active %v; want %v, %v", tc.at, s, ok, r.Active(tc.at), tc.want, tc.act)
		}
	}
	fri := mon.AddDate(0, 0, 4)
	wd := AdvanceReservation{Start: fri, End: fri.Add(time.Hour), Recur: RecurWeekday}
	if s, _, _ := wd.Next(fri.Add(2 * time.Hour)); !s.Equal(mon.AddDate(0, 0, 7)) {
		t.Errorf("weekday after Friday: %v, want the next Monday", s)
	}
	once := AdvanceReservation{Start: mon, End: mon.Add(time.Hour)}
	if _, _, ok := once.Next(mon.Add(2 * time.Hour)); ok {
		t.Errorf("a one-off reservation recurred")
	}
	// The scheduler holds the next week's window: a job of 8 days never
	// fits, one of 1 hour between windows does.
	nodes := []Node{node("a", 8, 1000, "h100", 8)}
	r.Nodes = []string{"a"}
	at := mon.Add(3 * time.Hour)
	p := Schedule(&Snapshot{Nodes: nodes, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{
		job(1, 1, 4, func(j *Job) { j.TimeLimit = 8 * 24 * time.Hour }),
		job(2, 1, 4, func(j *Job) { j.TimeLimit = time.Hour }),
	}}, at, Config{})
	st := startsOf(p)
	if _, ok := st[1]; ok || len(st[2]) != 1 {
		t.Fatalf("starts %v: want only the 1-hour job", st)
	}
}

// -N 2-4 starts on the 3 nodes free now rather than waiting for 4; a
// fixed -N 4 waits.
func TestFlexibleNodeCount(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("a", 8, 1000, "h100", 8), node("b", 8, 1000, "h100", 8), node("c", 8, 1000, "h100", 8), node("d", 8, 1000, "h100", 8)}
	nodes[3].FreeCPUs = 0 // busy
	for _, pol := range []Placement{PlaceFirstFit, PlacePack, PlaceSpread, PlaceFGD} {
		flex := job(1, 1, 8, func(j *Job) { j.Req.Nodes, j.Req.MaxNodes, j.TimeLimit = 2, 4, time.Hour })
		fixed := job(2, 1, 8, func(j *Job) { j.Req.Nodes, j.TimeLimit = 4, time.Hour; j.Priority = 10 })
		p := Schedule(&Snapshot{Nodes: nodes, Jobs: []Job{fixed, flex}}, t0, Config{Placement: pol})
		st := startsOf(p)
		if len(st[1]) != 3 {
			t.Errorf("%s: -N 2-4 started on %v, want the 3 free nodes", pol, st[1])
		}
		if _, ok := st[2]; ok {
			t.Errorf("%s: -N 4 started on %v with 3 nodes free", pol, st[2])
		}
		if err := VerifyPlan(&Snapshot{Nodes: nodes, Jobs: []Job{fixed, flex}}, t0, Config{Placement: pol}, p); err != nil {
			t.Errorf("%s: %v", pol, err)
		}
	}
	// Only one node free: below MIN, it waits.
	one := []Node{node("a", 8, 1000, "h100", 8), node("b", 8, 1000, "h100", 8)}
	one[1].FreeCPUs = 0
	p := Schedule(&Snapshot{Nodes: one, Jobs: []Job{job(1, 1, 8, func(j *Job) { j.Req.Nodes, j.Req.MaxNodes = 2, 4 })}}, t0, Config{})
	if len(p.Starts) != 0 {
		t.Errorf("-N 2-4 started with one node free: %+v", p.Starts)
	}
}

// --time-min fills a backfill hole: a 4-hour job that may run as short
// as 30 minutes starts now in the 90 minutes before a reservation made
// for a higher job, with its limit cut to the hole; without time-min it
// waits.
func TestTimeMinFillsBackfillHole(t *testing.T) {
	t.Parallel()
	n := node("a", 8, 1000, "h100", 8)
	n.GPUs[0].Free, n.FreeCPUs, n.Allocs = false, 7, 1
	run := RunningJob{ID: 9, Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0"}}}, Start: t0.Add(-30 * time.Minute), TimeLimit: 2 * time.Hour}
	big := job(1, 1, 8, func(j *Job) { j.TimeLimit, j.Priority = time.Hour, 10 })
	flex := job(2, 1, 4, func(j *Job) { j.TimeLimit, j.TimeMin = 4*time.Hour, 30*time.Minute })
	fixed := job(3, 1, 4, func(j *Job) { j.TimeLimit = 4 * time.Hour })
	snap := &Snapshot{Nodes: []Node{n}, Running: []RunningJob{run}, Jobs: []Job{big, flex, fixed}}
	p := Schedule(snap, t0, Config{})
	if len(p.Starts) != 1 || p.Starts[0].JobID != 2 {
		t.Fatalf("starts %+v; want only the --time-min job", p.Starts)
	}
	if got := p.Starts[0].TimeLimit; got != 90*time.Minute {
		t.Errorf("shortened limit %v, want the 90-minute hole", got)
	}
	if err := VerifyPlan(snap, t0, Config{}, p); err != nil {
		t.Error(err)
	}
	// Too short a hole for its time-min: it waits.
	flex.TimeMin = 2 * time.Hour
	p = Schedule(&Snapshot{Nodes: []Node{n}, Running: []RunningJob{run}, Jobs: []Job{big, flex}}, t0, Config{})
	if len(p.Starts) != 0 {
		t.Errorf("started with a hole below its --time-min: %+v", p.Starts)
	}
}

func TestAdmitsExcludedUsers(t *testing.T) {
	for _, tc := range []struct {
		users, accounts []string
		user, account   string
		want            bool
	}{
		{[]string{"alice"}, nil, "alice", "a", true},
		{[]string{"alice"}, nil, "bob", "a", false},
		{[]string{"alice"}, []string{"a"}, "bob", "a", true}, // either matches
		{[]string{"-alice"}, nil, "bob", "a", true},
		{[]string{"-alice", "-carol"}, nil, "carol", "a", false},
		{[]string{"-alice"}, []string{"a"}, "bob", "a", true},
		{[]string{"-alice"}, []string{"a"}, "bob", "b", false}, // not its account
		{[]string{"-alice"}, []string{"a"}, "alice", "a", false},
	} {
		r := AdvanceReservation{Users: tc.users, Accounts: tc.accounts}
		if got := r.Admits(tc.user, tc.account); got != tc.want {
			t.Errorf("Users=%v Accounts=%v admits %s (account %s) = %v, want %v", tc.users, tc.accounts, tc.user, tc.account, got, tc.want)
		}
	}
}
