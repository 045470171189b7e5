package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/slurmrest"
)

// Slurm's REST API (slurmrestd's data_parser versions) is served under
// /slurm/, /slurmdb/, /util/ and /openapi/ by gpud/slurmrest. It reaches
// gpud only through v1Caller, which answers each of its calls with this
// server's own /v1 handlers under the identity of the request being
// served: authentication (auth.go, including Slurm's X-SLURM-USER-TOKEN),
// roles, ownership, limits, privacy and the audit log are the /v1 API's,
// not a second copy of them.

// WithSlurmREST sets the options of Slurm's REST API (cluster name,
// release, diag counters). Without it the API is served with defaults.
func WithSlurmREST(o slurmrest.Options) Option {
	return func(s *Server) { s.slurmOpts = &o }
}

func (s *Server) slurmRoutes() {
	o := slurmrest.Options{Log: s.log}
	if s.slurmOpts != nil {
		o = *s.slurmOpts
		if o.Log == nil {
			o.Log = s.log
		}
	}
	h := slurmrest.New(v1Caller{s}, o)
	for _, p := range slurmrest.Prefixes {
		s.mux.Handle(p, h)
	}
	s.mux.Handle("POST /"+api.Version+"/token", s.recordAudit(http.HandlerFunc(s.userToken)))
	for _, p := range []string{"/livez", "/readyz"} {
		s.mux.HandleFunc("GET "+p, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("ok\n"))
		})
	}
}

// v1Caller serves slurmrest's calls with the /v1 handlers.
type v1Caller struct{ s *Server }

// Call implements slurmrest.V1.
func (c v1Caller) Call(r *http.Request, method, path string, in, out any) error {
	body := io.Reader(http.NoBody)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	sub, err := http.NewRequestWithContext(r.Context(), method, path, body)
	if err != nil {
		return fmt.Errorf("make %s %s: %w", method, path, err)
	}
	sub.RemoteAddr, sub.TLS, sub.Host = r.RemoteAddr, r.TLS, r.Host
	if in != nil {
		sub.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	c.s.mux.ServeHTTP(rec, sub)
	if rec.code >= 300 {
		var eb api.ErrorBody
		_ = json.Unmarshal(rec.buf.Bytes(), &eb)
		if eb.Error.Message == "" {
			eb.Error.Message = http.StatusText(rec.code)
		}
		return &api.Error{Status: rec.code, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = rec.buf.Bytes()
		return nil
	}
	if err := json.Unmarshal(rec.buf.Bytes(), out); err != nil {
		return fmt.Errorf("decode the answer to %s %s: %w", method, path, err)
	}
	return nil
}

// Caller implements slurmrest.V1.
func (c v1Caller) Caller(r *http.Request) slurmrest.Caller {
	id := who(r)
	src := "unix"
	if id.remote {
		src = r.RemoteAddr
	}
	name := id.caller.User
	if name == "" && id.caller.Known {
		name = strconv.FormatUint(uint64(id.caller.UID), 10)
	}
	return slurmrest.Caller{User: name, UID: id.caller.UID, GID: id.caller.GID, Role: id.role, Source: src}
}

// recorder keeps a /v1 answer in memory for slurmrest.
type recorder struct {
	header http.Header
	code   int
	wrote  bool
	buf    bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.code, w.wrote = code, true
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.buf.Write(b)
}
