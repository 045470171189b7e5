package sched

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Placement is how a partition chooses nodes and GPUs for a job that
// fits on several.
type Placement string

// Placements.
const (
	// PlacePack (the default) is best fit: the node left with the fewest
	// free GPUs, so whole nodes stay free for big jobs; a GPU share joins
	// the fullest shared GPU it fits on.
	PlacePack Placement = "pack"
	// PlaceSpread is least loaded first: the node with the most free
	// GPUs, for load balancing.
	PlaceSpread Placement = "spread"
	// PlaceFirstFit takes the first nodes by name.
	PlaceFirstFit Placement = "first-fit"
	// PlaceFGD is fragmentation gradient descent (Weng et al., USENIX
	// ATC'23): the node and GPU that least increase the expected GPU
	// fragmentation, measured against the workload's mix of requests
	// (Snapshot.Workload). It scores every eligible node per start.
	PlaceFGD Placement = "fgd"
)

// Placements lists the accepted placement names.
var Placements = []Placement{PlacePack, PlaceSpread, PlaceFirstFit, PlaceFGD}

// ParsePlacement reads a placement name; "" is PlacePack.
func ParsePlacement(s string) (Placement, error) {
	if s == "" {
		return PlacePack, nil
	}
	if p := Placement(s); slices.Contains(Placements, p) {
		return p, nil
	}
	names := make([]string, len(Placements))
	for i, p := range Placements {
		names[i] = fmt.Sprintf("%q", p)
	}
	return "", fmt.Errorf("%q is not a placement (use %s)", s, strings.Join(names, ", "))
}

// placement is the policy for j's partition.
func (c *cycle) placement(j *Job) Placement {
	if p := c.parts[j.Partition]; p != nil && p.Placement != "" {
		return p.Placement
	}
	if c.cfg.Placement != "" {
		return c.cfg.Placement
	}
	return PlacePack
}

// freeCount is the number of GPUs on w free whole now: its bucket.
func freeCount(w *workNode) int { return bits.OnesCount64(w.phys.GPUs & w.ok) }

// buckets index the nodes by freeCount, as bit sets over node indexes,
// so that pack and spread visit nodes in best-fit order without sorting
// or scanning the full nodes; built on first use.
func (c *cycle) ensureBuckets() {
	if c.buckets != nil {
		return
	}
	words := (len(c.nodes) + 63) / 64
	c.buckets = make([][]uint64, 65)
	for b := range c.buckets {
		c.buckets[b] = make([]uint64, words)
	}
	c.bucketOf = make([]int8, len(c.nodes))
	for i, w := range c.nodes {
		b := freeCount(w)
		c.bucketOf[i] = int8(b)
		c.buckets[b][i/64] |= 1 << (i % 64)
	}
}

// rebucket moves node i to the bucket of its free count after a change.
func (c *cycle) rebucket(i int) {
	if c.buckets == nil {
		return
	}
	b := freeCount(c.nodes[i])
	if old := int(c.bucketOf[i]); old != b {
		c.buckets[old][i/64] &^= 1 << (i % 64)
		c.buckets[b][i/64] |= 1 << (i % 64)
		c.bucketOf[i] = int8(b)
	}
}

// placeBest is placeNow for pack, spread and fgd.
func (c *cycle) placeBest(j *Job, dur int64, pol Placement, m *fitMemo) ([]pick, int, int) {
	need, want := max(j.Req.Nodes, 1), wantNodes(j)
	picks := c.picked[:0]
	physFit := 0
	// try reports whether node i holds j now without overlapping a
	// reservation; physFit counts the nodes that hold it ignoring them.
	try := func(i int) (pick, bool) {
		w := c.nodes[i]
		if !c.eligibleIn(m, i, j) || !fitsNow(w, j) {
			return pick{}, false
		}
		physFit++
		p, ok := c.fitFor(w, j, dur)
		p.node = i
		return p, ok
	}
	if pol == PlaceFGD || isFrac(j) {
		// Every eligible node is scored; the want best win.
		type scored struct {
			p      pick
			s1, s2 float64
		}
		var best []scored
		holders := c.imageHolders(j.Image)
		better := func(a, b scored) int {
			if x := cmp.Compare(a.s1, b.s1); x != 0 {
				return x
			}
			if x := cmp.Compare(a.s2, b.s2); x != 0 {
				return x
			}
			if holders != nil {
				// Weight, then the image (image.go), then name.
				if x := cmp.Compare(c.nodes[a.p.node].n.Weight, c.nodes[b.p.node].n.Weight); x != 0 {
					return x
				}
				if ha, hb := holds(holders, a.p.node), holds(holders, b.p.node); ha != hb {
					if ha {
						return -1
					}
					return 1
				}
			}
			return cmp.Compare(a.p.node, b.p.node)
		}
		if pol == PlaceFGD {
			if c.fgdMemo == nil {
				c.fgdMemo = map[fgdState]fgdScore{}
			}
			clear(c.fgdMemo) // scores are per job
		}
		for i := range c.nodes {
			p, ok := try(i)
			if !ok {
				continue
			}
			sc := scored{p: p}
			w := c.nodes[i]
			switch {
			case pol == PlaceFGD:
				p, sc.s1 = c.fgdPick(w, j, dur, p)
				// Increases within fgdQuantum of each other count as equal
				// and go best fit on the share of the node's GPUs left
				// free (docs/simulator.md: on the FGD paper's openb
				// experiment this is worth 0.7 points of allocation over
				// exact increases with ties best fit on free GPUs).
				sc.p, sc.s1 = p, math.Round(sc.s1/fgdQuantum)*fgdQuantum
				sc.s2 = freeShare(w) / float64(max(len(w.frac), 1))
			case pol == PlaceSpread:
				sc.s1 = -freeShare(w)
			default: // pack
				if p.shared {
					sc.s1 = w.frac[bits.TrailingZeros64(p.gpus)] - j.Req.GPUFraction
				} else {
					sc.s1 = 1 + float64(freeCount(w))
				}
			}
			k, _ := slices.BinarySearchFunc(best, sc, better)
			if k < want {
				best = slices.Insert(best, k, sc)
				if len(best) > want {
					best = best[:want]
				}
			}
		}
		for _, b := range best {
			picks = append(picks, b.p)
		}
	} else {
		c.ensureBuckets()
		lo := j.Req.GPUsPerNode
		if j.Req.Exclusive {
			lo = 0
		}
		step, b := 1, lo
		if pol == PlaceSpread {
			step, b = -1, 64
		}
		holders := c.imageHolders(j.Image)
	scan:
		for ; b >= lo && b <= 64; b += step {
			if holders != nil {
				// The bucket's nodes (equally good) with those holding the
				// job's image first among equal weights (image.go).
				idx := c.bucketNodes(b)
				c.imageFirst(idx, holders)
				for _, i := range idx {
					if p, ok := try(i); ok {
						picks = append(picks, p)
						if len(picks) == want {
							break scan
						}
					}
				}
				continue
			}
			for wi, word := range c.buckets[b] {
				for word != 0 {
					i := wi*64 + bits.TrailingZeros64(word)
					word &= word - 1
					if p, ok := try(i); ok {
						picks = append(picks, p)
						if len(picks) == want {
							break scan
						}
					}
				}
			}
		}
	}
	c.picked = picks
	if len(picks) < need {
		if !m.failed || dur < m.failedDur {
			m.failed, m.failedDur = true, dur
		}
		m.fitting, m.physFit = len(picks), physFit
		return nil, len(picks), physFit
	}
	if len(picks) > 1 {
		// Ranks follow node order, as with first fit.
		slices.SortFunc(picks, func(a, b pick) int { return cmp.Compare(a.node, b.node) })
	}
	return picks, len(picks), physFit
}

// share is GPU k's free share now: 1 when free whole, its unallocated
// share when fractional jobs use it, else 0.
func (w *workNode) share(k int) float64 {
	switch {
	case w.ok&(1<<k) == 0:
		return 0
	case w.phys.GPUs&(1<<k) != 0:
		return 1
	case w.frac[k] < 1:
		return w.frac[k]
	}
	return 0
}

// freeShare is the GPU capacity free on w now.
func freeShare(w *workNode) float64 {
	s := 0.0
	for k := range w.frac {
		s += w.share(k)
	}
	return s
}

// pickGPUs chooses n GPUs of avail on w: inside one NVLink group when one
// has room, else inside one NUMA node, else the lowest. Of the groups
// with room it takes the one with the fewest free, so that whole groups
// stay free for bigger jobs.
func pickGPUs(w *workNode, avail uint64, n int) uint64 {
	if n <= 0 {
		return 0
	}
	if bits.OnesCount64(avail) > n {
		for _, groups := range [][]uint64{w.nvlink, w.numa} {
			best, bestFree := uint64(0), 65
			for _, g := range groups {
				if f := bits.OnesCount64(avail & g); f >= n && f < bestFree {
					best, bestFree = avail&g, f
				}
			}
			if best != 0 {
				avail = best
				break
			}
		}
	}
	var got uint64
	for range n {
		low := avail & -avail
		got |= low
		avail &^= low
	}
	return got
}

// topology fills w's NVLink-group and NUMA masks (left nil when the node
// reports a single group or none).
func (w *workNode) topology() {
	// Most nodes have one NUMA node for all their GPUs and no NVLink
	// groups reported: nothing to respect, and no maps to build every
	// cycle for them.
	flat, seen, numa0 := true, false, 0
	for k, g := range w.n.GPUs {
		if k >= 64 || w.ok&(1<<k) == 0 {
			continue
		}
		if g.NVLinkGroup > 0 || seen && g.NUMANode != numa0 {
			flat = false
			break
		}
		seen, numa0 = true, g.NUMANode
	}
	if flat {
		w.nvlink, w.numa = nil, nil
		return
	}
	var nvl, numa map[int]uint64
	for k, g := range w.n.GPUs {
		if k >= 64 || w.ok&(1<<k) == 0 {
			continue
		}
		if g.NVLinkGroup > 0 {
			if nvl == nil {
				nvl = map[int]uint64{}
			}
			nvl[g.NVLinkGroup] |= 1 << k
		}
		if numa == nil {
			numa = map[int]uint64{}
		}
		numa[g.NUMANode] |= 1 << k
	}
	masks := func(m map[int]uint64) []uint64 {
		if len(m) < 1 || (len(m) == 1 && bits.OnesCount64(firstVal(m)) == bits.OnesCount64(w.ok)) {
			return nil
		}
		keys := make([]int, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make([]uint64, len(keys))
		for i, k := range keys {
			out[i] = m[k]
		}
		return out
	}
	w.nvlink, w.numa = masks(nvl), masks(numa)
}

func firstVal(m map[int]uint64) uint64 {
	for _, v := range m {
		return v
	}
	return 0
}
