package node

import (
	"context"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// ControllerClient is what a node agent asks of the controller: these
// four calls and no others. *api.Client (HTTP, with the node's TLS
// certificate in production) satisfies it; the agent's tests that used to
// fake the HTTP server may pass an in-process one.
type ControllerClient interface {
	// RegisterNode registers (or re-registers) the node's inventory; the
	// answer carries the heartbeat interval, node_timeout and the
	// revocation lists. Also used to report a changed MIG layout.
	RegisterNode(ctx context.Context, req api.RegisterRequest) (api.RegisterResponse, error)
	// HeartbeatAnswer tells the controller the node is alive, what it
	// runs and which GPUs are unhealthy; the answer carries node_timeout
	// (self-fencing, fence.go). spec.ErrNotFound: the controller does
	// not know the node (register again).
	HeartbeatAnswer(ctx context.Context, node string, req api.HeartbeatRequest) (api.HeartbeatResponse, error)
	// PollAssignments long-polls, for at most req.Wait, for the node's
	// desired allocations newer than generation req.After (or revocation
	// lists other than req.Revocations).
	PollAssignments(ctx context.Context, node string, req api.AssignmentsRequest) (api.AssignmentsResponse, error)
	// EventsFor delivers outbox events in seq order, saying the identity
	// of the controller they were recorded for ("": not said); the answer
	// says up to which seq the controller has them.
	EventsFor(ctx context.Context, node string, events []api.AllocEvent, now time.Time, controllerID string) (api.EventsResponse, error)
}

var _ ControllerClient = (*api.Client)(nil)

// AssignmentsWatcher is a ControllerClient that follows the node's
// assignments on a watch stream (api.Client.WatchAssignments): the agent
// then does, and long-polls with a client that is not one.
type AssignmentsWatcher interface {
	WatchAssignments(ctx context.Context, node string, req api.AssignmentsRequest, fn func(*api.AssignmentsResponse) error) (streamed bool, err error)
}

var _ AssignmentsWatcher = (*api.Client)(nil)
