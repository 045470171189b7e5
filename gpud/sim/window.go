package sim

import (
	"math/rand/v2"
	"slices"
)

// Window copies jobs[start:start+n], shifted so the first arrival is at 0.
func Window(jobs []Job, start, n int) []Job {
	end := min(start+n, len(jobs))
	if start >= end {
		return nil
	}
	w := slices.Clone(jobs[start:end])
	t0 := w[0].Submit
	for i := range w {
		w[i].Submit -= t0
	}
	return w
}

// WindowStarts picks count window starts for windows of size n among total
// jobs, uniformly with a seeded generator (as RLScheduler samples its
// evaluation windows), sorted. With total ≤ n the only start is 0.
func WindowStarts(total, n, count int, seed uint64) []int {
	if total <= n || count <= 0 {
		return []int{0}
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	starts := make([]int, count)
	for i := range starts {
		starts[i] = r.IntN(total - n + 1)
	}
	slices.Sort(starts)
	return starts
}
