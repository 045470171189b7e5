package health

import (
	"math/rand/v2"
	"testing"
	"time"
)

// telemetry is a healthy GPU's noisy readings over time: load that comes
// and goes, temperature following it with brief excursions over the limit,
// PCIe dropping to gen1 when idle, the power cap and idle clock reasons,
// a trickle of corrected ECC errors and NVLink replays, and now and then an
// application-caused XID. Everything a healthy fleet shows, nothing a
// failing GPU does.
type telemetry struct {
	rng        *rand.Rand
	util, temp float64
	sbe, nvl   uint64
}

func (g *telemetry) next(i int) Reading {
	r := healthy(i)
	// Load: jobs start and end, utilisation jitters in between.
	if g.rng.IntN(300) == 0 {
		g.util = float64(g.rng.IntN(2)) * (60 + 40*g.rng.Float64())
	}
	r.UtilPct = max(0, min(100, g.util+g.rng.NormFloat64()*5))
	// Temperature follows the load (35C idle, 80C flat out) with noise,
	// and a hot spell of up to 20s now and then (over the 85C limit, but
	// shorter than the sustain time).
	target := 35 + 0.45*r.UtilPct
	g.temp += (target-g.temp)*0.05 + g.rng.NormFloat64()*0.5
	r.TempC = g.temp
	if g.rng.IntN(1800) == 0 {
		r.TempC = 86 + 3*g.rng.Float64()
	}
	r.PowerW = 70 + 6*r.UtilPct
	if r.UtilPct < 5 {
		r.PCIeGen = 1
		r.Throttle |= 0x1 // GPU idle
	}
	if r.UtilPct > 95 && g.rng.IntN(4) == 0 {
		r.Throttle |= 0x4 // SW power cap: the workload, not the GPU
	}
	if g.rng.IntN(600) == 0 {
		r.Throttle |= ThrottleSWThermal
	}
	if g.rng.IntN(900) == 0 {
		r.Throttle |= ThrottleHWSlowdown // brief: a power excursion
	}
	if g.rng.IntN(120) == 0 {
		g.sbe++ // a few dozen corrected errors an hour
	}
	g.nvl += uint64(g.rng.IntN(3))
	r.ECCCorrected, r.NVLinkErrors = g.sbe, g.nvl
	if g.rng.IntN(7200) == 0 {
		r.XIDs = []int{[]int{13, 31, 43, 45}[g.rng.IntN(4)]}
	}
	return r
}

// TestNoFalseDrainInAnHour: 8 nodes of 8 healthy GPUs sampled every
// second for an hour of simulated time, with the defaults gpud ships:
// not one GPU is drained and nothing is even logged.
func TestNoFalseDrainInAnHour(t *testing.T) {
	t.Parallel()
	const nodes, gpus, samples = 8, 8, 3600
	var drains, logs, observed int
	for n := range nodes {
		m := New(DefaultTriage(), DefaultLimits(), inventory(gpus))
		tel := make([]telemetry, gpus)
		for i := range tel {
			tel[i] = telemetry{rng: rand.New(rand.NewPCG(uint64(n), uint64(i))), temp: 40}
		}
		for s := range samples {
			rs := make([]Reading, gpus)
			for i := range rs {
				rs[i] = tel[i].next(i)
			}
			rep := m.Observe(t0.Add(time.Duration(s)*time.Second), rs)
			observed += gpus
			for _, f := range rep.New {
				if f.Action.Drains() {
					drains++
					t.Errorf("node %d at %ds: false drain %s", n, s, f.Reason())
				} else {
					logs++
					t.Errorf("node %d at %ds: false alarm %s", n, s, f.Reason())
				}
			}
		}
	}
	t.Logf("%d GPU readings (8 nodes x 8 GPUs x 3600 s at 1 s): %d drains, %d logged findings", observed, drains, logs)
}

// TestSoakCatchesAFault makes sure the soak's telemetry does not hide a
// real fault: the same stream with one XID 79 drains exactly one GPU.
func TestSoakCatchesAFault(t *testing.T) {
	t.Parallel()
	m := New(DefaultTriage(), DefaultLimits(), inventory(8))
	tel := make([]telemetry, 8)
	for i := range tel {
		tel[i] = telemetry{rng: rand.New(rand.NewPCG(99, uint64(i))), temp: 40}
	}
	var got []string
	for s := range 600 {
		rs := make([]Reading, 8)
		for i := range rs {
			rs[i] = tel[i].next(i)
		}
		if s == 300 {
			rs[3].XIDs = append(rs[3].XIDs, 79)
		}
		got = append(got, codes(m.Observe(t0.Add(time.Duration(s)*time.Second), rs).New)...)
	}
	if len(got) != 1 || got[0] != "xid79@3:drain-gpu" {
		t.Errorf("findings %v, want only xid79 on GPU 3", got)
	}
}

// BenchmarkObserve is one 8-GPU node's sample through the model.
func BenchmarkObserve(b *testing.B) {
	m := New(DefaultTriage(), DefaultLimits(), inventory(8))
	tel := make([]telemetry, 8)
	for i := range tel {
		tel[i] = telemetry{rng: rand.New(rand.NewPCG(1, uint64(i))), temp: 40}
	}
	rs := make([]Reading, 8)
	now := t0
	for b.Loop() {
		for i := range rs {
			rs[i] = tel[i].next(i)
		}
		now = now.Add(time.Second)
		m.Observe(now, rs)
	}
}

// BenchmarkGate is the health part of a job start's gate on 2 GPUs.
func BenchmarkGate(b *testing.B) {
	m := New(DefaultTriage(), DefaultLimits(), inventory(8))
	rs := node(8, nil)
	m.Observe(t0, rs)
	want := []string{uuidOf(2), uuidOf(3)}
	for b.Loop() {
		if len(m.Gate(want, rs)) != 0 {
			b.Fatal("healthy GPUs failed the gate")
		}
	}
}
