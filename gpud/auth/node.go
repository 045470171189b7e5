package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"
)

// Node certificates: a node agent joins once with the cluster's join
// token, sending a certificate request for its name; the controller signs
// it with its CA, and from then on the agent authenticates with that
// client certificate (mTLS), which binds it to its node name. The join
// token is a shared secret: whoever holds it may join a node of any name,
// so it lives in a root-only file on the controller and is handed to
// nodes like a kubeadm bootstrap token.
const (
	// NodeOU marks a client certificate as a node's; its CommonName is
	// the node name.
	NodeOU = "gpud-node"
	// JoinTokenFile is the join token's file under the controller's
	// state_dir/auth.
	JoinTokenFile = "join.token"
	nodeValidity  = 397 * 24 * time.Hour
	maxCSR        = 16 << 10
)

// ValidName says whether s is a user or node name a token or certificate
// may carry.
func ValidName(s string) bool { return validName(s) }

// LoadJoinToken reads the join token at path, making a random one (mode
// 0600) if the file does not exist.
func LoadJoinToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if err := checkPrivate(path); err != nil {
			return "", err
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < 32 {
			return "", fmt.Errorf("join token in %s is %d characters; need at least 32 (delete the file to make a new one)", path, len(tok))
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read join token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make join token: %w", err)
	}
	if err := writePrivate(path, []byte(base64.RawURLEncoding.EncodeToString(raw)+"\n")); err != nil {
		if errors.Is(err, os.ErrExist) {
			return LoadJoinToken(path)
		}
		return "", fmt.Errorf("write join token: %w", err)
	}
	return LoadJoinToken(path)
}

// JoinTokenOK compares a presented join token with the real one in
// constant time.
func JoinTokenOK(presented, real string) bool {
	return real != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(real)) == 1
}

// CA signs node certificates with the controller's CA.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	now     func() time.Time
}

// LoadCA loads the CA that EnsureTLS made (f.CA, f.CAKey).
func LoadCA(f Files, now func() time.Time) (*CA, error) {
	cert, key, err := loadCA(f)
	if err != nil {
		return nil, fmt.Errorf("load CA for node certificates: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), now: now}, nil
}

// CertPEM is the CA certificate.
func (ca *CA) CertPEM() []byte { return slices.Clone(ca.certPEM) }

// Pool is a pool holding only the CA (the listener's ClientCAs).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// SignNode checks csrPEM (a PEM certificate request signed by its key,
// with CommonName node) and returns a client certificate for node,
// PEM-encoded. Whatever else the request asks for is ignored.
func (ca *CA) SignNode(csrPEM []byte, node string) ([]byte, error) {
	if !validName(node) {
		return nil, fmt.Errorf("node name %q is not valid (letters, digits, _ . @ -; at most 64)", node)
	}
	if len(csrPEM) > maxCSR {
		return nil, fmt.Errorf("certificate request is %d bytes; at most %d", len(csrPEM), maxCSR)
	}
	blk, _ := pem.Decode(csrPEM)
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("certificate request is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	if csr.Subject.CommonName != node {
		return nil, fmt.Errorf("certificate request is for %q, not for node %q", csr.Subject.CommonName, node)
	}
	if _, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok {
		return nil, errors.New("certificate request key is not ECDSA")
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: node, OrganizationalUnit: []string{NodeOU}, Organization: []string{"gpud"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(nodeValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("sign node certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// NodeOf returns the node a verified client certificate chain names, or
// false when the leaf is not a node certificate.
func NodeOf(chains [][]*x509.Certificate) (string, bool) {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", false
	}
	leaf := chains[0][0]
	if !slices.Contains(leaf.Subject.OrganizationalUnit, NodeOU) || !validName(leaf.Subject.CommonName) ||
		!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return "", false
	}
	return leaf.Subject.CommonName, true
}

// ParseSerial reads a certificate serial number written in hex, with or
// without colons between byte pairs (as openssl x509 -serial and gpud
// print it), and returns it in the canonical form Serial gives.
func ParseSerial(s string) (string, bool) {
	h := strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), ":", ""))
	h = strings.TrimPrefix(h, "0x")
	if h == "" || len(h) > 64 {
		return "", false
	}
	n, ok := new(big.Int).SetString(h, 16)
	if !ok || n.Sign() < 0 {
		return "", false
	}
	return n.Text(16), true
}

// Serial is the canonical form of a certificate's serial number
// (lowercase hex, no colons): what [auth] revoked_node_certs compares.
func Serial(c *x509.Certificate) string { return c.SerialNumber.Text(16) }

// NodeCertOf returns the leaf of a verified node certificate chain (see
// NodeOf), or nil.
func NodeCertOf(chains [][]*x509.Certificate) *x509.Certificate {
	if _, ok := NodeOf(chains); !ok {
		return nil
	}
	return chains[0][0]
}

// NodeKey makes a node's private key (PEM) and a certificate request for
// name signed by it (PEM).
func NodeKey(name string) (keyPEM, csrPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make node key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("make certificate request: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// WriteNodeCert stores a node's key and certificate (mode 0600),
// replacing earlier ones.
func WriteNodeCert(keyPath, certPath string, keyPEM, certPEM []byte) error {
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return fmt.Errorf("node certificate does not match its key: %w", err)
	}
	for _, p := range []string{keyPath, certPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("replace %s: %w", p, err)
		}
	}
	if err := writePrivate(keyPath, keyPEM); err != nil {
		return fmt.Errorf("write %s: %w", keyPath, err)
	}
	if err := writePrivate(certPath, certPEM); err != nil {
		return fmt.Errorf("write %s: %w", certPath, err)
	}
	return nil
}
