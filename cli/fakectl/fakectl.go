package fakectl

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Request is one request the fake received.
type Request struct {
	Method string
	Path   string
	Query  string
	Body   []byte
	// Key is the Idempotency-Key header, "" when none was sent.
	Key string
}

// Server is a fake controller. Set its fields before the CLI runs; they
// are read under mu by the handlers.
type Server struct {
	// Addr is the controller address to pass to --controller.
	Addr string

	mu       sync.Mutex
	requests []Request
	nextID   spec.JobID

	// Jobs are returned by GET /v1/jobs (filtered), /v1/jobs/{id} and
	// /v1/jobs/{id}/wait.
	Jobs []spec.Job
	// Nodes are returned by GET /v1/nodes.
	Nodes []spec.Node
	// Partitions are returned by GET /v1/partitions.
	Partitions []api.Partition
	// Associations is returned by GET /v1/associations.
	Associations api.AssociationsResponse
	// Config is returned by GET /v1/config.
	Config api.ClusterConfig
	// Priorities is returned by GET /v1/priorities.
	Priorities []api.JobPriority
	// SubmitErr, when set, answers every submission with this error.
	SubmitErr error
	// SubmitResp, when its ID is set, answers every submission.
	SubmitResp api.SubmitResponse
	// Acct is returned by GET /v1/accounting/jobs, filtered by id, user,
	// account, partition and state (not by time: tests check the query).
	// GET /v1/accounting/summary totals it by the group asked for, with the
	// same filters and no clipping to the window. Jobs keep their
	// AttemptHistory ([] when nil) only when the query asks for
	// attempt_history, as the controller does.
	Acct []api.AcctJob
	// AcctErr, when set, answers GET /v1/accounting/jobs and /summary.
	AcctErr error
	// Audit is returned by GET /v1/audit, filtered by actor (name) and
	// action (substring), not by time; AuditErr, when set, answers it.
	Audit    []api.AuditEntry
	AuditErr error
	// Cluster is returned by GET /v1/accounting/cluster, with the window
	// of the query (tests check the query for the rest).
	Cluster api.AcctClusterResponse
	// Resv is returned by GET /v1/accounting/reservations, with the
	// window of the query.
	Resv api.AcctResvResponse
	// Latest is returned by GET /v1/usage/latest.
	Latest []api.LatestUsage
	// Fairshare is returned by GET /v1/fairshare.
	Fairshare []api.FairshareRow
	// ActionErr maps a job id or node name to the error its actions get.
	ActionErr map[string]error
	// Controllers, when set, is returned by GET /v1/controllers; nil
	// answers 404, as a controller from before the endpoint did.
	Controllers *api.ControllersResponse
}

// New starts a fake controller on a unix socket in a short temporary
// directory (socket paths are limited to ~108 bytes, which t.TempDir can
// exceed) and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "gq")
	if err != nil {
		t.Fatalf("make socket dir: %v", err)
	}
	sock := filepath.Join(dir, "c.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen on %s: %v", sock, err)
	}
	s := &Server{Addr: "unix://" + sock, nextID: 100}
	hs := httptest.NewUnstartedServer(s.mux())
	hs.Listener.Close()
	hs.Listener = l
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		os.RemoveAll(dir)
	})
	return s
}

// Requests returns what the fake received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Submitted returns the submissions received, decoded.
func (s *Server) Submitted(t testing.TB) []api.SubmitRequest {
	t.Helper()
	var out []api.SubmitRequest
	for _, r := range s.Requests() {
		if r.Method == http.MethodPost && r.Path == "/v1/jobs" {
			var sr api.SubmitRequest
			if err := json.Unmarshal(r.Body, &sr); err != nil {
				t.Fatalf("decode submission %s: %v", r.Body, err)
			}
			out = append(out, sr)
		}
	}
	return out
}

// Set replaces the fake's state under its lock.
func (s *Server) Set(fn func(*Server)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s)
}

func (s *Server) mux() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/jobs", s.submit)
	m.HandleFunc("GET /v1/jobs", s.list)
	m.HandleFunc("POST /v1/jobs/cancel", s.cancelJobs)
	m.HandleFunc("PATCH /v1/jobs/{id}", s.jobAction) // scontrol update: answered with the job as it is
	m.HandleFunc("GET /v1/jobs/{id}", s.job)
	m.HandleFunc("GET /v1/jobs/{id}/wait", s.job)
	m.HandleFunc("POST /v1/jobs/{id}/{action}", s.jobAction)
	m.HandleFunc("GET /v1/nodes", s.nodes)
	m.HandleFunc("GET /v1/priorities", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, api.PrioritiesResponse{Jobs: append([]api.JobPriority{}, s.Priorities...)}, nil)
	})
	m.HandleFunc("GET /v1/associations", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, s.Associations, nil)
	})
	m.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, s.Config, nil)
	})
	m.HandleFunc("GET /v1/partitions", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, api.PartitionsResponse{Partitions: append([]api.Partition{}, s.Partitions...)}, nil)
	})
	m.HandleFunc("POST /v1/nodes/{name}/{action}", s.nodeAction)
	m.HandleFunc("GET /v1/accounting/jobs", s.acct)
	m.HandleFunc("GET /v1/accounting/summary", s.acctSummary)
	m.HandleFunc("GET /v1/audit", s.audit)
	m.HandleFunc("GET /v1/accounting/cluster", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.AcctErr != nil {
			reply(w, nil, s.AcctErr)
			return
		}
		out := s.Cluster
		out.Start, _ = time.Parse(time.RFC3339, r.URL.Query().Get("start"))
		out.End, _ = time.Parse(time.RFC3339, r.URL.Query().Get("end"))
		reply(w, out, nil)
	})
	m.HandleFunc("GET /v1/accounting/reservations", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := s.Resv
		out.Start, _ = time.Parse(time.RFC3339, r.URL.Query().Get("start"))
		out.End, _ = time.Parse(time.RFC3339, r.URL.Query().Get("end"))
		reply(w, out, nil)
	})
	m.HandleFunc("GET /v1/usage/latest", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, api.LatestUsageResponse{Samples: append([]api.LatestUsage{}, s.Latest...)}, nil)
	})
	m.HandleFunc("GET /v1/fairshare", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, api.FairshareResponse{Rows: append([]api.FairshareRow{}, s.Fairshare...)}, nil)
	})
	m.HandleFunc("GET /v1/controllers", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.Controllers == nil {
			reply(w, nil, spec.Errorf(spec.ErrNotFound, "no API endpoint GET /v1/controllers"))
			return
		}
		reply(w, s.Controllers, nil)
	})
	m.HandleFunc("POST /v1/reconfigure", func(w http.ResponseWriter, r *http.Request) {
		reply(w, api.ReconfigureResponse{Message: "configuration reloaded"}, nil)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body, Key: r.Header.Get(api.HeaderIdempotencyKey)})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.ServeHTTP(w, r)
	})
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code, status := api.KindCode(err)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	var req api.SubmitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		reply(w, nil, spec.Errorf(spec.ErrInvalid, "decode submission: %v", err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.SubmitErr != nil {
		reply(w, nil, s.SubmitErr)
		return
	}
	if s.SubmitResp.ID != 0 {
		reply(w, s.SubmitResp, nil)
		return
	}
	s.nextID++
	reply(w, api.SubmitResponse{ID: s.nextID, IDs: []spec.JobID{s.nextID}}, nil)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := func(key, v string) bool { return len(q[key]) == 0 || slices.Contains(q[key], v) }
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []spec.Job{}
	for _, j := range s.Jobs {
		states := q["state"]
		stateOK := slices.Contains(states, string(j.State)) || len(states) == 0 && (q.Get("all") == "1" || !j.State.Terminal())
		if in("id", strconv.FormatUint(uint64(j.ID), 10)) && in("user", j.User) && in("account", j.Account) && in("partition", j.Partition) && stateOK {
			out = append(out, j)
		}
	}
	if q.Get("view") == api.ViewBrief {
		// As the controller does: only what the table shows.
		for i, j := range out {
			var b spec.Job
			if err := json.Unmarshal(j.AppendBriefJSON(nil), &b); err != nil {
				reply(w, nil, err)
				return
			}
			out[i] = b
		}
	}
	reply(w, api.JobsResponse{Jobs: out}, nil)
}

func (s *Server) find(idText string) (spec.Job, error) {
	ref, err := spec.ParseJobRef(idText)
	if err != nil {
		return spec.Job{}, err
	}
	for _, j := range s.Jobs {
		if !ref.IsTask && j.ID == ref.ID || ref.IsTask && j.ArrayJobID == ref.ID && j.ArrayTaskID == ref.Task {
			return j, nil
		}
	}
	return spec.Job{}, spec.Errorf(spec.ErrNotFound, "job %s not found", ref)
}

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.find(r.PathValue("id"))
	reply(w, j, err)
}

func (s *Server) jobAction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ActionErr[r.PathValue("id")]; err != nil {
		reply(w, nil, err)
		return
	}
	j, err := s.find(r.PathValue("id"))
	reply(w, j, err)
}

// cancelJobs answers POST /v1/jobs/cancel with the ids of the pending or
// running Jobs the filter matches (the fake changes no state).
func (s *Server) cancelJobs(w http.ResponseWriter, r *http.Request) {
	var req api.CancelJobsRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		reply(w, nil, err)
		return
	}
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := api.CancelJobsResponse{Cancelled: []spec.JobID{}}
	f := req.Filter
	for _, j := range s.Jobs {
		if (len(f.IDs) > 0 && !slices.Contains(f.IDs, j.ID)) || !in(f.Users, j.User) || !in(f.Accounts, j.Account) ||
			!in(f.Partitions, j.Partition) || !in(req.Names, j.Name) || !in(req.QOS, j.QOS) ||
			(len(f.States) > 0 && !slices.Contains(f.States, j.State)) || j.State.Terminal() {
			continue
		}
		resp.Cancelled = append(resp.Cancelled, j.ID)
	}
	reply(w, resp, nil)
}

func (s *Server) nodes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply(w, api.NodesResponse{Nodes: append([]spec.Node{}, s.Nodes...)}, nil)
}

func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := r.PathValue("name")
	if err := s.ActionErr[name]; err != nil {
		reply(w, nil, err)
		return
	}
	for _, n := range s.Nodes {
		if n.Name == name {
			reply(w, n, nil)
			return
		}
	}
	reply(w, nil, spec.Errorf(spec.ErrNotFound, "node %s not found", name))
}

func (s *Server) acct(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := func(key, v string) bool { return len(q[key]) == 0 || slices.Contains(q[key], v) }
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.AcctErr != nil {
		reply(w, nil, s.AcctErr)
		return
	}
	out := []api.AcctJob{}
	for _, j := range s.Acct {
		if in("id", strconv.FormatUint(uint64(j.ID), 10)) && in("user", j.User) && in("account", j.Account) &&
			in("partition", j.Partition) && in("state", string(j.State)) {
			if q.Get("attempt_history") != "true" {
				j.AttemptHistory = nil
			} else if j.AttemptHistory == nil {
				j.AttemptHistory = []api.AcctAttempt{}
			}
			if q.Get("steps") != "true" {
				j.Steps = nil
			} else if j.Steps == nil {
				j.Steps = []api.AcctStep{}
			}
			out = append(out, j)
		}
	}
	reply(w, api.AcctJobsResponse{Jobs: out}, nil)
}

func (s *Server) acctSummary(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	in := func(key, v string) bool { return len(q[key]) == 0 || slices.Contains(q[key], v) }
	key := map[string]func(j *api.AcctJob) string{
		api.GroupByUser:      func(j *api.AcctJob) string { return j.User },
		api.GroupByAccount:   func(j *api.AcctJob) string { return j.Account },
		api.GroupByPartition: func(j *api.AcctJob) string { return j.Partition },
		api.GroupByGPUModel:  func(j *api.AcctJob) string { return j.GPUModel },
	}[q.Get("group")]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.AcctErr != nil {
		reply(w, nil, s.AcctErr)
		return
	}
	if key == nil {
		reply(w, nil, spec.Errorf(spec.ErrInvalid, "query parameter group=%q is not one of user, account, partition, gpu_model", q.Get("group")))
		return
	}
	rows := map[string]*api.AcctSummaryRow{}
	for i := range s.Acct {
		j := &s.Acct[i]
		if !in("user", j.User) || !in("account", j.Account) || !in("partition", j.Partition) {
			continue
		}
		g := key(j)
		if rows[g] == nil {
			rows[g] = &api.AcctSummaryRow{Group: g}
		}
		rows[g].Jobs++
		rows[g].GPUHours += j.GPUHours
		rows[g].CPUHours += j.CPUHours
	}
	out := api.AcctSummaryResponse{Group: q.Get("group"), Rows: []api.AcctSummaryRow{}}
	out.Start, _ = time.Parse(time.RFC3339, q.Get("start"))
	out.End, _ = time.Parse(time.RFC3339, q.Get("end"))
	for _, g := range slices.Sorted(maps.Keys(rows)) {
		out.Rows = append(out.Rows, *rows[g])
	}
	reply(w, out, nil)
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.AuditErr != nil {
		reply(w, nil, s.AuditErr)
		return
	}
	out := []api.AuditEntry{}
	for _, e := range s.Audit {
		if (q.Get("actor") == "" || q.Get("actor") == e.ActorName) && strings.Contains(e.Action, q.Get("action")) {
			out = append(out, e)
		}
	}
	reply(w, api.AuditResponse{Entries: out}, nil)
}
