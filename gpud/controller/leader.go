package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpud/gpud/gpud/spec"
)

// An HA group (gpud/ha) runs one Controller per member. Only the Raft
// leader's schedules, dispatches and commits; the others follow: their
// owner loop answers reads from the state their store replicates (Refresh
// reloads it), and runs no housekeeping, no scheduling cycle and no
// recorder. The group's driver calls Lead when its member wins an
// election (after a Raft barrier, so the store holds every committed
// entry) and Follow the moment it loses leadership.

// WithFollower starts the controller as a follower of an HA group: it
// schedules and commits nothing until Lead.
func WithFollower() Option { return func(c *Controller) { c.following = true } }

// Lead makes this controller the group's scheduler: it reloads its state
// from the store (which must hold every committed entry) and starts
// scheduling, housekeeping and recording. Ended jobs that accounting lacks
// (the old leader's recorder queue died with it) are recorded again.
func (c *Controller) Lead(ctx context.Context) error {
	var ended []spec.JobID
	err := c.roleCall(ctx, func() error {
		// Silence before now is not this leader's to judge: every node
		// gets FailoverNodeGrace (at least node_timeout) from now to
		// find it (overdue).
		c.leadSince = c.now()
		if err := c.load(ctx); err != nil {
			return err
		}
		// The group's first leader makes the identity, through the log:
		// every member has it, and the next leader finds it.
		if err := c.ensureIdentity(ctx); err != nil {
			return err
		}
		c.following = false
		ended = c.ended()
		return nil
	})
	if err != nil {
		return err
	}
	if chk, ok := c.recorder.(RecordChecker); ok && c.recCtx != nil {
		go c.recheckRecords(c.recCtx, chk, ended)
	}
	c.log.Info("controller leading: scheduling and dispatching", "jobs", len(ended))
	return nil
}

// Follow stops scheduling, housekeeping and recording at once; reads keep
// being served from the store's replica.
func (c *Controller) Follow(ctx context.Context) error {
	err := c.roleCall(ctx, func() error {
		c.following = true
		// Long polls come back now, to be told where the leader is.
		for _, n := range c.st.nodes {
			n.bump()
		}
		return nil
	})
	// What the recorder still holds is recorded again by the next
	// leader's recheck (it reads state.db, not this queue).
	c.recMu.Lock()
	c.recQueue, c.evQueue, c.rvQueue = nil, nil, nil
	c.recMu.Unlock()
	return err
}

// Refresh reloads a follower's state from its store (no-op while leading).
func (c *Controller) Refresh(ctx context.Context) error {
	return c.roleCall(ctx, func() error {
		if !c.following {
			return nil
		}
		return c.load(ctx)
	})
}

// roleCall runs fn on the owner in a batch of its own (see Run): a
// change of role never shares a commit with requests that were applied
// to the state it replaces.
func (c *Controller) roleCall(ctx context.Context, fn func() error) error {
	return c.callOn(ctx, c.roles, func(*txn) error { return fn() })
}

// refuseFollowerCommit undoes a batch a follower applied: a request that
// reached a follower's owner loop (the server refuses writes there, but a
// request can cross a change of role) changed memory that no commit may
// follow.
func (c *Controller) refuseFollowerCommit(ctx context.Context) error {
	if err := c.load(ctx); err != nil {
		panic(fmt.Sprintf("controller: reload after a refused follower commit failed: %v", err))
	}
	return spec.Errorf(spec.ErrNotLeader, "this controller is not the leader of its HA group; retry at the leader")
}

// isNotLeader reports whether a store failure is the HA group's "not
// the leader" (the entry was not committed by this member).
func isNotLeader(err error) bool { return errors.Is(err, spec.ErrNotLeader) }
