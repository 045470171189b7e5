package api

import (
	"bufio"
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// Per-attempt bounds of the client transport, well inside the failover
// budget (DefaultFailoverTimeout): a controller host that vanished or
// sits behind a cut link answers no SYN, and Go's defaults would wait 30 s
// for the dial (the kernel's SYN retries) and 10 s for the handshake.
const (
	// DefaultDialTimeout bounds one TCP connect: on a cluster network a
	// connect takes well under a millisecond, and 3 s still covers one
	// lost SYN (retransmitted after 1 s).
	DefaultDialTimeout = 3 * time.Second
	// DefaultHandshakeTimeout bounds one TLS handshake.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultPingAfter and DefaultPingTimeout find a dead HTTP/2
	// connection (a cut link, a host that vanished with it open): after
	// DefaultPingAfter with nothing read a ping is sent, and no answer
	// within DefaultPingTimeout closes the connection, failing what waits
	// on it, so the call is retried at another controller. 5 s each, so a
	// node agent (heartbeats every 5 s by default) notices within about
	// two heartbeat intervals.
	DefaultPingAfter   = 5 * time.Second
	DefaultPingTimeout = 5 * time.Second
)

// newTransport is the HTTP transport of every Client. Over https it
// speaks HTTP/2 when the controller offers it, so a node agent's long
// poll, heartbeats, events and usage samples share one connection (one
// file descriptor per node at each end; with HTTP/1.1 the long poll held
// one and everything else another). gpud loadtest hit the open-file
// limit at about 10,000 nodes with two (docs/fleet.md).
func newTransport(o ClientOptions) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// A custom TLSClientConfig turns HTTP/2 off unless it is forced.
	tr.ForceAttemptHTTP2 = true
	tr.MaxIdleConnsPerHost = 64
	// Close idle connections before the controller does ([api]
	// idle_timeout, 60s by default), so a request never races its close.
	tr.IdleConnTimeout = 30 * time.Second
	d := &net.Dialer{Timeout: cmp.Or(o.DialTimeout, DefaultDialTimeout), KeepAlive: 30 * time.Second}
	tr.DialContext = d.DialContext
	tr.TLSHandshakeTimeout = cmp.Or(o.HandshakeTimeout, DefaultHandshakeTimeout)
	// One connection carries every request, so a dead one must be
	// noticed: a request that times out only resets its stream and the
	// next would wait on the same connection. (Kubernetes' client pings
	// too.) The 10,000-node loadtest, whose 10,000 agents share one
	// starved process, passes longer times (ClientOptions): there a 5 s
	// ping timeout closed thousands of live connections (docs/fleet.md).
	tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: cmp.Or(o.PingAfter, DefaultPingAfter), PingTimeout: cmp.Or(o.PingTimeout, DefaultPingTimeout)}
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
