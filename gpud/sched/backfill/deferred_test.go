package backfill

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// eager is the profile as it was before releases were deferred: each
// Release splits and updates the steps at once. TestDeferredReleases
// holds Profile to it.
type eager struct {
	steps []step
}

func newEager(free Res) eager { return eager{steps: []step{{0, free}}} }

// split makes a step start at t and returns its index.
func (p *eager) split(t int64) int {
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
func (p *eager) Release(t int64, r Res) {
	for i := p.split(max(t, 0)); i < len(p.steps); i++ {
		f := &p.steps[i].free
		f.GPUs |= r.GPUs
		f.CPUs += r.CPUs
		f.MemMiB += r.MemMiB
		f.Allocs -= r.Allocs
	}
}

// Hold takes r over [from, to): a start (from 0) or a reservation.
func (p *eager) Hold(from, to int64, r Res) {
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
func (p *eager) Now() Res { return p.steps[0].free }

// Steps is the number of steps (a cost measure for tests).
func (p *eager) Steps() int { return len(p.steps) }

// Avail is what is free during all of [from, to): the GPUs free
// throughout, the least CPUs and memory, the most allocations.
func (p *eager) Avail(from, to int64) Res {
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
func (p *eager) Earliest(from, d, horizon int64, fits func(Res) bool) (int64, bool) {
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
func (p *eager) Times(from, horizon int64, out []int64) []int64 {
	for _, s := range p.steps {
		if s.at > from && s.at < horizon {
			out = append(out, s.at)
		}
	}
	return out
}

// Clone returns an independent copy.
func (p *eager) Clone() eager { return eager{steps: slices.Clone(p.steps)} }

// Unhold gives back r over [from, to): the inverse of Hold.
func (p *eager) Unhold(from, to int64, r Res) {
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

// TestDeferredReleases runs random cycles of releases (one at a time
// and deferred in arrays), holds, unholds and reads against the eager
// profile: every read answers the same, whatever the order.
func TestDeferredReleases(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	res := func() Res {
		return Res{GPUs: rng.Uint64() & 0xff, CPUs: rng.IntN(16), MemMiB: int64(rng.IntN(1000)), Allocs: rng.IntN(3)}
	}
	at := func() int64 {
		if rng.IntN(8) == 0 {
			return Forever
		}
		return int64(rng.IntN(50))
	}
	fits := func(need Res) func(Res) bool {
		return func(r Res) bool { return r.GPUs&need.GPUs == need.GPUs && r.CPUs >= need.CPUs }
	}
	for round := range 2000 {
		free := res()
		lazy, ref := New(free), newEager(free)
		if round%2 == 0 {
			buf := MakeBuf(3)
			lazy = NewIn(buf, 1, free)
		}
		if n := rng.IntN(6); n > 0 && rng.IntN(2) == 0 {
			e := MakeEndings(n)
			for i := range n {
				t, r := int64(1+rng.IntN(40)), res()
				e.Set(i, t, r)
				ref.Release(t, r)
			}
			lazy.Defer(e[:n:n])
		}
		for range 12 {
			switch op := rng.IntN(9); op {
			case 0, 1, 2:
				t, r := at(), res()
				if rng.IntN(4) == 0 {
					t = -int64(rng.IntN(5))
				}
				lazy.Release(t, r)
				ref.Release(t, r)
			case 3:
				from, r := int64(rng.IntN(40)), res()
				to := from + int64(1+rng.IntN(20))
				lazy.Hold(from, to, r)
				ref.Hold(from, to, r)
			case 4:
				from, r := int64(rng.IntN(40)), res()
				to := from + int64(1+rng.IntN(20))
				lazy.Unhold(from, to, r)
				ref.Unhold(from, to, r)
			case 5:
				from := int64(rng.IntN(60))
				to := from + int64(rng.IntN(30))
				if g, w := lazy.Avail(from, to), ref.Avail(from, to); g != w {
					t.Fatalf("round %d: Avail(%d, %d) = %+v, eager %+v", round, from, to, g, w)
				}
			case 6:
				if g, w := lazy.Now(), ref.Now(); g != w {
					t.Fatalf("round %d: Now = %+v, eager %+v", round, g, w)
				}
			case 7:
				from, d, need := int64(rng.IntN(30)), int64(1+rng.IntN(30)), res()
				gt, gok := lazy.Earliest(from, d, 60, fits(need))
				wt, wok := ref.Earliest(from, d, 60, fits(need))
				if gt != wt || gok != wok {
					t.Fatalf("round %d: Earliest = %d, %v, eager %d, %v", round, gt, gok, wt, wok)
				}
			case 8:
				if g, w := lazy.Times(0, Forever, nil), ref.Times(0, Forever, nil); !slices.Equal(g, w) || lazy.Steps() != ref.Steps() {
					t.Fatalf("round %d: Times %v (%d steps), eager %v (%d steps)", round, g, lazy.Steps(), w, ref.Steps())
				}
				c := lazy.Clone()
				if c.Avail(0, Forever) != ref.Avail(0, Forever) {
					t.Fatalf("round %d: a clone reads otherwise", round)
				}
			}
		}
	}
}
