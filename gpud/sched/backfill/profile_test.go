package backfill

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestProfile(t *testing.T) {
	t.Parallel()
	// 8 GPUs, 4 free now; the other 4 come back at 10.
	p := New(Res{GPUs: 0x0f, CPUs: 4, MemMiB: 100})
	p.Release(10, Res{GPUs: 0xf0, CPUs: 4, MemMiB: 100, Allocs: 1})
	eight := func(r Res) bool { return r.NGPUs() >= 8 }
	two := func(r Res) bool { return r.NGPUs() >= 2 }
	tests := []struct {
		name     string
		from, d  int64
		fits     func(Res) bool
		wantAt   int64
		wantOK   bool
		horizon  int64
		setup    func(p *Profile)
		wantNGPU int
	}{
		{name: "8 GPUs at the release", d: 30, fits: eight, wantAt: 10, wantOK: true, horizon: Forever},
		{name: "2 GPUs now", d: 60, fits: two, wantAt: 0, wantOK: true, horizon: Forever},
		{name: "beyond the window", d: 30, fits: eight, horizon: 10},
		{name: "reservation pushes a long job out", d: 60, fits: two, wantAt: 40, wantOK: true, horizon: Forever,
			setup: func(p *Profile) { p.Hold(10, 40, Res{GPUs: 0xff, Allocs: 1}) }},
		{name: "short job backfills before the reservation", d: 5, fits: two, wantAt: 0, wantOK: true, horizon: Forever,
			setup: func(p *Profile) { p.Hold(10, 40, Res{GPUs: 0xff, Allocs: 1}) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := p.Clone()
			if tc.setup != nil {
				tc.setup(&q)
			}
			at, ok := q.Earliest(tc.from, tc.d, tc.horizon, tc.fits)
			if at != tc.wantAt || ok != tc.wantOK {
				t.Errorf("Earliest = %d, %v; want %d, %v", at, ok, tc.wantAt, tc.wantOK)
			}
		})
	}
	if got := p.Avail(0, Forever).NGPUs(); got != 4 {
		t.Errorf("Avail over all time = %d GPUs, want 4", got)
	}
	if got := p.Avail(10, 20); got.NGPUs() != 8 || got.CPUs != 8 || got.Allocs != -1 {
		t.Errorf("Avail(10,20) = %+v", got)
	}
}

// TestHoldFree: a GPU-count hold takes only what is free, around a job on
// part of its GPUs, and giving back what it took restores the profile
// exactly, even after a start took some of the GPUs while it was lifted.
func TestHoldFree(t *testing.T) {
	t.Parallel()
	// GPUs 0-3 free; GPU 4 runs a job until 20 (free from then on).
	p := New(Res{GPUs: 0x0f, CPUs: 8})
	p.Release(20, Res{GPUs: 0x10, CPUs: 1, Allocs: 1})
	before := p.Clone()
	// Hold GPUs 2-4 over [10, 30).
	spans := p.HoldFree(10, 30, 0x1c, nil)
	want := []Span{{10, 20, 0x0c}, {20, 30, 0x1c}}
	if len(spans) != len(want) {
		t.Fatalf("spans = %+v, want %+v", spans, want)
	}
	for i := range want {
		if spans[i] != want[i] {
			t.Fatalf("spans = %+v, want %+v", spans, want)
		}
	}
	if got := p.Avail(10, 30).GPUs; got != 0x03 {
		t.Errorf("free during the hold = %#x, want 0x3 (GPUs 2-4 held, CPUs untouched)", got)
	}
	if got := p.Avail(10, 30).CPUs; got != 8 {
		t.Errorf("CPUs during the hold = %d, want 8", got)
	}
	if got := p.Avail(30, 40).GPUs; got != 0x1f {
		t.Errorf("free after the hold = %#x, want 0x1f", got)
	}
	// Lift, start a member on GPU 2 for [0, 25), hold again: GPU 2 is the
	// member's until 25 and the reservation's from there to 30.
	for _, s := range spans {
		p.Unhold(s.From, s.To, Res{GPUs: s.GPUs})
	}
	p.Hold(0, 25, Res{GPUs: 0x04, CPUs: 1, Allocs: 1})
	spans = p.HoldFree(10, 30, 0x1c, nil)
	if got := p.Avail(25, 30).GPUs; got != 0x03 {
		t.Errorf("free in [25,30) = %#x, want 0x3", got)
	}
	// Lift again: GPU 2 stays the member's until 25 (a mask Unhold of the
	// whole hold would have freed it).
	for _, s := range spans {
		p.Unhold(s.From, s.To, Res{GPUs: s.GPUs})
	}
	if got := p.Avail(10, 25).GPUs; got != 0x0b {
		t.Errorf("free in [10,25) with the hold lifted = %#x, want 0xb (GPU 2 the member's, GPU 4 the job's until 20)", got)
	}
	p.Unhold(0, 25, Res{GPUs: 0x04, CPUs: 1, Allocs: 1})
	for _, at := range []int64{0, 10, 20, 30} {
		if g, w := p.Avail(at, at+1), before.Avail(at, at+1); g != w {
			t.Errorf("at %d: %+v, want %+v as before the holds", at, g, w)
		}
	}
}

// TestFoldKeepsWhatIsAhead: a profile through random holds and unholds
// (starts, ends, reservations), folded at a time, gives from then on the
// same Avail, Earliest and Times as before, with no more steps than it
// has distinct changes ahead.
func TestFoldKeepsWhatIsAhead(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		p := New(Res{GPUs: 0xff, CPUs: 64, MemMiB: 1000})
		type hold struct {
			from, to int64
			res      Res
		}
		var held []hold
		for range 1 + r.IntN(40) {
			if len(held) > 0 && r.IntN(3) == 0 {
				k := r.IntN(len(held))
				p.Unhold(held[k].from, held[k].to, held[k].res)
				held = slices.Delete(held, k, k+1)
				continue
			}
			from := int64(r.IntN(100))
			h := hold{from, Add(from, []int64{1 + int64(r.IntN(50)), Forever}[r.IntN(2)]), Res{GPUs: 1 << r.IntN(8), CPUs: 1 + r.IntN(4), MemMiB: 10, Allocs: 1}}
			p.Hold(h.from, h.to, h.res)
			held = append(held, h)
		}
		at := int64(r.IntN(120))
		q := p.Clone()
		q.Fold(at)
		for _, d := range []int64{1, 5, 30, Forever} {
			for from := at; from < at+60; from += 7 {
				if a, b := p.Avail(from, Add(from, d)), q.Avail(from, Add(from, d)); a != b {
					t.Fatalf("round %d, folded at %d: Avail(%d, +%d) %+v, before %+v", round, at, from, d, b, a)
				}
				for _, n := range []int{1, 4, 8} {
					fits := func(r Res) bool { return r.NGPUs() >= n && r.CPUs >= 2*n }
					a1, ok1 := p.Earliest(from, d, Forever, fits)
					a2, ok2 := q.Earliest(from, d, Forever, fits)
					if a1 != a2 || ok1 != ok2 {
						t.Fatalf("round %d, folded at %d: Earliest(%d, %d, %d GPUs) %d %v, before %d %v", round, at, from, d, n, a2, ok2, a1, ok1)
					}
				}
			}
		}
		if a, b := p.Times(at, Forever, nil), q.Times(at, Forever, nil); len(b) > len(a) {
			t.Fatalf("round %d: folded at %d, step times ahead %v, before %v", round, at, b, a)
		}
		for i := 1; i < len(q.steps); i++ {
			if q.steps[i].free == q.steps[i-1].free {
				t.Fatalf("round %d: folded profile has two steps in a row freeing %+v", round, q.steps[i].free)
			}
		}
	}
}
