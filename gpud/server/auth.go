package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// TokenVerifier checks a bearer token and returns its claims
// (implemented by *auth.Keys). Safe for concurrent use.
type TokenVerifier interface {
	Verify(raw string) (auth.Claims, error)
}

// skewedVerifier is a TokenVerifier that takes a token for a while past
// its expiry (auth.Keys: the tolerated clock skew); a request that
// outlives a token (a watch stream) ends when the verifier stops taking it.
type skewedVerifier interface {
	Skew() time.Duration
}

// WithTokens accepts bearer tokens that v verifies on non-unix
// connections. Without it every TCP request but /healthz gets 401.
func WithTokens(v TokenVerifier) Option { return func(s *Server) { s.tokens = v } }

// WithRoles grants the operator and admin roles to user names (root is
// always admin); see SetRoles.
func WithRoles(operators, admins []string) Option {
	return func(s *Server) { s.SetRoles(operators, admins) }
}

// WithSubmitRate limits each user (but root) to perSec submissions per
// second sustained, in bursts of burst; perSec 0 means no limit.
func WithSubmitRate(perSec float64, burst int) Option {
	return func(s *Server) { s.submits = newRateLimiter(perSec, burst, time.Now) }
}

// WithClock replaces time.Now for the rate limiter (tests).
func WithClock(now func() time.Time) Option {
	return func(s *Server) {
		s.now = now
		if s.submits != nil {
			s.submits.now = now
		}
		if s.ref.budget != nil {
			s.ref.budget.now = now
		}
	}
}

// WithRevocations has the server consult r, the daemon's one revocation
// state (the HA members' Raft port consults the same), for every token
// and node certificate, send it to the nodes with their answers, and
// close live connections whose credential it revokes. Without it the
// server keeps its own (SetRevocations fills it).
func WithRevocations(r *auth.Revocations) Option { return func(s *Server) { s.rev = r } }

// Revocations is the server's revocation state.
func (s *Server) Revocations() *auth.Revocations { return s.rev }

// SetRevocations replaces the revoked node certificate serials (hex,
// colons allowed) and token IDs (a configuration reload; entries that
// cannot be read are left out: the configuration check refuses them);
// safe while serving. Connections made with a credential it revokes are
// closed, and the nodes get the lists with their next answers (a long
// poll is answered at once).
func (s *Server) SetRevocations(certs, tokens []string) {
	var okCerts []string
	for _, sn := range certs {
		if _, ok := auth.ParseSerial(sn); ok {
			okCerts = append(okCerts, sn)
		}
	}
	var okTokens []string
	for _, id := range tokens {
		if id = strings.TrimSpace(id); id != "" && len(id) <= 64 {
			okTokens = append(okTokens, id)
		}
	}
	l, err := auth.NewRevocationList(okCerts, okTokens)
	if err != nil {
		s.log.Error("revocation lists not applied", "err", err)
		return
	}
	old := s.rev.Version()
	if n := s.rev.Set(l, s.now()); n > 0 || old != l.Version {
		s.log.Info("revocation lists applied", "version", l.Version, "certificates", len(l.Certs), "tokens", len(l.Tokens), "connections_closed", n)
	}
}

// WithRevoked refuses tokens whose IDs ("jti") are in ids; see
// SetRevoked.
func WithRevoked(ids []string) Option { return func(s *Server) { s.SetRevoked(ids) } }

// SetRevoked replaces the revoked token IDs, keeping the revoked
// certificates; see SetRevocations.
func (s *Server) SetRevoked(ids []string) { s.SetRevocations(s.rev.List().Certs, ids) }

// NodeSigner signs node certificates (implemented by *auth.CA).
type NodeSigner interface {
	// SignNode returns a PEM client certificate for node from a PEM
	// certificate request with CommonName node.
	SignNode(csrPEM []byte, node string) ([]byte, error)
	// CertPEM is the CA certificate nodes must trust.
	CertPEM() []byte
}

// WithNodeJoin lets node agents holding joinToken get a client
// certificate signed by ca (POST /v1/nodes/join), with which they then
// speak the node protocol for their own name. The TLS listener must ask
// for client certificates signed by ca (tls.VerifyClientCertIfGiven).
func WithNodeJoin(ca NodeSigner, joinToken string) Option {
	return func(s *Server) { s.join = &nodeJoin{ca: ca, token: joinToken} }
}

type nodeJoin struct {
	ca    NodeSigner
	token string
}

const joinPath = "/" + api.Version + "/nodes/join"

// joinNode answers POST /v1/nodes/join.
func (s *Server) joinNode(w http.ResponseWriter, r *http.Request) {
	if s.join == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller does not let nodes join over TCP; configure listen_tcp"))
		return
	}
	// The token comes in a header (agents since issue 12), checked
	// before the body is read; older agents send it in the body, at most
	// 16 KiB read within [api] read_timeout.
	wrong := func() {
		s.writeStatus(w, r, http.StatusUnauthorized, api.CodePermissionDenied,
			"wrong join token; copy it from `gpud token join` on the controller host into the node's join_token_file")
	}
	hdr := r.Header.Get(api.JoinTokenHeader)
	if hdr != "" && !auth.JoinTokenOK(hdr, s.join.token) {
		wrong()
		return
	}
	var req api.JoinRequest
	if err := decode(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	noteTarget(w, "node "+clip(req.Node))
	if hdr == "" && !auth.JoinTokenOK(req.JoinToken, s.join.token) || hdr != "" && req.JoinToken != "" && req.JoinToken != hdr {
		wrong()
		return
	}
	if !auth.ValidName(req.Node) {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "node name %q is not valid (letters, digits, _ . @ -; at most 64)", req.Node))
		return
	}
	cert, err := s.join.ca.SignNode([]byte(req.CSR), req.Node)
	if err != nil {
		s.writeError(w, r, spec.Errorf(spec.ErrInvalid, "join node %s: %v", req.Node, err))
		return
	}
	s.log.Info("node joined: certificate issued", "node", req.Node, "serial", certSerial(cert), "remote", r.RemoteAddr)
	s.writeJSON(w, api.JoinResponse{Cert: string(cert), CA: string(s.join.ca.CertPEM())})
}

type roleLists struct{ operators, admins []string }

// SetRoles replaces the operator and admin lists (a configuration
// reload); safe while serving.
func (s *Server) SetRoles(operators, admins []string) {
	s.roles.Store(&roleLists{operators: slices.Clone(operators), admins: slices.Clone(admins)})
}

// configRole is the role the configuration grants user (root: admin).
func (s *Server) configRole(user string, uid uint32) string {
	if uid == 0 || user == "root" {
		return auth.RoleAdmin
	}
	if rl := s.roles.Load(); rl != nil {
		switch {
		case slices.Contains(rl.admins, user):
			return auth.RoleAdmin
		case slices.Contains(rl.operators, user):
			return auth.RoleOperator
		}
	}
	return auth.RoleUser
}

// identity is who makes a request and with what role.
type identity struct {
	caller controller.Caller
	role   string
	// node is the node a RoleNode token is bound to.
	node string
	// remote: the request came over TCP with a token.
	remote bool
	// cred is the credential the caller proved its identity with (what
	// a step ticket it obtains is bound to).
	cred auth.Credential
	// expires is when a token stops being taken (its expiry plus the
	// verifier's skew), or a node certificate's NotAfter; a request that
	// outlives it (a watch stream) ends by then, and authenticate refuses
	// the next one (TLS checks a certificate at the handshake only, and a
	// node's connection may outlive it). Zero for a unix socket's peer.
	expires time.Time
}

type identityKey struct{}

func who(r *http.Request) identity {
	id, _ := r.Context().Value(identityKey{}).(identity)
	return id
}

// caller is the controller.Caller of the request (zero when unknown).
func caller(r *http.Request) controller.Caller { return who(r).caller }

// viewer is who reads, for what the controller shows (hidden
// partitions, private jobs): an operator sees as root does.
func (s *Server) viewer(r *http.Request) controller.Caller {
	id := who(r)
	if id.role != auth.RoleNode && id.atLeast(auth.RoleOperator) {
		return id.privileged()
	}
	return id.caller
}

// atLeast says whether id's role ranks at least role.
func (id identity) atLeast(role string) bool { return auth.Rank(id.role) >= auth.Rank(role) }

// privileged returns the caller the controller must see for an action the
// server has already authorised by role: the controller knows only root
// (uid 0) as privileged, so an operator's authorised action goes to it as
// uid 0 under the operator's own name (which the controller writes into
// reasons such as "drained by alice").
// TODO(#8): pass the role to the controller (Caller.Role) instead.
func (id identity) privileged() controller.Caller {
	return controller.Caller{UID: 0, GID: 0, User: id.caller.User, Known: true}
}

// actor is the caller a request acts as on jobs and their history:
// operators (and admins) act on every user's, anyone else as themselves.
func (id identity) actor() controller.Caller {
	if id.atLeast(auth.RoleOperator) {
		return id.privileged()
	}
	return id.caller
}

func denied(format string, args ...any) error {
	return spec.Errorf(spec.ErrPermissionDenied, format, args...)
}

// requireRole refuses id unless it has at least role (node tokens never do).
func requireRole(id identity, role, what string) error {
	if id.role != auth.RoleNode && id.atLeast(role) {
		return nil
	}
	return denied("%s needs the %s role; %s has role %s (roles come from [auth] operators/admins in gpud.toml)", what, role, id.name(), id.role)
}

// notNode refuses node tokens outside the node protocol.
func notNode(id identity, what string) error {
	if id.role == auth.RoleNode {
		return denied("%s: a node token (node %s) may only speak the node protocol; use a user token", what, id.node)
	}
	return nil
}

func (id identity) name() string {
	if id.role == auth.RoleNode {
		return "node " + id.node
	}
	if id.caller.User != "" {
		return "user " + id.caller.User
	}
	return "uid " + strconv.FormatUint(uint64(id.caller.UID), 10)
}

// nodeCaller authorises a node-protocol request for node name: root on the
// unix socket, or a node token bound to name.
func nodeCaller(id identity, name string) (controller.Caller, error) {
	switch {
	case id.role == auth.RoleNode && id.node == name:
		return controller.Caller{UID: 0, User: "node:" + name, Known: true}, nil
	case id.role == auth.RoleNode:
		return controller.Caller{}, denied("a token for node %s may not speak for node %s", id.node, name)
	case !id.remote && id.caller.Known && id.caller.UID == 0:
		return id.caller, nil
	}
	return controller.Caller{}, denied("the node protocol (node %s) needs root on the controller's socket or a node token (gpud token issue --role node --node %s); %s may not use it", name, name, id.name())
}

// authenticate puts the request's identity in its context: peer
// credentials on the unix socket, a verified bearer token otherwise.
// /healthz and /metrics (when served) need none.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if peer, ok := r.Context().Value(callerKey{}).(controller.Caller); ok {
			id := identity{caller: peer, role: s.configRole(peer.User, peer.UID), cred: auth.UIDCredential(peer.UID)}
			if r.Header.Get(slurmTokenHeader) != "" || r.Header.Get(slurmUserHeader) != "" {
				var (
					class string
					err   error
				)
				if id, class, err = s.slurmOnSocket(r, id); err != nil {
					s.refuseUnidentified(w, r, class, http.StatusUnauthorized, api.CodePermissionDenied, err.Error())
					return
				}
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
			return
		}
		if r.URL.Path == "/healthz" || r.URL.Path == "/livez" || r.URL.Path == "/readyz" ||
			r.URL.Path == "/metrics" && s.metrics != nil && r.Header.Get("Authorization") == "" {
			// Probes (/livez and /readyz are slurmrestd's, which
			// Kubernetes operators probe) say only ok. /metrics without a token: the view without per-user series
			// (serveMetrics); with one, the token decides below.
			next.ServeHTTP(w, r)
			return
		}
		if r.TLS != nil {
			if node, ok := auth.NodeOf(r.TLS.VerifiedChains); ok {
				leaf := auth.NodeCertOf(r.TLS.VerifiedChains)
				if err := s.trackConn(r, auth.CertCredential(leaf)); err != nil {
					msg := fmt.Sprintf("node certificate %s of node %s was revoked ([auth] revoked_node_certs); an admin must rotate the join token and join the node again", auth.Serial(leaf), node)
					s.peerLog.Warn("revoked node certificate refused", "node", node, "serial", auth.Serial(leaf), "remote", r.RemoteAddr)
					s.refuseUnidentified(w, r, RefusedRevokedCert, http.StatusUnauthorized, api.CodePermissionDenied, msg)
					return
				}
				if now := s.now(); now.After(leaf.NotAfter) {
					// Valid at the handshake, expired since on a
					// connection kept open.
					msg := fmt.Sprintf("node certificate %s of node %s expired at %s; join the node again: remove state_dir/tls/node.pem on the node and restart gpud node, which joins with node.toml's join_token_file",
						auth.Serial(leaf), node, leaf.NotAfter.UTC().Format(time.RFC3339))
					s.peerLog.Warn("expired node certificate refused", "node", node, "serial", auth.Serial(leaf), "remote", r.RemoteAddr, "not_after", leaf.NotAfter)
					s.refuseUnidentified(w, r, RefusedExpiredCert, http.StatusUnauthorized, api.CodePermissionDenied, msg)
					return
				}
				// A node certificate from joining: the node's identity,
				// bound to its name (nodeCaller checks each request).
				id := identity{caller: controller.Caller{User: "node:" + node}, role: auth.RoleNode, node: node, remote: true, cred: auth.CertCredential(leaf), expires: leaf.NotAfter}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
				return
			}
			if r.URL.Path == joinPath && s.join != nil {
				// Joining is how a node gets an identity: the handler
				// checks the join token (and audits a wrong one).
				id := identity{remote: true}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
				return
			}
		}
		if r.TLS == nil {
			s.refuseUnidentified(w, r, RefusedNoTLS, http.StatusForbidden, api.CodePermissionDenied,
				"this controller takes TCP requests over TLS only; use https://")
			return
		}
		id, class, err := s.verify(r)
		if err != nil {
			s.refuseUnidentified(w, r, class, http.StatusUnauthorized, api.CodePermissionDenied, err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// tokenMemo is the last token verified on one TCP connection, with its
// claims, until the token expires. A node agent sends the same token on
// every call over its one HTTP/2 connection (heartbeats, events, long
// polls); verifying it each time (HMAC, base64, JSON) was 15 % of an idle
// 9,000-node controller's CPU. The token key does not change while the
// server runs, so the same bytes verify the same way until they expire;
// revocation is checked on every request all the same (verify).
type tokenMemo struct {
	mu     sync.Mutex
	raw    string
	claims auth.Claims
	until  time.Time
	// conn is the connection, creds the credentials it is tracked under
	// in the revocation state (trackConn).
	conn  net.Conn
	creds []auth.Credential
}

type tokenMemoKey struct{}

// trackConn refuses cred when it is revoked and otherwise has the
// revocation state close the request's connection when it is revoked
// later (once per connection and credential; a request with no
// connection memo, as in tests through Handler, is only checked).
func (s *Server) trackConn(r *http.Request, cred auth.Credential) error {
	m, _ := r.Context().Value(tokenMemoKey{}).(*tokenMemo)
	if m == nil || m.conn == nil {
		return s.rev.Check(cred)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.creds, cred) {
		// Tracked: a revocation since has closed the connection, but a
		// request read just before may still arrive here.
		return s.rev.Check(cred)
	}
	if err := s.rev.Track(m.conn, cred); err != nil {
		return err
	}
	m.creds = append(m.creds, cred)
	return nil
}

// verifyToken verifies raw, or takes its claims from the connection's
// memo when the connection's last token was the same and has not expired.
func (s *Server) verifyToken(ctx context.Context, raw string) (auth.Claims, error) {
	m, _ := ctx.Value(tokenMemoKey{}).(*tokenMemo)
	if m != nil {
		m.mu.Lock()
		if m.raw == raw && s.now().Before(m.until) {
			c := m.claims
			m.mu.Unlock()
			return c, nil
		}
		m.mu.Unlock()
	}
	c, err := s.tokens.Verify(raw)
	if err == nil && m != nil && c.ExpiresAt != nil {
		m.mu.Lock()
		m.raw, m.claims, m.until = raw, c, c.ExpiresAt.Time
		m.mu.Unlock()
	}
	return c, err
}

const howToGetToken = "ask an admin for one (gpud token issue --user NAME on the controller) and save it in ~/.config/gpud/token (mode 600) or set " + api.EnvToken

// verify authenticates a TCP request by its bearer token; a refusal
// comes with its class (RefusalClasses).
func (s *Server) verify(r *http.Request) (identity, string, error) {
	if s.tokens == nil {
		return identity{}, RefusedNoToken, errors.New("this controller accepts no tokens over TCP; use its unix socket")
	}
	h := r.Header.Get("Authorization")
	scheme, raw, _ := strings.Cut(h, " ")
	if h == "" && r.Header.Get(slurmTokenHeader) != "" {
		// Slurm's REST clients send the token in their own header.
		scheme, raw = "Bearer", r.Header.Get(slurmTokenHeader)
	}
	if scheme == "" || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return identity{}, RefusedNoToken, fmt.Errorf("a bearer token is required over TCP (Authorization: Bearer or %s); %s", slurmTokenHeader, howToGetToken)
	}
	c, err := s.verifyToken(r.Context(), strings.TrimSpace(raw))
	switch {
	case errors.Is(err, auth.ErrExpired):
		return identity{}, RefusedExpired, fmt.Errorf("your token has expired; %s", howToGetToken)
	case err != nil:
		return identity{}, RefusedBadToken, fmt.Errorf("token refused (%v); %s", err, howToGetToken)
	}
	if err := s.trackConn(r, auth.TokenCredential(c.ID)); err != nil {
		return identity{}, RefusedRevoked, fmt.Errorf("token %s was revoked ([auth] revoked_tokens); %s", c.ID, howToGetToken)
	}
	if name := r.Header.Get(slurmUserHeader); name != "" && name != c.User {
		return identity{}, RefusedBadToken, fmt.Errorf("%s %q is not the token's user %q: gpud acts only as the token's user; send that user's own token", slurmUserHeader, clip(name), c.User)
	}
	id := identity{caller: controller.Caller{UID: c.UID, GID: c.GID, User: c.User, Known: true}, role: c.Role, remote: true, cred: auth.TokenCredential(c.ID)}
	if c.ExpiresAt != nil {
		id.expires = c.ExpiresAt.Time
		if sv, ok := s.tokens.(skewedVerifier); ok {
			id.expires = id.expires.Add(sv.Skew())
		}
	}
	if c.Role != auth.RoleNode {
		id.caller.Groups = s.groupsOf(c.UID, c.GID)
	}
	if c.Role == auth.RoleNode {
		id.node = c.Node
		id.caller = controller.Caller{User: "node:" + c.Node} // no user identity
		return id, "", nil
	}
	// The token's role is a ceiling; the configuration is the grant.
	if granted := s.configRole(c.User, c.UID); auth.Rank(granted) < auth.Rank(c.Role) {
		id.role = granted
	}
	return id, "", nil
}

// writeStatus writes an error body with an explicit status.
// A 401 closes the connection after the answer.
func (s *Server) writeStatus(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if status == http.StatusUnauthorized {
		closeAfter(w, r)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	s.writeBody(w, r, code, msg)
}

// rateLimiter is a token bucket per key.
type rateLimiter struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets bounds the limiter's memory; full buckets are dropped first.
const maxBuckets = 100000

func newRateLimiter(perSec float64, burst int, now func() time.Time) *rateLimiter {
	if perSec <= 0 {
		return nil
	}
	return &rateLimiter{rate: perSec, burst: float64(max(burst, 1)), now: now, buckets: map[string]*bucket{}}
}

// take spends one token of key's bucket, or says how long until one is
// there.
func (l *rateLimiter) take(key string) (ok bool, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el*l.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// empty says whether key's bucket lacks a whole token now, and how long
// until it has one, without spending any.
func (l *rateLimiter) empty(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		return false, 0
	}
	tokens := math.Min(l.burst, b.tokens+max(l.now().Sub(b.last).Seconds(), 0)*l.rate)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - tokens) / l.rate * float64(time.Second))
}

func (l *rateLimiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// limitSubmit applies the per-user rate of submissions and updates (both
// add to what the controller stores: scontrol update of each task of an
// array rewrote its row); it writes 429 with Retry-After and returns
// false when the caller is over it.
func (s *Server) limitSubmit(w http.ResponseWriter, r *http.Request, id identity) bool {
	if s.submits == nil || (id.caller.Known && id.caller.UID == 0 && !id.remote) {
		return true
	}
	key := id.caller.User + "/" + strconv.FormatUint(uint64(id.caller.UID), 10)
	ok, retry := s.submits.take(key)
	if ok {
		return true
	}
	secs := max(int(math.Ceil(retry.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	s.writeStatus(w, r, http.StatusTooManyRequests, api.CodeRefused,
		fmt.Sprintf("%s is over the rate limit of submissions and updates (%g a second, bursts of %g); retry in %ds, or submit fewer, larger jobs (an array rather than many jobs)", id.name(), s.submits.rate, s.submits.burst, secs))
	return false
}

// redact hides another user's script, arguments, environment and paths
// from a caller below operator who does not own it (same uid, as the
// controller judges ownership).
func redact(id identity, j *spec.Job) {
	if id.atLeast(auth.RoleOperator) && id.role != auth.RoleNode {
		return
	}
	if id.caller.Known && id.caller.UID == j.UID {
		return
	}
	j.Script, j.Args, j.Env = "", nil, nil
	j.Output, j.Error, j.StdoutPath, j.StderrPath = "", "", "", ""
	j.WorkDir, j.SubmitDir = "", ""
	j.Comment = ""
}

// ownsOrPrivileged says whether id sees j's full listing entry.
func ownsOrPrivileged(id identity, j *spec.Job) bool {
	if id.atLeast(auth.RoleOperator) && id.role != auth.RoleNode {
		return true
	}
	return id.caller.Known && id.caller.UID == j.UID
}

// Slurm's REST authentication headers (slurmrestd's rest_auth/jwt).
const (
	slurmTokenHeader = "X-SLURM-USER-TOKEN"
	slurmUserHeader  = "X-SLURM-USER-NAME"
)

// slurmOnSocket is the identity of a unix-socket request that carries
// Slurm's token headers. The socket's peer credentials stay the identity:
// a token names the same user or is refused, so a token can never lift a
// local user to another. Only root's connection (a proxy such as gpud rest
// running on the controller host) acts as the token's user.
func (s *Server) slurmOnSocket(r *http.Request, peer identity) (identity, string, error) {
	name := r.Header.Get(slurmUserHeader)
	raw := strings.TrimSpace(r.Header.Get(slurmTokenHeader))
	if raw == "" || s.tokens == nil {
		if name != "" && name != peer.caller.User {
			return identity{}, RefusedBadToken, fmt.Errorf("%s %q is not you (%s): on the controller's socket you act as yourself", slurmUserHeader, clip(name), peer.name())
		}
		return peer, "", nil
	}
	tok, class, err := s.verify(r)
	if err != nil {
		return identity{}, class, err
	}
	if peer.caller.UID == 0 {
		tok.remote = false
		return tok, "", nil
	}
	if tok.caller.UID != peer.caller.UID || tok.caller.User != peer.caller.User {
		return identity{}, RefusedBadToken, fmt.Errorf("the token is %s's but this connection is %s's: on the controller's socket a token must be your own", tok.caller.User, peer.name())
	}
	return peer, "", nil
}
