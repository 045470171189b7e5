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
