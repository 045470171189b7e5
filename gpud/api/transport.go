package api

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// newTransport is the HTTP transport of every Client. Over https it
// speaks HTTP/2 when the controller offers it, so a node agent's long
// poll, heartbeats, events and usage samples share one connection (one
// file descriptor per node at each end; with HTTP/1.1 the long poll held
// one and everything else another). gpud loadtest hit the open-file
// limit at about 10,000 nodes with two (docs/fleet.md).
func newTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A custom TLSClientConfig turns HTTP/2 off unless it is forced.
	tr.ForceAttemptHTTP2 = true
	tr.MaxIdleConnsPerHost = 64
	// Close idle connections before the controller does ([api]
	// idle_timeout, 60s by default), so a request never races its close.
	tr.IdleConnTimeout = 30 * time.Second
	// One connection carries every request, so a dead one (a cut link,
	// a controller host that vanished) must be noticed: a request that
	// times out only resets its stream and the next would wait on the
	// same connection. With nothing read for 30 s (a node's heartbeat
	// answer comes every 10 s by default) a ping is sent, and no answer
	// within 15 s closes the connection; the next request dials afresh.
	// (Kubernetes' client uses the same.) A 5 s ping timeout closed
	// thousands of live connections of a starved controller in the
	// 10,000-node loadtest, and each re-dial cost it a TLS handshake.
	tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	return tr
}

// oneShot is the RoundTripper of ClientOptions.OneShot: it dials a
// connection for each request and writes the request and reads the
// answer head on the caller's goroutine; the connection closes with the
// body, or when the request's context ends. http.Transport, made for
// reuse, starts a goroutine to dial and two per connection (read and
// write loops): for sbatch, which sends one request and exits, that was
// three goroutines, their hand-offs and the threads the runtime started
// to run them.
type oneShot struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (t oneShot) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close() // a RoundTripper closes it, even on error
	}
	conn, err := t.dial(req.Context(), "unix", "")
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(req.Context(), func() { conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return fail(err)
	}
	resp.Body = &connBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
}

// connBody closes its connection with the body.
type connBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *connBody) Close() error {
	b.stop()
	err := b.ReadCloser.Close()
	b.conn.Close()
	return err
}
