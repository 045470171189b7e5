package server

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
)

// What a refused call costs the controller, whoever makes it (issue 24,
// hole 4: 60,000 bad-token requests each added an audit row until the
// state filesystem was full). A refusal is
//   - counted (WithRefusalCounter: gpud_api_refusals_total by class);
//   - audited once per source, action and status per interval: the first
//     such refusal is written as it happens, with its message, the rest
//     are counted and written as one summary row when the interval ends
//     (auditor.runAudit), so a flood adds at most two rows per source and
//     kind a minute, and a bounded number of sources (refusalKeys);
//   - charged to its source's refusal budget (WithRefusalRate): a source
//     over it is slowed down. An address that keeps failing
//     authentication gets each further refusal only after refusalTarpit
//     (so its rate is bounded by its connection cap over the tarpit),
//     as 429, and its connection is closed; a user (uid) whose calls keep
//     being refused has further state-changing calls answered 429 before
//     anything is written, until the budget refills. Requests that
//     authenticate are never slowed for their address's sake: users
//     sharing a login node with a flood are not locked out;
//   - closing its connection: a 401 closes it at once (writeStatus);
//     a connection with connRefusalLimit refusals of any kind is closed
//     after its next answer.
const (
	// refusalInterval is the summary period.
	refusalInterval = time.Minute
	// refusalKeys bounds the (source, action, status) tallies of one
	// interval; refusals beyond them are tallied per status under the
	// origin "(other sources)".
	refusalKeys = 4096
	// refusalTarpit delays the answer to an address over its budget.
	refusalTarpit = 2 * time.Second
	// connRefusalLimit refusals close a connection.
	connRefusalLimit = 8
	// Defaults of WithRefusalRate ([api] refusal_rate, refusal_burst).
	DefaultRefusalRate  = 2.0
	DefaultRefusalBurst = 60
)

// otherSources is the origin refusals beyond refusalKeys are tallied under.
const otherSources = "(other sources)"

// Refusal classes: the label values of gpud_api_refusals_total. A fixed
// set, so a caller cannot grow the metric's series.
const (
	RefusedNoTLS       = "no_tls"
	RefusedNoToken     = "no_token"
	RefusedBadToken    = "bad_token"
	RefusedExpired     = "expired_token"
	RefusedRevoked     = "revoked_token"
	RefusedRevokedCert = "revoked_node_cert"
	RefusedExpiredCert = "expired_node_cert"
	RefusedJoinToken   = "bad_join_token"
	RefusedDenied      = "denied"
	RefusedInvalid     = "invalid"
	RefusedNotFound    = "not_found"
	RefusedConflict    = "conflict"
	RefusedRateLimited = "rate_limited"
	RefusedOther       = "other"
)

// RefusalClasses lists every class, for a metric's help and tests.
var RefusalClasses = []string{RefusedNoTLS, RefusedNoToken, RefusedBadToken, RefusedExpired, RefusedRevoked, RefusedRevokedCert, RefusedExpiredCert,
	RefusedJoinToken, RefusedDenied, RefusedInvalid, RefusedNotFound, RefusedConflict, RefusedRateLimited, RefusedOther}

// statusClass is the class of a refusal after authentication.
func statusClass(code int) string {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return RefusedDenied
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return RefusedInvalid
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return RefusedNotFound
	case http.StatusConflict:
		return RefusedConflict
	case http.StatusTooManyRequests:
		return RefusedRateLimited
	}
	return RefusedOther
}

// WithRefusalCounter reports every refused request's class (one of
// RefusalClasses) to count: gpud_api_refusals_total.
func WithRefusalCounter(count func(class string)) Option {
	return func(s *Server) { s.ref.count = count }
}

// WithRefusalRate sets each source's refusal budget: perSec refusals a
// second sustained, bursts of burst (an address on TCP before it has
// authenticated, a uid after); perSec 0 turns the slow-down off
// (refusals are still counted and summarised). Root on the unix socket
// and conn_limit_exempt networks have no budget.
func WithRefusalRate(perSec float64, burst int) Option {
	return func(s *Server) { s.ref.setRate(perSec, burst, s.now) }
}

// refusals is the server's refusal bookkeeping (see above).
type refusals struct {
	count  func(class string)
	budget *rateLimiter

	mu      sync.Mutex
	tallies map[refusalKey]*refusalTally
	// classes counts refusals by class since start (tests, and the
	// counter when none is given).
	classes map[string]int64
}

// refusalKey is what a refusal is tallied by.
type refusalKey struct {
	origin string // "unix", an address, a /64, otherSources
	uid    uint32
	actor  string
	role   string
	action string
	status int
}

// refusalTally is one key's refusals in the current interval after its
// first (which was written on its own).
type refusalTally struct {
	n           int
	first, last time.Time
	msg         string
}

func (r *refusals) setRate(perSec float64, burst int, now func() time.Time) {
	r.budget = newRateLimiter(perSec, burst, now)
}

// class counts one refusal of class.
func (r *refusals) class(class string) {
	r.mu.Lock()
	if r.classes == nil {
		r.classes = map[string]int64{}
	}
	r.classes[class]++
	r.mu.Unlock()
	if r.count != nil {
		r.count(class)
	}
}

// note tallies a refusal: first says it is the first of its key this
// interval (write it on its own); otherwise it was counted for the
// interval's summary.
func (r *refusals) note(k refusalKey, msg string, at time.Time) (first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tallies == nil {
		r.tallies = map[refusalKey]*refusalTally{}
	}
	t, ok := r.tallies[k]
	if !ok && len(r.tallies) >= refusalKeys {
		// A flood from many addresses (an IPv6 /48 has 65,536 /64s):
		// the rest share one tally per action and status.
		k = refusalKey{origin: otherSources, uid: math.MaxUint32, actor: "unidentified", action: k.action, status: k.status}
		t, ok = r.tallies[k]
	}
	if !ok {
		r.tallies[k] = &refusalTally{}
		return true
	}
	if t.n == 0 {
		t.first, t.msg = at, msg
	}
	t.n++
	t.last = at
	return false
}

// summaries returns the interval's summary rows (keys refused more than
// once) and starts a new interval.
func (r *refusals) summaries() []accounting.AuditEntry {
	r.mu.Lock()
	tallies := r.tallies
	r.tallies = nil
	r.mu.Unlock()
	var out []accounting.AuditEntry
	for k, t := range tallies {
		if t.n == 0 {
			continue
		}
		out = append(out, accounting.AuditEntry{
			Time: t.last, ActorUID: k.uid, ActorName: k.actor, Role: k.role, Origin: k.origin, Action: k.action,
			Result: strconv.Itoa(k.status) + " " + clip(fmt.Sprintf("%d more refused like this between %s and %s (summarised): %s",
				t.n, t.first.UTC().Format(time.TimeOnly), t.last.UTC().Format(time.TimeOnly), t.msg)),
			Summarised: t.n,
		})
	}
	return out
}

// spend charges one refusal to source's budget and says whether the
// source is over it.
func (r *refusals) spend(source string) (over bool, retry time.Duration) {
	if r.budget == nil || source == "" {
		return false, 0
	}
	ok, retry := r.budget.take(source)
	return !ok, retry
}

// over says whether source has spent its budget (without spending).
func (r *refusals) over(source string) (bool, time.Duration) {
	if r.budget == nil || source == "" {
		return false, 0
	}
	return r.budget.empty(source)
}

// addrSource is the budget and summary key of a TCP peer: its address,
// or for IPv6 its /64 (one host's share of a network), "" for an exempt
// network (node networks behind NAT).
func (s *Server) addrSource(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		host, _, err := net.SplitHostPort(remote)
		if err != nil {
			return remote
		}
		return host
	}
	a := ap.Addr().Unmap()
	for _, p := range s.limits.Load().Exempt {
		if p.Contains(a) {
			return ""
		}
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// uidSource is the budget key of an identified caller: none for root on
// the unix socket.
func uidSource(id identity) string {
	if id.caller.Known && id.caller.UID == 0 && !id.remote {
		return ""
	}
	if id.role == "node" {
		return "node " + id.node
	}
	return "uid " + strconv.FormatUint(uint64(id.caller.UID), 10)
}

// refuseUnidentified answers a request refused before it had an identity
// (no TLS, no or a bad token, a revoked certificate): counted, audited as
// one of its source's refusals, charged to its address's budget, and
// answered status with msg; over budget, after refusalTarpit and as 429.
// The connection is closed after the answer.
func (s *Server) refuseUnidentified(w http.ResponseWriter, r *http.Request, class string, status int, code, msg string) {
	source := s.addrSource(r.RemoteAddr)
	if over, retry := s.ref.spend(source); over {
		class, status, code = RefusedRateLimited, http.StatusTooManyRequests, api.CodeRefused
		msg = fmt.Sprintf("too many refused requests from %s (%s); slow down: each is now answered after %s", source, msg, refusalTarpit)
		t := time.NewTimer(refusalTarpit)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
		w.Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(retry.Seconds())), 1)))
	}
	s.ref.class(class)
	s.auditRefusal(r, source, class, status, msg)
	closeAfter(w, r)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpud"`)
	}
	s.writeStatus(w, r, status, code, msg)
}

// connRefusals counts the refusals on one connection (connContext).
type connRefusals struct {
	mu sync.Mutex
	n  int
}

type connRefusalsKey struct{}

// refusedOnConn counts a refusal on r's connection.
func refusedOnConn(r *http.Request) {
	if c, ok := r.Context().Value(connRefusalsKey{}).(*connRefusals); ok {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

// connWornOut says whether r's connection has had connRefusalLimit
// refusals: it is closed after this answer.
func connWornOut(r *http.Request) bool {
	c, ok := r.Context().Value(connRefusalsKey{}).(*connRefusals)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n >= connRefusalLimit
}

// tally counts the refusals of identified requests (any method) by
// class, and on their connection; a connection with connRefusalLimit
// refusals is closed after its next answer.
func (s *Server) tally(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if connWornOut(r) {
			closeAfter(w, r)
		}
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		if refused(sw.code) {
			s.ref.class(statusClass(sw.code))
			refusedOnConn(r)
		}
	})
}
