package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ControllerOU marks a certificate as a controller's, a member of an HA
// group (gpud/ha): only such certificates pass the group's mutual TLS.
// A node certificate (NodeOU), signed by the same CA, does not.
const ControllerOU = "gpud-controller"

// memberServerName is the DNS name every member certificate carries and
// every member dials with: members are told apart by their CommonName
// (the member id), not by host name, so an address change needs no new
// certificate.
const memberServerName = "gpud-controller"

// memberValidity is how long a member certificate lasts; a new one is made
// at every start.
const memberValidity = 365 * 24 * time.Hour

// MemberTLS makes a key and a certificate for HA member id, signed by the
// CA (in memory, anew at every start), and returns the TLS configurations
// of the group's Raft traffic: server for its listener, client for its
// dials. Both sides present their certificate and demand the other's: a
// certificate of this CA with ControllerOU.
func (ca *CA) MemberTLS(id string) (server, client *tls.Config, err error) {
	if !validName(id) {
		return nil, nil, fmt.Errorf("HA member id %q is not valid (letters, digits, _ . @ -; at most 64)", id)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make HA member key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: id, OrganizationalUnit: []string{ControllerOU}, Organization: []string{"gpud"}},
		DNSNames:     []string{memberServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(memberValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign HA member certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	// Chains are verified by crypto/tls (ClientCAs, RootCAs); this only
	// demands that the peer is a controller, not a node of the same CA.
	member := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("HA peer presented no certificate")
		}
		if leaf := cs.PeerCertificates[0]; !slices.Contains(leaf.Subject.OrganizationalUnit, ControllerOU) {
			return fmt.Errorf("HA peer certificate %q is not a controller's (OU %s)", leaf.Subject.CommonName, ControllerOU)
		}
		return nil
	}
	server = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        ca.Pool(),
		VerifyConnection: member,
	}
	client = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{cert},
		RootCAs:          ca.Pool(),
		ServerName:       memberServerName,
		VerifyConnection: member,
	}
	return server, client, nil
}
