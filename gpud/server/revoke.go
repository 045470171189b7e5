package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
)

// revocationsFor is the revocation state for a node that holds version
// have: the version, with the lists when have differs. A node that sends
// no version (an agent before revocation lists) gets none.
func (s *Server) revocationsFor(have string, asked bool) *api.Revocations {
	if !asked {
		return nil
	}
	l := s.rev.List()
	out := &api.Revocations{Version: l.Version}
	if have != l.Version {
		out.Lists = &api.RevocationLists{Certs: l.Certs, Tokens: l.Tokens}
	}
	return out
}

// pollAssignments is the node's assignments long poll, answered early
// when the revocation lists change (or already differ from the version the
// node holds): nodes learn of a revocation within a round trip, not at
// their next heartbeat.
func (s *Server) pollAssignments(r *http.Request, as controller.Caller, name string, after uint64, wait time.Duration, have string, asked bool) (uint64, []controller.Assignment, error) {
	if !asked || wait == 0 {
		return s.c.Assignments(r.Context(), as, name, after, wait)
	}
	changed := s.rev.Changed()
	if have != s.rev.Version() {
		wait = 0
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	gen, list, err := s.c.Assignments(ctx, as, name, after, wait)
	if err != nil && errors.Is(err, context.Canceled) && r.Context().Err() == nil {
		// The lists changed: answer with the set as it is.
		return s.c.Assignments(r.Context(), as, name, after, 0)
	}
	return gen, list, err
}
