package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// HeartbeatAnswer is SendHeartbeat that returns the controller's answer
// (its node_timeout, for the agent's self-fencing).
func (c *Client) HeartbeatAnswer(ctx context.Context, node string, req HeartbeatRequest) (HeartbeatResponse, error) {
	var out HeartbeatResponse
	// A heartbeat sent twice changes nothing: safe to resend at another
	// member after a connection broke.
	err := c.do(withCall(ctx, callOpts{resend: true}), http.MethodPost, "/nodes/"+url.PathEscape(node)+"/heartbeat", nil, req, emptyOK{&out})
	return out, err
}

// RegisterNode registers (or re-registers) a node: Register with the
// whole request (the node's revocation list version too).
func (c *Client) RegisterNode(ctx context.Context, req RegisterRequest) (RegisterResponse, error) {
	var out RegisterResponse
	// Registering again changes nothing: safe to resend at another member.
	err := c.do(withCall(ctx, callOpts{resend: true}), http.MethodPost, "/nodes/register", nil, req, &out)
	return out, err
}

// AssignmentsRequest is the assignments long poll's query.
type AssignmentsRequest struct {
	// After is the generation the node has; Wait the longest the answer
	// may wait for a newer one.
	After uint64
	Wait  time.Duration
	// Revocations is the version of the revocation lists the node holds:
	// the controller answers at once when its lists are (or become)
	// another version, with them. Empty: not asked.
	Revocations string
}

// PollAssignments is Assignments with the whole query.
func (c *Client) PollAssignments(ctx context.Context, node string, req AssignmentsRequest) (AssignmentsResponse, error) {
	q := url.Values{
		"after": {strconv.FormatUint(req.After, 10)},
		"wait":  {strconv.Itoa(int(req.Wait / time.Second))},
	}
	if req.Revocations != "" {
		q.Set("revocations", req.Revocations)
	}
	var out AssignmentsResponse
	err := c.do(withCall(ctx, callOpts{patience: req.Wait}), http.MethodGet, "/nodes/"+url.PathEscape(node)+"/assignments", q, nil, &out)
	return out, err
}

// emptyOK decodes into v, taking an empty body (an older controller's,
// or a 204) as the zero value.
type emptyOK struct{ v any }

func (e emptyOK) UnmarshalJSON(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return json.Unmarshal(b, e.v)
}

// NodeTimeout is NodeTimeoutMS as a duration (0: not said).
func (r HeartbeatResponse) NodeTimeout() time.Duration {
	return time.Duration(r.NodeTimeoutMS) * time.Millisecond
}

// NodeTimeout is NodeTimeoutMS as a duration (0: not said).
func (r RegisterResponse) NodeTimeout() time.Duration {
	return time.Duration(r.NodeTimeoutMS) * time.Millisecond
}
