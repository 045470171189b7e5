package server

import (
	"bufio"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

func (s *Server) routes() {
	m := s.mux
	// handle records the route's state-changing calls in the audit log.
	handle := func(pattern string, h http.HandlerFunc) { m.Handle(pattern, s.recordAudit(h)) }
	m.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	if s.metrics != nil {
		m.HandleFunc("GET /metrics", s.serveMetrics)
	}
	v := "/" + api.Version
	handle("POST "+v+"/jobs", s.submit)
	m.HandleFunc("GET "+v+"/jobs", s.listJobs)
	m.HandleFunc("GET "+v+"/jobs/{id}", s.getJob)
	m.HandleFunc("GET "+v+"/jobs/{id}/wait", s.waitJob)
	handle("POST "+v+"/jobs/cancel", s.cancelJobs)
	handle("PATCH "+v+"/jobs/{id}", s.updateJob)
	handle("POST "+v+"/jobs/{id}/{action}", s.jobAction)
	handle("POST "+v+"/jobs/{id}/step-ticket", s.stepTicket)
	m.HandleFunc("GET "+v+"/nodes", s.listNodes)
	m.HandleFunc("GET "+v+"/partitions", s.listPartitions)
	m.HandleFunc("GET "+v+"/associations", s.associations)
	m.HandleFunc("GET "+v+"/config", s.clusterConfig) // config.go
	handle("POST "+v+"/nodes/register", s.register)
	handle("POST "+v+"/nodes/join", s.joinNode)
	handle("POST "+v+"/nodes/{name}/heartbeat", s.heartbeat)
	m.HandleFunc("GET "+v+"/nodes/{name}/assignments", s.assignments)
	handle("POST "+v+"/nodes/{name}/events", s.events)
	handle("POST "+v+"/nodes/{name}/{action}", s.nodeAction)
	handle("PATCH "+v+"/nodes", s.updateNodes)
	handle("PATCH "+v+"/partitions/{name}", s.updatePartition)
	m.HandleFunc("GET "+v+"/reservations", s.listReservations) // reservation.go
	handle("POST "+v+"/reservations", s.createReservation)
	handle("PATCH "+v+"/reservations/{name}", s.updateReservation)
	handle("DELETE "+v+"/reservations/{name}", s.deleteReservation)
	handle("POST "+v+"/reconfigure", s.reconfigure)
	m.HandleFunc("GET "+v+"/priorities", s.priorities)
	m.HandleFunc("GET "+v+"/fairshare", s.fairshareTree)
	m.HandleFunc("GET "+v+"/accounting/jobs", s.acctJobs)
	m.HandleFunc("GET "+v+"/accounting/summary", s.acctSummary)
	m.HandleFunc("GET "+v+"/accounting/cluster", s.acctCluster)
	m.HandleFunc("GET "+v+"/accounting/reservations", s.acctResv)
	m.HandleFunc("GET "+v+"/usage/latest", s.usageLatest)
	m.HandleFunc("GET "+v+"/audit", s.auditList)
	m.HandleFunc("GET "+v+"/health/events", s.gpuEvents) // health.go
	m.HandleFunc("GET "+v+"/health/rma", s.gpuRMA)
	m.HandleFunc("GET "+v+"/controllers", s.controllers)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, spec.Errorf(spec.ErrNotFound, "no API endpoint %s %s; this controller serves /%s", r.Method, r.URL.Path, api.Version))
	})
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := notNode(id, "submitting a job"); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !s.limitSubmit(w, r, id) {
		return
	}
	var req api.SubmitRequest
	if err := decodeWith(w, r, &req, func(b []byte) bool { return api.DecodeSubmitRequest(b, &req) }); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkJobSpec(&req.Job); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.TestOnly && len(req.Het) > 0 {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "--test-only of a heterogeneous job is not supported; test each component as a job of its own"))
		return
	}
	if req.TestOnly {
		res, err := s.c.TestSubmit(r.Context(), id.caller, req.Job)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, api.SubmitResponse{ExpectedStart: spec.NewTime(res.Start), Nodes: res.Nodes, Message: res.Message})
		return
	}
	key := r.Header.Get(api.HeaderIdempotencyKey)
	if key != "" && !api.ValidIdempotencyKey(key) {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "%s header: want 1 to %d printable ASCII characters without spaces (api.NewIdempotencyKey makes one)", api.HeaderIdempotencyKey, api.MaxIdempotencyKey))
		return
	}
	ids, err := s.c.SubmitHet(r.Context(), id.caller, &req.Job, req.Het, key) // SubmitKeyed without req.Het
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	noteTarget(w, submitTarget(ids))
	s.writeSubmitted(w, ids) // api.SubmitResponse{ID: ids[0], IDs: ids}
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := controller.JobFilter{Users: q["user"], Accounts: q["account"], Partitions: q["partition"], All: q.Get("all") == "1" || q.Get("all") == "true"}
	for _, v := range q["id"] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "id=%q is not a job id", v))
			return
		}
		f.IDs = append(f.IDs, spec.JobID(n))
	}
	for _, v := range q["state"] {
		st := spec.JobState(v)
		valid := false
		for _, k := range spec.AllJobStates {
			valid = valid || k == st
		}
		if !valid {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "state=%q is not a job state; use one of %v", v, spec.AllJobStates))
			return
		}
		f.States = append(f.States, st)
	}
	encoded := (*controller.JobView).ListJSON
	switch view := q.Get("view"); view {
	case api.ViewFull:
	case api.ViewBrief:
		encoded = (*controller.JobView).BriefJSON
	default:
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "view=%q is not a job list view; use %q or leave it out for full jobs", view, api.ViewBrief))
		return
	}
	views, err := s.c.ListJobs(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Users see the jobs privacy lets them see ([privacy] jobs, hidden
	// partitions), and another user's paths only in brief.
	full := encoded
	if id := who(r); !id.atLeast(auth.RoleOperator) || id.role == auth.RoleNode {
		if seen := s.view(r); seen.HidesJobs() {
			kept := views[:0]
			for _, v := range views {
				if j := v.Job(); seen.Job(&j) {
					kept = append(kept, v)
				}
			}
			views = kept
		}
		encoded = func(v *controller.JobView) []byte {
			if j := v.Job(); ownsOrPrivileged(id, &j) {
				return full(v)
			}
			return v.BriefJSON()
		}
	}
	// Each view carries its listing JSON, encoded once when the job
	// changed: listing 100,000 jobs is streaming bytes, not encoding. The
	// length is known up front, so the client can size its buffer once
	// and the body goes out unchunked.
	const head, tail = `{"jobs":[`, "]}\n"
	size := len(head) + len(tail) + max(len(views)-1, 0)
	for _, v := range views {
		size += len(encoded(v))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	bw := bufio.NewWriterSize(w, 256<<10)
	_, _ = bw.WriteString(head)
	for i, v := range views {
		if i > 0 {
			_ = bw.WriteByte(',')
		}
		_, _ = bw.Write(encoded(v))
	}
	_, _ = bw.WriteString(tail)
	if err := bw.Flush(); err != nil {
		s.log.Debug("write job list", "err", err)
	}
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	ref, err := jobRef(r)
	if err == nil {
		var j spec.Job
		if j, err = s.c.JobByRef(r.Context(), ref); err == nil && !s.view(r).Job(&j) {
			err = unseenJob(ref)
		}
		if err == nil {
			s.showJob(r, &j)
			s.writeJSON(w, j)
			return
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) waitJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	timeout, err := seconds(r, "timeout", 30*time.Second)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if j, err := s.c.Job(r.Context(), id); err == nil && !s.view(r).Job(&j) {
		s.writeError(w, r, unseenJob(spec.JobRef{ID: id}))
		return
	}
	s.longPoll(w, timeout)
	j, err := s.c.WaitJob(r.Context(), id, timeout)
	s.answerJob(w, r, j, err)
}

func (s *Server) jobAction(w http.ResponseWriter, r *http.Request) {
	ref, err := jobRef(r)
	if err != nil {
		s.refuse(w, r, err)
		return
	}
	// Who may act, and on which job, is known from the URL: checked
	// before the body is read, so a stranger's request costs no read.
	ident := who(r)
	if err := notNode(ident, "acting on a job"); err != nil {
		s.refuse(w, r, err)
		return
	}
	as := ident.actor()
	if err := s.c.MayAct(r.Context(), as, ref, r.PathValue("action")); err != nil {
		s.refuse(w, r, s.hideRefusal(r, ref, err))
		return
	}
	var req api.JobActionRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkReason(req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	action, reason := r.PathValue("action"), req.Reason
	if req.Step != "" {
		// One step of the job (gpuq cancel N.S, scancel [--signal] N.S).
		if action != controller.ActionCancel {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "a step can be cancelled or signalled, not %s", action))
			return
		}
		if len(req.Step) > maxShort {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "step: %d bytes; a step is a number", len(req.Step)))
			return
		}
		j, err := s.c.StepAction(r.Context(), as, ref, req.Step, req.Signal)
		s.answerJob(w, r, j, err)
		return
	}
	if action == controller.ActionComplete {
		// srun's or salloc's allocation, ended with its work's status.
		if ref.IsTask {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "%s is an array task; only an srun or salloc allocation is completed", ref))
			return
		}
		j, err := s.c.Complete(r.Context(), as, ref.ID, req.ExitCode, req.ExitSignal, reason)
		s.answerJob(w, r, j, err)
		return
	}
	if req.Signal != "" && req.SignalTarget != "" {
		req.Signal = req.SignalTarget + ":" + req.Signal // the controller's TARGET:SIG
	}
	if req.Signal != "" {
		if action != controller.ActionCancel {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "a signal goes with cancel only (scancel --signal), not %s", action))
			return
		}
		action, reason = controller.ActionSignal, req.Signal
	}
	j, err := s.c.RefAction(r.Context(), as, ref, action, reason)
	s.answerJob(w, r, j, err)
}

// updateJob is PATCH /v1/jobs/{id}: scontrol update JobId=N.
func (s *Server) updateJob(w http.ResponseWriter, r *http.Request) {
	ref, err := jobRef(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Checked before the body is read (see jobAction).
	ident := who(r)
	if err := notNode(ident, "updating a job"); err != nil {
		s.refuse(w, r, err)
		return
	}
	if !s.limitSubmit(w, r, ident) {
		return
	}
	var req api.JobUpdateRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	u := controller.JobUpdate{Partition: req.Partition, QOS: req.QOS, Nice: req.Nice, Name: req.Name, Comment: req.Comment}
	if req.TimeLimit != nil {
		d := req.TimeLimit.Std()
		u.TimeLimit = &d
	}
	// The new values as sbatch's would be checked (spec.JobSpec.Validate);
	// the controller checks them again with the job, and its policy.
	if err := u.Validate(); err != nil {
		s.writeError(w, r, err)
		return
	}
	as := ident.actor()
	j, err := s.c.UpdateJob(r.Context(), as, ref, u)
	if err != nil {
		s.writeError(w, r, s.hideRefusal(r, ref, err))
		return
	}
	s.showJob(r, &j)
	s.writeJSON(w, j)
}

// showJob makes j what the request's caller may see of it: another
// user's script, environment and paths gone (redact), or for an
// operator, its secrets masked (maskSecrets).
func (s *Server) showJob(r *http.Request, j *spec.Job) {
	redact(who(r), j)
	s.maskSecrets(who(r), j)
}

// answerJob answers a call that returns a job: the error, or the job as
// the caller may see it.
func (s *Server) answerJob(w http.ResponseWriter, r *http.Request, j spec.Job, err error) {
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.showJob(r, &j)
	s.writeJSON(w, j)
}

// cancelJobs is POST /v1/jobs/cancel: scancel by filter, one call and one
// transaction for any number of jobs.
func (s *Server) cancelJobs(w http.ResponseWriter, r *http.Request) {
	// Checked before the body is read (see jobAction).
	ident := who(r)
	if err := notNode(ident, "cancelling jobs"); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req api.CancelJobsRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkReason(req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	for _, st := range req.Filter.States {
		if !slices.Contains(spec.AllJobStates, st) {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "state %q is not a job state; use one of %v", st, spec.AllJobStates))
			return
		}
	}
	as := ident.actor()
	f := controller.CancelFilter{JobFilter: controller.JobFilter{IDs: req.Filter.IDs, Users: req.Filter.Users, Accounts: req.Filter.Accounts,
		Partitions: req.Filter.Partitions, States: req.Filter.States}, Names: req.Names, QOS: req.QOS}
	ids, skipped, err := s.c.CancelJobs(r.Context(), as, f, req.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ids == nil {
		ids = []spec.JobID{}
	}
	if v := s.view(r); !v.All() && v.Privacy().Jobs {
		skipped = 0 // others' jobs the filter matched are not the caller's to know of
	}
	s.writeJSON(w, api.CancelJobsResponse{Cancelled: ids, Skipped: skipped})
}

// associations is GET /v1/associations (sacctmgr list): the configured
// accounts with their users and limits, and the QOS, read-only.
func (s *Server) associations(w http.ResponseWriter, r *http.Request) {
	cfg, err := s.c.ConfigView(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.AssociationsResponse{Accounts: []api.AssocAccount{}, QOS: []api.AssocQOS{}, DefaultAccount: cfg.DefaultAccount, DefaultQOS: cfg.DefaultQOS}
	v := s.view(r)
	users := func(names []string, account string) []string {
		out := []string{}
		for _, n := range names {
			if v.User(n, account) {
				out = append(out, n)
			}
		}
		return out
	}
	for _, a := range cfg.Accounts {
		if !v.Account(a.Name) {
			continue // [privacy] accounts
		}
		out.Accounts = append(out.Accounts, api.AssocAccount{Name: a.Name, Parent: a.Parent, Shares: a.Shares, Users: users(a.Users, a.Name),
			Coordinators: users(a.Coordinators, a.Name), MaxGPUs: a.MaxGPUs, MaxJobs: a.MaxJobs, MaxSubmitJobs: a.MaxSubmitJobs,
			MaxWall: spec.Duration(a.MaxWall), MaxGPUHours: a.MaxGPUHours})
	}
	for _, q := range cfg.QOS {
		out.QOS = append(out.QOS, api.AssocQOS{Name: q.Name, Priority: q.Priority, Preempt: q.Preempt, PreemptMode: q.PreemptMode,
			MaxGPUsPerUser: q.MaxGPUsPerUser, MaxJobsPerUser: q.MaxJobsPerUser, MaxWall: spec.Duration(q.MaxWall)})
	}
	s.writeJSON(w, out)
}

func (s *Server) listPartitions(w http.ResponseWriter, r *http.Request) {
	ps, err := s.c.Partitions(r.Context(), s.viewer(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.PartitionsResponse{Partitions: make([]api.Partition, 0, len(ps))}
	for _, p := range ps {
		out.Partitions = append(out.Partitions, api.Partition{Name: p.Name, Default: p.Default, State: p.State,
			DefaultTime: spec.Duration(p.DefaultTime), MaxTime: spec.Duration(p.MaxTime), Nodes: p.Members})
	}
	s.writeJSON(w, out)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.c.Nodes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A node lists its jobs and partitions: only those the reader may see.
	if v := s.view(r); v.HidesJobs() {
		var ids []spec.JobID
		for _, n := range nodes {
			ids = append(ids, n.Jobs...)
		}
		seen, err := s.visibleJobs(r, ids, false)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		for i := range nodes {
			n := &nodes[i]
			n.Jobs = slices.DeleteFunc(slices.Clone(n.Jobs), func(id spec.JobID) bool { return !seen[id] })
			n.Partitions = slices.DeleteFunc(slices.Clone(n.Partitions), func(p string) bool { return !v.Partition(p) })
		}
	}
	s.writeJSON(w, api.NodesResponse{Nodes: nodes})
}

func (s *Server) nodeAction(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := requireRole(id, auth.RoleOperator, r.PathValue("action")+" of node "+quoteShort(r.PathValue("name"))); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req api.NodeActionRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkReason(req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	n, err := s.c.NodeAction(r.Context(), id.privileged(), r.PathValue("name"), r.PathValue("action"), req.Reason)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, n)
}

func (s *Server) reconfigure(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := requireRole(id, auth.RoleOperator, "reconfigure"); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req struct{}
	if r.ContentLength != 0 {
		if err := decode(w, r, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	msg, err := s.c.Reconfigure(r.Context(), id.privileged())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	noteError(w, msg) // the audit log keeps what changed (limits)
	s.writeJSON(w, api.ReconfigureResponse{Message: msg})
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if err := mayBeNode(who(r)); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req api.RegisterRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkInventory(&req.Inventory); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkRunning(req.Running); err != nil {
		s.writeError(w, r, err)
		return
	}
	as, err := nodeCaller(who(r), req.Inventory.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	hb, err := s.c.RegisterRunning(r.Context(), as, req.Inventory, req.Running)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out, err := s.c.GPUsOut(r.Context(), req.Inventory.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.RegisterResponse{HeartbeatIntervalSec: max(int(hb/time.Second), 1), NodeTimeoutMS: s.c.NodeTimeout().Milliseconds(),
		Revocations: s.revocationsFor(req.Revocations, req.Revocations != ""), GPUsOut: out, ControllerID: s.c.Identity()})
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	if _, err := nodeCaller(who(r), r.PathValue("name")); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req api.HeartbeatRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkRunning(req.Running); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := errors.Join(checkGPUProblems(req.GPUProblems), checkGPUEvents(req.GPUEvents), checkImageReport(req.Images, req.Pulls), checkSealed(req.Sealed)); err != nil {
		s.writeError(w, r, err)
		return
	}
	as, err := nodeCaller(who(r), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.c.Heartbeat(r.Context(), as, r.PathValue("name"), req.Running); err != nil {
		s.writeError(w, r, err)
		return
	}
	for i := range req.GPUProblems {
		req.GPUProblems[i].Problem = sanitize(req.GPUProblems[i].Problem)
	}
	for i := range req.GPUEvents {
		req.GPUEvents[i].Detail = sanitize(req.GPUEvents[i].Detail)
	}
	if len(req.GPUProblems) > 0 || len(req.GPUEvents) > 0 {
		if err := s.c.GPUHealth(r.Context(), as, r.PathValue("name"), req.GPUProblems, req.GPUEvents); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if req.NICReport {
		for i := range req.NICProblems {
			req.NICProblems[i].Problem = sanitize(req.NICProblems[i].Problem)
		}
		if err := s.c.NICHealth(r.Context(), as, r.PathValue("name"), req.NICProblems); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	var inv *controller.NodeImages
	if req.Images != nil {
		inv = &controller.NodeImages{Version: req.Images.Version, Images: req.Images.Images}
	}
	var pulls []controller.PullNote
	for _, p := range req.Pulls {
		pulls = append(pulls, controller.PullNote{Job: p.Job, Done: p.Done, Total: p.Total, Prefetch: p.Prefetch})
	}
	imagesVersion, err := s.c.NodeImages(r.Context(), as, r.PathValue("name"), inv, pulls)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := api.HeartbeatResponse{NodeTimeoutMS: s.c.NodeTimeout().Milliseconds(),
		Revocations: s.revocationsFor(req.Revocations, req.Revocations != ""), ImagesVersion: imagesVersion, Sealed: true}
	for _, p := range s.c.PrefetchFor(r.PathValue("name")) {
		resp.Prefetch = append(resp.Prefetch, api.Prefetch{Job: p.Job, Image: p.Image, UID: p.UID, GID: p.GID, Start: spec.NewTime(p.Start)})
	}
	if req.Prepares {
		for _, e := range s.c.ExpectedFor(r.PathValue("name")) {
			resp.Prepare = append(resp.Prepare, api.Expected{Job: e.Job, Node: e.Node, Start: spec.NewTime(e.Start)})
		}
	}
	if len(req.Sealed) > 0 {
		// The node's sealed checkpoint directories: those no job will
		// restart from are named back for it to remove (retain.go).
		dirs := make([]controller.CkptDir, len(req.Sealed))
		for i, d := range req.Sealed {
			dirs[i] = controller.CkptDir{Job: d.Job, Tag: d.Tag}
		}
		ended, err := s.c.EndedCheckpoints(r.Context(), as, dirs)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		for _, d := range ended {
			resp.Ended = append(resp.Ended, api.CkptDir{Job: d.Job, Tag: d.Tag})
		}
	}
	s.writeJSON(w, resp)
}

// checkSealed bounds a heartbeat's list of sealed checkpoint directories.
func checkSealed(dirs []api.CkptDir) error {
	if len(dirs) > api.MaxSealed {
		return spec.Errorf(spec.ErrInvalid, "heartbeat lists %d sealed checkpoint directories; at most %d (the oldest first)", len(dirs), api.MaxSealed)
	}
	for _, d := range dirs {
		if d.Job == 0 {
			return spec.Errorf(spec.ErrInvalid, "heartbeat lists a sealed checkpoint directory of job 0; job IDs start at 1")
		}
	}
	return nil
}

func (s *Server) assignments(w http.ResponseWriter, r *http.Request) {
	as, err := nodeCaller(who(r), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	after, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	if err != nil && r.URL.Query().Get("after") != "" {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "after=%q is not a generation number", r.URL.Query().Get("after")))
		return
	}
	wait, err := seconds(r, "wait", 0)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	have, asked := r.URL.Query().Get("revocations"), r.URL.Query().Has("revocations")
	if r.URL.Query().Get("watch") == "1" {
		deltas := r.URL.Query().Get("deltas") == "1"
		s.watchAssignments(w, r, as, r.PathValue("name"), after, wait, have, asked, deltas) // watch.go
		return
	}
	s.longPoll(w, wait)
	gen, list, err := s.pollAssignments(r, as, r.PathValue("name"), after, wait, have, asked)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	pb, release := answerBuf()
	defer release()
	*pb, _ = s.appendAssignments((*pb)[:0], gen, list, have, asked, nil)
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(*pb); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

// appendAssignments appends the answer of generation gen with list to b,
// for a node that holds revocation lists version have (asked: it said),
// and returns the lists' version it carries ("": none). With delta (a
// watch stream's line after its first, watch.go) list is not read: the
// answer is delta's line, the changes since the stream's line before.
func (s *Server) appendAssignments(b []byte, gen uint64, list []controller.Assignment, have string, asked bool, delta *sentSet) ([]byte, string) {
	out := api.AssignmentsResponse{Generation: gen, Revocations: s.revocationsFor(have, asked), StepTicketKey: s.steps.publicKey(), Now: s.c.Now(),
		ControllerID: s.c.Identity()}
	n, at := len(list), func(i int) *controller.Assignment { return &list[i] }
	if delta != nil {
		out.Delta, out.Base, out.Removed = true, delta.base, delta.removed
		n, at = len(delta.changed), func(i int) *controller.Assignment { return &delta.cur[delta.changed[i]] }
	}
	// Encoded by hand (api.AssignmentsResponse.AppendJSONEach, encoding/json's
	// bytes), each assignment from the controller's record through one
	// api.Assignment, with the newline json.Encoder adds, into a pooled
	// buffer (an answer is ~2 KB per assignment; Write has copied or sent
	// it when it returns). The job's JSON is the one its published view
	// keeps (controller.JobView.AppendJSON): the answer carries every job
	// on the node and is sent again at each change of any of them, so a
	// job was encoded ~20-40 times over its run (the answers' JSON was
	// 2.5 % of the controller's CPU in a live burst, docs/fleet.md).
	b = out.AppendJSONEach(b, n, func(b []byte, i int) []byte { return appendAssignment(b, at(i)) })
	var version string
	if out.Revocations != nil {
		version = out.Revocations.Version
	}
	return append(b, '\n'), version
}

// appendAssignment appends a's JSON (api.Assignment's), its job's from
// the job's published view where it has one.
func appendAssignment(b []byte, a *controller.Assignment) []byte {
	one := wireAssignment(a)
	if a.View != nil {
		return one.AppendJSONWithJob(b, a.View.AppendJSON)
	}
	return one.AppendJSONWithJob(b, a.Job.AppendJSON)
}

// wireAssignment is a as api.Assignment, without its job (appended from
// the view by AppendJSONWithJob).
func wireAssignment(a *controller.Assignment) api.Assignment {
	return api.Assignment{Alloc: a.Alloc, Stop: a.Stop, StopState: a.StopState, StopReason: a.StopReason,
		Checkpoint: a.Checkpoint, Signal: a.Signal, SignalSeq: a.SignalSeq, MPIDefault: a.MPIDefault, ClusterName: a.ClusterName, Gate: a.Gate, Het: a.Het}
}

// answerBufs are the assignments answers' buffers, kept up to
// maxPooledAnswer bytes.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

const maxPooledAnswer = 1 << 20

// answerBuf takes an assignments answer's buffer from answerBufs; release
// gives it back unless it grew past maxPooledAnswer.
func answerBuf() (pb *[]byte, release func()) {
	pb = answerBufs.Get().(*[]byte)
	return pb, func() {
		if cap(*pb) <= maxPooledAnswer {
			answerBufs.Put(pb)
		}
	}
}

// eventSkewTolerance is the difference between a node's clock as it sent
// events and the controller's as it reads them that is taken for the
// request's own delay (a loaded controller reads it seconds later) and
// left alone.
const eventSkewTolerance = time.Minute

// shiftEventTimes moves the times of a node's events, stamped on its
// clock, to the controller's (now): by the difference of the two clocks
// as the node sent them (EventsRequest.Now), where it is over
// eventSkewTolerance. A job's start stamped by a node whose clock is an
// hour behind would otherwise be an hour in the controller's past.
func shiftEventTimes(req api.EventsRequest, now time.Time, log *slog.Logger, node string) {
	if req.Now.IsZero() {
		return
	}
	d := now.Sub(req.Now)
	if d.Abs() <= eventSkewTolerance {
		return
	}
	log.Debug("node's clock differs from the controller's; its events' times moved", "node", node, "controller_ahead_by", d.Round(time.Millisecond))
	move := func(t *spec.Time) {
		if !t.IsZero() {
			*t = spec.NewTime(t.Add(d))
		}
	}
	for i := range req.Events {
		e := &req.Events[i]
		move(&e.Time)
		if e.Step != nil {
			move(&e.Step.StartTime)
			move(&e.Step.EndTime)
		}
		if e.Usage != nil {
			move(&e.Usage.Start)
			move(&e.Usage.End)
		}
	}
}

// sameIdentity refuses events a node recorded for another controller
// identity (api.EventsRequest.ControllerID): this controller's state was
// reset or replaced since, and its allocation IDs may name other jobs'
// allocations. The node agent drops such events itself once an answer
// tells it the new identity; this is the defence behind it.
func (s *Server) sameIdentity(theirs, node string, n int) error {
	mine := s.c.Identity()
	if theirs == "" || mine == "" || theirs == mine {
		return nil
	}
	s.log.Warn("refused events a node recorded for another controller state", "node", node, "events", n, "their_controller_id", theirs, "controller_id", mine)
	return spec.Errorf(spec.ErrConflict, "node %s sent %d events recorded for controller state %s, but this controller's state is %s (it was reset or replaced): they belong to allocations of the old state and are not applied; the node agent drops them once its next register or assignments answer tells it this identity", node, n, theirs, mine)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if _, err := nodeCaller(who(r), r.PathValue("name")); err != nil {
		s.refuse(w, r, err)
		return
	}
	var req api.EventsRequest
	if err := decodeWith(w, r, &req, func(b []byte) bool { return api.DecodeEventsRequest(b, &req) }); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkEvents(req.Events); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.sameIdentity(req.ControllerID, r.PathValue("name"), len(req.Events)); err != nil {
		s.writeError(w, r, err)
		return
	}
	// The controller applies an event only to an allocation with a live
	// part on the posting node (and refuses events naming another node),
	// so binding the path's node to the token is enough: a node cannot
	// end another node's job.
	as, err := nodeCaller(who(r), r.PathValue("name"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	shiftEventTimes(req, s.c.Now(), s.log, r.PathValue("name"))
	evs := make([]controller.NodeEvent, 0, len(req.Events))
	var samples []accounting.UsageSample
	var seen []controller.UsageSeen
	var usageSeq uint64
	for _, e := range req.Events {
		if e.Kind == api.EventUsage {
			// Samples are accounting's, not the controller's state: stored
			// before the acknowledgement, so none acknowledged is lost.
			u := e.Usage
			samples = append(samples, accounting.UsageSample{ID: u.ID, JobID: e.JobID, Attempt: u.Attempt,
				Node: r.PathValue("name"), Start: u.Start.Time, End: u.End.Time, GPUs: u.GPUs,
				GPUUtilAvg: u.GPUUtilAvg, GPUUtilMax: u.GPUUtilMax, GPUMemMiB: u.GPUMemMiB, PowerW: u.PowerW,
				EnergyJ: u.EnergyJ, CPUSeconds: u.CPUSeconds, MemMiB: u.MemMiB, MemPeakMiB: u.MemPeakMiB})
			seen = append(seen, controller.UsageSeen{JobID: e.JobID, Attempt: u.Attempt, Start: u.Start.Time, End: u.End.Time,
				GPUs: u.GPUs, GPUUtilMax: u.GPUUtilMax})
			usageSeq = max(usageSeq, e.Seq)
			continue
		}
		for i := range e.GateFailed {
			e.GateFailed[i].Problem = sanitize(e.GateFailed[i].Problem)
		}
		evs = append(evs, controller.NodeEvent{Seq: e.Seq, Node: e.Node, AllocID: e.AllocID, JobID: e.JobID, Kind: e.Kind,
			Time: e.Time.Time, State: e.State, ExitCode: e.ExitCode, Signal: e.Signal, Reason: sanitize(e.Reason),
			CkptSeq: e.CkptSeq, CkptBytes: e.CkptBytes, MIG: e.MIG, Step: e.Step, GateFailed: e.GateFailed,
			PullMS: max(e.PullMS, 0), PullBytes: max(e.PullBytes, 0)})
	}
	// A node speaks only for its own allocations, usage included: judged
	// before the events apply (an exit in this batch may end the attempt).
	if samples, seen, err = s.ownUsage(r.Context(), r.PathValue("name"), samples, seen); err != nil {
		s.writeError(w, r, err)
		return
	}
	acked, err := s.c.NodeEvents(r.Context(), as, r.PathValue("name"), evs)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(samples) > 0 && s.usage != nil {
		if err := s.usage.RecordUsageSamples(r.Context(), samples); err != nil {
			s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "store %d usage samples: %v; the node retries", len(samples), err))
			return
		}
	}
	// The idle-GPU policy judges the samples once they are stored; a
	// failure here loses no sample, only delays a flag to the next ones.
	if err := s.c.ObserveUsage(r.Context(), r.PathValue("name"), seen); err != nil {
		s.log.Warn("idle-GPU policy did not see usage samples", "node", r.PathValue("name"), "err", err)
	}
	s.latest.add(samples)
	s.writeAcked(w, max(acked, usageSeq)) // api.EventsResponse
}

// refuse answers a request refused before its body was read, and closes
// the connection after the answer: the unread body is not drained, and
// a refused client does not keep the connection.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	closeAfter(w, r)
	s.writeError(w, r, err)
}

// mayBeNode refuses, before the body names the node, a caller that
// cannot speak the node protocol for any node.
func mayBeNode(id identity) error {
	if id.role == auth.RoleNode || !id.remote && id.caller.Known && id.caller.UID == 0 {
		return nil
	}
	_, err := nodeCaller(id, "")
	return err
}

// checkReason refuses a malformed --reason (shown in gpuq).
func checkReason(reason string) error {
	var c checker
	c.name("--reason", reason, maxShort*4)
	return c.err()
}

// submitTarget names a submission's jobs for the audit log: "job 7", or
// "jobs 7-106" for an array (its IDs are consecutive), "jobs 7,9" otherwise.
func submitTarget(ids []spec.JobID) string {
	if len(ids) == 1 {
		return "job " + strconv.FormatUint(uint64(ids[0]), 10)
	}
	consecutive := true
	for i := 1; i < len(ids); i++ {
		consecutive = consecutive && ids[i] == ids[i-1]+1
	}
	first, last := strconv.FormatUint(uint64(ids[0]), 10), strconv.FormatUint(uint64(ids[len(ids)-1]), 10)
	if consecutive {
		return "jobs " + first + "-" + last
	}
	var b strings.Builder
	b.WriteString("jobs ")
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	return clip(b.String())
}
