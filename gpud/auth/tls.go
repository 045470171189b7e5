package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// TLS material file names under the controller's TLS directory.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 397 * 24 * time.Hour
	// renewBefore: a server certificate this close to expiry is reissued
	// at start.
	renewBefore = 30 * 24 * time.Hour
)

// Files are the paths of the controller's TLS material.
type Files struct {
	CA, CAKey, Cert, Key string
}

// EnsureTLS makes sure dir holds a CA (key and certificate) and a server
// certificate signed by it that covers hosts, creating what is missing:
// ECDSA P-256 keys, every file mode 0600, dir 0700. An existing server
// certificate that lacks one of hosts, does not chain to the CA or expires
// within 30 days is reissued; the CA is never replaced (clients trust it).
// now is the clock (time.Now outside tests).
func EnsureTLS(dir, cluster string, hosts []string, now time.Time) (Files, error) {
	f := Files{
		CA:    filepath.Join(dir, CAFile),
		CAKey: filepath.Join(dir, CAKeyFile),
		Cert:  filepath.Join(dir, ServerFile),
		Key:   filepath.Join(dir, ServerKeyFile),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return f, fmt.Errorf("create TLS dir %s: %w", dir, err)
	}
	caCert, caKey, err := loadCA(f)
	if errors.Is(err, os.ErrNotExist) {
		caCert, caKey, err = makeCA(f, cluster, now)
	}
	if err != nil {
		return f, err
	}
	if serverCertOK(f, caCert, hosts, now) {
		return f, nil
	}
	if err := makeServerCert(f, caCert, caKey, cluster, hosts, now); err != nil {
		return f, err
	}
	return f, nil
}

func loadCA(f Files) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(f.CAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("read CA key %s (the CA certificate %s exists): %w", f.CAKey, f.CA, err)
	}
	if err := checkPrivate(f.CAKey); err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("load CA %s: %w", f.CA, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("load CA %s: key is not ECDSA", f.CAKey)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("load CA %s: %w", f.CA, err)
	}
	return cert, key, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func makeCA(f Files, cluster string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("make CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: "gpud CA " + cluster, Organization: []string{"gpud"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("make CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKeyAndCert(f.CAKey, f.CA, key, der); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func writeKeyAndCert(keyPath, certPath string, key *ecdsa.PrivateKey, der []byte) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	for _, p := range []string{keyPath, certPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("replace %s: %w", p, err)
		}
	}
	if err := writePrivate(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})); err != nil {
		return fmt.Errorf("write %s: %w", keyPath, err)
	}
	if err := writePrivate(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return fmt.Errorf("write %s: %w", certPath, err)
	}
	return nil
}

// serverCertOK says whether the existing server certificate can stay.
func serverCertOK(f Files, ca *x509.Certificate, hosts []string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Add(renewBefore).After(cert.NotAfter) {
		return false
	}
	if cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	for _, h := range hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func makeServerCert(f Files, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cluster string, hosts []string, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("make server key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "gpud controller " + cluster, Organization: []string{"gpud"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("make server certificate: %w", err)
	}
	return writeKeyAndCert(f.Key, f.Cert, key, der)
}

// ServerTLS returns the listener configuration for the controller's
// certificate and key: TLS 1.2 or newer, AEAD cipher suites only.
func ServerTLS(certFile, keyFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s: %w", certFile, err)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pair},
		CipherSuites: []uint16{ // TLS 1.2 only; 1.3 suites are all AEAD
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos: []string{"h2", "http/1.1"},
	}, nil
}
