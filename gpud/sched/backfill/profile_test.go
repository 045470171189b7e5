package backfill

import "testing"

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
