package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/growstack"
	"github.com/gpud/gpud/gpud/slurmrest"
)

// Body limits by endpoint: a submission (its script) and the node
// protocol's batches may be large; everything else carries a reason at
// most, and joining (no identity yet) a certificate request.
const (
	smallBody = 64 << 10
	joinBody  = 16 << 10
)

func bodyLimit(r *http.Request) int64 {
	if slurmrest.LargeBody(r.URL.Path) {
		return maxBody // a job submitted through Slurm's REST API
	}
	p := strings.TrimPrefix(r.URL.Path, "/"+api.Version)
	switch {
	case p == joinPath[len("/"+api.Version):]:
		return joinBody
	case p == "/jobs", p == "/nodes/register",
		strings.HasPrefix(p, "/nodes/") && (strings.HasSuffix(p, "/events") || strings.HasSuffix(p, "/heartbeat")):
		return maxBody
	}
	return smallBody
}

// edge applies the per-request limits before anything reads the body:
// a body over its endpoint's limit is refused from its Content-Length
// (or cut where it crosses the limit), the server's ReadTimeout bounds
// reading it and is lifted once it is read (so long polls and slow
// handlers are not cut: net/http, as of Go 1.26, also clears it when it
// starts its background read after the body; lifting it here keeps that
// explicit), and the response gets WriteTimeout.
func (s *Server) edge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// net/http serves each HTTP/2 request on a new goroutine: its
		// stack grown once, before the handler goes deep (growstack).
		growstack.Grow()
		l := s.limits.Load()
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(l.WriteTimeout))
		limit := bodyLimit(r)
		if r.ContentLength > limit {
			closeAfter(w, r)
			s.writeStatus(w, r, http.StatusRequestEntityTooLarge, api.CodeInvalid, tooLarge(limit).Error())
			return
		}
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &readBody{ReadCloser: http.MaxBytesReader(w, r.Body, limit), rc: rc}
		}
		next.ServeHTTP(w, r)
	})
}

// readBody lifts the connection's read deadline once the body is read.
type readBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *readBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// longPoll gives a long poll of up to wait its own write deadline.
func (s *Server) longPoll(w http.ResponseWriter, wait time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.limits.Load().WriteTimeout))
}

// closeAfter makes the connection close after this response, at once:
// net/http would otherwise read up to 256 KiB of an unread body (for up
// to read_timeout) hoping to reuse the connection.
func closeAfter(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}
