package health

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// poisson draws a Poisson count of mean mu (normal approximation above 30).
func poisson(rng *rand.Rand, mu float64) uint64 {
	if mu > 30 {
		return uint64(max(0, math.Round(mu+rng.NormFloat64()*math.Sqrt(mu))))
	}
	n, p, l := uint64(0), rng.Float64(), math.Exp(-mu)
	for p > l {
		n++
		p *= rng.Float64()
	}
	return n
}

// TestTrendRule measures the trend rule (DefaultLimits: windows of 6 h,
// four of them, at least 100 corrected errors in the last) on simulated
// telemetry read every 30 minutes for 30 days:
//
//   - 500 healthy GPUs, each with its own steady corrected-error rate
//     (0-60 an hour) plus now and then a burst (a day's worth in one
//     reading) and a remapped row once in a while: no GPU is flagged
//     (with three windows, 10 of 1,000 were: a chance rise, then a burst);
//   - 100 GPUs whose memory wears out: the corrected-error rate starts at
//     2-20 an hour and grows by 1.6-3 times every 6 hours, with a remapped
//     row every 2-12 hours once it passes 200 an hour, until an
//     uncorrectable error comes once it passes 5,000 an hour: every one is
//     flagged (drained) before its uncorrectable error, and the test
//     reports how long before.
func TestTrendRule(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	const step, days = 30 * time.Minute, 30
	const healthyN, wearingN = 500, 100
	steps := int(days * 24 * time.Hour / step)
	run := func(seed uint64, wearing bool) (flagged time.Duration, dbe time.Duration) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := New(DefaultTriage(), l, inventory(1))
		rate := 60 * rng.Float64() // per hour
		growth := 1.0
		if wearing {
			rate, growth = 2+18*rng.Float64(), math.Pow(1.6+1.4*rng.Float64(), float64(step)/float64(l.TrendWindow))
		}
		remapEvery := time.Duration(2+rng.IntN(11)) * time.Hour
		var sbe, rows uint64
		var sinceRemap time.Duration
		flagged, dbe = -1, -1
		for s := range steps {
			now := time.Duration(s) * step
			r := healthy(0)
			sbe += poisson(rng, rate*step.Hours())
			if !wearing && rng.IntN(700) == 0 {
				sbe += uint64(24 * rate) // a burst
			}
			sinceRemap += step
			if (!wearing && rng.IntN(1000) == 0) || (wearing && rate > 200 && sinceRemap >= remapEvery) {
				rows++
				sinceRemap = 0
			}
			if wearing && rate > 5000 && dbe < 0 {
				dbe = now
				r.ECCUncorrected = 1
			}
			rate *= growth
			r.ECCCorrected, r.RowsRemapped = sbe, rows
			rep := m.Observe(t0.Add(now), []Reading{r})
			for _, f := range rep.New {
				if (f.Code == CodeECCTrend || f.Code == CodeRowRemapTrend) && flagged < 0 {
					flagged = now
					if !wearing {
						t.Logf("healthy GPU %d (rate %.0f/h): %s %s", seed, rate, f.Code, f.Detail)
					}
				}
			}
			if dbe >= 0 {
				return flagged, dbe
			}
		}
		return flagged, dbe
	}
	falseFlags := 0
	for g := range healthyN {
		if f, _ := run(uint64(g), false); f >= 0 {
			falseFlags++
		}
	}
	if falseFlags > 0 {
		t.Errorf("%d of %d healthy GPUs flagged by the trend rule, want none", falseFlags, healthyN)
	}
	var leads []time.Duration
	for g := range wearingN {
		f, d := run(uint64(10000+g), true)
		switch {
		case d < 0:
			t.Fatalf("wearing GPU %d never reached its uncorrectable error in %d days", g, days)
		case f < 0 || f > d:
			t.Errorf("wearing GPU %d: flagged at %v, uncorrectable error at %v; want flagged first", g, f, d)
		default:
			leads = append(leads, d-f)
		}
	}
	slices.Sort(leads)
	if len(leads) > 0 {
		t.Logf("TREND RULE: %d of %d healthy GPUs flagged over %d days; %d of %d wearing GPUs flagged before their uncorrectable error, lead time min %v, median %v, max %v",
			falseFlags, healthyN, days, len(leads), wearingN, leads[0], leads[len(leads)/2], leads[len(leads)-1])
	}
}
