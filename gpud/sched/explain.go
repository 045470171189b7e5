package sched

import (
	"time"
)

// NodeCount is how many nodes turned a pending job down for one reason.
type NodeCount struct {
	Reason string
	Nodes  int
}

// Explain says why each node of snap does not hold pending job j now,
// as counts per reason, most first: the placement pipeline's reasons
// (filters.go: state, partition, node lists, constraint, capacity, then
// what is in use now, "insufficient free h100 GPUs"), and "fits now" for
// nodes that could take it (the job waits for priority or a
// reservation). It is the count a cycle puts in Plan.Placement, made on
// demand for one job outside the cycle (reservations are not known
// here). MIG jobs get nil.
func Explain(snap *Snapshot, j Job, now time.Time) []NodeCount {
	if j.Req.GPUProfile != "" {
		return nil
	}
	c := newCycle(snap, now, Config{})
	return c.countNodes(&j).List(&j)
}
