package auth

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
)

// handshake runs a TLS handshake between a server and a client config
// over a pipe and returns each side's error.
func handshake(server, client *tls.Config) (error, error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	errc := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 checks the client's certificate after the client's
			// handshake returns: read so the server's verdict arrives.
			_, err = s.Write([]byte("x"))
		}
		a.Close()
		errc <- err
	}()
	c := tls.Client(b, client)
	cerr := c.Handshake()
	if cerr == nil {
		buf := make([]byte, 1)
		_, cerr = c.Read(buf)
	}
	b.Close()
	return <-errc, cerr
}

// Members accept each other; a node certificate of the same CA is no
// member's, and a member of another CA is refused.
func TestMemberTLS(t *testing.T) {
	ca := testCA(t)
	s1, _, err := ca.MemberTLS("c1")
	if err != nil {
		t.Fatal(err)
	}
	_, c2, err := ca.MemberTLS("c2")
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(s1, c2); serr != nil || cerr != nil {
		t.Fatalf("member to member: server %v, client %v", serr, cerr)
	}

	// A node certificate (OU gpud-node) of the same CA.
	keyPEM, csr, err := NodeKey("gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignNode(csr, "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	asNode := c2.Clone()
	asNode.Certificates = []tls.Certificate{nodeCert}
	if serr, _ := handshake(s1, asNode); serr == nil || !strings.Contains(serr.Error(), "not a controller's") {
		t.Errorf("a node certificate reached a member: %v", serr)
	}

	// A member of another cluster's CA.
	_, other, err := testCA(t).MemberTLS("c2")
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(s1, other); serr == nil && cerr == nil {
		t.Error("a member of another CA was accepted")
	}
	if _, _, err := ca.MemberTLS("../x"); err == nil {
		t.Error("a bad member id was accepted")
	}
}
