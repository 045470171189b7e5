package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/spec"
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
	// Borrow (WatchAssignments only) hands fn the set the stream's lines
	// have made itself, not a copy of it per line: fn reads the answer's
	// Assignments only until it returns, and changes nothing in them and
	// keeps no pointer into them (the next line changes them in place).
	// A node with 8 jobs copied ~13 KB a line otherwise.
	Borrow bool
}

// HeaderWatch, set to "1" on an assignments answer, says the answer is a
// watch stream (WatchAssignments): a sequence of answers, one a line.
const HeaderWatch = "Gpud-Watch"

// WatchAssignments asks for the node's assignments as a watch stream: one
// long-lived answer on the node's open connection whose body is a
// sequence of AssignmentsResponse, one JSON object a line, the first at
// once, each next one when the node's assignments (or the revocation
// lists) change, or after req.Wait without a change. fn gets each in
// order; the stream ends when fn returns an error (returned), ctx ends,
// the controller ends it (nil: ask again), the connection fails, or no
// answer came for req.Wait plus watchGrace (a dead link the pings missed).
// A controller that does not stream (an older one) answers the query as
// a long poll: fn gets that one answer and streamed is false.
func (c *Client) WatchAssignments(ctx context.Context, node string, req AssignmentsRequest, fn func(*AssignmentsResponse) error) (streamed bool, err error) {
	q := url.Values{
		"after": {strconv.FormatUint(req.After, 10)},
		"wait":  {strconv.Itoa(int(req.Wait / time.Second))},
		"watch": {"1"},
		// Deltas: lines after the first carry only what changed; an
		// older controller ignores the parameter and sends whole sets.
		"deltas": {"1"},
	}
	if req.Revocations != "" {
		q.Set("revocations", req.Revocations)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.send(withCall(ctx, callOpts{patience: req.Wait}), http.MethodGet, "/nodes/"+url.PathEscape(node)+"/assignments", q, nil, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.Header.Get(HeaderWatch) != "1" {
		var out AssignmentsResponse
		b, err := readBody(resp)
		if err == nil {
			err = out.UnmarshalJSON(b)
		}
		if err != nil {
			return false, fmt.Errorf("decode the assignments answer: %w", err)
		}
		return false, fn(&out)
	}
	// The controller answers at least every req.Wait: silence beyond it
	// is a dead link or controller.
	idle := time.AfterFunc(req.Wait+watchGrace, cancel)
	defer idle.Stop()
	br := bufio.NewReaderSize(resp.Body, 32<<10)
	var line []byte
	var held heldSet
	for {
		line = line[:0]
		for {
			frag, err := br.ReadSlice('\n')
			line = append(line, frag...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if errors.Is(err, io.EOF) && len(line) == 0 {
					return true, nil // the controller ended the stream
				}
				if ctx.Err() != nil {
					return true, spec.Errorf(spec.ErrUnavailable, "the assignments watch stream was silent for more than %s, or was cancelled: %v", req.Wait+watchGrace, err)
				}
				return true, spec.Errorf(spec.ErrUnavailable, "the assignments watch stream broke: %v", err)
			}
			break
		}
		idle.Reset(req.Wait + watchGrace)
		var out AssignmentsResponse
		if err := out.UnmarshalJSON(line); err != nil {
			return true, fmt.Errorf("decode an assignments watch answer: %w", err)
		}
		if err := held.apply(&out, req.Borrow); err != nil {
			return true, err
		}
		if err := fn(&out); err != nil {
			return true, err
		}
	}
}

// ErrWatchOutOfStep is WatchAssignments' error when a delta line of the
// stream does not apply to the set the node holds (its Base is not the
// generation of the line before): the line is not handed over, the
// stream is dropped, and the node asks again (a new stream's first line
// is the whole set).
var ErrWatchOutOfStep = errors.New("an assignments delta line does not follow the generation held")

// heldSet is the node's whole set as a watch stream's lines have made it
// (the controller's allocation order: by ID), with its generation.
type heldSet struct {
	ok   bool
	gen  uint64
	asgs []Assignment
}

// apply takes one line of the stream into h and makes resp the whole set
// as it now is (Delta false, Base 0, Removed nil), with Assignments a
// slice of its own (the caller may keep it and change it), or with
// borrow h's own (AssignmentsRequest.Borrow). A delta that does not
// follow h's generation (or comes before any whole set) changes nothing
// and is ErrWatchOutOfStep. A whole-set line (the first; every line of
// an older controller's stream) replaces h. Assignments are ~1.6 KB
// each: they are reached by index, never passed by value to a callback
// (slices.IndexFunc and a sort's comparator copied one per call).
func (h *heldSet) apply(resp *AssignmentsResponse, borrow bool) error {
	if !resp.Delta {
		// The line's slice is this line's alone: held as it is, in
		// allocation order (the controller's already; another's sorted).
		h.ok, h.gen, h.asgs = true, resp.Generation, sortedByID(resp.Assignments)
		resp.Assignments, resp.Base, resp.Removed = h.asgs, 0, nil
		if !borrow {
			resp.Assignments = slices.Clone(h.asgs)
		}
		return nil
	}
	if !h.ok || resp.Base != h.gen {
		held := "none"
		if h.ok {
			held = strconv.FormatUint(h.gen, 10)
		}
		return fmt.Errorf("%w: the line is generation %d on %d, the node holds %s; asking for the whole set again", ErrWatchOutOfStep, resp.Generation, resp.Base, held)
	}
	if len(resp.Removed) > 0 {
		kept := h.asgs[:0]
		for i := range h.asgs {
			if !slices.Contains(resp.Removed, h.asgs[i].Alloc.ID) {
				kept = append(kept, h.asgs[i])
			}
		}
		clear(h.asgs[len(kept):]) // no job kept alive past its removal
		h.asgs = kept
	}
	for i := range resp.Assignments {
		a := &resp.Assignments[i]
		j, found := h.place(a.Alloc.ID)
		if found {
			h.asgs[j] = *a
			continue
		}
		h.asgs = slices.Insert(h.asgs, j, *a)
	}
	h.gen = resp.Generation
	resp.Assignments = h.asgs
	if !borrow {
		resp.Assignments = slices.Clone(h.asgs)
	}
	resp.Delta, resp.Base, resp.Removed = false, 0, nil
	return nil
}

// place is where allocation id is in h (found) or goes: the set is in
// allocation order, and an allocation a delta adds is inserted where the
// order puts it.
func (h *heldSet) place(id string) (int, bool) {
	for i := range h.asgs {
		switch c := strings.Compare(h.asgs[i].Alloc.ID, id); {
		case c == 0:
			return i, true
		case c > 0:
			return i, false
		}
	}
	return len(h.asgs), false
}

// sortedByID returns asgs in allocation order: asgs itself when it is
// (a controller's whole set always is), else sorted by position, each
// assignment moved once.
func sortedByID(asgs []Assignment) []Assignment {
	sorted := true
	for i := 1; i < len(asgs) && sorted; i++ {
		sorted = asgs[i-1].Alloc.ID <= asgs[i].Alloc.ID
	}
	if sorted {
		return asgs
	}
	order := make([]int, len(asgs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return strings.Compare(asgs[x].Alloc.ID, asgs[y].Alloc.ID) })
	out := make([]Assignment, len(asgs))
	for i, j := range order {
		out[i] = asgs[j]
	}
	return out
}

// watchGrace is how much longer than its wait a watch stream may be
// silent before the node takes it for dead.
const watchGrace = 15 * time.Second

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
