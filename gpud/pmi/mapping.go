package pmi

import (
	"fmt"
	"slices"
	"strings"
)

type triple struct{ start, count, size int }

// expand is the node of each of size ranks under the mapping ts, as
// MPICH reads it.
func expand(ts []triple, size int) []int {
	out := make([]int, 0, size)
	for len(out) < size {
		for _, t := range ts {
			for n := range t.count {
				for range t.size {
					if len(out) == size {
						return out
					}
					out = append(out, t.start+n)
				}
			}
		}
	}
	return out
}

// ProcessMapping is PMI_process_mapping for a step whose rank r runs on
// the step's node nodeOf[r]: MPICH's "(vector,(start,count,size),...)",
// where each triple puts size consecutive ranks on each of count nodes
// from start on, and the list repeats from the beginning once it is used
// up. Block layouts come out as one triple per run of equal blocks
// ("(vector,(0,2,2))": two nodes with two ranks each), cyclic ones as one
// cycle ("(vector,(0,2,1))").
func ProcessMapping(nodeOf []int) string {
	var ts []triple
	for r := 0; r < len(nodeOf); {
		// A block: consecutive ranks on one node.
		n, size := nodeOf[r], 0
		for r+size < len(nodeOf) && nodeOf[r+size] == n {
			size++
		}
		r += size
		if k := len(ts) - 1; k >= 0 && ts[k].size == size && ts[k].start+ts[k].count == n {
			ts[k].count++
			continue
		}
		ts = append(ts, triple{n, 1, size})
	}
	// MPICH starts the list again when it is used up: a layout that
	// repeats a cycle from node 0 (the last one maybe cut short) needs
	// the cycle only.
	period := len(ts)
	for p := 1; p < min(len(ts), 64) && ts[0].start == 0; p++ {
		if slices.Equal(expand(ts[:p], len(nodeOf)), nodeOf) {
			period = p
			break
		}
	}
	var b strings.Builder
	b.WriteString("(vector")
	for _, t := range ts[:period] {
		fmt.Fprintf(&b, ",(%d,%d,%d)", t.start, t.count, t.size)
	}
	b.WriteString(")")
	return b.String()
}
