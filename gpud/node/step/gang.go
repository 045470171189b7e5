package step

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Gang start (issue 25 D): a multi-node batch job's script starts only
// once every node of its allocation holds its part (its container runs),
// so that its first srun finds every node, and a node that returns late
// from a network cut cannot leave the script running on part of the
// allocation. The batch node's agent asks each peer (in this process, or
// over its step listener, api.StepHello.Holds) until all say so, for at
// most GangWait.

// GangWait bounds how long a batch script waits for the nodes of its
// allocation. A node that never starts its part is usually marked DOWN
// by the controller sooner (node_timeout), which requeues the job.
const GangWait = 2 * time.Minute

// gangWait is GangWait, shortened by tests.
var gangWait = GangWait

// WaitGang waits until every node of the allocation (nodes) other than
// this one holds its part of allocID, ctx ends or stop is closed. After
// GangWait it returns an error naming each node that does not and why.
// A peer it cannot ask (no step listener: node tokens) or that cannot
// tell (an older agent) counts as holding its part.
func (n *Node) WaitGang(ctx context.Context, allocID string, nodes []spec.NodeAlloc, stop <-chan struct{}) error {
	deadline := time.Now().Add(gangWait)
	pause := 50 * time.Millisecond
	waiting := map[string]error{}
	for _, nd := range nodes {
		if nd.Node != n.cfg.Node {
			waiting[nd.Node] = nil
		}
	}
	logged := false
	for {
		for _, nd := range nodes {
			if _, ok := waiting[nd.Node]; !ok {
				continue
			}
			if err := n.holds(ctx, allocID, nd); err != nil {
				waiting[nd.Node] = err
			} else {
				delete(waiting, nd.Node)
			}
		}
		if len(waiting) == 0 {
			if logged {
				n.cfg.Log.Info("every node of the allocation holds its part; the batch script starts", "alloc_id", allocID)
			}
			return nil
		}
		if time.Now().After(deadline) {
			var errs []error
			for node, err := range waiting {
				errs = append(errs, fmt.Errorf("node %s did not start its part within %v: %w", node, gangWait, err))
			}
			return errors.Join(errs...)
		}
		if !logged && pause >= time.Second {
			logged = true
			var names []string
			for node := range waiting {
				names = append(names, node)
			}
			n.cfg.Log.Info("the batch script waits for every node of the allocation to start its part", "alloc_id", allocID,
				"waiting_for", strings.Join(names, ","), "max", gangWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errors.New("stopped while waiting for the nodes of the allocation")
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// holds says whether node nd holds its part of allocID (nil) or why not.
func (n *Node) holds(ctx context.Context, allocID string, nd spec.NodeAlloc) error {
	p, err := n.peer(nd)
	if err != nil {
		return nil // cannot ask: steps across hosts are not set up
	}
	if rp, ok := p.(*remotePeer); ok {
		return rp.holds(ctx, allocID)
	}
	if o := p.owner(allocID); o == nil || !o.view().running {
		return fmt.Errorf("node %s has not started its part of allocation %s yet", nd.Node, allocID)
	}
	return nil
}
