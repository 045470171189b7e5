package server

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// GPUHealthAccounting is implemented by an Accounting that keeps GPU
// health history (accounting.DB does).
type GPUHealthAccounting interface {
	GPUEvents(ctx context.Context, f accounting.GPUEventFilter) ([]accounting.GPUEvent, error)
	RMAReport(ctx context.Context, f accounting.GPUEventFilter) ([]accounting.RMARow, error)
}

// gpuEventFilter reads GET /v1/health/*'s query: node, serial, uuid,
// kind, class (each repeatable), start and end (RFC 3339), limit.
func gpuEventFilter(q url.Values) (accounting.GPUEventFilter, error) {
	f := accounting.GPUEventFilter{Nodes: q["node"], Serials: q["serial"], UUIDs: q["uuid"], Kinds: q["kind"], Classes: q["class"]}
	var c checker
	for _, p := range []struct {
		key string
		dst *time.Time
	}{{"start", &f.Start}, {"end", &f.End}} {
		if v := q.Get(p.key); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				c.bad("query parameter %s=%q is not an RFC 3339 time (e.g. 2025-03-14T00:00:00Z)", p.key, v)
			}
			*p.dst = t
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			c.bad("query parameter limit=%q is not a whole number (0: no limit)", v)
		}
		f.Limit = n
	}
	for _, k := range f.Kinds {
		if !slices.Contains(gpuEventKinds, k) {
			c.bad("query parameter kind=%q is not a GPU event kind; use fault, probe-failed, readmit or diag", k)
		}
	}
	for _, cl := range f.Classes {
		if cl != "fatal" && cl != "degraded" && cl != "info" {
			c.bad("query parameter class=%q is not a class; use fatal, degraded or info", cl)
		}
	}
	return f, c.err()
}

// gpuHealthSource returns the accounting that keeps GPU history, or
// writes why there is none.
func (s *Server) gpuHealthSource(w http.ResponseWriter, r *http.Request) (GPUHealthAccounting, accounting.GPUEventFilter, bool) {
	ga, ok := s.acct.(GPUHealthAccounting)
	if !ok {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no accounting; start it with an accounting database to use gpuq health"))
		return nil, accounting.GPUEventFilter{}, false
	}
	if err := notNode(who(r), "GPU health history"); err != nil {
		s.writeError(w, r, err)
		return nil, accounting.GPUEventFilter{}, false
	}
	f, err := gpuEventFilter(r.URL.Query())
	if err != nil {
		s.writeError(w, r, err)
		return nil, f, false
	}
	// Events the nodes reported before this call are in what it reads,
	// though the recorder batches its writes (controller.recordLinger).
	s.c.FlushRecords(r.Context())
	return ga, f, true
}

// gpuEvents is GET /v1/health/events: the GPUs' health history (like
// gpuq nodes, open to every user of the cluster).
func (s *Server) gpuEvents(w http.ResponseWriter, r *http.Request) {
	ga, f, ok := s.gpuHealthSource(w, r)
	if !ok {
		return
	}
	evs, err := ga.GPUEvents(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.GPUEventsResponse{Events: append([]spec.GPUEvent{}, evs...)})
}

// gpuRMA is GET /v1/health/rma: the GPUs with faults, RMA candidates
// first.
func (s *Server) gpuRMA(w http.ResponseWriter, r *http.Request) {
	ga, f, ok := s.gpuHealthSource(w, r)
	if !ok {
		return
	}
	rows, err := ga.RMAReport(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.RMAResponse{GPUs: append([]api.RMARow{}, rows...)})
}
