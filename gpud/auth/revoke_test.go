package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRevocationListCanonical(t *testing.T) {
	a, err := NewRevocationList([]string{"0A:1b", "ff"}, []string{"jti-2", "jti-1", "jti-1"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRevocationList([]string{"ff", "a1b"}, []string{"jti-1", "jti-2"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Version != b.Version || strings.Join(a.Certs, ",") != "a1b,ff" || strings.Join(a.Tokens, ",") != "jti-1,jti-2" {
		t.Errorf("equal lists differ: %+v / %+v", a, b)
	}
	c, _ := NewRevocationList([]string{"ff"}, []string{"jti-1", "jti-2"})
	if c.Version == a.Version {
		t.Errorf("different lists share version %s", c.Version)
	}
	// A serial and a token ID that spell the same never match each other.
	d, _ := NewRevocationList([]string{"abc"}, nil)
	if d.Revoked(TokenCredential("abc")) || !d.Revoked(Credential{Kind: CredCert, ID: "abc"}) || d.Revoked(UIDCredential(0)) {
		t.Error("credential kinds are mixed up")
	}
	_, err = NewRevocationList([]string{"xyz", "12"}, []string{"", strings.Repeat("j", 65)})
	if err == nil || strings.Count(err.Error(), "\n") != 2 || !strings.Contains(err.Error(), `"xyz"`) {
		t.Errorf("bad entries: %v; want all three named", err)
	}
}

// pipeConn is one end of a net.Pipe that records its closing.
type pipeConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func newPipeConn(t *testing.T) *pipeConn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	go io.Copy(io.Discard, b)
	return &pipeConn{Conn: a, closed: make(chan struct{})}
}

func (c *pipeConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

func (c *pipeConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func TestRevocationsCloseLiveConnections(t *testing.T) {
	r := NewRevocations(nil)
	if err := r.Check(TokenCredential("t1")); err != nil {
		t.Fatal(err)
	}
	c1, c2, c3 := newPipeConn(t), newPipeConn(t), newPipeConn(t)
	if err := r.Track(c1, TokenCredential("t1")); err != nil {
		t.Fatal(err)
	}
	if err := r.Track(c2, Credential{Kind: CredCert, ID: "ab"}, TokenCredential("t2")); err != nil {
		t.Fatal(err)
	}
	if err := r.Track(c3, UIDCredential(1001)); err != nil {
		t.Fatal(err)
	}
	changed := r.Changed()
	l, _ := NewRevocationList([]string{"AB"}, []string{"t9"})
	if n := r.Set(l, time.Time{}); n != 1 {
		t.Errorf("Set closed %d connections; want 1 (the one with the revoked certificate)", n)
	}
	select {
	case <-changed:
	default:
		t.Error("Changed not closed by a new list")
	}
	if c1.isClosed() || !c2.isClosed() || c3.isClosed() {
		t.Errorf("closed: t1 %v, cert ab %v, uid %v; want only the certificate's", c1.isClosed(), c2.isClosed(), c3.isClosed())
	}
	if r.Tracked() != 2 {
		t.Errorf("tracked %d; want 2", r.Tracked())
	}
	// The same list again changes nothing.
	same, _ := NewRevocationList([]string{"ab"}, []string{"t9"})
	ch := r.Changed()
	r.Set(same, time.Time{})
	select {
	case <-ch:
		t.Error("Changed closed by an equal list")
	default:
	}
	err := r.Track(newPipeConn(t), Credential{Kind: CredCert, ID: "ab"})
	if !errors.Is(err, ErrRevoked) || !strings.Contains(err.Error(), "revoked_node_certs") {
		t.Errorf("Track of a revoked certificate: %v", err)
	}
	r.Untrack(c1)
	l2, _ := NewRevocationList([]string{"ab"}, []string{"t1", "t9"})
	r.Set(l2, time.Time{})
	if c1.isClosed() {
		t.Error("an untracked connection was closed")
	}
}

func TestRevocationCopyStaleness(t *testing.T) {
	now := t0
	r := NewRevocationCopy(27*time.Second, func() time.Time { return now })
	if err := r.Check(); !errors.Is(err, ErrStaleRevocations) {
		t.Errorf("a copy never sent a list: %v; want stale", err)
	}
	l, _ := NewRevocationList(nil, []string{"t1"})
	r.Set(l, now)
	if err := r.Check(TokenCredential("t2")); err != nil {
		t.Errorf("fresh copy: %v", err)
	}
	now = now.Add(20 * time.Second)
	if r.Confirm("other", now) {
		t.Error("Confirm of another version said current")
	}
	now = now.Add(10 * time.Second) // 30 s after the list came, 10 s after a confirmation of another version
	if err := r.Check(TokenCredential("t2")); !errors.Is(err, ErrStaleRevocations) || !strings.Contains(err.Error(), "30s ago") {
		t.Errorf("copy 30s old (bound 27s): %v; want stale, saying how old", err)
	}
	if !r.Confirm(l.Version, now.Add(-time.Second)) {
		t.Error("Confirm of the copy's version said not current")
	}
	if err := r.Check(TokenCredential("t2")); err != nil {
		t.Errorf("confirmed copy: %v", err)
	}
	if age := r.Age(); age != time.Second {
		t.Errorf("Age = %v; want 1s", age)
	}
	if err := r.Check(TokenCredential("t1")); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked token on a fresh copy: %v", err)
	}
	// The authoritative state is never stale.
	if err := NewRevocations(func() time.Time { return now.Add(1000 * time.Hour) }).Check(); err != nil {
		t.Errorf("authoritative state: %v", err)
	}
}

func TestRevocationsVerifyPeer(t *testing.T) {
	ca := testCA(t)
	keyPEM, csr, err := NodeKey("gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignNode(csr, "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	r := NewRevocations(nil)
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	if err := r.VerifyPeer(cs); err != nil {
		t.Fatal(err)
	}
	l, _ := NewRevocationList([]string{Serial(leaf)}, nil)
	r.Set(l, time.Time{})
	if err := r.VerifyPeer(cs); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked peer: %v", err)
	}
}

func TestStepTickets(t *testing.T) {
	now := t0
	s, err := NewStepTicketSigner([]byte(strings.Repeat("s", 32)), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	pk := s.PublicKey()
	tk, err := s.Issue("alloc-1", 7, TokenCredential("jti-bob"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyStepTicket(pk, tk, "alloc-1", now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c.Holder != TokenCredential("jti-bob") || c.Job != 7 {
		t.Errorf("claims %+v", c)
	}
	// The same key makes the same signer (HA members share the key file).
	s2, _ := NewStepTicketSigner([]byte(strings.Repeat("s", 32)), nil)
	if s2.PublicKey() != pk {
		t.Error("the signing key is not derived from the step ticket key alone")
	}
	other, _ := NewStepTicketSigner([]byte(strings.Repeat("o", 32)), func() time.Time { return now })
	forged, _ := other.Issue("alloc-1", 7, TokenCredential("jti-bob"))
	// A holder swapped in the payload breaks the signature.
	_, sig, _ := strings.Cut(strings.TrimPrefix(tk, stepTicketPrefix), ".")
	swapped, _ := s.Issue("alloc-1", 7, UIDCredential(0))
	p2, _, _ := strings.Cut(strings.TrimPrefix(swapped, stepTicketPrefix), ".")
	for name, bad := range map[string]struct {
		tk, alloc string
		at        time.Time
		want      string
	}{
		"other key":     {forged, "alloc-1", now, "not one the controller signed"},
		"other alloc":   {tk, "alloc-2", now, "not alloc-2"},
		"expired":       {tk, "alloc-1", now.Add(StepTicketTTL + DefaultSkew + time.Second), "expired"},
		"from future":   {tk, "alloc-1", now.Add(-DefaultSkew - time.Second), "future"},
		"payload swap":  {stepTicketPrefix + p2 + "." + sig, "alloc-1", now, "not one the controller signed"},
		"old HMAC form": {"q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80", "alloc-1", now, "not one the controller signed"},
		"oversized":     {strings.Repeat("a", 4096), "alloc-1", now, "at most"},
	} {
		if _, err := VerifyStepTicket(pk, bad.tk, bad.alloc, bad.at); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v; want an error saying %q", name, err, bad.want)
		}
	}
	if _, err := VerifyStepTicket("", tk, "alloc-1", now); err == nil || !strings.Contains(err.Error(), "no valid step ticket key") {
		t.Errorf("no key: %v", err)
	}
}
