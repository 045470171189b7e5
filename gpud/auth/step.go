package auth

import (
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Steps across hosts (api.StepHello). Node agents reach each other's
// step listeners with their node certificates: the listener asks for a
// client certificate and accepts a node certificate of the cluster CA
// (NodeOf names the peer) or none (then only a step ticket admits a
// step); callers verify the listener's node certificate against the CA
// and check it names the node they dialled. Node certificates carry
// client authentication only (they are made at join for the controller
// connection), so callers verify them as such instead of as servers'.

// StepTicketKeyFile is the key step tickets are derived from, under the
// controller's state_dir/auth.
const StepTicketKeyFile = "step-ticket.key"

// LoadStepTicketKey reads the step ticket key at path, making a random
// one (mode 0600) the first time.
func LoadStepTicketKey(path string) ([]byte, error) {
	// The join token's file format and checks fit: 32 random bytes.
	s, err := LoadJoinToken(path)
	if err != nil {
		return nil, fmt.Errorf("step ticket key: %w", err)
	}
	return []byte(s), nil
}

// Step tickets are signed by the controller (Ed25519, its key derived
// from the step ticket key, so the members of an HA group, which share
// state_dir/auth, sign alike) and verified by the nodes with the public
// key that comes with their assignments: a node holds nothing that could
// make a ticket. A ticket names its allocation, the credential it was
// obtained with (a token's ID, or a local uid) and when it expires: the
// node refuses it after StepTicketTTL, and at once when its holder's
// credential is revoked (Revocations), also on the connections it
// already opened.

// StepTicketTTL is how long a step ticket admits steps after it is issued
// (srun asks for a new one for every connection it opens); a node
// tolerates DefaultSkew between its clock and the controller's.
const StepTicketTTL = 5 * time.Minute

// stepTicketPrefix starts every ticket (its format's version).
const stepTicketPrefix = "st1."

// maxStepTicket bounds a presented ticket before it is parsed.
const maxStepTicket = 2048

// StepTicketClaims is what a step ticket says.
type StepTicketClaims struct {
	// Alloc is the allocation the ticket admits steps in; Job its job.
	Alloc string `json:"alloc"`
	Job   uint64 `json:"job"`
	// Holder is the credential the ticket was obtained with.
	Holder Credential `json:"holder"`
	// IssuedAt and Expires are Unix seconds.
	IssuedAt int64 `json:"iat"`
	Expires  int64 `json:"exp"`
}

// StepTicketSigner makes step tickets.
type StepTicketSigner struct {
	key ed25519.PrivateKey
	now func() time.Time
}

// NewStepTicketSigner derives the signing key from the step ticket key
// (LoadStepTicketKey). now is the clock (nil: time.Now).
func NewStepTicketSigner(key []byte, now func() time.Time) (*StepTicketSigner, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("step ticket key is %d bytes; need at least 32", len(key))
	}
	if now == nil {
		now = time.Now
	}
	seed := sha256.Sum256(append([]byte("gpud step ticket ed25519\x00"), key...))
	return &StepTicketSigner{key: ed25519.NewKeyFromSeed(seed[:]), now: now}, nil
}

// PublicKey is the key nodes verify tickets with (base64url).
func (s *StepTicketSigner) PublicKey() string {
	return base64.RawURLEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
}

// Issue makes a ticket for job's allocation alloc, held by holder, valid
// for StepTicketTTL.
func (s *StepTicketSigner) Issue(alloc string, job uint64, holder Credential) (string, error) {
	now := s.now()
	c := StepTicketClaims{Alloc: alloc, Job: job, Holder: holder, IssuedAt: now.Unix(), Expires: now.Add(StepTicketTTL).Unix()}
	body, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("make step ticket: %w", err)
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	sig := ed25519.Sign(s.key, []byte(stepTicketPrefix+payload))
	return stepTicketPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// VerifyStepTicket checks ticket against the controller's public key
// (PublicKey's form): its signature, that it is for alloc, and that it
// has not expired at now (with DefaultSkew). It returns its claims; the
// caller checks the holder (Revocations.Check).
func VerifyStepTicket(publicKey, ticket, alloc string, now time.Time) (StepTicketClaims, error) {
	const how = "get a new one: srun asks the controller for one as the job's owner"
	pk, err := base64.RawURLEncoding.DecodeString(publicKey)
	if err != nil || len(pk) != ed25519.PublicKeySize {
		return StepTicketClaims{}, errors.New("this node has no valid step ticket key from the controller (it comes with the assignments; the controller may be older than this agent)")
	}
	if len(ticket) > maxStepTicket {
		return StepTicketClaims{}, fmt.Errorf("step ticket is %d bytes; at most %d", len(ticket), maxStepTicket)
	}
	rest, ok := strings.CutPrefix(ticket, stepTicketPrefix)
	payload, sigB64, ok2 := strings.Cut(rest, ".")
	sig, err := base64.RawURLEncoding.DecodeString(sigB64)
	if !ok || !ok2 || err != nil || !ed25519.Verify(pk, []byte(stepTicketPrefix+payload), sig) {
		return StepTicketClaims{}, fmt.Errorf("step ticket for allocation %s is not one the controller signed; %s", alloc, how)
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	var c StepTicketClaims
	if err == nil {
		err = json.Unmarshal(body, &c)
	}
	if err != nil {
		return StepTicketClaims{}, fmt.Errorf("step ticket cannot be read: %v", err)
	}
	if c.Alloc != alloc {
		return StepTicketClaims{}, fmt.Errorf("step ticket is for allocation %s, not %s", c.Alloc, alloc)
	}
	if exp := time.Unix(c.Expires, 0); now.After(exp.Add(DefaultSkew)) {
		return StepTicketClaims{}, fmt.Errorf("step ticket for allocation %s expired %s ago (tickets last %s); %s", alloc, now.Sub(exp).Round(time.Second), StepTicketTTL, how)
	}
	if iat := time.Unix(c.IssuedAt, 0); iat.After(now.Add(DefaultSkew)) || c.Expires-c.IssuedAt > int64(StepTicketTTL/time.Second) {
		return StepTicketClaims{}, fmt.Errorf("step ticket for allocation %s is issued in the future or lives over %s; check the clocks of the controller and node", alloc, StepTicketTTL)
	}
	return c, nil
}

// CAPool parses a PEM CA certificate into a pool.
func CAPool(caPEM []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no PEM certificate in the cluster CA")
	}
	return p, nil
}

// StepServerTLS is a node's step listener configuration: its node
// certificate, and a client's node certificate verified against ca when
// one is given (peers); srun comes without one and shows a ticket.
func StepServerTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca,
		MinVersion:   tls.VersionTLS13,
	}
}

// StepClientTLS is the configuration for dialling node's step listener:
// its certificate must be node's certificate from ca. cert, when not nil,
// is the caller's own node certificate (a peer agent).
func StepClientTLS(ca *x509.CertPool, node string, cert *tls.Certificate) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The chain and the name are checked below, as a node
		// certificate's (client authentication), not a server's.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("node %s's step listener showed no certificate", node)
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: ca, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			if err != nil {
				return fmt.Errorf("node %s's step listener certificate is not from the cluster CA: %w", node, err)
			}
			got, ok := NodeOf(chains)
			if !ok || got != node {
				return fmt.Errorf("the step listener dialled for node %s is node %q's (certificate CN); check the node's [node] address", node, got)
			}
			return nil
		},
	}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}
