// Package registrytest runs a private OCI registry for tests: Debian's
// docker-registry (the CNCF distribution registry) on loopback, with TLS
// from a CA the test makes and basic authentication from an htpasswd file,
// and pushes images the test builds (busybox-static layers, generated
// files, random layers of any size) to it. Nothing here reaches beyond
// 127.0.0.1. It imports nothing from gpud/* and no containerd package, so
// any test (runtime, node agent, end to end) can use it.
package registrytest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Binary is the registry's program as Debian installs it.
const Binary = "docker-registry"

// Missing says why a registry cannot run here ("" if it can).
func Missing() string {
	if _, err := exec.LookPath(Binary); err != nil {
		return Binary + " not on PATH (apt-get install docker-registry, or make deps)"
	}
	return ""
}

// Require skips the test, loudly, where no registry can run; with CI=true
// it fails instead, so CI never passes by skipping.
func Require(t testing.TB) {
	t.Helper()
	if why := Missing(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("registry test cannot run: %s (CI=true, so this is a failure)", why)
		}
		t.Skipf("SKIPPED: registry test needs %s: %s", Binary, why)
	}
}

// User is a registry account for basic authentication.
type User struct{ Name, Password string }

// Registry is a running private registry.
type Registry struct {
	// Host is host:port on loopback, the registry part of image references.
	Host string
	// CAFile holds the PEM certificate of the CA that signed the
	// registry's certificate (what a node's ca_file would name).
	CAFile string
	// CAPEM is CAFile's content.
	CAPEM []byte
	// Dir is the registry's directory (storage, config, log).
	Dir string

	users  []User
	client *http.Client
	cmd    *exec.Cmd
	logMu  sync.Mutex
	logBuf bytes.Buffer
}

// Start starts a registry in a temporary directory that answers only the
// given users (none: anyone, without authentication). Cleanup stops it and
// prints its log when the test failed.
func Start(t testing.TB, users ...User) *Registry {
	t.Helper()
	Require(t)
	dir, err := os.MkdirTemp("", "gpud-registry")
	if err != nil {
		t.Fatalf("registry directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &Registry{Dir: dir, users: users}
	caPEM, certPEM, keyPEM, err := makeTLS()
	if err != nil {
		t.Fatalf("registry TLS: %v", err)
	}
	r.CAPEM = caPEM
	r.CAFile = filepath.Join(dir, "ca.pem")
	files := map[string][]byte{"ca.pem": caPEM, "cert.pem": certPEM, "key.pem": keyPEM}
	auth := ""
	if len(users) > 0 {
		var ht bytes.Buffer
		for _, u := range users {
			h, err := bcrypt.GenerateFromPassword([]byte(u.Password), bcrypt.MinCost)
			if err != nil {
				t.Fatalf("htpasswd: %v", err)
			}
			fmt.Fprintf(&ht, "%s:%s\n", u.Name, h)
		}
		files["htpasswd"] = ht.Bytes()
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: gpud-test\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("registry port: %v", err)
	}
	r.Host = fmt.Sprintf("127.0.0.1:%d", port)
	files["config.yml"] = fmt.Appendf(nil, `version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  tls:
    certificate: %s
    key: %s
%s`, filepath.Join(dir, "storage"), r.Host, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), auth)
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatalf("registry %s: %v", name, err)
		}
	}
	// Tests that run jobs as other users read the CA like a node would:
	// root's, but not secret.
	if err := os.Chmod(r.CAFile, 0o644); err != nil {
		t.Fatalf("registry CA: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	r.client = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	r.cmd = exec.Command(Binary, "serve", filepath.Join(dir, "config.yml"))
	r.cmd.Stdout, r.cmd.Stderr = (*logWriter)(r), (*logWriter)(r)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Pdeathsig fires when the OS thread that forked the registry ends,
	// not the process: the runtime ends threads (safefs.AsUser's, which
	// tests in this process run), so the registry is started and waited
	// for on a thread locked to one goroutine that lives as long as it.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		if err := r.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		r.cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start %s: %v", Binary, err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			r.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("registry log:\n%s", r.Log())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := r.client.Get("https://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("registry exited before serving: %s", r.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("registry at %s did not serve within 30s: %v\n%s", r.Host, err, r.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

type logWriter Registry

func (w *logWriter) Write(p []byte) (int, error) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	return w.logBuf.Write(p)
}

// Log is what the registry printed so far.
func (r *Registry) Log() string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	return r.logBuf.String()
}

// accessLine is one line of the registry's access log (Apache's combined
// format): the method, the path and the status.
var accessLine = regexp.MustCompile(`"([A-Z]+) (/v2/[^ ]*) HTTP/[0-9.]+" ([0-9]{3}) `)

// Requests counts the requests the registry answered with a 2xx status
// whose method is method and whose path contains pathPart, read from its
// access log: what the registry itself saw, not what a client says.
func (r *Registry) Requests(method, pathPart string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(r.Log()))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := accessLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != method || !strings.Contains(m[2], pathPart) || m[3][0] != '2' {
			continue
		}
		n++
	}
	return n
}

// Ref is the reference of repo:tag in this registry.
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

// EnrootRef is the same in enroot's syntax (registry#repo:tag).
func (r *Registry) EnrootRef(repoTag string) string { return r.Host + "#" + repoTag }

// HTTPClient trusts the registry's CA.
func (r *Registry) HTTPClient() *http.Client { return r.client }

func (r *Registry) do(ctx context.Context, method, url string, body io.Reader, size int64, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if len(r.users) > 0 {
		req.SetBasicAuth(r.users[0].Name, r.users[0].Password)
	}
	return r.client.Do(req)
}

func makeTLS() (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpud test registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
