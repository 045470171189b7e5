package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/guard"
	"github.com/gpud/gpud/gpud/slurmrest"
	"github.com/gpud/gpud/gpud/spec"
)

// maxBody bounds request bodies; a batch script larger than this is a
// mistake, not a job.
const maxBody = 4 << 20

// maxWait bounds long polls (assignments, job wait).
const maxWait = 5 * time.Minute

// Server serves the controller's API.
type Server struct {
	c        *controller.Controller
	log      *slog.Logger
	mux      *http.ServeMux
	handler  http.Handler // mux behind authenticate
	users    sync.Map     // uid → user name
	acct     Accounting
	usage    UsageRecorder
	tokens   TokenVerifier
	roles    atomic.Pointer[roleLists]
	join     *nodeJoin
	submits  *rateLimiter
	now      func() time.Time
	started  time.Time // when New ran: the controller's BOOT_TIME (config.go)
	metrics  http.Handler
	observe  func(route string, code int, d time.Duration)
	audit    *auditor
	retain   AuditRetention // audit.go
	latest   latestUsage
	limits   atomic.Pointer[Limits]
	conns    connCounter
	refusing chan struct{}  // refused connections being answered
	refusals sync.WaitGroup // their goroutines
	sec      secState       // secstate.go
	ha       HA             // ha.go; nil for a single controller
	steps    stepTickets    // steps.go
	ref      refusals       // refusal.go
	groups   groupCache     // groups.go

	// auditBuffer sizes the audit queue (0: auditBuffer; tests set it).
	auditBuffer int

	// group answers GET /v1/controllers (controllers.go); nil: a single
	// controller.
	group ControllerGroup

	// slurmOpts configure Slurm's REST API (slurmrest.go).
	slurmOpts *slurmrest.Options
	// rev is the daemon's one revocation state (auth.go, revoke.go;
	// WithRevocations).
	rev *auth.Revocations
	// peerLog bounds the log lines a remote caller can trigger.
	peerLog *guard.RateLog
}

// Accounting is the job history the server reads for GET
// /v1/accounting/jobs and /v1/accounting/summary (implemented by
// *accounting.DB).
type Accounting interface {
	// Jobs lists the jobs f selects, ordered by job ID. It only reads, is
	// safe for concurrent use, and gives up when ctx ends.
	Jobs(ctx context.Context, f accounting.Filter) ([]accounting.Record, error)
	// Summary totals the jobs f selects by groupBy (an accounting.GroupBy
	// constant), clipping usage to [f.Start, f.End]; an unknown group is
	// spec.ErrInvalid. Same concurrency and ctx contract as Jobs.
	Summary(ctx context.Context, f accounting.Filter, groupBy string) ([]accounting.SummaryRow, error)
	// Attempts returns the attempts of the jobs ids, each job's oldest
	// first (sacct --duplicates). Same concurrency and ctx contract as Jobs.
	Attempts(ctx context.Context, ids []spec.JobID) (map[spec.JobID][]accounting.Attempt, error)
	// Steps returns the steps of the jobs' last attempts (sacct's N.batch,
	// N.0 rows). Same concurrency and ctx contract as Jobs.
	Steps(ctx context.Context, ids []spec.JobID) (map[spec.JobID][]accounting.Step, error)
}

// UsageRecorder stores the usage samples nodes send with their events
// (accounting). A sample already stored (same ID) must be left as it is:
// a node re-sends what was not acknowledged.
type UsageRecorder interface {
	RecordUsageSamples(ctx context.Context, samples []accounting.UsageSample) error
}

// Option configures a Server.
type Option func(*Server)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithAccounting serves job history from a (gpuq acct). Without it the
// accounting endpoints answer 503 unavailable.
func WithAccounting(a Accounting) Option { return func(s *Server) { s.acct = a } }

// WithUsageRecorder stores the nodes' usage samples in u before their
// events are acknowledged. Without it samples are acknowledged and
// dropped.
func WithUsageRecorder(u UsageRecorder) Option { return func(s *Server) { s.usage = u } }

// WithMetrics serves h at GET /metrics (Prometheus) and reports every
// request that reaches the API's router to observe, with the route
// pattern it matched ("GET /v1/jobs/{id}", "" for none), the status code
// and the time taken. Like /healthz, /metrics needs no token on TCP (it
// still needs TLS there); on the unix socket any local user may read it.
// So h must show cluster-wide counts only: WithOperatorMetrics serves
// the series that name users or accounts to operators.
func WithMetrics(h http.Handler, observe func(route string, code int, d time.Duration)) Option {
	return func(s *Server) { s.metrics, s.observe = h, observe }
}

// New returns a server for c.
func New(c *controller.Controller, opts ...Option) *Server {
	s := &Server{c: c, log: slog.Default(), mux: http.NewServeMux(), now: time.Now, refusing: make(chan struct{}, maxRefusing),
		rev: auth.NewRevocations(nil)}
	s.SetLimits(Limits{})
	s.ref.setRate(DefaultRefusalRate, DefaultRefusalBurst, time.Now)
	for _, o := range opts {
		o(s)
	}
	s.started = s.now()
	s.peerLog = guard.NewRateLog(s.log)
	s.routes()
	s.haRoutes()
	s.slurmRoutes()
	s.handler = s.edge(s.authenticate(s.tally(s.instrument(s.leaderGate(s.mux)))))
	if s.audit != nil {
		s.startAudit(s.auditBuffer)
	}
	return s
}

// Handler returns the HTTP handler (for tests and extra listeners). On a
// connection that is not a unix socket it demands TLS and a bearer token.
func (s *Server) Handler() http.Handler { return s.handler }

// maxStreams caps the concurrent requests on one HTTP/2 connection (Go's
// default is 250). A node agent has at most a handful in flight (long
// poll, heartbeat, events, usage, GPU health); a client that wants more
// opens another connection, which the per-address cap counts, so one
// connection cannot carry a flood that HTTP/1.1's one request per
// connection would not.
const maxStreams = 16

// ServeTLS serves on ln with TLS (cfg from auth.ServerTLS) until ctx ends;
// see Serve.
func (s *Server) ServeTLS(ctx context.Context, ln net.Listener, cfg *tls.Config) error {
	if cfg == nil || len(cfg.Certificates) == 0 && cfg.GetCertificate == nil {
		return fmt.Errorf("serve API on %s: no TLS certificate", ln.Addr())
	}
	cfg = cfg.Clone()
	cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
	// HTTP/2 first: a node agent's long poll, heartbeats, events and
	// usage share one connection (one descriptor per node in the
	// controller, not two); net/http's Serve takes h2 from a TLS
	// listener by ALPN. HTTP/1.1 stays for older clients.
	cfg.NextProtos = []string{"h2", "http/1.1"}
	// Connections are capped below TLS: a refused one costs no handshake.
	// The guard gives each address a share of the connections still in
	// their handshake (or before their first request), and closes those
	// that take longer than apiHandshake.
	gl := guard.NewListener(ln, "controller API", guard.Limits{Handshake: apiHandshake, IsExempt: s.exempt}, s.peerLog)
	return s.serve(ctx, tls.NewListener(s.limitListener(gl), cfg))
}

// exempt says whether a is in the exempt networks ([api]
// conn_limit_exempt, as last reloaded).
func (s *Server) exempt(a netip.Addr) bool {
	for _, p := range s.limits.Load().Exempt {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// apiHandshake bounds a TCP connection's TLS handshake and first request
// head (a client that connects and waits before asking is closed).
const apiHandshake = 5 * time.Second

// ListenUnix listens on a unix socket at path, removing a stale socket
// file first, with mode 0666: every local user may connect, and each is
// identified by peer credentials.
func ListenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s: the path exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen on %s: another controller is serving this socket; stop it first", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("make socket %s reachable by all users: %w", path, err)
	}
	return ln, nil
}

// Serve serves on ln until ctx ends, then shuts down gracefully: long
// polls are released at once, other requests get up to 5s to finish.
// Connections are capped per peer (uid on a unix socket, address on TCP)
// at accept; see Limits.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, s.limitListener(ln))
}

func (s *Server) serve(ctx context.Context, ln net.Listener) error {
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	l := s.limits.Load()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second, // bounds the TLS handshake too
		// Reading the body: edge lifts it once the body is read, so
		// handlers (long polls) are not cut by it.
		ReadTimeout:    l.ReadTimeout,
		IdleTimeout:    l.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		BaseContext:    func(net.Listener) context.Context { return baseCtx },
		ConnContext:    s.connContext,
		// One line per failed TLS handshake, which anyone who can
		// connect can make: rate-limited.
		ErrorLog: log.New(s.peerLog.Writer(slog.LevelWarn, "API connection error"), "", 0),
		HTTP2:    &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
	}
	fresh := &freshConns{m: map[net.Conn]struct{}{}}
	hs.ConnState = func(c net.Conn, st http.ConnState) {
		fresh.note(c, st)
		s.connState(c, st)
	}
	hs.RegisterOnShutdown(fresh.close)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// Long polls watch the base context: end them first so Shutdown
	// does not wait out their timeouts.
	cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		hs.Close()
	}
	<-errc // Serve returned ErrServerClosed
	s.refusals.Wait()
	if err != nil {
		return fmt.Errorf("shut down API server: %w", err)
	}
	return nil
}

type callerKey struct{}

// connContext stores the peer's credentials for unix connections, and
// a token memo for TCP ones.
func (s *Server) connContext(ctx context.Context, conn net.Conn) context.Context {
	var cred *syscall.Ucred
	switch c := conn.(type) {
	case *limitedConn:
		cred = c.cred // read at accept
	case *net.UnixConn:
		var err error
		if cred, err = peerCred(c); err != nil {
			s.log.Warn("cannot read peer credentials", "err", err)
		}
	}
	ctx = context.WithValue(ctx, connRefusalsKey{}, &connRefusals{})
	if cred == nil {
		// TCP: bearer tokens, remembered per connection (verifyToken),
		// and the connection, closed when its credential is revoked
		// (trackConn).
		return context.WithValue(ctx, tokenMemoKey{}, &tokenMemo{conn: conn})
	}
	who := controller.Caller{UID: cred.Uid, GID: cred.Gid, Known: true, User: s.userName(cred.Uid), Groups: s.groupsOf(cred.Uid, cred.Gid)}
	return context.WithValue(ctx, callerKey{}, who)
}

func (s *Server) userName(uid uint32) string {
	if v, ok := s.users.Load(uid); ok {
		return v.(string)
	}
	name := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	s.users.Store(uid, name)
	return name
}

// writeJSON writes v with status 200.
func (s *Server) writeJSON(w http.ResponseWriter, v any) {
	w.Header()["Content-Type"] = jsonContentType
	if err := json.NewEncoder(w).Encode(v); err != nil {
		s.log.Debug("write response", "err", err)
	}
}

// writeError writes err as an api.ErrorBody with the status of its kind.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client left
	}
	code, status := api.KindCode(err)
	if status == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	s.writeBody(w, r, code, err.Error())
}

func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, code, msg string) {
	noteError(w, msg)
	if err := json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}}); err != nil {
		s.log.Debug("write error response", "path", r.URL.Path, "err", err)
	}
}

// decode reads a JSON body strictly: bodies over 4 MiB, bytes that are
// not UTF-8, unknown fields and trailing data are errors naming the
// problem. (encoding/json would turn invalid UTF-8 into U+FFFD silently,
// so a script would run with other bytes than were sent.)
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeWith(w, r, v, nil)
}

// decodeWith is decode with a hand-written decoder tried first (fast,
// when not nil: it decodes the body into v and reports true, or leaves v
// zero and reports false for anything it does not take, which decodeBytes
// then decodes or refuses as always). The body's size and UTF-8 are
// checked before either.
func decodeWith(w http.ResponseWriter, r *http.Request, v any, fast func([]byte) bool) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	b, err := readAllSized(r.Body, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return tooLarge(mbe.Limit)
		}
		return spec.Errorf(spec.ErrInvalid, "read request body: %v", err)
	}
	return decodeBytesWith(b, v, fast)
}

// maxSizedBody is the largest declared Content-Length readAllSized allocates
// for up front: a client declaring more than it sends then costs no more
// than what it sent.
const maxSizedBody = 64 << 10

// readAllSized is io.ReadAll into one array of the body's declared length
// (size, -1 when unknown), when that is small: io.ReadAll grows from 512
// bytes by appends, ~2.5 times a submission's or an events post's ~1 KiB
// allocated per request.
func readAllSized(rd io.Reader, size int64) ([]byte, error) {
	if size <= 0 || size > maxSizedBody {
		return io.ReadAll(rd)
	}
	b := make([]byte, 0, size+1) // +1: the read that meets EOF has room
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) { // more than declared: grow as io.ReadAll does
			b = append(b, 0)[:len(b)]
		}
	}
}

// decodeBytesWith is decodeWith after the body is read (the fuzz
// targets' entry).
func decodeBytesWith(b []byte, v any, fast func([]byte) bool) error {
	if fast != nil && len(b) <= maxBody && utf8.Valid(b) && fast(b) {
		return nil
	}
	return decodeBytes(b, v)
}

func tooLarge(limit int64) error {
	if limit >= 1<<20 {
		return spec.Errorf(spec.ErrInvalid, "request body is over %d MiB; send a smaller script or stage large files on shared storage", limit>>20)
	}
	return spec.Errorf(spec.ErrInvalid, "request body is over %d KiB, the most this endpoint takes", limit>>10)
}

// decodeBytes is decode after the body is read (the fuzz targets' entry).
func decodeBytes(b []byte, v any) error {
	if len(b) > maxBody {
		return spec.Errorf(spec.ErrInvalid, "request body is over %d MiB; send a smaller script or stage large files on shared storage", maxBody>>20)
	}
	if !utf8.Valid(b) {
		return spec.Errorf(spec.ErrInvalid, "request body is not valid UTF-8 (at byte %d); send scripts and names as UTF-8 text (convert with iconv)", invalidUTF8At(b))
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return spec.Errorf(spec.ErrInvalid, "request body is empty; send a JSON object")
		}
		return spec.Errorf(spec.ErrInvalid, "bad JSON in request body: %v", err)
	}
	if dec.More() {
		return spec.Errorf(spec.ErrInvalid, "bad JSON in request body: data after the JSON object")
	}
	return nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

func seconds(r *http.Request, key string, def time.Duration) (time.Duration, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, spec.Errorf(spec.ErrInvalid, "query parameter %s=%q is not a whole number of seconds", key, v)
	}
	return time.Duration(min(n, int(maxWait/time.Second))) * time.Second, nil // capped before the multiply, which could wrap
}

func jobID(r *http.Request) (spec.JobID, error) {
	v := r.PathValue("id")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, spec.Errorf(spec.ErrInvalid, "job id %q is not a positive number", v)
	}
	return spec.JobID(n), nil
}

// jobRef is the {id} path segment as users write it: 42 or 42_7.
func jobRef(r *http.Request) (spec.JobRef, error) {
	return spec.ParseJobRef(r.PathValue("id"))
}

// instrument reports each request to s.observe. It wraps the mux directly
// (inside authenticate) because the mux records the matched pattern on
// the very *http.Request it is given; requests refused by authenticate
// are not observed.
func (s *Server) instrument(next http.Handler) http.Handler {
	if s.observe == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		s.observe(r.Pattern, sw.code, time.Since(start))
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.code, w.wroteHeader = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
