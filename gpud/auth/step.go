package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
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

// StepTicket is allocation allocID's step ticket: an HMAC of the ID under
// the controller's key, so it needs no storage, differs for every
// allocation (a requeued job's next attempt gets a new one) and cannot be
// guessed from the ID.
func StepTicket(key []byte, allocID string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("gpud step ticket\x00" + allocID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// StepTicketOK compares a presented step ticket with the allocation's in
// constant time; an allocation without a ticket admits none.
func StepTicketOK(presented, real string) bool { return JoinTokenOK(presented, real) }

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
