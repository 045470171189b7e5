package slurmrest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpud/gpud/gpud/api"
)

// V1 is how the handler reaches gpud: the /v1 API, called for the caller
// of the request being answered. gpud/server implements it by serving the
// call with its own /v1 handlers (identity, roles, ownership, limits,
// privacy and audit included); tests may serve it from a real server too.
type V1 interface {
	// Call performs method path (with its query) under r's identity, with
	// in encoded as the JSON body (nil: none), and decodes a successful
	// answer into out (nil: discard; *[]byte: the raw body). An answer
	// that is not a success is returned as *api.Error.
	Call(r *http.Request, method, path string, in, out any) error
	// Caller names who r is, for the answers' meta.client and for
	// scontrol-style messages; it grants nothing.
	Caller(r *http.Request) Caller
}

// Caller is the identity of a request as V1 established it.
type Caller struct {
	User   string
	UID    uint32
	GID    uint32
	Role   string
	Source string // "unix" or the remote address
}

// Options configure a Handler.
type Options struct {
	// Cluster is the cluster name in answers (meta.slurm.cluster, the
	// slurmdb cluster record); default "gpud".
	Cluster string
	// Release is gpud's version, shown in meta.slurm.release.
	Release string
	// Log receives the handler's own errors; default slog.Default().
	Log *slog.Logger
	// Started is when the controller started (diag's req_time_start);
	// default when the handler was made.
	Started time.Time
	// Now replaces time.Now (tests).
	Now func() time.Time
	// Counters, when set, gives diag its job counters.
	Counters *Counters
	// Hostname names the controller in ping and conf answers; default
	// the cluster name.
	Hostname string
}

// Handler serves Slurm's REST API.
type Handler struct {
	v1     V1
	o      Options
	routes map[string][]*route // by "plugin/version"
	nodes  nodeEpoch           // when the node view last changed
}

// Prefixes are the URL prefixes Handler serves; gpud/server mounts it on
// each.
var Prefixes = []string{"/slurm/", "/slurmdb/", "/util/", "/openapi/", "/openapi.json", "/openapi.yaml"}

// New returns a Handler that reaches gpud through v1.
func New(v1 V1, o Options) *Handler {
	if o.Cluster == "" {
		o.Cluster = "gpud"
	}
	if o.Hostname == "" {
		o.Hostname = o.Cluster
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Started.IsZero() {
		o.Started = o.Now()
	}
	h := &Handler{v1: v1, o: o, routes: map[string][]*route{}}
	for _, rt := range routeTable() {
		for _, v := range Versions {
			if rt.has(v) {
				k := rt.plugin + "/" + strconv.Itoa(v)
				h.routes[k] = append(h.routes[k], rt)
			}
		}
	}
	return h
}

// route is one method and path of Slurm's API.
type route struct {
	method string
	plugin string // slurm, slurmdb or util
	// path after the version, as Slurm's document writes it ("jobs/",
	// "job/{job_id}"); a trailing slash is optional in requests.
	path string
	segs []string
	span
	// empty writes the members the response schema requires, for an
	// answer that carries only errors.
	empty string
	serve func(c *call)
}

// match says whether p (the path after the version, without its
// trailing slash) is rt's, and returns its parameter.
func (rt *route) match(segs []string) (param string, ok bool) {
	if len(segs) != len(rt.segs) {
		return "", false
	}
	for i, s := range rt.segs {
		if strings.HasPrefix(s, "{") {
			param = segs[i]
			continue
		}
		if s != segs[i] {
			return "", false
		}
	}
	return param, true
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// ServeHTTP answers a request under one of Prefixes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if p == "/openapi/v3" || p == "/openapi.json" || p == "/openapi" || p == "/openapi/" {
		h.serveOpenAPI(w, r)
		return
	}
	if p == "/openapi.yaml" {
		c := &call{h: h, w: w, r: r, v: latest()}
		c.fail(http.StatusNotAcceptable, errHTTPMime, "gpud serves its OpenAPI document as JSON only: GET /openapi/v3 or /openapi.json", "")
		return
	}
	plugin, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	ver, rest, _ := strings.Cut(rest, "/")
	v, ok := parseVersion(ver)
	c := &call{h: h, w: w, r: r, v: v, plugin: plugin}
	if !ok {
		c.v = latest()
		c.fail(http.StatusNotFound, errUnknownURL, fmt.Sprintf("unknown data_parser version %q in %s; this server answers %s", clipText(ver), clipText(p), versionList()), "")
		return
	}
	segs := splitPath(rest)
	var methodOK []string
	for _, rt := range h.routes[plugin+"/"+strconv.Itoa(v)] {
		param, ok := rt.match(segs)
		if !ok {
			continue
		}
		if rt.method != r.Method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
			methodOK = append(methodOK, rt.method)
			continue
		}
		c.rt, c.param = rt, param
		if deprecated(v) {
			c.warn(fmt.Sprintf("data_parser %s is deprecated; move to %s", versionName(v), versionName(latest())), "")
		}
		rt.serve(c)
		return
	}
	if len(methodOK) > 0 {
		w.Header().Set("Allow", strings.Join(methodOK, ", "))
		c.fail(http.StatusMethodNotAllowed, errUnknownURLMethod, fmt.Sprintf("%s %s: this path takes %s", r.Method, clipText(p), strings.Join(methodOK, ", ")), "")
		return
	}
	c.fail(http.StatusNotFound, errUnknownURLMethod, fmt.Sprintf("no such path %s in Slurm's REST API %s (see GET /openapi/v3)", clipText(p), versionName(v)), "")
}

func deprecated(v int) bool {
	for _, d := range Deprecated {
		if d == v {
			return true
		}
	}
	return false
}

func versionList() string {
	names := make([]string, len(Versions))
	for i, v := range Versions {
		names[i] = versionName(v)
	}
	return strings.Join(names, ", ")
}

// clipText keeps a client's text short and printable in messages.
func clipText(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// call is one request being answered.
type call struct {
	h      *Handler
	w      http.ResponseWriter
	r      *http.Request
	v      int
	plugin string
	rt     *route
	param  string

	warnings []problem
	errors   []problem
}

// problem is an entry of an answer's errors or warnings.
type problem struct {
	desc, source string
	num          int
}

func (c *call) warn(desc, source string) {
	c.warnings = append(c.warnings, problem{desc: desc, source: source})
}

// addError records an error that goes with an answer (its status is the
// caller's choice).
func (c *call) addError(num int, desc, source string) {
	c.errors = append(c.errors, problem{num: num, desc: desc, source: source})
}

// reply writes a 200 answer: the members body writes, then the envelope.
func (c *call) reply(body func(w *jw)) { c.replyStatus(http.StatusOK, body) }

func (c *call) replyStatus(status int, body func(w *jw)) {
	w := &jw{b: make([]byte, 0, 1024), v: c.v}
	w.begin('{')
	if body != nil {
		body(w)
	}
	c.envelope(w)
	w.end('}')
	w.b = append(w.b, '\n')
	c.w.Header().Set("Content-Type", "application/json")
	c.w.Header().Set("Content-Length", strconv.Itoa(len(w.b)))
	c.w.WriteHeader(status)
	if c.r.Method != http.MethodHead {
		_, _ = c.w.Write(w.b)
	}
}

// fail answers with an error only: the response schema's required members
// empty, and the error.
func (c *call) fail(status, num int, desc, source string) {
	c.addError(num, desc, source)
	c.failAll(status)
}

// failAll answers with the errors recorded so far.
func (c *call) failAll(status int) {
	empty := ""
	if c.rt != nil {
		empty = c.rt.empty
	}
	c.replyStatus(status, func(w *jw) {
		if empty != "" {
			w.raw([]byte(empty))
		}
	})
}

// failV1 answers with the error a /v1 call returned, keeping its status
// (so a refusal reads the same on both APIs) and naming it with Slurm's
// error number: notFound for a missing object (ESLURM_INVALID_JOB_ID for
// a job, ...), invalid for a bad request.
func (c *call) failV1(err error, notFound, invalid int) {
	var ae *api.Error
	if !errors.As(err, &ae) {
		c.h.o.Log.Error("slurm REST call failed", "path", c.r.URL.Path, "err", err)
		c.fail(http.StatusInternalServerError, errInternal, err.Error(), "")
		return
	}
	num := errorNumber(err, notFound, invalid)
	c.fail(ae.Status, num, ae.Message, "")
}

// envelope writes meta, errors and warnings.
func (c *call) envelope(w *jw) {
	who := c.h.v1.Caller(c.r)
	w.key("meta")
	w.obj(func() {
		w.key("plugin")
		w.obj(func() {
			kind := map[string]string{"slurm": "openapi/slurmctld", "slurmdb": "openapi/slurmdbd", "util": "openapi/util"}[c.plugin]
			w.key("type")
			w.str(kind)
			w.key("name")
			w.str("Slurm OpenAPI " + strings.TrimPrefix(kind, "openapi/") + " (gpud)")
			w.key("data_parser")
			w.str("data_parser/" + versionName(c.v))
			w.key("accounting_storage")
			w.str("accounting_storage/gpud")
		})
		w.key("client")
		w.obj(func() {
			w.key("source")
			w.str(who.Source)
			w.key("user")
			w.str(who.User)
			w.key("group")
			w.str(strconv.FormatUint(uint64(who.GID), 10))
		})
		w.key("command")
		w.arr(func() {})
		w.key("slurm")
		w.obj(func() {
			w.key("version")
			w.obj(func() {
				w.key("major")
				w.str(slurmMajor)
				w.key("micro")
				w.str(slurmMicro)
				w.key("minor")
				w.str(slurmMinor)
			})
			w.key("release")
			w.str("gpud " + c.h.o.Release)
			w.key("cluster")
			w.str(c.h.o.Cluster)
		})
	})
	w.key("errors")
	w.arr(func() {
		for _, e := range c.errors {
			w.obj(func() {
				w.key("description")
				w.str(e.desc)
				w.key("error_number")
				w.int(int64(e.num))
				w.key("error")
				w.str(errName(e.num))
				w.key("source")
				w.str(e.source)
			})
		}
	})
	w.key("warnings")
	w.arr(func() {
		for _, e := range c.warnings {
			w.obj(func() {
				w.key("description")
				w.str(e.desc)
				w.key("source")
				w.str(e.source)
			})
		}
	})
}

// The Slurm release whose REST API gpud serves: Slurm 26.05 serves
// v0.0.42 (deprecated) to v0.0.45.
const (
	slurmMajor = "26"
	slurmMinor = "05"
	slurmMicro = "0"
)

// maxRequest bounds a request body (a batch script is the large part).
const maxRequest = 4 << 20

// body reads the request's JSON object into a generic value, checking
// what any body must be (UTF-8, one JSON object). An empty body is nil.
func (c *call) body() (map[string]any, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(c.w, c.r.Body, maxRequest))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			c.fail(http.StatusRequestEntityTooLarge, errHTTPTooLarge, fmt.Sprintf("request body is over %d MiB; stage large files on shared storage", maxRequest>>20), "")
			return nil, false
		}
		c.fail(http.StatusBadRequest, errRESTFailParsing, "read request body: "+err.Error(), "")
		return nil, false
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, true
	}
	if !utf8.Valid(b) {
		c.fail(http.StatusBadRequest, errUTF8, "request body is not valid UTF-8; send JSON as UTF-8 text", "")
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		c.fail(http.StatusBadRequest, errRESTFailParsing, "request body is not a JSON object: "+err.Error(), "")
		return nil, false
	}
	if dec.More() {
		c.fail(http.StatusBadRequest, errRESTFailParsing, "request body has data after its JSON object", "")
		return nil, false
	}
	return m, true
}

// get calls GET path on /v1 into out; on failure it answers and returns
// false.
func (c *call) get(path string, out any, notFound int) bool {
	if err := c.h.v1.Call(c.r, http.MethodGet, path, nil, out); err != nil {
		c.failV1(err, notFound, errRESTInvalidQuery)
		return false
	}
	return true
}
