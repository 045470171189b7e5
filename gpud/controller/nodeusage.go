package controller

import (
	"context"
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// UsageRef names the attempt one usage sample is for.
type UsageRef struct {
	JobID   spec.JobID
	Attempt int
}

// UsageVerdict says whether a node may report usage for a UsageRef.
type UsageVerdict int

const (
	// UsageRefused: the node did not run that attempt (another node's
	// job, a job that does not exist, an attempt not yet made).
	UsageRefused UsageVerdict = iota
	// UsageAllowed: the attempt is the job's current one and the node is
	// in its allocation (its part may have ended: the last sample comes
	// after the exit).
	UsageAllowed
	// UsageAskHistory: an earlier attempt of the job (it was requeued
	// since); the controller no longer holds its nodes, accounting does
	// (accounting.DB.Attempts).
	UsageAskHistory
)

// UsageFromNode judges, for each ref, whether node may speak for it: a
// node speaks only for its own allocations. Call it before the node's
// events of the same batch are applied (an exit there may requeue the
// job and end the attempt).
func (c *Controller) UsageFromNode(ctx context.Context, node string, refs []UsageRef) ([]UsageVerdict, error) {
	out := make([]UsageVerdict, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	err := c.call(ctx, func(*txn) error {
		for i, r := range refs {
			out[i] = c.usageVerdict(node, r)
		}
		return nil
	})
	return out, err
}

func (c *Controller) usageVerdict(node string, r UsageRef) UsageVerdict {
	rec := c.st.jobs[r.JobID]
	if rec == nil || r.Attempt < 1 {
		return UsageRefused
	}
	if a := rec.job.Alloc; a != nil && a.Attempt == r.Attempt {
		if slices.ContainsFunc(a.Nodes, func(p spec.NodeAlloc) bool { return p.Node == node }) {
			return UsageAllowed
		}
		return UsageRefused
	}
	cur := rec.job.Attempt
	if a := rec.job.Alloc; a != nil {
		cur = max(cur, a.Attempt)
	}
	if r.Attempt < cur || rec.job.Alloc == nil && r.Attempt <= cur {
		return UsageAskHistory
	}
	return UsageRefused
}
