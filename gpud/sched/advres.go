package sched

import (
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// Advance reservations (Slurm's scontrol create reservation): a named
// window of time, once or recurring, in which a set of nodes is kept for
// the jobs that ask for it (--reservation=NAME) and whose users and
// accounts it admits. They are part of the backfill profile, not a filter
// bolted on: each window holds every CPU of each of its nodes, so no other
// job is started, backfilled, reserved or placed by preemption where its
// time limit would cross a window (a job without a time limit crosses
// every future window). A job in the reservation sees the holds lifted
// while it is decided, may start only while a window is active (FLEX:
// at any time, on any node) and is reserved from the next window's start.
//
// Holds take CPUs, not GPUs: counts add and subtract exactly, so lifting
// a window for a member and holding it again leaves the members' own
// starts in place (GPU masks would not).
//
// A GPU-count reservation (Slurm's TRES=gres/gpu=N) holds only its GPUs
// on each node (AdvanceReservation.GPUs): the rest of the node stays
// everyone's, before, during and after its windows. Its holds take the
// reserved GPUs that are free at each moment (backfill.HoldFree) and
// remember what they took, so lifting gives back exactly that: a job on
// a reserved GPU (one that ran when the reservation was made with
// IGNORE_JOBS, or a member started while the holds were lifted) keeps
// it. What a job's end or a preemption frees is taken again
// (reholdGPUs). Its members get those GPUs and no others (without FLEX).

// Recurrence is how an advance reservation repeats.
type Recurrence uint8

// Recurrences, as Slurm's reservation flags name them.
const (
	RecurNone    Recurrence = iota
	RecurHourly             // HOURLY
	RecurDaily              // DAILY
	RecurWeekly             // WEEKLY
	RecurWeekday            // WEEKDAY: Monday to Friday
	RecurWeekend            // WEEKEND: Saturday and Sunday
)

// AdvanceReservation is one reservation as the scheduler sees it; the
// controller resolves its node list (Slurm's NodeCnt= picks nodes when
// it is created: PickReservationNodes).
type AdvanceReservation struct {
	Name string
	// Start and End are the first window.
	Start, End time.Time
	Recur      Recurrence
	Nodes      []string
	// GPUs, when set, makes it a GPU-count reservation: the indexes of
	// the GPUs it holds on each of its nodes, as a mask (bit k: the
	// node's GPU k); it holds nothing else of them. Nil: whole nodes.
	GPUs map[string]uint64
	// Users, Groups and Accounts are who may use it, as Slurm judges
	// them: a job must be approved by each one given (its user in Users,
	// or in one of Groups, and its account in Accounts). Users all
	// prefixed with '-' (Slurm's Users=-alice,-bob) are the ones it
	// refuses. Users and Groups are not both given; all empty: only root
	// (the controller refuses to create such a reservation).
	Users, Groups, Accounts []string
	// Maint marks a maintenance window: the jobs it keeps off its nodes
	// wait with spec.ReasonReservedMaint.
	Maint bool
	// Flex lets its jobs start before a window, run past it and use
	// nodes outside it (Slurm's FLEX).
	Flex bool
}

// recurHorizon is how far ahead a recurring reservation's windows are
// held one by one; from the first window after it the nodes are held
// for good (any job that long crosses a window anyway).
const recurHorizon = 28 * 24 * time.Hour

// step returns the start of r's window after the one starting at s.
func (r *AdvanceReservation) step(s time.Time) time.Time {
	switch r.Recur {
	case RecurHourly:
		return s.Add(time.Hour)
	case RecurDaily:
		return s.AddDate(0, 0, 1)
	case RecurWeekly:
		return s.AddDate(0, 0, 7)
	case RecurWeekday:
		s = s.AddDate(0, 0, 1)
		for s.Weekday() == time.Saturday || s.Weekday() == time.Sunday {
			s = s.AddDate(0, 0, 1)
		}
		return s
	case RecurWeekend:
		s = s.AddDate(0, 0, 1)
		for s.Weekday() != time.Saturday && s.Weekday() != time.Sunday {
			s = s.AddDate(0, 0, 1)
		}
		return s
	}
	return time.Time{}
}

// Next returns the first window of r that ends after t (the one active
// at t, if any); ok is false when r has no window ending after t.
func (r *AdvanceReservation) Next(t time.Time) (start, end time.Time, ok bool) {
	d := r.End.Sub(r.Start)
	s := r.Start
	if r.Recur != RecurNone && t.Sub(s) > 8*24*time.Hour {
		// Skip whole weeks (every recurrence repeats weekly) without
		// walking them; AddDate keeps the wall-clock time across DST.
		weeks := int(t.Sub(s)/(7*24*time.Hour)) - 1
		s = s.AddDate(0, 0, 7*weeks)
	}
	for i := 0; i < 1<<20; i++ {
		if s.Add(d).After(t) {
			return s, s.Add(d), true
		}
		if r.Recur == RecurNone {
			return time.Time{}, time.Time{}, false
		}
		s = r.step(s)
	}
	return time.Time{}, time.Time{}, false
}

// Active reports whether a window of r holds t.
func (r *AdvanceReservation) Active(t time.Time) bool {
	s, _, ok := r.Next(t)
	return ok && !s.After(t)
}

// Admits reports whether a job of user (in groups) and account may use
// r: every access field r has approves it (Slurm: "If multiple access
// control fields are specified, a job must be approved by all of them").
func (r *AdvanceReservation) Admits(user, account string, groups []string) bool {
	if len(r.Users)+len(r.Groups)+len(r.Accounts) == 0 {
		return false
	}
	switch {
	case spec.ResvUsersExcluded(r.Users):
		if slices.Contains(r.Users, "-"+user) {
			return false
		}
	case len(r.Users) > 0:
		if !slices.Contains(r.Users, user) {
			return false
		}
	case len(r.Groups) > 0:
		if !slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(r.Groups, g) }) {
			return false
		}
	}
	return len(r.Accounts) == 0 || account != "" && slices.Contains(r.Accounts, account)
}

// window is a span of offsets from the cycle's now.
type window struct{ from, to int64 }

// advRes is an advance reservation in a cycle: its nodes and windows.
// For a GPU-count reservation, mask[i] is what it holds on nodes[i] and
// held[i] what its holds took there (backfill.HoldFree).
type advRes struct {
	r     *AdvanceReservation
	nodes []int
	wins  []window
	mask  []uint64
	held  [][]backfill.Span
}

// gpuHold reports whether ar holds GPUs rather than whole nodes.
func (ar *advRes) gpuHold() bool { return ar.r.GPUs != nil }

// windows are r's windows from now as offsets, the recurring ones up to
// recurHorizon and then one that never ends.
func windows(r *AdvanceReservation, now time.Time) []window {
	var out []window
	t := now
	for {
		s, e, ok := r.Next(t)
		if !ok {
			return out
		}
		from := max(int64(s.Sub(now)), 0)
		if r.Recur != RecurNone && s.Sub(now) > recurHorizon {
			return append(out, window{from, backfill.Forever})
		}
		out = append(out, window{from, int64(e.Sub(now))})
		if r.Recur == RecurNone {
			return out
		}
		t = e
	}
}

// setupAdvRes holds every reservation's windows on its nodes.
func (c *cycle) setupAdvRes() {
	rs := c.snap.AdvanceReservations
	if len(rs) == 0 {
		return
	}
	idx := make(map[string]int, len(c.nodes))
	for i, w := range c.nodes {
		idx[w.n.Name] = i
	}
	c.adv = make(map[string]*advRes, len(rs))
	for i := range rs {
		ar := &advRes{r: &rs[i], wins: windows(&rs[i], c.now)}
		c.adv[rs[i].Name] = ar
		for _, name := range rs[i].Nodes {
			ni, ok := idx[name]
			if !ok {
				continue
			}
			ar.nodes = append(ar.nodes, ni)
			w := c.nodes[ni]
			if ar.gpuHold() {
				m := rs[i].GPUs[name] & w.ok
				ar.mask = append(ar.mask, m)
				ar.held = append(ar.held, nil)
				w.resvGPUs |= m // a share on them must not cross a window
			}
			w.advOn = append(w.advOn, ar)
			w.adv = c.adv
			if len(ar.wins) > 0 {
				w.reserved = true
			}
		}
		c.holdAdv(ar, true)
	}
	for _, w := range c.nodes {
		w.adv = c.adv // the nodelist filter looks reservations up by name
	}
}

// holdAdv holds (or, hold false, lifts) ar's windows on its nodes.
func (c *cycle) holdAdv(ar *advRes, hold bool) {
	for k, ni := range ar.nodes {
		w := c.nodes[ni]
		if ar.gpuHold() {
			if hold {
				ar.hold(w, k)
				continue
			}
			for _, s := range ar.held[k] {
				w.prof.Unhold(s.From, s.To, backfill.Res{GPUs: s.GPUs})
			}
			ar.held[k] = ar.held[k][:0]
			continue
		}
		res := backfill.Res{CPUs: w.n.CPUs + 1}
		for _, win := range ar.wins {
			if hold {
				w.prof.Hold(win.from, win.to, res)
			} else {
				w.prof.Unhold(win.from, win.to, res)
			}
		}
	}
	c.gen++
}

// hold takes ar's reserved GPUs on its k'th node, w, over its windows
// where they are free, adding to what it holds there.
func (ar *advRes) hold(w *workNode, k int) {
	for _, win := range ar.wins {
		ar.held[k] = w.prof.HoldFree(win.from, win.to, ar.mask[k], ar.held[k])
	}
}

// reholdGPUs takes again, on the given nodes, the reserved GPUs of the
// GPU-count reservations that a job's end or a preemption freed within
// their windows: nobody else may start on them there.
func (c *cycle) reholdGPUs(nodes []int) {
	if c.adv == nil {
		return
	}
	for _, ni := range nodes {
		w := c.nodes[ni]
		for _, ar := range w.advOn {
			if !ar.gpuHold() {
				continue
			}
			if k := slices.Index(ar.nodes, ni); k >= 0 {
				ar.hold(w, k)
			}
		}
	}
}

// holdGPUsOn takes, on p (a copy of node ni's profile), the reserved GPUs
// of the GPU-count reservations on it that are free there: what a
// preemption search frees of them stays theirs.
func (c *cycle) holdGPUsOn(p *backfill.Profile, ni int) {
	if c.adv == nil {
		return
	}
	for _, ar := range c.nodes[ni].advOn {
		if k := slices.Index(ar.nodes, ni); k >= 0 && ar.gpuHold() {
			for _, win := range ar.wins {
				p.HoldFree(win.from, win.to, ar.mask[k], nil)
			}
		}
	}
}

// only restricts the GPUs that may be handed out on ar's nodes to its
// reserved ones (a member of a GPU-count reservation gets those and no
// others) and returns what undoes it.
func (c *cycle) only(ar *advRes) func() {
	if !ar.gpuHold() || ar.r.Flex {
		return func() {}
	}
	saved := make([]uint64, len(ar.nodes))
	for k, ni := range ar.nodes {
		w := c.nodes[ni]
		saved[k] = w.ok
		w.ok &= ar.mask[k]
	}
	return func() {
		for k, ni := range ar.nodes {
			c.nodes[ni].ok = saved[k]
			c.rebucket(ni) // a start's bucket was counted with the restriction
		}
	}
}

// nextFrom is when a job in ar may start at the earliest (from off on),
// false when no window of ar is left.
func (ar *advRes) nextFrom(off int64) (int64, bool) {
	for _, win := range ar.wins {
		if win.to > off {
			return max(win.from, off), true
		}
	}
	return 0, false
}

// inMaint reports whether a MAINT reservation's window on w overlaps
// [off, off+dur).
func (w *workNode) inMaint(off, dur int64) bool {
	end := backfill.Add(off, dur)
	for _, ar := range w.advOn {
		if !ar.r.Maint || ar.gpuHold() {
			continue // a GPU-count one keeps nobody off the node
		}
		for _, win := range ar.wins {
			if win.from < end && win.to > off {
				return true
			}
		}
	}
	return false
}

// maintBlocks reports whether j, placed for dur, is kept off nodes it
// fits on now by a maintenance window (its pending reason says so).
func (c *cycle) maintBlocks(j *Job, dur int64) bool {
	if c.adv == nil {
		return false
	}
	for _, w := range c.nodes {
		if len(w.advOn) > 0 && w.inMaint(c.off, dur) && c.eligible(w, j) && fitsNow(w, j) {
			return true
		}
	}
	return false
}

// decideInResv decides a job that asks for an advance reservation: with
// its reservation's holds lifted, on the reservation's nodes (the
// nodelist filter), starting now if a window is active (or the
// reservation is FLEX), else reserved from the next window's start.
func (c *cycle) decideInResv(j *Job) {
	ar := c.adv[j.Reservation]
	if ar == nil {
		c.pending(j, spec.ReasonReservationDeleted, "reservation "+j.Reservation+" does not exist")
		return
	}
	if !ar.r.Admits(j.User, j.Account, j.Groups) {
		c.pending(j, spec.ReasonReservation, "user "+j.User+" (account "+j.Account+") may not use reservation "+ar.r.Name)
		return
	}
	from, ok := ar.nextFrom(c.off)
	if !ok && !ar.r.Flex {
		c.pending(j, spec.ReasonReservation, "reservation "+ar.r.Name+" has no window left")
		return
	}
	c.holdAdv(ar, false)
	defer c.holdAdv(ar, true)
	defer c.only(ar)()
	dur := durOf(j)
	if from <= c.off || ar.r.Flex {
		if j.Req.GPUProfile != "" {
			c.decideMIG(j, dur)
			return
		}
		m := &fitMemo{}
		if picks, _, _ := c.placeNow(j, dur, m); picks != nil {
			c.start(j, picks, dur)
			return
		}
		c.unplaced = append(c.unplaced, unplaced{j: j, m: m})
	}
	p := Pending{JobID: j.ID, Reason: spec.ReasonReservation, Detail: "waiting for reservation " + ar.r.Name}
	if from <= c.off {
		p.Reason, p.Detail = spec.ReasonResources, "needs "+describe(j.Req)+" in reservation "+ar.r.Name
	}
	if c.cfg.BackfillDepth == 0 || c.nresv < c.cfg.BackfillDepth {
		if at, ok := c.reserveFrom(j, dur, max(from, c.off)); ok {
			c.nresv++
			p.ExpectedStart = at
		}
	}
	c.plan.Pending = append(c.plan.Pending, p)
}

// PickReservationNodes chooses count nodes for a reservation that asks
// for a node count (Slurm's NodeCnt=): schedulable nodes of partition
// (any, when "") with at least gpus GPUs each, not in a reservation
// listed in busy whose window overlaps, idle ones first, then by name.
// It returns fewer than count when there are not enough.
func PickReservationNodes(nodes []Node, count, gpus int, partition string, avoid map[string]bool) []string {
	type cand struct {
		name string
		idle bool
	}
	var cs []cand
	for i := range nodes {
		n := &nodes[i]
		if !schedulable(n.State) || avoid[n.Name] || len(n.GPUs) < gpus {
			continue
		}
		if partition != "" && !slices.Contains(n.Partitions, partition) {
			continue
		}
		cs = append(cs, cand{n.Name, n.Allocs == 0})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.idle != b.idle {
			if a.idle {
				return -1
			}
			return 1
		}
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	out := make([]string, 0, count)
	for _, c := range cs[:min(count, len(cs))] {
		out = append(out, c.name)
	}
	return out
}

// PickReservationGPUs chooses count GPUs (of model; any when "") for a
// GPU-count reservation (Slurm's TRES=gres/gpu=N): on the nodes named in
// only, else on any schedulable node of partition (any, when ""), never
// on a node in avoid nor a GPU in taken (busy then: jobs running past
// its start, other reservations). With perNode > 0 (NodeCnt=) it takes
// exactly perNode on each node it uses. Nodes with the most such GPUs
// come first (the fewest nodes), idle ones before busy, then by name;
// each node's lowest indexes are taken. It returns the GPUs per node as
// masks of indexes and how many it found (fewer than count when there
// are not enough).
func PickReservationGPUs(nodes []Node, count, perNode int, model, partition string, only []string, avoid map[string]bool, taken map[string]uint64) (map[string]uint64, int) {
	type cand struct {
		name  string
		free  uint64
		n     int
		idle  bool
		order int
	}
	var cs []cand
	for i := range nodes {
		n := &nodes[i]
		order := 0
		if only != nil {
			order = slices.Index(only, n.Name)
			if order < 0 {
				continue
			}
		} else if !schedulable(n.State) || partition != "" && !slices.Contains(n.Partitions, partition) {
			continue
		}
		if avoid[n.Name] {
			continue
		}
		var free uint64
		for k := range min(len(n.GPUs), 64) {
			g := &n.GPUs[k]
			if g.Unhealthy || g.MIGEnabled || g.Profile != "" || model != "" && !modelMatch(model, g.Model) {
				continue
			}
			free |= 1 << k
		}
		free &^= taken[n.Name]
		c := cand{name: n.Name, free: free, n: bits.OnesCount64(free), idle: n.Allocs == 0, order: order}
		if c.n == 0 || perNode > 0 && c.n < perNode {
			continue
		}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b cand) int {
		switch {
		case a.n != b.n && perNode == 0:
			return b.n - a.n
		case a.idle != b.idle:
			if a.idle {
				return -1
			}
			return 1
		case a.order != b.order:
			return a.order - b.order
		}
		return strings.Compare(a.name, b.name)
	})
	out := map[string]uint64{}
	got := 0
	for _, c := range cs {
		if got == count {
			break
		}
		want := min(c.n, count-got)
		if perNode > 0 {
			want = perNode
		}
		var m uint64
		for f := c.free; bits.OnesCount64(m) < want; f &= f - 1 {
			m |= f & -f
		}
		out[c.name] = m
		got += want
	}
	return out, got
}
