package slurmrest

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// Empty bodies of answers that carry only errors: the members each
// response schema requires.
const (
	emptyJobs       = `"jobs":[],"last_backfill":{"set":false,"infinite":false,"number":0},"last_update":{"set":false,"infinite":false,"number":0}`
	emptyNodes      = `"nodes":[],"last_update":{"set":false,"infinite":false,"number":0}`
	emptyParts      = `"partitions":[],"last_update":{"set":false,"infinite":false,"number":0}`
	emptyResv       = `"reservations":[],"last_update":{"set":false,"infinite":false,"number":0}`
	emptyLicenses   = `"licenses":[],"last_update":{"set":false,"infinite":false,"number":0}`
	emptyStatus     = `"status":[]`
	emptyResults    = `"results":[]`
	emptyResvMod    = `"reservations":[]`
	emptyPings      = `"pings":[]`
	emptyStatistics = `"statistics":{}`
	emptyShares     = `"shares":{}`
	emptyLayout     = `"nodes":[]`
)

func lastUpdate(w *jw, now time.Time) {
	w.key("last_update")
	w.num(now.Unix())
}

// jobsPath is GET /v1/jobs with ended jobs the controller still keeps:
// slurmrestd lists those too until they age out.
const jobsPath = "/v1/jobs?all=true"

func (c *call) writeJobs(jobs []spec.Job) {
	now := c.h.o.Now()
	c.reply(func(w *jw) {
		w.key("jobs")
		w.arr(func() {
			for i := range jobs {
				jobFields.write(w, c.v, &jobRec{Job: &jobs[i], cluster: c.h.o.Cluster})
			}
		})
		w.key("last_backfill")
		w.num(now.Unix())
		lastUpdate(w, now)
	})
}

// getJobs is GET jobs/ (squeue).
func getJobs(c *call) {
	if !c.queryKnown("update_time", "flags") {
		return
	}
	var out api.JobsResponse
	if !c.get(jobsPath, &out, errInvalidJobID) {
		return
	}
	c.writeJobs(out.Jobs)
}

// getJobsState is GET jobs/state/?job_id=1,2.
func getJobsState(c *call) {
	if !c.queryKnown("job_id") {
		return
	}
	q := url.Values{"all": {"true"}}
	for id := range strings.SplitSeq(c.r.URL.Query().Get("job_id"), ",") {
		if id = strings.TrimSpace(id); id == "" {
			continue
		}
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			c.fail(http.StatusBadRequest, errInvalidJobID, fmt.Sprintf("job_id=%q: give job ids separated by commas", clipText(id)), "job_id")
			return
		}
		q.Add("id", id)
	}
	var out api.JobsResponse
	if !c.get("/v1/jobs?"+q.Encode(), &out, errInvalidJobID) {
		return
	}
	c.writeJobs(out.Jobs)
}

// jobPath is /v1's path of the job c names, checked.
func (c *call) jobPath() (string, bool) {
	if _, err := spec.ParseJobRef(c.param); err != nil || c.param == "" {
		c.fail(http.StatusBadRequest, errInvalidJobID, fmt.Sprintf("job id %q: give a job id (123) or an array task (123_4)", clipText(c.param)), "job_id")
		return "", false
	}
	return "/v1/jobs/" + url.PathEscape(c.param), true
}

// getJob is GET job/{job_id} (scontrol show job).
func getJob(c *call) {
	if !c.queryKnown("update_time", "flags") {
		return
	}
	p, ok := c.jobPath()
	if !ok {
		return
	}
	var j spec.Job
	if !c.get(p, &j, errInvalidJobID) {
		return
	}
	c.writeJobs([]spec.Job{j})
}

// updateJob is POST job/{job_id} (scontrol update): the fields gpud can
// change on a submitted job.
func updateJob(c *call) {
	p, ok := c.jobPath()
	if !ok {
		return
	}
	body, ok := c.body()
	if !ok {
		return
	}
	var (
		u       api.JobUpdateRequest
		hold    *bool
		changed bool
	)
	for _, k := range sortedKeys(body) {
		v := body[k]
		var err error
		switch k {
		case "time_limit":
			var nv noVal
			if nv, err = asNoVal(v); err == nil && nv.set {
				d := spec.Duration(time.Duration(nv.n) * time.Minute)
				if nv.infinite {
					d = 0
				}
				u.TimeLimit = &d
			}
		case "partition", "qos", "name", "comment":
			var s string
			if s, err = asString(v); err == nil {
				switch k {
				case "partition":
					u.Partition = &s
				case "qos":
					u.QOS = &s
				case "name":
					u.Name = &s
				case "comment":
					u.Comment = &s
				}
			}
		case "nice":
			var nv noVal
			if nv, err = asNoVal(v); err == nil {
				n := int(nv.n)
				u.Nice = &n
			}
		case "hold":
			b, isBool := v.(bool)
			if !isBool {
				err = fmt.Errorf("want true or false, got %s", jsonType(v))
			}
			hold = &b
		case "job_id":
		default:
			if _, known := descByName[k]; known {
				c.addError(errNotSupported, fmt.Sprintf("job.%s cannot be changed on a submitted gpud job; gpud changes time_limit, partition, qos, nice, name, comment and hold", k), k)
				continue
			}
			c.warn(fmt.Sprintf("%s is not a job description field gpud reads; ignored", k), k)
			continue
		}
		if err != nil {
			c.addError(errRESTInvalidJobDesc, fmt.Sprintf("job.%s: %v", k, err), k)
		}
		changed = true
	}
	if len(c.errors) > 0 {
		c.failAll(http.StatusBadRequest)
		return
	}
	if !changed {
		c.fail(http.StatusBadRequest, errRESTInvalidJobDesc, "nothing to change: send the fields to change (time_limit, partition, qos, nice, name, comment, hold)", "")
		return
	}
	var j spec.Job
	if u != (api.JobUpdateRequest{}) {
		if err := c.h.v1.Call(c.r, http.MethodPatch, p, u, &j); err != nil {
			c.failV1(err, errInvalidJobID, errRESTInvalidJobDesc)
			return
		}
	}
	if hold != nil {
		action := "/release"
		if *hold {
			action = "/hold"
		}
		if err := c.h.v1.Call(c.r, http.MethodPost, p+action, api.JobActionRequest{}, &j); err != nil {
			c.failV1(err, errInvalidJobID, errRESTInvalidJobDesc)
			return
		}
	}
	c.reply(func(w *jw) {
		w.key("results")
		w.arr(func() { arrayResult(w, j.ID, c.param, nil) })
	})
}

// arrayResult writes a job_array_response_msg_entry.
func arrayResult(w *jw, id spec.JobID, ref string, err error) {
	w.obj(func() {
		w.key("job_id")
		w.uint(uint64(id))
		w.key("step_id")
		w.str(ref)
		code, msg := 0, ""
		if err != nil {
			code, msg = errorNumber(err, errInvalidJobID, errRESTInvalidQuery), err.Error()
		}
		w.key("error")
		w.str(msg)
		w.key("error_code")
		w.int(int64(code))
		w.key("why")
		w.str(msg)
	})
}

// errorNumber is the Slurm error number of a /v1 error: notFound for a
// missing object, invalid for a bad request.
func errorNumber(err error, notFound, invalid int) int {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return errInternal
	}
	if ae.Status == http.StatusTooManyRequests {
		return errTooManyRPCs
	}
	switch ae.Code {
	case api.CodeNotFound:
		return notFound
	case api.CodeInvalid:
		return invalid
	case api.CodePermissionDenied:
		return errAccessDenied
	case api.CodeConflict:
		return errAlreadyDone
	case api.CodeRefused:
		return errAccountingPolicy
	case api.CodeUnavailable:
		return errDBConnection
	case api.CodeNotLeader:
		return errCtldConnection
	}
	return errInternal
}

func sortedKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// signalJob is DELETE job/{job_id}[?signal=SIG] (scancel).
func signalJob(c *call) {
	if !c.queryKnown("signal", "flags") {
		return
	}
	p, ok := c.jobPath()
	if !ok {
		return
	}
	q := c.r.URL.Query()
	req := api.JobActionRequest{Signal: q.Get("signal")}
	if req.Signal != "" {
		if _, err := strconv.Atoi(req.Signal); err != nil {
			req.Signal = strings.TrimPrefix(strings.ToUpper(req.Signal), "SIG")
		}
		if req.Signal == "KILL" || req.Signal == "9" {
			req.Signal = "" // SIGKILL is a cancel, as scancel -s KILL
		}
	}
	for f := range strings.SplitSeq(q.Get("flags"), ",") {
		switch f {
		case "", "FULL_JOB", "VERBOSE", "HURRY":
		case "BATCH_JOB":
			req.SignalTarget = spec.SignalBatch
		case "FULL_STEPS_ONLY":
			req.SignalTarget = spec.SignalSteps
		default:
			c.warn(fmt.Sprintf("flags=%s has no effect in gpud", clipText(f)), "flags")
		}
	}
	var j spec.Job
	err := c.h.v1.Call(c.r, http.MethodPost, p+"/cancel", req, &j)
	if err != nil && c.v >= 44 {
		c.addError(errorNumber(err, errInvalidJobID, errRESTInvalidQuery), err.Error(), "")
	}
	if err != nil && c.v < 44 {
		c.failV1(err, errInvalidJobID, errRESTInvalidQuery)
		return
	}
	status := http.StatusOK
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			status = ae.Status
		}
	}
	c.replyStatus(status, func(w *jw) {
		w.key("status")
		w.arr(func() { killResult(w, c.param, j.ID, err) })
	})
}

// killResult writes a kill_jobs_resp_job.
func killResult(w *jw, ref string, id spec.JobID, err error) {
	w.obj(func() {
		code, msg := 0, ""
		if err != nil {
			code, msg = errorNumber(err, errInvalidJobID, errRESTInvalidQuery), err.Error()
		}
		w.key("error")
		w.obj(func() {
			w.key("string")
			w.str(errNameIf(code))
			w.key("code")
			w.int(int64(code))
			w.key("message")
			w.str(msg)
		})
		w.key("step_id")
		w.str(ref)
		w.key("job_id")
		if id == 0 {
			if n, perr := strconv.ParseUint(strings.SplitN(ref, "_", 2)[0], 10, 64); perr == nil {
				id = spec.JobID(n)
			}
		}
		w.num(int64(id))
		w.key("federation")
		w.obj(func() {
			w.key("sibling")
			w.str("")
		})
	})
}

func errNameIf(code int) string {
	if code == 0 {
		return ""
	}
	return errName(code)
}

// deleteJobs is DELETE jobs/ (scancel with filters; kill_jobs_msg).
func deleteJobs(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	var (
		req    api.CancelJobsRequest
		signal string
		ids    []string
	)
	for _, k := range sortedKeys(body) {
		v := body[k]
		var err error
		switch k {
		case "account":
			req.Filter.Accounts, err = asList(v)
		case "partition":
			req.Filter.Partitions, err = asList(v)
		case "qos":
			req.QOS, err = asList(v)
		case "job_name":
			req.Names, err = asList(v)
		case "user_name":
			req.Filter.Users, err = asList(v)
		case "job_state":
			var l []string
			if l, err = asList(v); err == nil {
				for _, s := range l {
					req.Filter.States = append(req.Filter.States, spec.JobState(s))
				}
			}
		case "jobs":
			ids, err = asList(v)
		case "signal":
			signal, err = asString(v)
		case "flags":
		default:
			c.warn(fmt.Sprintf("%s has no effect in gpud's scancel; ignored", k), k)
		}
		if err != nil {
			c.addError(errRESTInvalidQuery, fmt.Sprintf("%s: %v", k, err), k)
		}
	}
	if len(c.errors) > 0 {
		c.failAll(http.StatusBadRequest)
		return
	}
	type result struct {
		ref string
		id  spec.JobID
		err error
	}
	var results []result
	if len(ids) > 0 || signal != "" {
		// By id (or a signal, which goes job by job): each job its own
		// call, each with its own answer.
		if len(ids) == 0 {
			var out api.JobsResponse
			q := url.Values{}
			for _, a := range req.Filter.Accounts {
				q.Add("account", a)
			}
			for _, p := range req.Filter.Partitions {
				q.Add("partition", p)
			}
			for _, u := range req.Filter.Users {
				q.Add("user", u)
			}
			for _, s := range req.Filter.States {
				q.Add("state", string(s))
			}
			if !c.get("/v1/jobs?"+q.Encode(), &out, errInvalidJobID) {
				return
			}
			for _, j := range out.Jobs {
				ids = append(ids, strconv.FormatUint(uint64(j.ID), 10))
			}
		}
		for _, ref := range ids {
			var j spec.Job
			if _, err := spec.ParseJobRef(ref); err != nil {
				results = append(results, result{ref: ref, err: &api.Error{Status: 400, Code: api.CodeInvalid, Message: fmt.Sprintf("%q is not a job id", clipText(ref))}})
				continue
			}
			err := c.h.v1.Call(c.r, http.MethodPost, "/v1/jobs/"+url.PathEscape(ref)+"/cancel", api.JobActionRequest{Signal: strings.TrimPrefix(strings.ToUpper(signal), "SIG")}, &j)
			results = append(results, result{ref: ref, id: j.ID, err: err})
		}
	} else {
		var out api.CancelJobsResponse
		if err := c.h.v1.Call(c.r, http.MethodPost, "/v1/jobs/cancel", req, &out); err != nil {
			c.failV1(err, errInvalidJobID, errRESTInvalidQuery)
			return
		}
		for _, id := range out.Cancelled {
			results = append(results, result{ref: strconv.FormatUint(uint64(id), 10), id: id})
		}
		if out.Skipped > 0 {
			c.warn(fmt.Sprintf("%d matching jobs were not cancelled (another user's, or already ending)", out.Skipped), "")
		}
	}
	c.reply(func(w *jw) {
		w.key("status")
		w.arr(func() {
			for _, r := range results {
				killResult(w, r.ref, r.id, r.err)
			}
		})
	})
}

// requeueJob is GET job/{job_id}/requeue (v0.0.45).
func requeueJob(c *call) {
	if !c.queryKnown("Incomplete", "Hold", "SpecialExit") {
		return
	}
	p, ok := c.jobPath()
	if !ok {
		return
	}
	q := c.r.URL.Query()
	var j spec.Job
	err := c.requeue(p, q.Has("Hold") && q.Get("Hold") != "false", &j)
	if err != nil {
		c.failV1(err, errInvalidJobID, errRESTInvalidQuery)
		return
	}
	c.reply(func(w *jw) {
		w.key("status")
		w.arr(func() { arrayResult(w, j.ID, c.param, nil) })
	})
}

// requeue requeues the job at p, held when hold (scontrol requeuehold).
func (c *call) requeue(p string, hold bool, j *spec.Job) error {
	if err := c.h.v1.Call(c.r, http.MethodPost, p+"/requeue", api.JobActionRequest{}, j); err != nil {
		return err
	}
	if hold {
		return c.h.v1.Call(c.r, http.MethodPost, p+"/hold", api.JobActionRequest{}, j)
	}
	return nil
}

// requeueJobs is POST jobs/requeue (v0.0.45).
func requeueJobs(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	ids, err := asList(body["jobs"])
	if err != nil || len(ids) == 0 {
		c.fail(http.StatusBadRequest, errRESTInvalidQuery, "jobs: give the job ids to requeue", "jobs")
		return
	}
	hold := false
	if fl, ok := body["flags"]; ok {
		l, err := asList(fl)
		if err != nil {
			c.fail(http.StatusBadRequest, errRESTInvalidQuery, "flags: "+err.Error(), "flags")
			return
		}
		hold = slices.Contains(l, "Hold")
	}
	type res struct {
		ref string
		j   spec.Job
		err error
	}
	var out []res
	for _, ref := range ids {
		r := res{ref: ref}
		if _, perr := spec.ParseJobRef(ref); perr != nil {
			r.err = &api.Error{Status: 400, Code: api.CodeInvalid, Message: fmt.Sprintf("%q is not a job id", clipText(ref))}
		} else {
			r.err = c.requeue("/v1/jobs/"+url.PathEscape(ref), hold, &r.j)
		}
		out = append(out, r)
	}
	c.reply(func(w *jw) {
		w.key("status")
		w.arr(func() {
			for _, r := range out {
				w.arr(func() { arrayResult(w, r.j.ID, r.ref, r.err) })
			}
		})
	})
}

// allocate is POST job/allocate (salloc without a shell): an allocation
// with no batch script, released by cancelling it.
func allocate(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	desc, isObj := body["job"].(map[string]any)
	if !isObj {
		c.fail(http.StatusBadRequest, errRESTInvalidJobDesc, "job: send the job description as an object", "job")
		return
	}
	if _, het := body["hetjob"]; het {
		c.fail(http.StatusBadRequest, errNotSupported, "gpud runs no heterogeneous jobs (hetjob); allocate with job", "hetjob")
		return
	}
	if _, has := desc["script"]; !has {
		desc["script"] = "#!/bin/sh\n# allocation made through Slurm's REST API (job/allocate)\n"
	}
	js, ok := c.jobSpec(desc, "", "job")
	if !ok {
		return
	}
	js.Interactive = true
	var out api.SubmitResponse
	if err := c.h.v1.Call(c.r, http.MethodPost, "/v1/jobs", api.SubmitRequest{Job: js}, &out); err != nil {
		c.failV1(err, errInvalidJobID, errRESTInvalidJobDesc)
		return
	}
	c.reply(func(w *jw) {
		w.key("job_id")
		w.uint(uint64(out.ID))
		w.key("job_submit_user_msg")
		w.str("allocation made; its nodes hold their share until it is cancelled (DELETE job/" + strconv.FormatUint(uint64(out.ID), 10) + ") or its time is up")
	})
}

// nodes answers remember when the node view last changed (update_time).
type nodeEpoch struct {
	mu    sync.Mutex
	sig   string
	since time.Time
}

func (e *nodeEpoch) changed(sig string, now time.Time) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sig != e.sig || e.since.IsZero() {
		e.sig, e.since = sig, now
	}
	return e.since
}

// getNodes is GET nodes/ and node/{name} (sinfo, scontrol show node).
func getNodes(c *call) {
	if !c.queryKnown("update_time", "flags") {
		return
	}
	var out api.NodesResponse
	if !c.get("/v1/nodes", &out, errInvalidNodeName) {
		return
	}
	nodes := out.Nodes
	if c.param != "" {
		i := slices.IndexFunc(nodes, func(n spec.Node) bool { return n.Name == c.param })
		if i < 0 {
			c.fail(http.StatusNotFound, errInvalidNodeName, fmt.Sprintf("no node %q; GET nodes/ lists them", clipText(c.param)), "node_name")
			return
		}
		nodes = nodes[i : i+1]
	}
	now := c.h.o.Now()
	changed := c.h.nodes.changed(nodeSignature(out.Nodes), now)
	if !c.notModified(changed) {
		return
	}
	c.reply(func(w *jw) {
		w.key("nodes")
		w.arr(func() {
			for i := range nodes {
				nodeFields.write(w, c.v, &nodeRec{Node: &nodes[i], cluster: c.h.o.Cluster})
			}
		})
		w.key("last_update")
		w.num(changed.Unix())
	})
}

// notModified answers 304 when the query's update_time is at or after
// changed (Slurm answers nodes that way: nothing changed since the
// client's copy); it returns whether to answer in full.
func (c *call) notModified(changed time.Time) bool {
	v := c.r.URL.Query().Get("update_time")
	if v == "" {
		return true
	}
	t, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.fail(http.StatusBadRequest, errInvalidTimeValue, fmt.Sprintf("update_time=%q: give Unix seconds", clipText(v)), "update_time")
		return false
	}
	if changed.Unix() <= t {
		c.w.WriteHeader(http.StatusNotModified)
		return false
	}
	return true
}

// updateNode is POST node/{name} and nodes/ (scontrol update NodeName=):
// gpud changes a node's state by drain and resume; other fields are
// configuration (node.toml).
func updateNode(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	var names []string
	if c.param != "" {
		names = []string{c.param}
	}
	var (
		state  string
		reason string
	)
	for _, k := range sortedKeys(body) {
		v := body[k]
		switch k {
		case "state":
			l, err := asList(v)
			if err != nil || len(l) == 0 {
				c.addError(errInvalidNodeState, "state: give one of DRAIN, RESUME, UNDRAIN, IDLE", "state")
				continue
			}
			state = strings.ToUpper(l[0])
		case "reason":
			s, err := asString(v)
			if err != nil {
				c.addError(errRESTInvalidQuery, "reason: "+err.Error(), "reason")
			}
			reason = s
		case "name":
			l, err := asList(v)
			if err != nil {
				c.addError(errRESTInvalidQuery, "name: "+err.Error(), "name")
				continue
			}
			if c.param == "" {
				for _, n := range l {
					names = append(names, expandHosts(c, n)...)
				}
			}
		case "reason_uid", "comment", "weight", "resume_after":
			c.warn(fmt.Sprintf("%s has no effect in gpud's node update; ignored", k), k)
		default:
			c.addError(errNotSupported, fmt.Sprintf("%s: gpud nodes take their %s from node.toml and their inventory; an update changes only state (DRAIN, RESUME) and reason", k, k), k)
		}
	}
	action := ""
	switch state {
	case "DRAIN":
		action = "drain"
		if reason == "" {
			c.addError(errInvalidNodeState, "state DRAIN needs a reason (as scontrol update state=DRAIN reason=...)", "reason")
		}
	case "RESUME", "UNDRAIN", "IDLE":
		action = "resume"
	case "":
		if len(c.errors) == 0 {
			c.addError(errRESTInvalidQuery, "nothing to change: give state (DRAIN or RESUME)", "state")
		}
	default:
		c.addError(errInvalidNodeState, fmt.Sprintf("state %s: gpud changes a node to DRAIN or RESUME (UNDRAIN); DOWN follows from missed heartbeats", clipText(state)), "state")
	}
	if len(names) == 0 && len(c.errors) == 0 {
		c.addError(errInvalidNodeName, "name: give the nodes to update", "name")
	}
	if len(c.errors) > 0 {
		c.failAll(http.StatusBadRequest)
		return
	}
	for _, n := range names {
		var node spec.Node
		if err := c.h.v1.Call(c.r, http.MethodPost, "/v1/nodes/"+url.PathEscape(n)+"/"+action, api.NodeActionRequest{Reason: reason}, &node); err != nil {
			c.failV1(err, errInvalidNodeName, errInvalidNodeState)
			return
		}
	}
	c.reply(nil)
}

func expandHosts(c *call, s string) []string {
	out, err := expandHostlist(s)
	if err != nil {
		c.addError(errInvalidNodeName, fmt.Sprintf("name %q: %v", clipText(s), err), "name")
	}
	return out
}

// deleteNode is DELETE node/{name}: gpud nodes leave by stopping their
// agent; the controller forgets none.
func deleteNode(c *call) {
	c.fail(http.StatusUnprocessableEntity, errNotSupported, fmt.Sprintf("gpud does not delete node %s through the API: stop its agent (gpud node) and drain it; a node is defined by its agent registering", clipText(c.param)), "node_name")
}

// newNode is POST new/node (scontrol create nodename=): gpud nodes join
// by their agent.
func newNode(c *call) {
	c.fail(http.StatusUnprocessableEntity, errNotSupported, "gpud nodes are created by their agent joining (gpud node with the join token from gpud token join), not by a node_conf line", "node_conf")
}

// getPartitions is GET partitions/ and partition/{name}.
func getPartitions(c *call) {
	if !c.queryKnown("update_time", "flags") {
		return
	}
	var parts api.PartitionsResponse
	if !c.get("/v1/partitions", &parts, errInvalidPartition) {
		return
	}
	var nodes api.NodesResponse
	if !c.get("/v1/nodes", &nodes, errInvalidNodeName) {
		return
	}
	var assoc api.AssociationsResponse
	if !c.get("/v1/associations", &assoc, errInvalidAccount) {
		return
	}
	ps := parts.Partitions
	if c.param != "" {
		i := slices.IndexFunc(ps, func(p api.Partition) bool { return p.Name == c.param })
		if i < 0 {
			c.fail(http.StatusNotFound, errInvalidPartition, fmt.Sprintf("no partition %q; GET partitions/ lists them", clipText(c.param)), "partition_name")
			return
		}
		ps = ps[i : i+1]
	}
	byName := map[string]*spec.Node{}
	for i := range nodes.Nodes {
		byName[nodes.Nodes[i].Name] = &nodes.Nodes[i]
	}
	c.reply(func(w *jw) {
		w.key("partitions")
		w.arr(func() {
			for i := range ps {
				p := partRec{Partition: &ps[i], cluster: c.h.o.Cluster, defaultQOS: assoc.DefaultQOS}
				for _, n := range ps[i].Nodes {
					if node := byName[n]; node != nil {
						p.cpus += node.CPUs
						p.gpus += gpuCount(node, false)
						p.memMiB += node.MemMiB
					}
				}
				partFields.write(w, c.v, &p)
			}
		})
		lastUpdate(w, c.h.o.Now())
	})
}

// configOnly refuses a change to what gpud.toml defines.
func configOnly(what string) func(c *call) {
	return func(c *call) {
		c.fail(http.StatusUnprocessableEntity, errNotSupported, fmt.Sprintf("gpud's %s are defined in gpud.toml: edit it and reload (gpuq reconfigure or SIGHUP); the API does not change them", what), "")
	}
}

// changeReservation: reservations are made and changed with scontrol.
func changeReservation(c *call) {
	c.fail(http.StatusUnprocessableEntity, errNotSupported, "this API does not change gpud's advance reservations yet; use scontrol create, update or delete reservation", "")
}

// getResources is GET resources/{job_id} (v0.0.44+): where a running
// job's resources are, node by node.
func getResources(c *call) {
	p, ok := c.jobPath()
	if !ok {
		return
	}
	var j spec.Job
	if !c.get(p, &j, errInvalidJobID) {
		return
	}
	if j.Alloc == nil || !j.State.Active() {
		c.fail(http.StatusNotFound, errInvalidJobID, fmt.Sprintf("job %s holds no resources now (state %s)", clipText(c.param), j.State), "job_id")
		return
	}
	c.reply(func(w *jw) {
		w.key("nodes")
		w.arr(func() {
			for _, n := range j.Alloc.Nodes {
				w.obj(func() {
					w.key("node")
					w.str(n.Node)
					w.key("sockets_per_node")
					w.int(0)
					w.key("cores_per_socket")
					w.int(0)
					w.key("mem_alloc")
					w.int(n.MemMiB)
					w.key("core_bitmap")
					w.str("")
					w.key("channel")
					w.unset()
					w.key("gres")
					w.arr(func() {
						if g := len(n.GPUs) + len(n.MIG); g > 0 {
							w.obj(func() {
								w.key("name")
								w.str("gpu")
								w.key("type")
								w.str(j.Resources.GPUModel)
								w.key("count")
								w.int(int64(g))
								w.key("index")
								w.str(strings.Join(n.GPUs, ","))
							})
						}
					})
				})
			}
		})
	})
}

// reconfigure is GET reconfigure/ (scontrol reconfigure).
func reconfigure(c *call) {
	var out api.ReconfigureResponse
	if err := c.h.v1.Call(c.r, http.MethodPost, "/v1/reconfigure", nil, &out); err != nil {
		c.failV1(err, errInternal, errRESTInvalidQuery)
		return
	}
	if out.Message != "" {
		c.warn(out.Message, "")
	}
	c.reply(nil)
}

// ping is GET ping/ (scontrol ping): this controller answers.
func ping(c *call) {
	start := c.h.o.Now()
	err := c.h.v1.Call(c.r, http.MethodGet, "/v1/partitions", nil, nil)
	lat := c.h.o.Now().Sub(start)
	c.reply(func(w *jw) {
		w.key("pings")
		w.arr(func() {
			w.obj(func() {
				w.key("hostname")
				w.str(c.h.o.Hostname)
				if c.v < 45 {
					w.key("pinged")
					w.str(map[bool]string{true: "UP", false: "DOWN"}[err == nil])
				}
				w.key("responding")
				w.bool(err == nil)
				w.key("latency")
				w.int(lat.Microseconds())
				if c.v < 45 {
					w.key("mode")
					w.str("primary")
				} else {
					w.key("status")
					w.str(map[bool]string{true: "UP", false: "DOWN"}[err == nil])
				}
				w.key("primary")
				w.bool(true)
			})
		})
	})
}

// licenses is GET licenses/: gpud schedules none.
func licenses(c *call) {
	c.warn("gpud schedules no licenses: the list is empty", "")
	c.reply(func(w *jw) {
		w.key("licenses")
		w.arr(func() {})
		lastUpdate(w, c.h.o.Now())
	})
}

// queryKnown warns about query parameters the route does not take.
func (c *call) queryKnown(names ...string) bool {
	for k := range c.r.URL.Query() {
		if !slices.Contains(names, k) {
			c.warn(fmt.Sprintf("query parameter %s is not one this path takes (%s); ignored", clipText(k), strings.Join(names, ", ")), k)
		}
	}
	return true
}
