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

// TestAdmits: every access field given must approve the job (Slurm's
// rule), Users=-name refuses those named, Groups= admits their members.
func TestAdmits(t *testing.T) {
	for _, tc := range []struct {
		users, groups, accounts []string
		user, account           string
		in                      []string
		want                    bool
	}{
		{[]string{"alice"}, nil, nil, "alice", "a", nil, true},
		{[]string{"alice"}, nil, nil, "bob", "a", nil, false},
		{[]string{"alice"}, nil, []string{"a"}, "bob", "a", nil, false},   // the account alone is not enough
		{[]string{"alice"}, nil, []string{"a"}, "alice", "b", nil, false}, // nor the user alone
		{[]string{"alice"}, nil, []string{"a"}, "alice", "a", nil, true},
		{nil, nil, []string{"a"}, "bob", "a", nil, true},
		{nil, nil, []string{"a"}, "bob", "", nil, false},
		{[]string{"-alice"}, nil, nil, "bob", "a", nil, true},
		{[]string{"-alice", "-carol"}, nil, nil, "carol", "a", nil, false},
		{[]string{"-alice"}, nil, []string{"a"}, "bob", "a", nil, true},
		{[]string{"-alice"}, nil, []string{"a"}, "bob", "b", nil, false}, // not its account
		{[]string{"-alice"}, nil, []string{"a"}, "alice", "a", nil, false},
		{nil, []string{"bio", "chem"}, nil, "bob", "a", []string{"bob", "chem"}, true},
		{nil, []string{"bio"}, nil, "bob", "a", []string{"bob", "chem"}, false},
		{nil, []string{"bio"}, nil, "bob", "a", nil, false}, // groups unknown
		{nil, []string{"bio"}, []string{"a"}, "bob", "b", []string{"bio"}, false},
		{nil, []string{"bio"}, []string{"a"}, "bob", "a", []string{"bio"}, true},
		{nil, nil, nil, "root", "a", nil, false},
	} {
		r := AdvanceReservation{Users: tc.users, Groups: tc.groups, Accounts: tc.accounts}
		if got := r.Admits(tc.user, tc.account, tc.in); got != tc.want {
			t.Errorf("Users=%v Groups=%v Accounts=%v admits %s (account %s, groups %v) = %v, want %v", tc.users, tc.groups, tc.accounts, tc.user, tc.account, tc.in, got, tc.want)
		}
	}
}

// gpusOn returns the GPU indexes job id started on, by node.
func gpusOn(p Plan, id spec.JobID) map[string][]string {
	out := map[string][]string{}
	for _, s := range p.Starts {
		if s.JobID != id {
			continue
		}
		for _, a := range s.Nodes {
			out[a.Node] = append(out[a.Node], a.GPUs...)
		}
	}
	return out
}

// A GPU-count reservation (TRES=gres/gpu=4) holds only its four GPUs of
// node a: before its window a long job takes the other four across the
// window's start, a short one backfills on the reserved GPUs, and a long
// one that only fits on reserved GPUs waits for the window's end.
func TestGPUReservationBeforeWindow(t *testing.T) {
	t.Parallel()
	n := node("a", 16, 1000, "h100", 8)
	r := AdvanceReservation{Name: "g", Start: t0.Add(10 * time.Minute), End: t0.Add(70 * time.Minute), Nodes: []string{"a"},
		GPUs: map[string]uint64{"a": 0x0f}, Users: []string{"alice"}}
	snap := &Snapshot{Nodes: []Node{n}, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{
		job(1, 1, 4, func(j *Job) { j.User, j.TimeLimit = "bob", 2*time.Hour }),
		job(2, 1, 2, func(j *Job) { j.User, j.TimeLimit = "bob", 2*time.Hour }),
		job(3, 1, 2, func(j *Job) { j.User, j.TimeLimit = "carol", 5*time.Minute }),
	}}
	p := Schedule(snap, t0, Config{})
	if err := Verify(snap, p); err != nil {
		t.Fatal(err)
	}
	g1 := gpusOn(p, 1)["a"]
	if len(g1) != 4 {
		t.Fatalf("job 1 (4 GPUs, 2h) did not start beside the reserved GPUs: starts %v, pending %+v", startsOf(p), p.Pending)
	}
	for _, u := range g1 {
		for k := range 4 {
			if u == n.GPUs[k].UUID {
				t.Errorf("job 1 (crosses the window) got reserved GPU %d: %v", k, g1)
			}
		}
	}
	if len(gpusOn(p, 3)["a"]) != 2 {
		t.Errorf("job 3 (5 minutes, ends before the window) did not backfill on the reserved GPUs: %v", startsOf(p))
	}
	if _, ok := startsOf(p)[2]; ok {
		t.Errorf("job 2 (2h) started on reserved GPUs across the window: %v", gpusOn(p, 2))
	}
	if q := pendingOf(p, 2); q.Reason != spec.ReasonReservation || !q.ExpectedStart.Equal(t0.Add(70*time.Minute)) {
		t.Errorf("job 2 waits with %q (%s) expected %v; want %q at the window's end %v", q.Reason, q.Detail, q.ExpectedStart,
			spec.ReasonReservation, t0.Add(70*time.Minute))
	}
}

// During a GPU-count reservation's window its members get exactly its
// GPUs (not the free ones beside them), two members never share one,
// a job still on a reserved GPU (IGNORE_JOBS) keeps it, and others use
// the rest of the node; when that job ends (State.End) its GPU goes back
// to the reservation, not to the queue.
func TestGPUReservationInWindow(t *testing.T) {
	t.Parallel()
	n := node("a", 16, 1000, "h100", 8)
	n.GPUs[0].Free, n.FreeCPUs, n.Allocs = false, 15, 1
	run := RunningJob{ID: 9, User: "bob", Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: []string{"GPU-a-0"}}}, Start: t0.Add(-30 * time.Minute), TimeLimit: 2 * time.Hour}
	r := AdvanceReservation{Name: "g", Start: t0.Add(-10 * time.Minute), End: t0.Add(time.Hour), Nodes: []string{"a"},
		GPUs: map[string]uint64{"a": 0x0f}, Users: []string{"alice"}}
	member := func(gpus int) func(*Job) {
		return func(j *Job) { j.User, j.Reservation, j.TimeLimit = "alice", "g", 20*time.Minute }
	}
	snap := &Snapshot{Nodes: []Node{n}, Running: []RunningJob{run}, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{
		job(1, 1, 2, member(2)),
		job(2, 1, 1, member(1)),
		job(3, 1, 1, member(1)), // GPUs 1-3 are taken by 1 and 2; 0 is job 9's
		job(4, 1, 4, func(j *Job) { j.User, j.TimeLimit = "bob", 3*time.Hour }),
		job(5, 1, 1, func(j *Job) { j.User, j.TimeLimit = "carol", 3*time.Hour }),
	}}
	st, p := NewState(snap, t0, Config{})
	if err := Verify(snap, p); err != nil {
		t.Fatal(err)
	}
	reserved := map[string]bool{}
	for k := range 4 {
		reserved[n.GPUs[k].UUID] = true
	}
	for _, id := range []spec.JobID{1, 2} {
		g := gpusOn(p, id)["a"]
		if len(g) == 0 {
			t.Fatalf("member job %d did not start: starts %v, pending %+v", id, startsOf(p), p.Pending)
		}
		for _, u := range g {
			if !reserved[u] {
				t.Errorf("member job %d got %s, outside the reservation's GPUs", id, u)
			}
		}
	}
	if _, ok := startsOf(p)[3]; ok {
		t.Errorf("member job 3 started though the reservation's GPUs are all taken: %v", gpusOn(p, 3))
	}
	if q := pendingOf(p, 3); !q.ExpectedStart.Equal(t0.Add(20 * time.Minute)) {
		t.Errorf("member job 3 expected at %v (%s), want when members 1 and 2 end, %v", q.ExpectedStart, q.Detail, t0.Add(20*time.Minute))
	}
	for _, u := range gpusOn(p, 4)["a"] {
		if reserved[u] {
			t.Errorf("job 4 (not a member) got reserved GPU %s", u)
		}
	}
	if len(gpusOn(p, 4)["a"]) != 4 {
		t.Errorf("job 4 did not start on the four unreserved GPUs: %v, pending %+v", startsOf(p), p.Pending)
	}
	if _, ok := startsOf(p)[5]; ok {
		t.Errorf("job 5 (not a member) started with only reserved GPUs left: %v", gpusOn(p, 5))
	}
	// Job 9 (expected to run past the window) ends: its GPU 0 is the
	// reservation's now, so job 5 still waits; member job 3 is started by
	// the next full cycle, not by End.
	p = st.End(9, t0.Add(time.Minute))
	if _, ok := startsOf(p)[5]; ok {
		t.Errorf("after job 9's end, job 5 (not a member) started on its reserved GPU: %v", gpusOn(p, 5))
	}
}

// PickReservationGPUs takes the fewest nodes, never a GPU that is taken
// or unhealthy, and with a per-node count exactly that many per node.
func TestPickReservationGPUs(t *testing.T) {
	t.Parallel()
	a, b, c := node("a", 8, 1000, "h100", 8), node("b", 8, 1000, "h100", 8), node("c", 8, 1000, "a100", 4)
	a.GPUs[1].Unhealthy = true
	nodes := []Node{a, b, c}
	taken := map[string]uint64{"a": 0x01, "b": 0xf0}
	// a has 6 usable (0 taken, 1 unhealthy), b 4, c 4: 9 GPUs are a's 6
	// and three of b's.
	got, n := PickReservationGPUs(nodes, 9, 0, "", "", nil, nil, taken)
	if n != 9 || got["a"] != 0xfc || got["b"] != 0x07 || len(got) != 2 {
		t.Errorf("9 GPUs: %d, %#v; want a:0xfc b:0x7", n, got)
	}
	got, n = PickReservationGPUs(nodes, 4, 2, "", "", nil, nil, taken)
	if n != 4 || got["a"] != 0x0c || len(got) != 2 {
		t.Errorf("4 GPUs, 2 per node: %d, %#v; want a:0xc and one more node", n, got)
	}
	got, n = PickReservationGPUs(nodes, 3, 0, "a100", "", nil, nil, taken)
	if n != 3 || got["c"] != 0x07 || len(got) != 1 {
		t.Errorf("3 a100: %d, %#v; want c:0x7", n, got)
	}
	if _, n = PickReservationGPUs(nodes, 12, 0, "h100", "", nil, nil, taken); n != 10 {
		t.Errorf("12 h100 of 10 usable: found %d, want 10", n)
	}
	got, n = PickReservationGPUs(nodes, 2, 0, "", "", []string{"b"}, nil, taken)
	if n != 2 || got["b"] != 0x03 || len(got) != 1 {
		t.Errorf("2 GPUs on named node b: %d, %#v", n, got)
	}
	if _, n = PickReservationGPUs(nodes, 2, 0, "", "", nil, map[string]bool{"a": true, "b": true, "c": true}, nil); n != 0 {
		t.Errorf("every node avoided: found %d", n)
	}
}

// A preemptor outside a GPU-count reservation does not preempt a job on
// the reserved GPUs to take them across the window: what the victim
// would free of them stays the reservation's. With the reservation gone
// it does preempt (the test can fail).
func TestGPUReservationPreemption(t *testing.T) {
	t.Parallel()
	n := node("a", 16, 1000, "h100", 8)
	var running []RunningJob
	for i, q := range []string{"low", "normal"} { // low on GPUs 0-3, normal on 4-7
		var uuids []string
		for k := 4 * i; k < 4*i+4; k++ {
			n.GPUs[k].Free = false
			uuids = append(uuids, n.GPUs[k].UUID)
		}
		running = append(running, RunningJob{ID: spec.JobID(10 + i), QOS: q, Priority: 1, Start: t0.Add(-time.Hour),
			Nodes: []spec.NodeAlloc{{Node: "a", CPUs: 1, GPUs: uuids}}})
	}
	n.FreeCPUs, n.Allocs = 14, 2
	qos := []QOS{{Name: "low"}, {Name: "normal", Priority: 100}, {Name: "high", Priority: 1000, Preempt: []string{"low"}}}
	r := AdvanceReservation{Name: "g", Start: t0.Add(10 * time.Minute), End: t0.Add(70 * time.Minute), Nodes: []string{"a"},
		GPUs: map[string]uint64{"a": 0x0f}, Users: []string{"alice"}}
	hi := job(1, 1, 4, func(j *Job) { j.QOS, j.User, j.TimeLimit, j.Priority = "high", "bob", 2*time.Hour, 100 })
	snap := &Snapshot{Nodes: []Node{n}, Running: running, QOS: qos, AdvanceReservations: []AdvanceReservation{r}, Jobs: []Job{hi}}
	if p := Schedule(snap, t0, Config{}); len(p.Preemptions) != 0 {
		t.Errorf("preempted %+v to take reserved GPUs across the window", p.Preemptions)
	}
	snap.AdvanceReservations = nil
	if p := Schedule(snap, t0, Config{}); len(p.Preemptions) != 1 || p.Preemptions[0].Victim != 10 {
		t.Errorf("without the reservation: preemptions %+v; want job 10", p.Preemptions)
	}
}
