package sched

import "math/bits"

// Image-aware placement. A job whose image a node's cache already holds
// starts there without a pull, so among placements that are otherwise
// equally good the scheduler takes the nodes that hold it. It is a
// tie-breaker only: priority decides which job goes first, fit and the
// partition's policy (pack's best fit, spread, FGD's score, node weight)
// decide which nodes are better, and the image decides only among nodes
// those leave equal (then name). First-fit stays first by name: its
// order is the policy.

// imageHolders is the set (a bit per node index) of the nodes whose
// inventory holds image, nil when none does; built once per image and
// cycle.
func (c *cycle) imageHolders(image string) []uint64 {
	if image == "" {
		return nil
	}
	if set, ok := c.holders[image]; ok {
		return set
	}
	var set []uint64
	for i, w := range c.nodes {
		if w.n.Images[image] {
			if set == nil {
				set = make([]uint64, (len(c.nodes)+63)/64)
			}
			set[i/64] |= 1 << (i % 64)
		}
	}
	if c.holders == nil {
		c.holders = map[string][]uint64{}
	}
	c.holders[image] = set
	return set
}

// holds reports whether node index i is in set.
func holds(set []uint64, i int) bool {
	return i/64 < len(set) && set[i/64]&(1<<(i%64)) != 0
}

// imageFirst orders idx, node indexes in ascending order (weight, then
// name), so that within each run of equal weight the nodes in holders
// come first, keeping index order otherwise.
func (c *cycle) imageFirst(idx []int, holders []uint64) {
	tmp := c.orderBuf[:0]
	for s := 0; s < len(idx); {
		e, wt := s, c.nodes[idx[s]].n.Weight
		for e < len(idx) && c.nodes[idx[e]].n.Weight == wt {
			e++
		}
		tmp = tmp[:0]
		for _, i := range idx[s:e] {
			if holds(holders, i) {
				tmp = append(tmp, i)
			}
		}
		for _, i := range idx[s:e] {
			if !holds(holders, i) {
				tmp = append(tmp, i)
			}
		}
		copy(idx[s:e], tmp)
		s = e
	}
	c.orderBuf = tmp
}

// bucketNodes lists bucket b's node indexes in ascending order, in a
// buffer reused by the next call.
func (c *cycle) bucketNodes(b int) []int {
	idx := c.bucketBuf[:0]
	for wi, word := range c.buckets[b] {
		for word != 0 {
			idx = append(idx, wi*64+bits.TrailingZeros64(word))
			word &= word - 1
		}
	}
	c.bucketBuf = idx
	return idx
}

// SetImages replaces node name's inventory (Node.Images) in the State,
// for the Submit, End and Resume answered after its full cycle: a node's
// cache changes with its pulls, and a job submitted once its image
// reached a node should be placed there without waiting for the next
// full cycle. Only the order among equally good nodes depends on it, so
// nothing the full cycle decided changes. An unknown name is ignored.
func (st *State) SetImages(name string, images map[string]bool) {
	c := st.c
	if c.byName == nil {
		c.byName = make(map[string]int, len(c.nodes))
		for i, w := range c.nodes {
			c.byName[w.n.Name] = i
		}
	}
	i, ok := c.byName[name]
	if !ok {
		return
	}
	c.nodes[i].n.Images = images
	c.holders = nil
}
