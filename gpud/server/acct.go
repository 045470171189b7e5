package server

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// acctJobs serves GET /v1/accounting/jobs (gpuq acct).
func (s *Server) acctJobs(w http.ResponseWriter, r *http.Request) {
	if s.acct == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no job accounting; start it with an accounting database to use gpuq acct"))
		return
	}
	q := r.URL.Query()
	f, err := acctFilter(q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	history := false
	if v := q.Get("attempt_history"); v != "" {
		if history, err = strconv.ParseBool(v); err != nil {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter attempt_history=%q is not true or false", v))
			return
		}
	}
	steps := false
	if v := q.Get("steps"); v != "" {
		if steps, err = strconv.ParseBool(v); err != nil {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter steps=%q is not true or false", v))
			return
		}
	}
	encs, someFields, err := parseAcctFields(q["fields"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Fields that need none of the usage sums spare the database six
	// sub-selects a job (sacct's default columns).
	f.NoUsage = someFields && !slices.ContainsFunc(q["fields"], func(v string) bool {
		return slices.ContainsFunc(strings.Split(v, ","), func(n string) bool { return slices.Contains(acctUsageFields, strings.TrimSpace(n)) })
	})
	id := who(r)
	if err := notNode(id, "job accounting"); err != nil {
		s.writeError(w, r, err)
		return
	}
	as := id.actor()
	if err := scopeToCaller(as, &f); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Jobs that ended before this call are in what it reads, though the
	// recorder batches its writes (controller.recordLinger).
	s.c.FlushRecords(r.Context())
	recs, err := s.acct.Jobs(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The attempts are of the jobs already scoped and filtered above, so
	// they need no permission check of their own.
	var attempts map[spec.JobID][]accounting.Attempt
	if history && len(recs) > 0 {
		ids := make([]spec.JobID, len(recs))
		for i := range recs {
			ids[i] = recs[i].ID
		}
		if attempts, err = s.acct.Attempts(r.Context(), ids); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	var stepsOf map[spec.JobID][]accounting.Step
	if steps && len(recs) > 0 {
		ids := make([]spec.JobID, len(recs))
		for i := range recs {
			ids[i] = recs[i].ID
		}
		if stepsOf, err = s.acct.Steps(r.Context(), ids); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	out := api.AcctJobsResponse{Jobs: make([]api.AcctJob, 0, len(recs))}
	for i := range recs {
		j := api.AcctJob{AcctRecord: recs[i]}
		if history {
			j.AttemptHistory = acctAttempts(attempts[j.ID])
		}
		if steps {
			j.Steps = stepsOf[j.ID]
			if j.Steps == nil {
				j.Steps = []api.AcctStep{}
			}
		}
		out.Jobs = append(out.Jobs, j)
	}
	if someFields {
		s.writeAcctFields(w, out.Jobs, encs, history, steps) // acctfields.go
		return
	}
	s.writeJSON(w, out)
}

// acctAttempts converts attempts to their wire form; never nil, so a job
// asked for with its history shows "attempt_history": [] when it has none.
func acctAttempts(as []accounting.Attempt) []api.AcctAttempt {
	if as == nil {
		return []api.AcctAttempt{}
	}
	return as // the same type
}

// acctFilter reads the query parameters; a bad value is an invalid
// request naming the parameter.
func acctFilter(q url.Values) (accounting.Filter, error) {
	f := accounting.Filter{Users: q["user"], Accounts: q["account"], Partitions: q["partition"]}
	for _, v := range q["id"] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return f, spec.Errorf(spec.ErrInvalid, "query parameter id=%q is not a job id (a positive whole number)", v)
		}
		f.IDs = append(f.IDs, spec.JobID(n))
	}
	for _, v := range q["state"] {
		st := spec.JobState(v)
		if !slices.Contains(spec.AllJobStates, st) {
			return f, spec.Errorf(spec.ErrInvalid, "query parameter state=%q is not a job state; use one of %v", v, spec.AllJobStates)
		}
		f.States = append(f.States, st)
	}
	for _, p := range []struct {
		key string
		dst *time.Time
	}{{"start", &f.Start}, {"end", &f.End}} {
		v := q.Get(p.key)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, spec.Errorf(spec.ErrInvalid, "query parameter %s=%q is not an RFC 3339 time (e.g. 2025-03-14T00:00:00Z)", p.key, v)
		}
		*p.dst = t
	}
	if !f.Start.IsZero() && !f.End.IsZero() && f.End.Before(f.Start) {
		return f, spec.Errorf(spec.ErrInvalid, "query parameter end=%s is before start=%s; pick an end after the start", q.Get("end"), q.Get("start"))
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return f, spec.Errorf(spec.ErrInvalid, "query parameter limit=%q is not a whole number (0 means no limit)", v)
		}
		f.Limit = n
	}
	return f, nil
}

// scopeToCaller keeps a caller who is not root to their own jobs: with no
// user filter it adds theirs, and a filter on anyone else is refused.
func scopeToCaller(who controller.Caller, f *accounting.Filter) error {
	if who.Known && who.UID == 0 {
		return nil
	}
	if !who.Known || who.User == "" {
		return spec.Errorf(spec.ErrPermissionDenied, "job accounting needs an identified caller; connect over the controller's unix socket")
	}
	for _, u := range f.Users {
		if u != who.User {
			return spec.Errorf(spec.ErrPermissionDenied, "user %s may see only their own jobs, not those of user %s; ask root for other users' accounting", who.User, u)
		}
	}
	f.Users = []string{who.User}
	return nil
}

// acctSummary serves GET /v1/accounting/summary (gpuq report). The caller
// rule is gpuq acct's: a caller below operator who is not root gets only
// their own usage.
func (s *Server) acctSummary(w http.ResponseWriter, r *http.Request) {
	if s.acct == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no job accounting; start it with an accounting database to use gpuq report"))
		return
	}
	q := r.URL.Query()
	for _, k := range []string{"id", "state", "limit", "attempt_history", "steps"} {
		if q.Has(k) {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter %s is not supported by the accounting summary; filter by user, account, partition, start and end", k))
			return
		}
	}
	group := q.Get("group")
	if !slices.Contains([]string{api.GroupByUser, api.GroupByAccount, api.GroupByPartition, api.GroupByGPUModel}, group) {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter group=%q is not one of %s, %s, %s, %s", group,
			api.GroupByUser, api.GroupByAccount, api.GroupByPartition, api.GroupByGPUModel))
		return
	}
	f, err := acctFilter(q)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := who(r)
	if err := notNode(id, "job accounting"); err != nil {
		s.writeError(w, r, err)
		return
	}
	as := id.actor()
	if err := scopeToCaller(as, &f); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.c.FlushRecords(r.Context()) // jobs ended before the call count
	rows, err := s.acct.Summary(r.Context(), f, group)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.AcctSummaryResponse{Group: group, Start: f.Start, End: f.End, Rows: make([]api.AcctSummaryRow, 0, len(rows))}
	for _, row := range rows {
		out.Rows = append(out.Rows, row) // accounting.SummaryRow is api.AcctSummaryRow
	}
	s.writeJSON(w, out)
}

// ClusterAccounting is implemented by an Accounting that reports the
// cluster's use by GPU model (*accounting.DB): GET /v1/accounting/cluster.
type ClusterAccounting interface {
	ClusterUsage(ctx context.Context, start, end time.Time, bucket time.Duration, inv []accounting.NodeGPUs) (accounting.ClusterUsage, error)
}

// acctWindow makes the checks of a cluster-wide accounting read (what):
// no node's credential; the recorder's writes in first, so what ended
// before the call counts; and reads its window, start and end, the last
// 24 hours by default.
func (s *Server) acctWindow(w http.ResponseWriter, r *http.Request, what string) (accounting.Filter, bool) {
	if err := notNode(who(r), what); err != nil {
		s.writeError(w, r, err)
		return accounting.Filter{}, false
	}
	s.c.FlushRecords(r.Context())
	q := r.URL.Query()
	f, err := acctFilter(url.Values{"start": q["start"], "end": q["end"]})
	if err != nil {
		s.writeError(w, r, err)
		return f, false
	}
	if f.End.IsZero() {
		f.End = s.now().Truncate(time.Second)
	}
	if f.Start.IsZero() {
		f.Start = f.End.Add(-24 * time.Hour)
	}
	if !f.End.After(f.Start) {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "the window %s to %s is empty; pick an end after the start", f.Start.Format(time.RFC3339), f.End.Format(time.RFC3339)))
		return f, false
	}
	return f, true
}

// acctCluster serves GET /v1/accounting/cluster (gpuq report cluster).
// Any identified caller may read it: it shows cluster totals, no user's
// usage (as sreport cluster utilization). The window defaults to the last
// 24 hours and the bucket to a hundredth of it, at least a minute.
func (s *Server) acctCluster(w http.ResponseWriter, r *http.Request) {
	ca, ok := s.acct.(ClusterAccounting)
	if !ok {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no cluster accounting; start it with an accounting database to use gpuq report cluster"))
		return
	}
	q := r.URL.Query()
	f, ok := s.acctWindow(w, r, "cluster accounting")
	if !ok {
		return
	}
	bucket := max(time.Minute, (f.End.Sub(f.Start) / 100).Truncate(time.Second))
	if v := q.Get("bucket"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter bucket=%q is not a positive number of seconds", v))
			return
		}
		bucket = time.Duration(n) * time.Second
	}
	nodes, err := s.c.Nodes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	usage, err := ca.ClusterUsage(r.Context(), f.Start, f.End, bucket, nodeGPUs(nodes))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.AcctClusterResponse{Start: f.Start, End: f.End, Bucket: int64(bucket / time.Second),
		Rows: make([]api.AcctClusterRow, 0, len(usage.Rows)), Series: make([]api.AcctUtilPoint, 0, len(usage.Series))}
	// accounting's rows and points are the API's types.
	out.Rows = append(out.Rows, usage.Rows...)
	out.Series = append(out.Series, usage.Series...)
	if ri, ok := s.acct.(ReservedIdleAccounting); ok {
		if out.ReservedIdleGPUHours, out.MaintIdleGPUHours, err = ri.ReservedIdle(r.Context(), f.Start, f.End); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.writeJSON(w, out)
}

// ReservedIdleAccounting is implemented by an Accounting that keeps
// reservation windows (*accounting.DB): their idle reserved GPU-hours in
// GET /v1/accounting/cluster.
type ReservedIdleAccounting interface {
	ReservedIdle(ctx context.Context, start, end time.Time) (reserved, maint float64, err error)
}

// ResvAccounting is implemented by an Accounting that keeps reservation
// windows (*accounting.DB): GET /v1/accounting/reservations.
type ResvAccounting interface {
	ReservationUsage(ctx context.Context, start, end time.Time, names []string) ([]api.AcctResvRow, error)
}

// acctResv serves GET /v1/accounting/reservations (sreport reservation
// utilization). Any identified caller may read it, as scontrol show
// reservation. The period defaults to the last 24 hours.
func (s *Server) acctResv(w http.ResponseWriter, r *http.Request) {
	ra, ok := s.acct.(ResvAccounting)
	if !ok {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no reservation accounting; start it with an accounting database to use sreport reservation utilization"))
		return
	}
	q := r.URL.Query()
	f, ok := s.acctWindow(w, r, "reservation accounting")
	if !ok {
		return
	}
	var names []string
	if v := q.Get("names"); v != "" {
		names = strings.Split(v, ",")
	}
	rows, err := ra.ReservationUsage(r.Context(), f.Start, f.End, names)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.AcctResvResponse{Start: f.Start, End: f.End, Rows: append([]api.AcctResvRow{}, rows...)})
}

// nodeGPUs counts each node's whole GPUs by model: the capacity cluster
// usage is measured against.
func nodeGPUs(nodes []spec.Node) []accounting.NodeGPUs {
	var out []accounting.NodeGPUs
	for _, n := range nodes {
		by := map[string]int{}
		for _, g := range n.GPUs {
			by[g.Model]++
		}
		for _, m := range slices.Sorted(maps.Keys(by)) {
			out = append(out, accounting.NodeGPUs{Node: n.Name, Model: m, GPUs: by[m]})
		}
	}
	return out
}
