package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// AuditLog is where the server writes and reads the audit log
// (implemented by *accounting.DB).
type AuditLog interface {
	// WriteAudits applies writes in one transaction, durably, setting
	// the ID of each new entry. It is called from one goroutine at a time.
	WriteAudits(ctx context.Context, ws []accounting.AuditWrite) error
	// AuditLog lists the entries f selects, oldest first; safe for
	// concurrent use.
	AuditLog(ctx context.Context, f accounting.AuditFilter) ([]accounting.AuditEntry, error)
}

// Audit writer tuning: writes wait in a queue of auditBuffer (callers
// block when it is full) and go to the database in one transaction of up
// to auditBatch, as soon as the previous one is done (group commit).
// Writes that failed and must not be lost (outcomes, refusals) are
// retried every auditRetryEvery.
const (
	auditBuffer     = 8192
	auditBatch      = 500
	auditRetryEvery = time.Second
	// auditLinger is how long writes nobody waits for (outcomes, refusals
	// recorded after the fact) may wait for one somebody does (the next
	// call's entry) to share its transaction: in a loop of submissions
	// (sbatch in a shell loop) each call's outcome rides with the next
	// call's entry, one commit and one fsync per call instead of two. A
	// reader of the log (GET /v1/audit) and Close flush them first; a
	// kill within the linger leaves the call's row "in progress", as a
	// kill during the call does.
	auditLinger = 50 * time.Millisecond
	// auditMaxField bounds each text field of an entry (a path value or an
	// error message chosen by the caller).
	auditMaxField = 256
	// auditInProgress is the result of an entry whose call is being
	// carried out. It stays so only if the controller stopped (or could
	// not write the outcome) during the call.
	auditInProgress = "in progress"
)

// errAuditClosed answers calls that reach the audit writer after Close.
var errAuditClosed = errors.New("the audit writer is stopped (the controller is shutting down)")

// WithAudit records every state-changing API call (any request but GET
// and HEAD, except successful node-protocol calls: register, heartbeat,
// events) in a, and serves GET /v1/audit to operators and admins (gpuq
// audit).
//
// Nothing is dropped: a call's entry is written durably (one
// transaction, shared with the calls arriving at the same time) before
// the call is carried out, and its outcome is queued once it answered
// (written with the next call's entry, or within auditLinger).
// A call whose entry cannot be written is not carried out: the caller
// gets 503 saying why. When the queue is full callers wait for room
// (backpressure). An outcome that cannot be written is kept and retried,
// and meanwhile its entry reads "in progress". Requests refused before
// they have an identity (TCP without TLS, without a token, with a bad,
// expired or revoked one) are recorded too, whatever their method, with
// no actor and the remote address as origin; they are queued without
// holding the refusal back. onDrop, if not nil, is told how many entries
// were lost anyway: refusals beyond auditBuffer held while the database
// fails, and what Close could not write (a metric); losses are logged as
// well.
func WithAudit(a AuditLog, onDrop func(n int)) Option {
	return func(s *Server) { s.audit = &auditor{store: a, onDrop: onDrop} }
}

// AuditRetention is how much audit log the server keeps ([accounting]
// audit_max_age, audit_max_size, audit_min_free): entries older than
// MaxAge go, and the oldest ones once the log takes more than MaxBytes
// (each checked every minute); when the file system of the audit log has
// less than MinFree left, the log stops growing: each write is followed
// by dropping as much of the oldest, down to what the log took then (at
// least auditFloor), so job state on the same file system keeps its room
// while the audit is under attack. Zero fields bound nothing. The
// AuditLog must implement PruneAudit, AuditBytes and FreeBytes (as
// *accounting.DB does), or retention is off.
type AuditRetention struct {
	MaxAge   time.Duration
	MaxBytes int64
	MinFree  int64
}

// auditFloor is the audit log a full disk still keeps (the newest rows).
const auditFloor = 1 << 20

// WithAuditRetention sets the audit log's retention (see AuditRetention).
func WithAuditRetention(r AuditRetention) Option { return func(s *Server) { s.retain = r } }

// auditPruner is what retention needs of the audit log (*accounting.DB).
type auditPruner interface {
	PruneAudit(ctx context.Context, before time.Time, maxBytes int64) (int, error)
	AuditBytes(ctx context.Context) (int64, error)
	FreeBytes() (int64, error)
}

// retention is the audit writer's state of AuditRetention.
type retention struct {
	AuditRetention
	p auditPruner
	// short: the disk has less than MinFree; the log keeps at most cap.
	short   bool
	cap     int64
	checked time.Time
}

// keep applies the retention: by age and size (every minute: all), and
// while the disk is short, the size the log had when it ran short.
func (s *Server) keep(rt *retention, all bool) {
	if rt.p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := s.now()
	if rt.MinFree > 0 && (all || now.Sub(rt.checked) >= time.Second) {
		rt.checked = now
		free, err := rt.p.FreeBytes()
		switch {
		case err != nil:
			s.log.Warn("audit log retention: cannot tell the free space", "err", err)
		case free < rt.MinFree && !rt.short:
			size, err := rt.p.AuditBytes(ctx)
			if err != nil {
				s.log.Warn("audit log retention", "err", err)
				return
			}
			rt.short, rt.cap = true, max(size, auditFloor)
			s.log.Error("free space below [accounting] audit_min_free: the audit log stops growing, its oldest entries make room for new ones",
				"free_bytes", free, "audit_min_free", rt.MinFree, "audit_bytes", rt.cap)
		case free > rt.MinFree+rt.MinFree/8 && rt.short:
			rt.short = false
			s.log.Info("free space back above [accounting] audit_min_free: the audit log grows again up to audit_max_size", "free_bytes", free)
		}
	}
	if !all && !rt.short {
		return
	}
	var before time.Time
	if rt.MaxAge > 0 && all {
		before = now.Add(-rt.MaxAge)
	}
	limit := rt.MaxBytes
	if rt.short && (limit == 0 || rt.cap < limit) {
		limit = rt.cap
	}
	n, err := rt.p.PruneAudit(ctx, before, limit)
	if err != nil {
		s.log.Warn("audit log retention", "err", err)
	}
	if n > 0 && all {
		s.log.Info("audit log entries past their retention deleted", "entries", n, "max_age", rt.MaxAge, "max_bytes", limit)
	}
}

// auditOp is one write queued for the audit writer.
type auditOp struct {
	w accounting.AuditWrite
	// intent: the entry of a call not yet carried out; a failed write
	// fails the call instead of being retried.
	intent bool
	// done, if not nil, receives the write's result once (buffered).
	done chan error
}

// auditor is the group-committing writer behind WithAudit.
type auditor struct {
	store  AuditLog
	onDrop func(int)
	ch     chan *auditOp
	flushc chan chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	// failing: the last write failed (the writer's view, for callers).
	failing atomic.Bool
	// carried counts entries committed with their calls' state changes
	// (state.db) and not yet copied to the audit log.
	carried atomic.Int64
}

// start makes the queue of n (auditBuffer if 0) and starts the writer.
func (s *Server) startAudit(n int) {
	if n <= 0 {
		n = auditBuffer
	}
	a := s.audit
	a.ch, a.flushc = make(chan *auditOp, n), make(chan chan struct{})
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	// Read before the server takes its first call: an entry a call of
	// this start keeps in state.db would otherwise be copied as one a
	// stop left ("in progress"), beside the call's own complete entry.
	recovered := s.recoveredAudits()
	go s.runAudit(recovered)
}

// write queues op, waiting for room (backpressure) until ctx ends, and
// with wait, for its write. It fails only for an intent or after Close.
func (a *auditor) write(ctx context.Context, op *auditOp, wait bool) error {
	// The writer clears op.done once it has answered: wait on a copy.
	var done chan error
	if wait {
		done = make(chan error, 1)
		op.done = done
	}
	select {
	case a.ch <- op:
	case <-ctx.Done():
		return fmt.Errorf("waiting for room in the audit queue: %w", context.Cause(ctx))
	case <-a.stop:
		return errAuditClosed
	}
	if !wait {
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-a.done:
		select {
		case err := <-done:
			return err
		default:
			return errAuditClosed
		}
	}
}

func (s *Server) runAudit(recovered []*auditOp) {
	a := s.audit
	defer close(a.done)
	tick := time.NewTicker(auditRetryEvery)
	defer tick.Stop()
	var (
		held    []*auditOp // failed writes kept for retry
		batch   = make([]*auditOp, 0, auditBatch)
		ws      = make([]accounting.AuditWrite, 0, auditBatch)
		failing bool
		// waited: an op in batch has a caller waiting for its write.
		waited bool
	)
	rt := &retention{AuditRetention: s.retain}
	rt.p, _ = a.store.(auditPruner)
	if rt.MaxAge == 0 && rt.MaxBytes == 0 && rt.MinFree == 0 {
		rt.p = nil
	}
	s.keep(rt, true)
	// Entries committed with their calls' state changes that a stop (or a
	// kill) left before they were copied: copied first, each once.
	batch = append(batch, recovered...)
	var forget []int64
	write := func() {
		ops := append(held, batch...)
		held, batch, waited = nil, batch[:0], false
		for len(ops) > 0 {
			n := min(len(ops), auditBatch)
			ws = ws[:0]
			for _, op := range ops[:n] {
				ws = append(ws, op.w)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := a.store.WriteAudits(ctx, ws)
			cancel()
			if err == nil && failing {
				failing = false
				s.log.Info("audit log writable again; state-changing calls are accepted")
			} else if err != nil && !failing {
				failing = true
				s.log.Error("write audit log; state-changing calls are refused until it can be written", "err", err)
			}
			a.failing.Store(err != nil)
			for i, op := range ops[:n] {
				if err == nil {
					op.w.ID = ws[i].ID
					if op.w.Carried != 0 {
						forget = append(forget, op.w.Carried)
					}
				} else if !op.intent {
					held = append(held, op)
				}
				if op.done != nil {
					op.done <- err
					op.done = nil
				}
			}
			ops = ops[n:]
		}
		if len(forget) > 0 {
			// In the audit log now: their kept copies in state.db go with
			// the controller's next commit.
			a.carried.Add(-int64(len(forget)))
			s.c.ForgetAudits(forget)
			forget = forget[:0]
		}
		s.keep(rt, false)
		// Outcomes are bounded by the calls in flight (no new call starts
		// while writes fail); refusals are not, so they are capped.
		if over := len(held) - cap(a.ch); over > 0 {
			kept := held[:0]
			for _, op := range held {
				if over > 0 && op.w.ID == 0 {
					over--
					continue
				}
				kept = append(kept, op)
			}
			lost := len(held) - len(kept)
			held = kept
			s.log.Error("audit log unwritable: refusals held for it dropped", "dropped", lost)
			if a.onDrop != nil {
				a.onDrop(lost)
			}
		}
	}
	gather := func() {
		for len(batch) < auditBatch {
			select {
			case op := <-a.ch:
				batch = append(batch, op)
				waited = waited || op.done != nil
			default:
				return
			}
		}
	}
	// summarise queues the refusal summaries of the interval so far
	// (refusal.go) and starts the next.
	summarise := func() {
		for _, e := range s.ref.summaries() {
			batch = append(batch, &auditOp{w: accounting.AuditWrite{Entry: e}})
		}
	}
	interval := time.NewTicker(refusalInterval)
	defer interval.Stop()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	lingering := false
	if len(batch) > 0 {
		write() // the recovered entries
	}
	for {
		select {
		case op := <-a.ch:
			batch = append(batch, op)
			waited = waited || op.done != nil
			gather()
			if !waited && len(batch) < auditBatch {
				if !lingering {
					linger.Reset(auditLinger)
					lingering = true
				}
				continue
			}
			write()
		case <-linger.C:
			lingering = false
			if len(batch) > 0 {
				write()
			}
		case <-tick.C:
			if len(held) > 0 {
				write()
			}
		case <-interval.C:
			summarise()
			if len(batch) > 0 {
				write()
			}
			s.keep(rt, true)
		case reply := <-a.flushc:
			gather()
			summarise()
			write()
			close(reply)
		case <-a.stop:
			summarise()
			for {
				gather()
				if len(batch) == 0 {
					break
				}
				write()
			}
			if len(held) > 0 {
				write()
			}
			if n := len(held); n > 0 {
				s.log.Error("audit entries not written at shutdown: their outcome (or the refusal) is lost", "entries", n)
				if a.onDrop != nil {
					a.onDrop(n)
				}
			}
			return
		}
	}
}

// recoveredAudits are the entries the controller kept with their calls'
// state changes and had not copied to the audit log when it stopped,
// as writes that add each only if the log does not hold it yet.
func (s *Server) recoveredAudits() []*auditOp {
	if s.c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kept, err := s.c.CarriedAudits(ctx)
	if err != nil {
		s.log.Error("read the audit entries kept in state.db before the last stop; they are copied at the next start", "err", err)
		return nil
	}
	var ops []*auditOp
	for _, k := range kept {
		var e accounting.AuditEntry
		if err := json.Unmarshal(k.Entry, &e); err != nil {
			s.log.Error("an audit entry kept in state.db cannot be read; it stays there", "seq", k.Seq, "err", err)
			continue
		}
		ops = append(ops, &auditOp{w: accounting.AuditWrite{Entry: e, Carried: k.Seq, Recovered: true}})
	}
	if len(ops) > 0 {
		s.log.Info("copying to the audit log the entries kept in state.db with their calls before the last stop", "entries", len(ops))
		s.audit.carried.Add(int64(len(ops)))
	}
	return ops
}

// carriedRoutes are the calls whose audit entry the controller commits
// with the call's state change (one durable write, not two): each makes
// one controller call whose success is the whole of its change.
var carriedRoutes = map[string]bool{
	"POST /" + api.Version + "/jobs": true,
}

// carries says whether r's entry can ride with its state change: a
// carried route, a controller whose store keeps entries, and an audit
// log that is being written and not behind: fewer than its queue's
// length of carried entries not yet copied (else the entry is written
// to the log first, as for any call: a stalled log holds calls back, a
// failing one refuses them). A true answer holds one of those places
// (s.audit.carried), which the call gives back if it commits nothing.
func (s *Server) carries(r *http.Request) bool {
	if !carriedRoutes[r.Pattern] || s.c == nil || !s.c.CarriesAudit() || s.audit.failing.Load() {
		return false
	}
	if s.audit.carried.Add(1) > int64(cap(s.audit.ch)) {
		s.audit.carried.Add(-1)
		return false
	}
	return true
}

// FlushAudit writes the audit entries queued so far (refusals and their
// summaries so far; calls' entries are written before they are
// answered). It returns at once without WithAudit or after Close.
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
// every Serve has returned; calls made later are refused.
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
// request on its way to the real writer.
type auditWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
	msg, target string
}

func (w *auditWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
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

// recordAudit wraps each route's handler (inside the mux, so the route
// pattern and path values are set) and records each state-changing call:
// its entry is written before next runs (or next does not run), its
// outcome queued once next has answered.
func (s *Server) recordAudit(next http.Handler) http.Handler {
	if s.audit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		source := s.callSource(r)
		if unaudited[r.Pattern] {
			// Recorded only when refused (no state changed): after the
			// fact, without holding the refusal back.
			aw := &auditWriter{ResponseWriter: w, code: http.StatusOK}
			next.ServeHTTP(aw, r)
			// A call its node gave up on (a heartbeat past its timeout
			// on a busy controller) failed reading its body or waiting:
			// no refusal, and recording it would add to the load that
			// made it time out (the 10,000-node loadtest's audit queue
			// filled with such 400s, and heartbeats waited for room).
			if aw.code >= 300 && r.Context().Err() == nil {
				e := s.auditEntry(r, aw)
				if aw.code < 400 || s.ref.note(refusalOf(e, source, aw.code), aw.msg, e.Time) {
					s.queueAudit(r.Context(), e)
				}
			}
			return
		}
		// A caller whose calls keep being refused is told to slow down
		// before anything is written (refusal.go).
		if over, retry := s.ref.over(source); over {
			s.overBudget(w, r, source, retry)
			return
		}
		aw := &auditWriter{ResponseWriter: w, code: http.StatusOK}
		if s.carries(r) {
			s.carryAudit(aw, r, next, source)
			return
		}
		op := &auditOp{w: accounting.AuditWrite{Entry: s.auditEntry(r, aw)}, intent: true}
		op.w.Entry.Result = auditInProgress
		if err := s.audit.write(r.Context(), op, true); err != nil {
			s.log.Error("state-changing call refused: its audit entry cannot be written", "action", op.w.Entry.Action,
				"actor", op.w.Entry.ActorName, "err", err)
			s.writeError(w, r, spec.Errorf(spec.ErrUnavailable,
				"%s was not carried out: every state-changing call is recorded in the audit log first, and it cannot be written (%v); "+
					"the call can be retried once the controller's accounting database is writable (check its disk)", r.Pattern, err))
			return
		}
		next.ServeHTTP(aw, r)
		out := &auditOp{w: accounting.AuditWrite{ID: op.w.ID, Entry: s.auditEntry(r, aw)}}
		if refused(aw.code) {
			// A refused call changed nothing: the first of its kind this
			// interval keeps its row, the others are summarised and
			// their rows dropped, and each is charged to the caller.
			s.ref.spend(source)
			if !s.ref.note(refusalOf(out.w.Entry, source, aw.code), aw.msg, out.w.Entry.Time) {
				out.w.Delete = true
			}
		}
		// The call is done and already on record (the intent above): its
		// outcome is queued, not waited for, so an answer costs one
		// durable commit, not two; the writer keeps and retries a failed
		// outcome, and only Close (or a kill) can leave the row "in
		// progress", never a call unrecorded.
		if err := s.audit.write(context.WithoutCancel(r.Context()), out, false); err != nil {
			s.log.Error("write the outcome of an audited call; retrying", "id", op.w.ID, "action", out.w.Entry.Action, "err", err)
		}
	})
}

// carryAudit is recordAudit for a call whose entry the controller
// commits with the call's state change: nothing is written before the
// call; its commit makes the entry durable (state.db) before the answer,
// and the entry with its outcome is then queued for the audit log, which
// has the kept copy dropped once written. A call that committed nothing
// (refused, failed) changed nothing: its entry is queued after the fact,
// a refusal counted and summarised as any other.
func (s *Server) carryAudit(aw *auditWriter, r *http.Request, next http.Handler, source string) {
	e := s.auditEntry(r, aw)
	e.Result = auditInProgress
	carry := &controller.AuditCarry{Entry: func(made []spec.JobID) []byte {
		k := e
		if len(made) > 0 {
			k.Target = submitTarget(made)
		}
		// By hand (accounting.AuditEntry.AppendJSON: json.Marshal's
		// bytes, which recoveredAudits reads back), one per submission.
		raw, err := k.AppendJSON(make([]byte, 0, 192+len(k.ActorName)+len(k.Origin)+len(k.Target)))
		if err != nil { // a time out of RFC 3339's range: cannot happen
			raw = fmt.Appendf(nil, `{"time":%q,"action":%q,"result":"in progress"}`, k.Time.Format(time.RFC3339Nano), k.Action)
		}
		return raw
	}}
	next.ServeHTTP(aw, r.WithContext(controller.WithAuditCarry(r.Context(), carry)))
	out := s.auditEntry(r, aw)
	out.Time = e.Time // when the call came, as for any other
	ctx := context.WithoutCancel(r.Context())
	if seq := carry.Seq(); seq != 0 {
		if err := s.audit.write(ctx, &auditOp{w: accounting.AuditWrite{Entry: out, Carried: seq}}, false); err != nil {
			s.log.Error("copy a call's audit entry to the audit log; it stays in state.db and is copied at the next start",
				"seq", seq, "action", out.Action, "err", err)
		}
		return
	}
	s.audit.carried.Add(-1)
	if refused(aw.code) {
		s.ref.spend(source)
		if !s.ref.note(refusalOf(out, source, aw.code), aw.msg, out.Time) {
			return
		}
	}
	s.queueAudit(ctx, out)
}

// refused says whether an answer with status code refused the call (it
// changed nothing, by the caller's doing).
func refused(code int) bool { return code >= 400 && code < 500 }

// refusalOf is the tally key of a refused call's entry e from source.
func refusalOf(e accounting.AuditEntry, source string, code int) refusalKey {
	return refusalKey{origin: orDefault(source, e.Origin), uid: e.ActorUID, actor: e.ActorName, role: e.Role, action: e.Action, status: code}
}

// callSource is the refusal budget's key for r: its caller's uid (or
// node), or for a call without an identity (a join) its address.
func (s *Server) callSource(r *http.Request) string {
	id := who(r)
	if id.caller.Known || id.role != "" {
		return uidSource(id)
	}
	return s.addrSource(r.RemoteAddr)
}

// overBudget answers a state-changing call from a source over its
// refusal budget: 429, nothing written but the tally.
func (s *Server) overBudget(w http.ResponseWriter, r *http.Request, source string, retry time.Duration) {
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	msg := fmt.Sprintf("%s had too many calls refused; state-changing calls are refused for %ds (the refusal budget refills at %g a second)",
		source, secs, s.ref.budget.rate)
	aw := &auditWriter{ResponseWriter: w, code: http.StatusTooManyRequests}
	e := s.auditEntry(r, aw)
	e.Result = strconv.Itoa(http.StatusTooManyRequests) + " " + clip(msg)
	if s.ref.note(refusalOf(e, source, http.StatusTooManyRequests), msg, e.Time) {
		s.queueAudit(r.Context(), e)
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	closeAfter(w, r)
	s.writeStatus(w, r, http.StatusTooManyRequests, api.CodeRefused, msg)
}

// queueAudit queues e, waiting for room in the queue but not for the write.
func (s *Server) queueAudit(ctx context.Context, e accounting.AuditEntry) {
	if err := s.audit.write(ctx, &auditOp{w: accounting.AuditWrite{Entry: e}}, false); err != nil {
		s.log.Error("audit entry not recorded", "action", e.Action, "actor", e.ActorName, "result", e.Result, "err", err)
	}
}

// auditRefusal records a request from source (its address) refused
// before it had an identity, as the first of its kind in the interval or
// in the interval's summary (refusal.go). The action is the method and
// path as sent (clipped), since no route matched yet; the summary names
// the class of refusal instead (RefusalClasses), so varying the path
// makes no new rows.
func (s *Server) auditRefusal(r *http.Request, source, class string, code int, msg string) {
	if s.audit == nil {
		return
	}
	now := s.now()
	k := refusalKey{origin: orDefault(source, r.RemoteAddr), uid: math.MaxUint32, actor: "unidentified",
		action: "refused before authentication (" + class + ")", status: code}
	if !s.ref.note(k, msg, now) {
		return
	}
	s.queueAudit(r.Context(), accounting.AuditEntry{
		Time: now,
		// No uid: 0 would read as root.
		ActorUID:  math.MaxUint32,
		ActorName: "unidentified",
		Origin:    r.RemoteAddr,
		Action:    clip(r.Method + " " + strings.ToValidUTF8(r.URL.Path, "?")),
		Result:    strconv.Itoa(code) + " " + clip(msg),
	})
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
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
	// Refusals are queued; a reader sees every one answered before its
	// own call (an operator checking what just happened, a test).
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
