// Package backfill holds the time–resource profile of one node: what is
// free from now on, given running jobs' expected ends (start + time limit)
// and the reservations and starts made so far in a cycle. Times are
// offsets from the cycle's now; Forever is "no end known".
package backfill

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
)

// Forever is the end of a job without a time limit.
const Forever = int64(math.MaxInt64)

// Res is a node's resources at one moment: free GPUs as a bit mask of the
// node's GPU indexes (GPU granularity; at most 64 GPUs a node), free CPUs
// and memory, and how many allocations hold part of the node.
type Res struct {
	GPUs   uint64
	CPUs   int
	MemMiB int64
	Allocs int
}

// NGPUs is how many GPUs r has free.
func (r Res) NGPUs() int { return bits.OnesCount64(r.GPUs) }

type step struct {
	at   int64
	free Res
}

// Profile is a step function of free resources over [0, Forever).
//
// Releases are kept aside (pend) and merged into the steps in one pass
// when the profile is first read past what they cannot change: a cycle
// releases every running job's resources on its nodes, and most nodes
// are then only asked what is free from now on (Avail from before the
// first release of a profile without holds), which the releases do not
// change. One release at a time was a slice insertion each, a quarter of
// a cycle on 1,000 nodes.
type Profile struct {
	steps []step
	pend  []step
	// first is the earliest time in pend (Forever when pend is empty).
	first int64
}

// New returns a profile with free resources now and no future change.
func New(free Res) Profile { return Profile{steps: []step{{0, free}}, first: Forever} }

// Buf is one backing array for the first step of many profiles (NewIn):
// a scheduling cycle builds a profile per node, and one allocation per
// node was a third of a cycle's allocations on 1,000 nodes.
type Buf []step

// MakeBuf returns room for n profiles' first steps.
func MakeBuf(n int) Buf { return make(Buf, n) }

// NewIn is New with its step in s[i]; the profile's first change
// copies it out (the slice's capacity is 1), so profiles never share
// later steps.
func NewIn(s Buf, i int, free Res) Profile {
	s[i] = step{0, free}
	return Profile{steps: s[i : i+1 : i+1], first: Forever}
}

// Add returns the end of a job of duration d starting at t, saturating.
func Add(t, d int64) int64 {
	if d >= Forever-t {
		return Forever
	}
	return t + d
}

// byAt orders a step against an instant (binary searches of steps).
func byAt(s step, t int64) int { return cmp.Compare(s.at, t) }

// split makes a step start at t and returns its index.
func (p *Profile) split(t int64) int {
	if t >= Forever {
		return len(p.steps)
	}
	i, found := slices.BinarySearchFunc(p.steps, t, byAt)
	if found {
		return i
	}
	p.steps = slices.Insert(p.steps, i, step{t, p.steps[i-1].free})
	return i
}

// Release adds r from t on: a running job's expected end.
func (p *Profile) Release(t int64, r Res) {
	if t >= Forever {
		return
	}
	t = max(t, 0)
	p.pend = append(p.pend, step{t, r})
	p.first = min(p.first, t)
}

// Endings are releases for Defer, in one array that a cycle carves
// into each node's part.
type Endings []step

// MakeEndings returns room for n releases.
func MakeEndings(n int) Endings { return make(Endings, n) }

// Set makes the i'th release r, free from t on (0 <= t < Forever).
func (e Endings) Set(i int, t int64, r Res) { e[i] = step{t, r} }

// Defer adds the releases in e as Release would one by one. The
// profile keeps e: give each profile its own part of the array, with
// the capacity cut to its length (a later Release then copies it out).
func (p *Profile) Defer(e Endings) {
	if len(p.pend) > 0 {
		p.pend = append(p.pend, e...)
	} else {
		p.pend = e
	}
	for _, r := range e {
		p.first = min(p.first, r.at)
	}
}

// flush merges the pending releases into the steps: a step at each
// release time, each step plus every release at or before it.
func (p *Profile) flush() {
	if len(p.pend) == 0 {
		return
	}
	slices.SortStableFunc(p.pend, func(a, b step) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	out := make([]step, 0, len(p.steps)+len(p.pend))
	var acc Res
	i, j := 0, 0
	for i < len(p.steps) || j < len(p.pend) {
		t := Forever
		if i < len(p.steps) {
			t = p.steps[i].at
		}
		if j < len(p.pend) && p.pend[j].at < t {
			t = p.pend[j].at
		}
		for ; j < len(p.pend) && p.pend[j].at == t; j++ {
			r := p.pend[j].free
			acc.GPUs |= r.GPUs
			acc.CPUs += r.CPUs
			acc.MemMiB += r.MemMiB
			acc.Allocs += r.Allocs
		}
		var base Res
		if i < len(p.steps) && p.steps[i].at == t {
			base = p.steps[i].free
			i++
		} else {
			base = p.steps[i-1].free // i > 0: the steps start at 0, and t >= 0
		}
		out = append(out, step{t, Res{GPUs: base.GPUs | acc.GPUs, CPUs: base.CPUs + acc.CPUs, MemMiB: base.MemMiB + acc.MemMiB,
			Allocs: base.Allocs - acc.Allocs}})
	}
	p.steps, p.pend, p.first = out, p.pend[:0], Forever
}

// Hold takes r over [from, to): a start (from 0) or a reservation.
func (p *Profile) Hold(from, to int64, r Res) {
	p.flush()
	i := p.split(max(from, 0))
	end := p.split(to)
	for ; i < end; i++ {
		f := &p.steps[i].free
		f.GPUs &^= r.GPUs
		f.CPUs -= r.CPUs
		f.MemMiB -= r.MemMiB
		f.Allocs += r.Allocs
	}
}

// Now is what is free at offset 0.
func (p *Profile) Now() Res {
	if p.first == 0 {
		p.flush()
	}
	return p.steps[0].free
}

// Steps is the number of steps (a cost measure for tests).
func (p *Profile) Steps() int {
	p.flush()
	return len(p.steps)
}

// Avail is what is free during all of [from, to): the GPUs free
// throughout, the least CPUs and memory, the most allocations.
func (p *Profile) Avail(from, to int64) Res {
	if len(p.steps) == 1 && from < p.first {
		// Constant but for releases after from, which only add.
		return p.steps[0].free
	}
	p.flush()
	i, _ := slices.BinarySearchFunc(p.steps, from, byAt)
	if i == len(p.steps) || p.steps[i].at > from {
		i--
	}
	out := p.steps[i].free
	for i++; i < len(p.steps) && p.steps[i].at < to; i++ {
		f := p.steps[i].free
		out.GPUs &= f.GPUs
		out.CPUs = min(out.CPUs, f.CPUs)
		out.MemMiB = min(out.MemMiB, f.MemMiB)
		out.Allocs = max(out.Allocs, f.Allocs)
	}
	return out
}

// Earliest is the earliest start t in [from, horizon) at which
// fits(Avail(t, t+d)) holds; candidates are from and the step times.
func (p *Profile) Earliest(from, d, horizon int64, fits func(Res) bool) (int64, bool) {
	p.flush()
	st := p.steps
	i := 0
	for i+1 < len(st) && st[i+1].at <= from {
		i++
	}
	for i < len(st) {
		t := max(st[i].at, from)
		if t >= horizon {
			return 0, false
		}
		end := Add(t, d)
		r := st[i].free
		if !fits(r) {
			i++
			continue
		}
		ok, next := true, i+1
		for k := i + 1; k < len(st) && st[k].at < end; k++ {
			f := st[k].free
			r.GPUs &= f.GPUs
			r.CPUs = min(r.CPUs, f.CPUs)
			r.MemMiB = min(r.MemMiB, f.MemMiB)
			r.Allocs = max(r.Allocs, f.Allocs)
			if !fits(r) {
				ok = false
				// A step that cannot hold the job alone rules out every
				// start before it.
				if !fits(f) {
					next = k + 1
				}
				break
			}
		}
		if ok {
			return t, true
		}
		i = next
	}
	return 0, false
}

// Times returns the step times after from and before horizon.
func (p *Profile) Times(from, horizon int64, out []int64) []int64 {
	p.flush()
	for _, s := range p.steps {
		if s.at > from && s.at < horizon {
			out = append(out, s.at)
		}
	}
	return out
}

// Clone returns an independent copy.
func (p *Profile) Clone() Profile {
	p.flush()
	return Profile{steps: slices.Clone(p.steps), first: Forever}
}

// Fold forgets the profile before from, which is never asked again (a
// State's now only moves on): the step in force at from becomes the
// first (from 0), and a step that frees what the one before it frees is
// merged into it. What is free at from and after is unchanged. A kept
// profile gains a step at every start and end on its node; folded, it has
// one per distinct change still ahead.
func (p *Profile) Fold(from int64) {
	p.flush()
	i, found := slices.BinarySearchFunc(p.steps, from, byAt)
	if !found {
		i-- // the steps start at 0 and from >= 0: i > 0
	}
	out := p.steps[:0] // in place: out never passes the step read
	for k := i; k < len(p.steps); k++ {
		s := p.steps[k]
		if k == i {
			s.at = 0
		}
		if n := len(out); n > 0 && out[n-1].free == s.free {
			continue
		}
		out = append(out, s)
	}
	p.steps = out
}

// Unhold gives back r over [from, to): the inverse of Hold.
func (p *Profile) Unhold(from, to int64, r Res) {
	p.flush()
	i := p.split(max(from, 0))
	end := p.split(to)
	for ; i < end; i++ {
		f := &p.steps[i].free
		f.GPUs |= r.GPUs
		f.CPUs += r.CPUs
		f.MemMiB += r.MemMiB
		f.Allocs -= r.Allocs
	}
}

// Span is part of what HoldFree took: GPUs over [From, To).
type Span struct {
	From, To int64
	GPUs     uint64
}

// HoldFree takes, over [from, to), the GPUs of mask that are free at each
// moment and appends what it took to out, for Unhold to give back span by
// span. A GPU has one holder at a time, so giving back exactly what was
// taken is the inverse even where a job holds part of mask (a GPU-count
// advance reservation holds its GPUs around the jobs already on them).
func (p *Profile) HoldFree(from, to int64, mask uint64, out []Span) []Span {
	p.flush()
	i := p.split(max(from, 0))
	end := p.split(to)
	for ; i < end; i++ {
		f := &p.steps[i].free
		take := f.GPUs & mask
		if take == 0 {
			continue
		}
		f.GPUs &^= take
		at, until := p.steps[i].at, Forever
		if i+1 < len(p.steps) {
			until = p.steps[i+1].at
		}
		if n := len(out); n > 0 && out[n-1].GPUs == take && out[n-1].To == at {
			out[n-1].To = until
		} else {
			out = append(out, Span{From: at, To: until, GPUs: take})
		}
	}
	return out
}
