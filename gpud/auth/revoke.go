package auth

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Revocation. One state, Revocations, answers for every daemon that
// accepts a credential: the controller's API (tokens and node
// certificates), the HA members' Raft port (member certificates), every
// node's step listener (peers' node certificates, and the credential a
// step ticket was obtained with) and the nodes' dials to their peers.
// The controller's state comes from [auth] revoked_node_certs and
// revoked_tokens (a reload replaces it); the nodes' is a copy the
// controller sends with the answers they poll for anyway (registration,
// heartbeats, assignments), named by a version (a digest of the lists) so
// a node sends what it has and gets the lists only when they changed.
//
// A copy can be stale: a node that has not had its version confirmed by
// the controller for longer than its bound (Revocations.MaxAge) refuses
// every credential rather than trust an old list. A revocation also ends
// the live connections made with the credential (Track).

// Credential kinds.
const (
	// CredCert is a certificate of the cluster CA (a node's or an HA
	// member's), named by its serial (Serial's form).
	CredCert = "cert"
	// CredToken is a signed token, named by its ID (jti).
	CredToken = "token"
	// CredUID is a local user on the controller's socket (peer
	// credentials): nothing to revoke.
	CredUID = "uid"
)

// Credential names one credential a caller authenticated with.
type Credential struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

// CertCredential is a certificate's credential.
func CertCredential(c *x509.Certificate) Credential { return Credential{Kind: CredCert, ID: Serial(c)} }

// TokenCredential is a token's credential, by its ID (jti).
func TokenCredential(jti string) Credential { return Credential{Kind: CredToken, ID: jti} }

// UIDCredential is a local user's (never revoked).
func UIDCredential(uid uint32) Credential {
	return Credential{Kind: CredUID, ID: strconv.FormatUint(uint64(uid), 10)}
}

func (c Credential) String() string {
	switch c.Kind {
	case CredCert:
		return "certificate " + c.ID
	case CredToken:
		return "token " + c.ID
	case CredUID:
		return "uid " + c.ID
	}
	return c.Kind + " " + c.ID
}

// RevocationList is one version of the revocation lists; treat it as
// immutable.
type RevocationList struct {
	// Version names the lists' content: equal lists, equal versions, on
	// every controller of a group that has the same configuration.
	Version string
	// Certs are revoked certificate serials (Serial's form), sorted;
	// Tokens revoked token IDs, sorted.
	Certs, Tokens []string

	certs, tokens map[string]bool
}

// maxRevoked bounds each list, so a list a node is sent cannot be made
// to exhaust it.
const maxRevoked = 100000

// NewRevocationList makes a list from certificate serials (hex, colons
// allowed, as ParseSerial reads them) and token IDs. It returns every
// entry it cannot read.
func NewRevocationList(certs, tokens []string) (*RevocationList, error) {
	var errs []error
	l := &RevocationList{certs: make(map[string]bool, len(certs)), tokens: make(map[string]bool, len(tokens))}
	for _, s := range certs {
		sn, ok := ParseSerial(s)
		if !ok {
			errs = append(errs, fmt.Errorf("revoked certificate %q is not a serial number (hex digits, colons allowed)", s))
			continue
		}
		l.certs[sn] = true
	}
	for _, id := range tokens {
		id = strings.TrimSpace(id)
		if id == "" || len(id) > maxJTI {
			errs = append(errs, fmt.Errorf("revoked token ID %q is empty or over %d characters", id, maxJTI))
			continue
		}
		l.tokens[id] = true
	}
	if len(l.certs) > maxRevoked || len(l.tokens) > maxRevoked {
		errs = append(errs, fmt.Errorf("%d revoked certificates and %d revoked tokens: at most %d of each", len(l.certs), len(l.tokens), maxRevoked))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	l.Certs = slices.Sorted(maps.Keys(l.certs))
	l.Tokens = slices.Sorted(maps.Keys(l.tokens))
	h := sha256.New()
	for _, sn := range l.Certs {
		h.Write([]byte("c " + sn + "\n"))
	}
	for _, id := range l.Tokens {
		h.Write([]byte("t " + id + "\n"))
	}
	l.Version = hex.EncodeToString(h.Sum(nil)[:12])
	return l, nil
}

// Revoked says whether the list names c.
func (l *RevocationList) Revoked(c Credential) bool {
	switch c.Kind {
	case CredCert:
		return l.certs[c.ID]
	case CredToken:
		return l.tokens[c.ID]
	}
	return false
}

// ErrRevoked is matched (errors.Is) by the error for a revoked
// credential.
var ErrRevoked = errors.New("was revoked")

// ErrStaleRevocations is matched by the error of a node whose list is
// older than its bound.
var ErrStaleRevocations = errors.New("revocation list stale")

// Revocations is a daemon's revocation state: the current list, when the
// controller last confirmed it (nodes), and the live connections made
// with each credential. Safe for concurrent use.
type Revocations struct {
	now    func() time.Time
	maxAge atomic.Int64 // time.Duration; 0: never stale (the controller)

	cur atomic.Pointer[revState]

	mu      sync.Mutex
	conns   map[net.Conn][]Credential
	changed chan struct{}
}

type revState struct {
	list *RevocationList
	// confirmed is when the list was last known current (zero: never).
	confirmed time.Time
}

// NewRevocations returns an empty state that is authoritative (never
// stale): the controller's. now is the clock (nil: time.Now).
func NewRevocations(now func() time.Time) *Revocations {
	if now == nil {
		now = time.Now
	}
	empty, _ := NewRevocationList(nil, nil)
	r := &Revocations{now: now, conns: map[net.Conn][]Credential{}, changed: make(chan struct{})}
	r.cur.Store(&revState{list: empty})
	return r
}

// NewRevocationCopy returns a node's copy: empty and stale until Update
// gives it the controller's list, and stale again when the list has not
// been confirmed (Update, Confirm) for longer than maxAge.
func NewRevocationCopy(maxAge time.Duration, now func() time.Time) *Revocations {
	r := NewRevocations(now)
	r.cur.Store(&revState{list: r.cur.Load().list}) // confirmed: never
	r.SetMaxAge(maxAge)
	return r
}

// SetMaxAge changes a copy's bound (the controller's node_timeout may
// change with a reload).
func (r *Revocations) SetMaxAge(d time.Duration) { r.maxAge.Store(int64(max(d, 1))) }

// MaxAge is a copy's bound (0: the authoritative state).
func (r *Revocations) MaxAge() time.Duration { return time.Duration(r.maxAge.Load()) }

// List is the current list.
func (r *Revocations) List() *RevocationList { return r.cur.Load().list }

// Version is the current list's version.
func (r *Revocations) Version() string { return r.List().Version }

// Set replaces the list (the controller's configuration, or the list a
// node was sent, confirmed as of at) and closes the tracked connections
// of every credential it newly revokes; it returns how many it closed.
func (r *Revocations) Set(l *RevocationList, at time.Time) (closed int) {
	r.mu.Lock()
	old := r.cur.Load()
	confirmed := old.confirmed
	if at.After(confirmed) {
		confirmed = at
	}
	r.cur.Store(&revState{list: l, confirmed: confirmed})
	if old.list.Version == l.Version {
		r.mu.Unlock()
		return 0
	}
	var victims []net.Conn
	for c, creds := range r.conns {
		if slices.ContainsFunc(creds, l.Revoked) {
			victims = append(victims, c)
			delete(r.conns, c)
		}
	}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
	return len(victims)
}

// Confirm notes that the controller said, in an answer to a request sent
// at at, that version is current: the copy is fresh from at when it has
// that version. It reports whether it does (false: Update with the
// controller's lists).
func (r *Revocations) Confirm(version string, at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.cur.Load()
	if st.list.Version != version {
		return false
	}
	if at.After(st.confirmed) {
		r.cur.Store(&revState{list: st.list, confirmed: at})
	}
	return true
}

// Age is how long ago the list was last confirmed (a negative value:
// never); 0 for the authoritative state.
func (r *Revocations) Age() time.Duration {
	if r.MaxAge() == 0 {
		return 0
	}
	st := r.cur.Load()
	if st.confirmed.IsZero() {
		return -1
	}
	return r.now().Sub(st.confirmed)
}

// Changed is closed at the next change of the list.
func (r *Revocations) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Check returns why the credentials may not be trusted: one is revoked
// (ErrRevoked), or this copy is stale (ErrStaleRevocations); nil when
// they may.
func (r *Revocations) Check(creds ...Credential) error {
	st := r.cur.Load()
	if maxAge := r.MaxAge(); maxAge > 0 {
		if st.confirmed.IsZero() {
			return fmt.Errorf("%w: the controller has not sent this node its revocation list yet (it comes with the registration answer); retry once the node is registered", ErrStaleRevocations)
		}
		if age := r.now().Sub(st.confirmed); age > maxAge {
			return fmt.Errorf("%w: this node's revocation list was last confirmed by the controller %s ago, more than the %s it may be trusted for; the node refuses peers and step tickets until it reaches the controller again",
				ErrStaleRevocations, age.Round(time.Second), maxAge)
		}
	}
	for _, c := range creds {
		if st.list.Revoked(c) {
			return fmt.Errorf("%s %w ([auth] revoked_%s in the controller's gpud.toml)", c, ErrRevoked, map[string]string{CredCert: "node_certs", CredToken: "tokens"}[c.Kind])
		}
	}
	return nil
}

// Track checks creds (Check) and, when they may be trusted, keeps c
// until Untrack: a later Set that revokes one of them closes c. When they
// may not, it returns Check's error and does not keep c (the caller
// refuses and closes it).
func (r *Revocations) Track(c net.Conn, creds ...Credential) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Checked under mu: a Set between the check and the insert would
	// miss c.
	if err := r.Check(creds...); err != nil {
		return err
	}
	for _, cr := range creds {
		if !slices.Contains(r.conns[c], cr) {
			r.conns[c] = append(r.conns[c], cr)
		}
	}
	return nil
}

// Untrack forgets c (closed).
func (r *Revocations) Untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// Tracked is how many connections are tracked (tests, metrics).
func (r *Revocations) Tracked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// VerifyPeer refuses a TLS peer whose leaf certificate is revoked or,
// on a stale copy, any peer (a tls.Config's VerifyConnection; use after
// the chain is verified).
func (r *Revocations) VerifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return r.Check()
	}
	return r.Check(CertCredential(cs.PeerCertificates[0]))
}
