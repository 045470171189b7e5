package slurmrest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// The documents Slurm generates for each data_parser version, kept as
// test data beside the repository (../shared/slurm-openapi, GPL-2.0: used
// to validate, never copied). Every request and answer of these tests
// goes through validate.

var versions = []int{42, 43, 44, 45}

// openapiDir finds ../shared/slurm-openapi relative to the repository
// (or $SLURM_OPENAPI_DIR); "" when absent.
func openapiDir() string {
	if d := os.Getenv("SLURM_OPENAPI_DIR"); d != "" {
		return d
	}
	for _, d := range []string{"../../../shared/slurm-openapi", "../../shared/slurm-openapi"} {
		if abs, err := filepath.Abs(d); err == nil {
			if _, err := os.Stat(filepath.Join(abs, "openapi_spec_v45.json")); err == nil {
				return abs
			}
		}
	}
	return ""
}

// requireDocs skips loudly without Slurm's documents, and fails in CI,
// where they must be.
func requireDocs(t testing.TB) string {
	t.Helper()
	d := openapiDir()
	if d == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("Slurm's OpenAPI documents not found (../shared/slurm-openapi beside the repository, or $SLURM_OPENAPI_DIR); CI must have them")
		}
		t.Skip("SKIP: Slurm's OpenAPI documents not found (../shared/slurm-openapi beside the repository, or $SLURM_OPENAPI_DIR): nothing to validate against")
	}
	return d
}

type validator struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	docsMu sync.Mutex
	docs   = map[int]*validator{}
)

// loadDoc loads Slurm's document for version v, made strict: an object
// schema with properties takes no others, so a member gpud writes that
// the version does not have fails validation. Slurm's generator writes
// some required members as paths ("nodes/count"), which no JSON object
// can have under that name; those entries are dropped.
func loadDoc(t testing.TB, v int) *validator {
	t.Helper()
	docsMu.Lock()
	defer docsMu.Unlock()
	if d := docs[v]; d != nil {
		return d
	}
	dir := requireDocs(t)
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join(dir, fmt.Sprintf("openapi_spec_v%d.json", v)))
	if err != nil {
		t.Fatalf("load Slurm's v0.0.%d document: %v", v, err)
	}
	seen := map[*openapi3.Schema]bool{}
	var strict func(s *openapi3.Schema)
	strict = func(s *openapi3.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		req := s.Required[:0]
		for _, r := range s.Required {
			if !strings.Contains(r, "/") {
				req = append(req, r)
			}
		}
		s.Required = req
		if s.Type.Is("object") && len(s.Properties) > 0 {
			no := false
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: &no}
		}
		for _, p := range s.Properties {
			strict(p.Value)
		}
		if s.Items != nil {
			strict(s.Items.Value)
		}
	}
	for _, s := range doc.Components.Schemas {
		strict(s.Value)
	}
	doc.Servers = openapi3.Servers{{URL: "http://gpud.test/"}}
	if err := doc.Validate(loader.Context, openapi3.DisableExamplesValidation()); err != nil {
		t.Logf("Slurm's v0.0.%d document does not validate as OpenAPI 3 (%v); validating against it all the same", v, err)
	}
	router, err := legacy.NewRouter(doc, openapi3.DisableExamplesValidation())
	if err != nil {
		t.Fatalf("route Slurm's v0.0.%d document: %v", v, err)
	}
	d := &validator{doc: doc, router: router}
	docs[v] = d
	return d
}

// versionOf reads the data_parser version from a path.
func versionOf(path string) int {
	for _, v := range versions {
		if strings.Contains(path, fmt.Sprintf("/v0.0.%d/", v)) || strings.HasSuffix(path, fmt.Sprintf("/v0.0.%d", v)) {
			return v
		}
	}
	return 0
}

// validate checks a request and its answer against Slurm's document for
// the path's version. A path the version does not have is an error: every
// request these tests send is one of Slurm's.
func validate(t testing.TB, method, path string, reqBody []byte, status int, header http.Header, respBody []byte) {
	t.Helper()
	v := versionOf(path)
	if v == 0 {
		t.Fatalf("validate %s %s: no data_parser version in the path", method, path)
	}
	d := loadDoc(t, v)
	req, err := http.NewRequest(method, "http://gpud.test"+path, bytes.NewReader(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	if reqBody != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := d.router.FindRoute(req)
	if err != nil {
		t.Errorf("%s %s is not a route of Slurm's v0.0.%d document: %v", method, path, v, err)
		return
	}
	ctx := context.Background()
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		t.Errorf("request %s %s does not validate against Slurm's v0.0.%d document:\n%v\nbody: %s", method, path, v, err, clipBody(reqBody))
	}
	if status == http.StatusNotModified {
		return
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: h, Body: io.NopCloser(bytes.NewReader(respBody)), Options: opts}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Errorf("answer %d to %s %s does not validate against Slurm's v0.0.%d document:\n%v\nbody: %s", status, method, path, v, err, clipBody(respBody))
	}
}

func clipBody(b []byte) string {
	if len(b) > 3000 {
		return string(b[:3000]) + "…"
	}
	return string(b)
}

// cluster is a controller serving over its socket and TLS with tokens,
// with two registered nodes of 4 H100s; olga is an operator, ada an
// admin.
type cluster struct {
	unix, https string
	keys        *auth.Keys
	hc          *http.Client
	root        *api.Client
	srv         *server.Server
	ctl         *controller.Controller
}

func startCluster(t testing.TB, opts ...server.Option) *cluster {
	t.Helper()
	dir := t.TempDir()
	files, err := auth.EnsureTLS(filepath.Join(dir, "tls"), "test", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := auth.ServerTLS(files.Cert, files.Key)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeys(filepath.Join(dir, "token.key"), "test")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{keys: keys}
	db, err := accounting.Open(filepath.Join(dir, "accounting.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	o := servertest.Options{
		ServerOptions:     append([]server.Option{server.WithTokens(keys), server.WithRoles([]string{"olga"}, []string{"ada"}), server.WithAccounting(db)}, opts...),
		ControllerOptions: []controller.Option{controller.WithRecorder(db)},
		TLS:               tlsCfg, TLSAddr: &c.https, Server: &c.srv,
	}
	c.unix, c.ctl, _ = servertest.Start(t, func(cfg *controller.Config) {}, o)
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(c.hc.CloseIdleConnections)
	c.root, err = api.NewClient(c.unix)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []string{"gpu01", "gpu02"} {
		inv := spec.Inventory{Name: n, Addr: "127.0.0.1", CPUs: 32, MemMiB: 256000}
		for i := range 4 {
			inv.GPUs = append(inv.GPUs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n, i), Model: "h100", Name: "NVIDIA H100"})
		}
		if _, err := c.root.Register(ctx, inv); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// Users of the tests.
var (
	alice = auth.Claims{User: "alice", UID: 1001, GID: 1001}
	bob   = auth.Claims{User: "bob", UID: 1002, GID: 1002}
	olga  = auth.Claims{User: "olga", UID: 1003, GID: 1003, Role: auth.RoleOperator}
	ada   = auth.Claims{User: "ada", UID: 1004, GID: 1004, Role: auth.RoleAdmin}
)

func (c *cluster) token(t testing.TB, cl auth.Claims) string {
	t.Helper()
	tok, err := c.keys.Issue(cl, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// answer is a response of Slurm's API.
type answer struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errors is the answer's errors' descriptions.
func (a answer) errs() []string {
	var out []string
	l, _ := a.body["errors"].([]any)
	for _, e := range l {
		m, _ := e.(map[string]any)
		out = append(out, fmt.Sprint(m["error_number"], " ", m["description"]))
	}
	return out
}

func (a answer) warnings() []string {
	var out []string
	l, _ := a.body["warnings"].([]any)
	for _, e := range l {
		m, _ := e.(map[string]any)
		out = append(out, fmt.Sprint(m["description"]))
	}
	return out
}

// call sends method path with body (nil: none; a []byte as it is, else
// JSON) and token (""; anonymous), and validates both ways.
func (c *cluster) call(t testing.TB, token, method, path string, body any) answer {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, c.https+path, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("X-SLURM-USER-TOKEN", token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, header: resp.Header, raw: out}
	if resp.StatusCode == http.StatusUnauthorized {
		return a // refused before Slurm's API: /v1's body
	}
	validate(t, method, path, raw, resp.StatusCode, resp.Header, out)
	if resp.StatusCode != http.StatusNotModified {
		if err := json.Unmarshal(out, &a.body); err != nil {
			t.Errorf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, clipBody(out))
		}
	}
	return a
}

// submitBody is a job_submit_req as Slurm's clients send it.
func submitBody(name string, extra map[string]any) map[string]any {
	job := map[string]any{
		"name":                      name,
		"current_working_directory": "/tmp",
		"environment":               []string{"PATH=/bin:/usr/bin"},
		"tres_per_node":             "gres/gpu:2",
		"time_limit":                map[string]any{"set": true, "infinite": false, "number": 30},
	}
	for k, v := range extra {
		job[k] = v
	}
	return map[string]any{"script": "#!/bin/sh\nnvidia-smi -L\n", "job": job}
}

var _ = net.Listen
