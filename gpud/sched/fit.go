package sched

import (
	"math/bits"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/sched/backfill"
	"github.com/gpud/gpud/gpud/spec"
)

// Fitting: whether a request fits what a node has free, and which of its
// GPUs it takes. The filters (filters.go) and the placements
// (placement.go, mig.go, fgd.go) share these.

// modelMatch reports whether a GPU of model have satisfies a request for
// want: one model name, or several separated by "|" (any of them).
func modelMatch(want, have string) bool {
	if want == have {
		return true
	}
	if !strings.Contains(want, "|") {
		return false
	}
	for m := range strings.SplitSeq(want, "|") {
		if m == have {
			return true
		}
	}
	return false
}

func modelMask(w *workNode, model string) uint64 {
	if model == "" {
		return w.ok
	}
	var m uint64
	for k, g := range w.n.GPUs {
		if k < 64 && modelMatch(model, g.Model) {
			m |= 1 << k
		}
	}
	return m & w.ok
}

// jobGPUs is the GPUs j counts against QOS limits: a share counts as one.
func jobGPUs(j *Job) int {
	if isFrac(j) {
		return 1
	}
	return max(j.Req.Nodes, 1) * j.Req.GPUsPerNode
}

// memNeed is the memory j's request r takes on w: all of the node's for
// --mem=0 (MemWholeNode), else its MemMiB.
func memNeed(w *workNode, r *spec.Resources) int64 {
	if r.MemWholeNode {
		return w.n.MemMiB
	}
	return r.MemMiB
}

// isFrac reports whether j asks for a share of one GPU.
func isFrac(j *Job) bool { return j.Req.GPUFraction > 0 && j.Req.GPUFraction < 1 }

// fitRes returns the GPUs j takes from free, or false. A fractional job
// takes a whole free GPU here (the backfill profile has GPU granularity,
// so reservations are conservative); fitShared adds the partly used GPUs
// for a start now.
func fitRes(w *workNode, j *Job, free backfill.Res) (uint64, bool) {
	r := &j.Req
	if isFrac(j) {
		if free.CPUs < r.CPUsPerNode || free.MemMiB < memNeed(w, r) {
			return 0, false
		}
		avail := free.GPUs & modelMask(w, r.GPUModel)
		return avail & -avail, avail != 0
	}
	if r.Exclusive {
		if free.Allocs > 0 || free.GPUs&w.ok != w.ok || free.CPUs < r.CPUsPerNode || free.MemMiB < memNeed(w, r) {
			return 0, false
		}
		return free.GPUs & w.ok, true
	}
	if free.CPUs < r.CPUsPerNode || free.MemMiB < memNeed(w, r) {
		return 0, false
	}
	if r.GPUsPerNode == 0 {
		return 0, true
	}
	avail := free.GPUs & w.ok
	if r.GPUModel != "" {
		avail &= modelMask(w, r.GPUModel)
	}
	if bits.OnesCount64(avail) < r.GPUsPerNode {
		return 0, false
	}
	return pickGPUs(w, avail, r.GPUsPerNode), true
}

// fitShared is where fractional j starts now on w: the most used GPU whose
// free share suffices (to pack), else a whole free GPU from free. A shared
// GPU qualifies when no reservation holds it or j ends before its other
// sharers do, so j never delays a reservation.
func fitShared(w *workNode, j *Job, free backfill.Res, end int64, phys bool) (pick, bool) {
	r := &j.Req
	if free.CPUs < r.CPUsPerNode || free.MemMiB < memNeed(w, r) {
		return pick{}, false
	}
	best := -1
	mask := modelMask(w, r.GPUModel)
	for k := range w.frac {
		fk := w.frac[k]
		if mask&(1<<k) == 0 || fk >= 1 || fk+fracEps < r.GPUFraction {
			continue
		}
		if !phys && w.resvGPUs&(1<<k) != 0 && end > w.fracEnd[k] {
			continue
		}
		if best < 0 || fk < w.frac[best] {
			best = k
		}
	}
	if best >= 0 {
		return pick{gpus: 1 << best, shared: true}, true
	}
	g, ok := fitRes(w, j, free)
	return pick{gpus: g}, ok
}

// HasFeatures reports whether features satisfy constraint, a list of
// feature names joined by "&" (empty matches every node).
func HasFeatures(features []string, constraint string) bool {
	if constraint == "" {
		return true
	}
	for f := range strings.SplitSeq(constraint, "&") {
		if !slices.Contains(features, strings.TrimSpace(f)) {
			return false
		}
	}
	return true
}

// fitFor is where j fits on w for dur from now without overlapping a
// reservation (w.freeNow): its GPUs, and for a share the GPU it joins.
func (c *cycle) fitFor(w *workNode, j *Job, dur int64) (pick, bool) {
	if isFrac(j) {
		return fitShared(w, j, w.freeNow(c.off, dur), backfill.Add(c.off, dur), false)
	}
	g, ok := fitRes(w, j, w.freeNow(c.off, dur))
	return pick{gpus: g}, ok
}
