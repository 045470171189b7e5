package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
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
