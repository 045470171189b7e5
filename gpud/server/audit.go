package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// AuditLog is where the server writes and reads the audit log
// (implemented by *accounting.DB).
type AuditLog interface {
	// AddAudits appends entries in one transaction. It is called from one
	// goroutine at a time.
	AddAudits(ctx context.Context, entries []accounting.AuditEntry) error
	// AuditLog lists the entries f selects, oldest first; safe for
	// concurrent use.
	AuditLog(ctx context.Context, f accounting.AuditFilter) ([]accounting.AuditEntry, error)
}

// Audit writer tuning: entries wait in a buffer of auditBuffer and are
// written in one transaction every auditFlushEvery or auditBatch entries,
// whichever comes first.
const (
	auditBuffer     = 8192
	auditBatch      = 500
	auditFlushEvery = 200 * time.Millisecond
	// auditMaxField bounds each text field of an entry (a path value or an
	// error message chosen by the caller).
	auditMaxField = 256
)

// WithAudit records every state-changing API call (any request but GET
// and HEAD, except successful node-protocol calls: register, heartbeat,
// events) in a,
// and serves GET /v1/audit to operators and admins (gpuq audit). onDrop,
// if not nil, is told how many entries were dropped because the buffer
// was full (a metric); drops are logged as well.
//
// Recording never blocks a request: entries go to a buffered channel that
// one goroutine drains, writing a batch every 200 ms or 500 entries. Close
// flushes it. A crash (kill -9) loses at most the entries of the last
// flush window, never a job (jobs live in the state store). Requests
// refused before they have an identity (TCP without TLS, without a
// token, with a bad, expired or revoked one) are recorded too, whatever
// their method, with no actor and the remote address as origin.
func WithAudit(a AuditLog, onDrop func(n int)) Option {
	return func(s *Server) { s.audit = newAuditor(a, onDrop) }
}

// auditor is the batching writer behind WithAudit.
type auditor struct {
	store   AuditLog
	onDrop  func(int)
	ch      chan accounting.AuditEntry
	flushc  chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped atomic.Int64 // since the last report
}

func newAuditor(a AuditLog, onDrop func(int)) *auditor {
	return &auditor{store: a, onDrop: onDrop, ch: make(chan accounting.AuditEntry, auditBuffer),
		flushc: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// add queues e without blocking; a full buffer drops it.
func (a *auditor) add(e accounting.AuditEntry) {
	select {
	case a.ch <- e:
	default:
		a.dropped.Add(1)
	}
}

func (s *Server) runAudit() {
	a := s.audit
	defer close(a.done)
	tick := time.NewTicker(auditFlushEvery)
	defer tick.Stop()
	batch := make([]accounting.AuditEntry, 0, auditBatch)
	write := func() {
		if n := a.dropped.Swap(0); n > 0 {
			s.log.Warn("audit buffer full: entries dropped; the accounting database is too slow for the request rate", "dropped", n)
			if a.onDrop != nil {
				a.onDrop(int(n))
			}
		}
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := a.store.AddAudits(ctx, batch); err != nil {
			s.log.Error("write audit entries; they are lost", "entries", len(batch), "err", err)
		}
		cancel()
		clear(batch)
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case e := <-a.ch:
				batch = append(batch, e)
				if len(batch) >= auditBatch {
					write()
				}
			default:
				return
			}
		}
	}
	for {
		select {
		case e := <-a.ch:
			batch = append(batch, e)
			if len(batch) >= auditBatch {
				write()
			}
		case <-tick.C:
			write()
		case reply := <-a.flushc:
			drain()
			write()
			close(reply)
		case <-a.stop:
			drain()
			write()
			return
		}
	}
}

// FlushAudit writes the audit entries of requests already answered. It
// returns at once without WithAudit or after Close.
func (s *Server) FlushAudit() {
	if s.audit == nil {
		return
	}
	reply := make(chan struct{})
	select {
	case s.audit.flushc <- reply:
		<-reply
	case <-s.audit.done:
	}
}

// Close stops the audit writer after writing what it holds. Call it once
// every Serve has returned; requests answered later are not recorded.
func (s *Server) Close() {
	if s.audit == nil {
		return
	}
	s.audit.once.Do(func() { close(s.audit.stop) })
	<-s.audit.done
}

// unaudited are the node protocol's state-changing routes: too frequent
// to record, and not user actions. Refused ones (a node speaking for
// another, a user posing as a node) are recorded all the same.
var unaudited = map[string]bool{
	"POST /" + api.Version + "/nodes/register":         true,
	"POST /" + api.Version + "/nodes/{name}/heartbeat": true,
	"POST /" + api.Version + "/nodes/{name}/events":    true,
}

// auditWriter notes the status, error message and target of an audited
// request.
type auditWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
	msg, target string
}

func (w *auditWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// auditOf finds the auditWriter under w, if the request is audited.
func auditOf(w http.ResponseWriter) *auditWriter {
	for {
		switch x := w.(type) {
		case *auditWriter:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

// noteTarget sets the audited target of the request w answers (the job
// IDs a submission made).
func noteTarget(w http.ResponseWriter, target string) {
	if aw := auditOf(w); aw != nil {
		aw.target = target
	}
}

// noteError keeps the message the caller is shown for the audit log: an
// error, or what a successful call changed (a reload's limit changes).
func noteError(w http.ResponseWriter, msg string) {
	if aw := auditOf(w); aw != nil {
		aw.msg = msg
	}
}

// recordAudit wraps the mux (inside authenticate, like instrument, since
// the mux sets the route pattern and path values on the request it is
// given) and queues an audit entry for each state-changing call.
func (s *Server) recordAudit(next http.Handler) http.Handler {
	if s.audit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		aw := &auditWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(aw, r)
		if r.Pattern == "" || r.Pattern == "/" {
			return // no route: nothing changed
		}
		if unaudited[r.Pattern] && aw.code < 300 {
			return
		}
		s.audit.add(s.auditEntry(r, aw))
	})
}

// auditRefusal records a request refused before it had an identity. The
// action is the method and path as sent (clipped), since no route matched
// yet.
func (s *Server) auditRefusal(r *http.Request, code int, msg string) {
	if s.audit == nil {
		return
	}
	s.audit.add(accounting.AuditEntry{
		Time: s.now(),
		// No uid: 0 would read as root.
		ActorUID:  math.MaxUint32,
		ActorName: "unidentified",
		Origin:    r.RemoteAddr,
		Action:    clip(r.Method + " " + strings.ToValidUTF8(r.URL.Path, "?")),
		Result:    strconv.Itoa(code) + " " + clip(msg),
	})
}

func (s *Server) auditEntry(r *http.Request, aw *auditWriter) accounting.AuditEntry {
	id := who(r)
	e := accounting.AuditEntry{
		Time:      s.now(),
		ActorUID:  id.caller.UID,
		ActorName: id.caller.User,
		Role:      id.role,
		Origin:    "unix",
		Action:    r.Pattern,
		Target:    aw.target,
	}
	if id.remote {
		e.Origin = r.RemoteAddr
	}
	if id.role == "" && !id.caller.Known && id.caller.User == "" {
		// A join request: no identity yet (uid 0 would read as root).
		e.ActorUID, e.ActorName = math.MaxUint32, "unidentified"
	}
	if v := r.PathValue("action"); v != "" && isWord(v) {
		e.Action = strings.Replace(e.Action, "{action}", v, 1)
	}
	if e.Target == "" {
		switch {
		case r.PathValue("id") != "":
			e.Target = "job " + clip(r.PathValue("id"))
		case r.PathValue("name") != "":
			e.Target = "node " + clip(r.PathValue("name"))
		}
	}
	e.Result = strconv.Itoa(aw.code) + " ok"
	if aw.code >= 300 || aw.msg != "" {
		e.Result = strconv.Itoa(aw.code) + " " + clip(aw.msg)
	}
	return e
}

// isWord says whether v is a short lowercase verb fit for the action.
func isWord(v string) bool {
	if len(v) > 32 {
		return false
	}
	for _, c := range v {
		if (c < 'a' || c > 'z') && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

// clip bounds a field at auditMaxField bytes on a rune boundary.
func clip(v string) string {
	if len(v) <= auditMaxField {
		return v
	}
	v = v[:auditMaxField]
	for len(v) > 0 && !utf8.ValidString(v) {
		v = v[:len(v)-1]
	}
	return v + "…"
}

// auditList serves GET /v1/audit (gpuq audit): operators and admins only.
func (s *Server) auditList(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := requireRole(id, auth.RoleOperator, "reading the audit log"); err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.audit == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller keeps no audit log; start it with an accounting database to use gpuq audit"))
		return
	}
	// Entries are written in batches; a reader sees every call answered
	// before its own (an operator checking what just happened, a test).
	s.FlushAudit()
	q := r.URL.Query()
	f := accounting.AuditFilter{Actor: q.Get("actor"), Action: q.Get("action")}
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
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter %s=%q is not an RFC 3339 time (e.g. 2025-03-14T00:00:00Z)", p.key, v))
			return
		}
		*p.dst = t
	}
	if !f.Start.IsZero() && !f.End.IsZero() && f.End.Before(f.Start) {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter end=%s is before start=%s; pick an end after the start", q.Get("end"), q.Get("start")))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "query parameter limit=%q is not a whole number (0 means no limit)", v))
			return
		}
		f.Limit = n
	}
	entries, err := s.audit.store.AuditLog(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.AuditResponse{Entries: make([]api.AuditEntry, 0, len(entries))}
	for _, e := range entries {
		out.Entries = append(out.Entries, auditEntry(e))
	}
	s.writeJSON(w, out)
}

// auditEntry compiles only while api.AuditEntry and accounting.AuditEntry
// have the same fields; TestAuditEntryMatches checks their JSON tags.
func auditEntry(e accounting.AuditEntry) api.AuditEntry { return api.AuditEntry(e) }
