// Package preempt chooses victims: the running jobs whose removal frees
// exactly what a preemptor needs with the least lost work. Eligibility
// (QOS lists, minimum run time) is the caller's; this package orders and
// prunes. Pure and deterministic.
package preempt

import (
	"cmp"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Modes a QOS preempts with.
const (
	ModeRequeue    = "requeue"
	ModeCancel     = "cancel"
	ModeCheckpoint = "checkpoint"
)

// Candidate is a running job that may be preempted.
type Candidate struct {
	ID       spec.JobID
	Priority int64
	Start    time.Time
	// LastCheckpoint is zero when the job never checkpointed.
	LastCheckpoint time.Time
	// Index is the caller's handle (e.g. into its running-job table).
	Index int
}

// Lost is the work lost if c stops at now: time since its last checkpoint
// (or its start).
func (c *Candidate) Lost(now time.Time) time.Duration {
	from := c.Start
	if c.LastCheckpoint.After(from) {
		from = c.LastCheckpoint
	}
	return max(now.Sub(from), 0)
}

// Order is the victim order: lowest priority, then most recent
// checkpoint, then least run time (latest start), then id.
func Order(a, b *Candidate) int {
	if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
		return c
	}
	if c := b.LastCheckpoint.Compare(a.LastCheckpoint); c != 0 {
		return c
	}
	if c := b.Start.Compare(a.Start); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// Choose returns the victims among cands, taken in Order until fits
// reports the preemptor fits with them gone, then pruned of any victim not
// needed (tried last-added first). ok is false when even all of cands are
// not enough. cands is reordered in place and the victims are a prefix of
// it (no allocation): copy them before reusing cands.
func Choose(cands []Candidate, fits func(victims []Candidate) bool) ([]Candidate, bool) {
	slices.SortFunc(cands, func(a, b Candidate) int { return Order(&a, &b) })
	if fits(nil) {
		return nil, true
	}
	n := 0
	for {
		if n == len(cands) {
			return nil, false
		}
		n++
		if fits(cands[:n]) {
			break
		}
	}
	// Prune: move each victim in turn (from the second last) past the
	// prefix; keep it out if the rest still suffice.
	for i := n - 2; i >= 0; i-- {
		v := cands[i]
		copy(cands[i:n-1], cands[i+1:n])
		cands[n-1] = v
		if fits(cands[:n-1]) {
			n--
			continue
		}
		copy(cands[i+1:n], cands[i:n-1])
		cands[i] = v
	}
	return cands[:n], true
}

// Cost ranks victim sets across nodes: fewer/lower victims first.
type Cost struct {
	MaxPriority int64
	Lost        time.Duration
	Victims     int
}

// CostOf returns the cost of stopping victims at now.
func CostOf(victims []Candidate, now time.Time) Cost {
	c := Cost{MaxPriority: -1 << 63}
	for i := range victims {
		c.MaxPriority = max(c.MaxPriority, victims[i].Priority)
		c.Lost += victims[i].Lost(now)
	}
	c.Victims = len(victims)
	return c
}

// Compare orders costs: no victims first, then lower highest priority,
// then less lost work, then fewer victims.
func (a Cost) Compare(b Cost) int {
	if c := cmp.Compare(min(a.Victims, 1), min(b.Victims, 1)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.MaxPriority, b.MaxPriority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Lost, b.Lost); c != 0 {
		return c
	}
	return cmp.Compare(a.Victims, b.Victims)
}
