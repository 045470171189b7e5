package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testCA(t testing.TB) *CA {
	t.Helper()
	f, err := EnsureTLS(filepath.Join(t.TempDir(), "tls"), "test", []string{"127.0.0.1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(f, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parseCert(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		t.Fatalf("not PEM: %q", certPEM)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestSignNode(t *testing.T) {
	ca := testCA(t)
	_, csr, err := NodeKey("gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignNode(csr, "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	cert := parseCert(t, certPEM)
	chains, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatalf("node certificate does not verify as a client certificate: %v", err)
	}
	if node, ok := NodeOf(chains); !ok || node != "gpu-01" {
		t.Errorf("NodeOf = %q, %v; want gpu-01", node, ok)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a node certificate verifies as a server certificate")
	}

	// What must not be signed.
	otherName := func() []byte { // a valid P-384 request, for another name
		k, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "gpu-02"}}, k)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	tampered := []byte(strings.Replace(string(csr), "A", "B", 3))
	for _, tc := range []struct {
		name, node string
		csr        []byte
		want       string
	}{
		{"other name", "gpu-01", otherName(), `is for "gpu-02"`},
		{"bad node name", "../etc", csr, "not valid"},
		{"not PEM", "gpu-01", []byte("hello"), "not a PEM"},
		{"a certificate, not a request", "gpu-01", certPEM, "not a PEM CERTIFICATE REQUEST"},
		{"tampered", "gpu-01", tampered, ""},
		{"huge", "gpu-01", make([]byte, maxCSR+1), "at most"},
	} {
		if _, err := ca.SignNode(tc.csr, tc.node); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want one containing %q", tc.name, err, tc.want)
		}
	}
	// The server certificate is not a node's.
	if _, ok := NodeOf(nil); ok {
		t.Error("NodeOf(nil) ok")
	}
}

func TestLoadJoinToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth", JoinTokenFile)
	tok, err := LoadJoinToken(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) < 32 {
		t.Errorf("join token %q is short", tok)
	}
	if again, err := LoadJoinToken(path); err != nil || again != tok {
		t.Errorf("second load = %q, %v; want the same token", again, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("join token file mode %#o, want 0600", fi.Mode().Perm())
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadJoinToken(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable join token: err = %v", err)
	}
	if !JoinTokenOK(tok, tok) || JoinTokenOK(tok[:len(tok)-1], tok) || JoinTokenOK("", "") {
		t.Error("JoinTokenOK compares wrongly")
	}
}

// FuzzSignNode: whatever request bytes and node name arrive at the join
// endpoint (after the join token), SignNode never panics and signs only a
// valid request for exactly that, valid, name.
func FuzzSignNode(f *testing.F) {
	ca := testCA(f)
	_, csr, err := NodeKey("n1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(csr, "n1")
	f.Add(csr, "n2")
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"), "n1")
	f.Add(ca.CertPEM(), "n1")
	f.Fuzz(func(t *testing.T, b []byte, node string) {
		certPEM, err := ca.SignNode(b, node)
		if err != nil {
			return
		}
		cert := parseCert(t, certPEM)
		chains, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: t0, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err != nil {
			t.Fatalf("signed a certificate that does not verify: %v", err)
		}
		got, ok := NodeOf(chains)
		if !ok || got != node || !ValidName(node) {
			t.Fatalf("signed a certificate for %q (NodeOf %q, %v)", node, got, ok)
		}
	})
}

func TestParseSerial(t *testing.T) {
	for in, want := range map[string]string{"0A:1B:FF": "a1bff", "a1bff": "a1bff", " 00:a1:bf:f ": "a1bff", "0x10": "10"} {
		if got, ok := ParseSerial(in); !ok || got != want {
			t.Errorf("ParseSerial(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "xyz", "-1", strings.Repeat("f", 65)} {
		if got, ok := ParseSerial(in); ok {
			t.Errorf("ParseSerial(%q) = %q; want refused", in, got)
		}
	}
}
