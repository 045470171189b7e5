package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// A controller group (issue 16): GPUD_CONTROLLER, --controller and
// node.toml's controller take a comma-separated list of addresses, e.g.
// "https://c1:6817,https://c2:6817,https://c3:6817". Only the Raft leader
// takes writes and node-protocol calls; a follower answers them with 421
// not_leader naming the leader (HeaderLeader). A client over a list
// follows the leader with the failover transport below; a client over one
// address behaves exactly as before (no retries), so a single controller
// that is down is reported at once.

// DefaultFailoverTimeout bounds one call of a client over several
// addresses, from its start: its attempts, their retries after a
// connection error, a not_leader answer or a 503 to a read, and the wait
// for an answer (a long poll adds its wait): long enough to ride out an
// election, short enough that a group with no leader is reported.
const DefaultFailoverTimeout = 12 * time.Second

// Backoff between rounds of attempts over every address. The cap bounds
// how late a client notices the end of an election (a round finds no
// leader, then sleeps): a quarter second, not the second it was, which
// put up to a second on the first acknowledgement after a failover
// (issue 25). A round costs each live member one small answer.
const (
	failoverBackoffMin = 50 * time.Millisecond
	failoverBackoffMax = 250 * time.Millisecond
)

// SplitControllers splits a controller address list on commas, trimming
// spaces and dropping empty items: "https://c1:6817, https://c2:6817".
func SplitControllers(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// newGroupClient returns a client over addrs (two or more), each one a
// client of its own as NewClientWith makes for a single address, behind
// one failover transport.
func newGroupClient(addrs []string, o ClientOptions) (*Client, error) {
	f := &failover{timeout: o.FailoverTimeout}
	if f.timeout <= 0 {
		f.timeout = DefaultFailoverTimeout
	}
	g := &Client{base: "http://gpud-controllers", addr: strings.Join(addrs, ",")}
	seen := map[string]string{}
	for _, a := range addrs {
		m, err := NewClientWith(a, o)
		if err != nil {
			return nil, err
		}
		k := addrKey(a)
		if prev, dup := seen[k]; dup {
			return nil, spec.Errorf(spec.ErrInvalid, "controller address %q repeats %q; list each controller once", a, prev)
		}
		seen[k] = a
		u, _ := url.Parse(m.base)
		f.members = append(f.members, member{addr: a, key: k, scheme: u.Scheme, host: u.Host, rt: m.hc.Transport, tls: m.tls})
		if m.tls {
			g.tls, g.Token = true, m.Token
		}
	}
	f.addrs = strings.Join(addrs, ",")
	g.hc = &http.Client{Transport: f}
	return g, nil
}

// addrKey is an address in a form two spellings of it share: lower-case
// scheme and host, the default port made explicit, a clean socket path.
func addrKey(addr string) string {
	u, err := url.Parse(strings.TrimSpace(addr))
	if err != nil {
		return addr
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme == "unix" {
		p := u.Path
		if p == "" {
			p = u.Opaque
		}
		return "unix://" + path.Clean(p)
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// SameController reports whether two controller addresses name the same
// controller (spelling aside: case, a default port, a socket path).
func SameController(a, b string) bool { return addrKey(a) == addrKey(b) }

// member is one controller of the group.
type member struct {
	addr   string // as configured
	key    string // addrKey(addr)
	scheme string // of the requests sent to it ("http" for a unix socket)
	host   string
	rt     http.RoundTripper
	tls    bool
}

// failover is the transport of a client over several controllers. It
// sends each request to the controller that answered last and, while the
// group fails over, to the others:
//
//   - a not_leader answer (421) is retried at the leader it names when
//     that is one of the configured addresses (a token never goes to an
//     address the user did not give), else at the next address: the
//     follower did not apply the call, so writes are retried too;
//
//   - a connection error is retried at the next address for reads (GET,
//     HEAD) always, for writes only when the request was not sent (the
//     dial failed): a write that may have reached a leader is not sent
//     again, since the caller cannot tell whether it was applied;
//
//   - a 503 to a read is retried at the next address; when every address
//     answered 503 it is the answer;
//
//   - a write carrying an Idempotency-Key (a submission) is retried as a
//     read is, after a connection error or a 503 (which may mean it was
//     committed): the controller answers a resend with the job the first
//     send made;
//
//   - a read a follower answered from its replica (HeaderStale) is asked
//     again of the leader it names, if configured, else (no leader known
//     there) of the next address, so that a client reads its own writes
//     and does not stay with a member cut off from the group; the first
//     follower's answer stands if the others fail or are followers too,
//     or if the leader's try has no connection staleWait after it began
//     (a leader behind a cut link, which the follower still names until
//     the election);
//
//   - an attempt that has no connection after hedgeDelay (a member behind a
//     cut link answers no SYN) has the next member tried beside it, when
//     the call may be sent twice (reads, keyed submissions, a node's
//     idempotent calls); the first answer wins;
//
// backing off between rounds over every address. A call that may be sent
// twice does not wait for a try still in flight (a dial into a cut link)
// before its next round: the member elected meanwhile is asked within the
// backoff, not after the dial timeout. The whole call, from its start, is
// bounded by timeout (plus a long poll's wait).
type failover struct {
	members []member
	addrs   string // the configured list, for messages
	timeout time.Duration
	cur     atomic.Int32 // index of the member that answered last
}

// CloseIdleConnections closes every member's idle connections (what
// http.Client.CloseIdleConnections calls).
func (f *failover) CloseIdleConnections() {
	for _, m := range f.members {
		if c, ok := m.rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// hedgeDelay is how long an attempt may go without a connection before
// the next controller is tried beside it (happy eyeballs; RFC 8305's
// 250 ms): a controller behind a cut link answers no SYN, and waiting for
// the dial timeout before trying the next would cost every call that
// long. Only calls that are safe to send twice are tried in parallel.
const hedgeDelay = 250 * time.Millisecond

// staleWait is how long a follower's answer to a read is held while the
// leader it names is asked, when that leader's try has no connection yet:
// a leader behind a cut link, still named by the followers until they
// elect another, never answers, and the read should not wait a dial
// timeout for it. A leader with a connection is waited for (its answer
// is the fresh one).
const staleWait = time.Second

// callOpts are what a Client method tells the failover transport about
// its call, through the request's context (withCall).
type callOpts struct {
	// resend marks a call that is safe to send again whatever became of
	// an earlier send (a node's heartbeat, registration or events, which
	// the controller applies idempotently), as reads are.
	resend bool
	// patience is how much longer than the failover budget the call may
	// take to be answered: a long poll's wait, a report's work.
	patience time.Duration
}

type callKey struct{}

func withCall(ctx context.Context, o callOpts) context.Context {
	return context.WithValue(ctx, callKey{}, o)
}

// verdict is what one attempt calls for.
type verdict int

const (
	answered  verdict = iota // return the response
	retryNext                // try the next address
	retryAt                  // try the address the 421 named
	giveUp                   // return the error
)

// try is one attempt of a call at one member.
type try struct {
	i      int
	began  time.Time
	cancel context.CancelFunc
	// conn is closed when the attempt got a connection: from then on
	// its request may have reached the controller.
	conn    chan struct{}
	conned  atomic.Bool
	sawConn sync.Once
}

func (t *try) connected() bool { return t.conned.Load() }

// outcome is what a try came back with.
type outcome struct {
	t    *try
	resp *http.Response
	err  error
}

// call is one RoundTrip over the group: its tries in flight and what the
// failed ones said, for the error.
type call struct {
	f       *failover
	req     *http.Request
	start   time.Time
	results chan outcome
	done    chan struct{} // closed when RoundTrip returns
	flying  []*try        // by member index; nil when none in flight
	tried   []bool        // launched in this round
	notes   []string      // each member's last failure, for the error
	newest  *try          // the last launched, watched for hedging
	// launches counts the tries launched in this round.
	launches int
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	co, _ := ctx.Value(callKey{}).(callOpts)
	read := req.Method == http.MethodGet || req.Method == http.MethodHead
	// A submission named by an Idempotency-Key is safe to send again
	// whatever became of the first send: the controller makes one job
	// per key. So it is retried as a read is.
	again := read || req.Header.Get(HeaderIdempotencyKey) != "" || co.resend
	n := len(f.members)
	c := &call{f: f, req: req, start: time.Now(), results: make(chan outcome), done: make(chan struct{}),
		flying: make([]*try, n), tried: make([]bool, n), notes: make([]string, n)}
	defer close(c.done)
	if req.Body != nil && req.GetBody == nil {
		// The body can be sent once only: one attempt, where the last
		// call was answered.
		c.launch(int(f.cur.Load()))
		o := <-c.results
		if o.err != nil {
			return nil, fmt.Errorf("%s: %w", f.members[o.t.i].addr, o.err)
		}
		return c.keep(o), nil
	}
	// The whole call, retries and a slow answer included, is bounded by
	// the failover budget (plus a long poll's wait): no controller that
	// fails to answer can hold it longer.
	budget := f.timeout + co.patience
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	var (
		hedge    *time.Timer // armed while the newest try has no connection
		hedgeC   <-chan time.Time
		round    *time.Timer // the backoff before the next round
		roundC   <-chan time.Time
		backoff  = failoverBackoffMin
		pref     = int(f.cur.Load()) // the member to try first in a round
		only503  = true
		foreign  int // 421s this round naming a leader not in the list
		lastResp *http.Response
		lastErr  error
		// stale is a follower's answer to a read, held while the
		// leader it names is asked (staleAt: that leader's index); the
		// answer if the leader fails or makes no connection in time.
		stale     *outcome
		staleAt   = -1
		staleT    *time.Timer
		staleC    <-chan time.Time
		staleHops int // stale answers followed to another member
	)
	defer func() {
		if hedge != nil {
			hedge.Stop()
		}
		if round != nil {
			round.Stop()
		}
		if staleT != nil {
			staleT.Stop()
		}
		if stale != nil {
			// Not the answer after all.
			stale.resp.Body.Close()
			stale.t.cancel()
		}
	}()
	// useStale returns the held follower's answer.
	useStale := func() *http.Response {
		o := *stale
		stale = nil
		c.cancelAll()
		return c.keep(o)
	}
	armHedge := func() {
		if !again || c.newest == nil || c.newest.connected() || c.untried(pref) < 0 {
			hedgeC = nil
			return
		}
		d := max(hedgeDelay-time.Since(c.newest.began), 0)
		if hedge == nil {
			hedge = time.NewTimer(d)
		} else {
			hedge.Reset(d)
		}
		hedgeC = hedge.C
	}
	c.launch(pref)
	armHedge()
	for {
		var connC <-chan struct{}
		if hedgeC != nil {
			connC = c.newest.conn
		}
		select {
		case <-ctx.Done():
			c.cancelAll()
			return nil, ctx.Err()
		case <-deadline.C:
			if stale != nil {
				return useStale(), nil
			}
			err := c.timeoutErr(lastErr, budget)
			c.cancelAll()
			if lastResp != nil {
				return lastResp, nil
			}
			return nil, err
		case <-connC:
			hedgeC = nil // connected in time: no need for another
			continue
		case <-staleC:
			staleC = nil
			if t := c.flying[staleAt]; t == nil || !t.connected() {
				// The leader the follower named is not reachable
				// (yet): the follower's answer it is.
				return useStale(), nil
			}
			continue // connected: its answer is coming
		case <-hedgeC:
			// No connection yet: try the next member beside it.
			if j := c.untried(pref); j >= 0 {
				c.launch(j)
			}
			armHedge()
			continue
		case <-roundC:
			roundC = nil
			clear(c.tried)
			c.launches = 0
			for i, t := range c.flying {
				c.tried[i] = t != nil
				if t != nil {
					c.launches++
				}
			}
			only503, foreign = true, 0
			if j := c.untried(pref); j >= 0 {
				c.launch(j)
				armHedge()
			}
			continue
		case o := <-c.results:
			i, resp, err := o.t.i, o.resp, o.err
			c.flying[i] = nil
			v, next := answered, -1
			switch {
			case err != nil:
				v = retryNext
				sent := o.t.connected() && !notSent(err)
				if ctx.Err() != nil || permanent(err) || (!again && sent) {
					v = giveUp
				}
				only503 = false
			case resp.StatusCode == http.StatusMisdirectedRequest:
				v = retryNext
				leader := resp.Header.Get(HeaderLeader)
				if j := f.index(ctx, leader); j >= 0 && j != i {
					v, next = retryAt, j
				} else if j < 0 && strings.TrimSpace(leader) != "" {
					foreign++
				}
				only503 = false
			case resp.StatusCode == http.StatusServiceUnavailable && again:
				v = retryNext
			}
			if v == answered && read && staleHops < n && resp.Header.Get(HeaderStale) == "true" {
				// A follower's replica may lag the leader: a job just
				// submitted may be missing. Ask the leader it names; a
				// follower that knows no leader (an election, or a
				// member cut off from the others, whose replica stops
				// where the cut came) sends the read on to the next
				// address, which may. Should that fail, or make no
				// connection within staleWait, the first follower's
				// answer will do.
				j := f.index(ctx, resp.Header.Get(HeaderLeader))
				if j < 0 {
					j = (i + 1) % n
				}
				if j != i {
					if stale == nil {
						stale = &o
					} else {
						resp.Body.Close()
						o.t.cancel()
					}
					staleHops++
					if c.flying[j] == nil {
						c.launch(j)
						armHedge()
					}
					staleAt = j
					d := max(staleWait-time.Since(c.flying[j].began), 0)
					if staleT == nil {
						staleT = time.NewTimer(d)
					} else {
						staleT.Reset(d)
					}
					staleC = staleT.C
					continue
				}
			}
			if v == answered {
				c.cancelAll()
				f.cur.Store(int32(i))
				return c.keep(o), nil
			}
			if v == giveUp {
				c.cancelAll()
				o.t.cancel()
				if ctx.Err() == nil && !again && !permanent(err) {
					return nil, fmt.Errorf("%s: %w (after %s); the controller may have carried out this %s %s before the connection broke, so it was not sent again: check (gpuq, squeue) before repeating it",
						f.members[i].addr, err, since(o.t.began), req.Method, req.URL.Path)
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%s: %w", f.members[i].addr, err)
			}
			// Keep this failure's answer, in case it is the last.
			if resp != nil {
				lastResp, lastErr = buffered(resp), nil
				c.notes[i] = fmt.Sprintf("%s %s", resp.Status, errorCode(lastResp))
			} else {
				lastResp, lastErr = nil, err
				c.notes[i] = fmt.Sprintf("%v (after %s)", err, since(o.t.began))
			}
			o.t.cancel()
			if stale != nil {
				// The leader failed: take the follower's answer after all.
				return useStale(), nil
			}
			// At most n launches a round: members naming each other
			// as leader (views differ during an election) back off too.
			// A leader named while its try is still in flight (a dial
			// into a cut link, during the election) is not waited for:
			// the next member is asked.
			if next >= 0 {
				pref = next
				if c.flying[next] == nil && c.launches < n {
					c.launch(next)
					armHedge()
					continue
				}
			}
			if j := c.untried((i + 1) % n); j >= 0 && c.launches < n {
				c.launch(j)
				armHedge()
				continue
			}
			if roundC != nil {
				continue
			}
			if c.inFlight() {
				if !again || c.connectedInFlight() {
					continue // a try in flight may have sent the call, or is being answered: wait for it
				}
				// The others answered; a try still dialing (into a cut
				// link) must not hold the next round, which may find
				// the member elected meanwhile.
			} else {
				// A round over every address failed.
				if only503 && lastResp != nil {
					return lastResp, nil // every controller says unavailable: that is the answer
				}
				if foreign >= n && lastResp != nil {
					return lastResp, nil // the leader is at an address the user did not list
				}
			}
			if round == nil {
				round = time.NewTimer(backoff)
			} else {
				round.Reset(backoff)
			}
			roundC = round.C
			backoff = min(2*backoff, failoverBackoffMax)
		}
	}
}

// launch starts a try at member i.
func (c *call) launch(i int) {
	ctx, cancel := context.WithCancel(c.req.Context())
	t := &try{i: i, began: time.Now(), cancel: cancel, conn: make(chan struct{})}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		t.sawConn.Do(func() {
			t.conned.Store(true)
			close(t.conn)
		})
	}})
	c.flying[i], c.tried[i], c.newest = t, true, t
	c.launches++
	m := &c.f.members[i]
	go func() {
		resp, err := m.send(c.req.WithContext(ctx))
		select {
		case c.results <- outcome{t: t, resp: resp, err: err}:
		case <-c.done:
			// The call was answered (or gave up) meanwhile.
			if resp != nil {
				resp.Body.Close()
			}
			cancel()
		}
	}()
}

// untried returns the first member from from on (cyclically) that was
// not launched in this round and has no try in flight, or -1.
func (c *call) untried(from int) int {
	n := len(c.tried)
	for k := range n {
		if j := (from + k) % n; !c.tried[j] && c.flying[j] == nil {
			return j
		}
	}
	return -1
}

func (c *call) inFlight() bool {
	for _, t := range c.flying {
		if t != nil {
			return true
		}
	}
	return false
}

// connectedInFlight reports whether a try in flight has a connection.
func (c *call) connectedInFlight() bool {
	for _, t := range c.flying {
		if t != nil && t.connected() {
			return true
		}
	}
	return false
}

// cancelAll ends every try in flight; their late answers are closed.
func (c *call) cancelAll() {
	for i, t := range c.flying {
		if t != nil {
			t.cancel()
			c.flying[i] = nil
		}
	}
}

// keep returns o's response, its body ending the try when closed.
func (c *call) keep(o outcome) *http.Response {
	o.resp.Body = &tryBody{ReadCloser: o.resp.Body, cancel: o.t.cancel}
	return o.resp
}

// tryBody releases its try's context when the body is closed.
type tryBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *tryBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// timeoutErr says that no member answered within budget, and what each
// one did (call it before cancelAll, which forgets the tries in flight).
func (c *call) timeoutErr(last error, budget time.Duration) error {
	var parts []string
	for i, m := range c.f.members {
		note := c.notes[i]
		if note == "" {
			note = "no answer"
			if t := c.flying[i]; t != nil && !t.connected() {
				note = "no connection"
			}
		}
		parts = append(parts, m.addr+": "+note)
	}
	msg := fmt.Sprintf("no controller of %s answered within %s (%s)", c.f.addrs, budget.Round(time.Millisecond), strings.Join(parts, "; "))
	if last != nil {
		return fmt.Errorf("%s: %w", msg, last)
	}
	return errors.New(msg)
}

// since is how long ago t was, rounded for messages.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// errorCode is the code of an error answer's body, "" when it has none.
func errorCode(resp *http.Response) string {
	b, err := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	if err != nil {
		return ""
	}
	var eb ErrorBody
	if json.Unmarshal(b, &eb) != nil {
		return ""
	}
	if eb.Error.Code == CodeNotLeader && resp.Header.Get(HeaderLeader) == "" {
		return eb.Error.Code + ", no leader known"
	}
	return eb.Error.Code
}

// send sends req to m: the request is cloned with m's address (and
// without the token unless m is https), its body rewound.
func (m *member) send(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = m.scheme, m.host, ""
	if !m.tls {
		r.Header.Del("Authorization")
	}
	if req.Body != nil && req.GetBody != nil {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = b
	}
	return m.rt.RoundTrip(r)
}

// index returns the member whose address is leader (as a 421 names it),
// or -1. A leader named by another spelling of a configured host (an IP
// address for a host name) matches when the name resolves to it; the
// request still goes to the address as configured.
func (f *failover) index(ctx context.Context, leader string) int {
	leader = strings.TrimSpace(leader)
	if leader == "" {
		return -1
	}
	k := addrKey(leader)
	for i, m := range f.members {
		if m.key == k {
			return i
		}
	}
	u, err := url.Parse(k)
	if err != nil || u.Scheme == "unix" || net.ParseIP(u.Hostname()) == nil {
		return -1
	}
	ip := net.ParseIP(u.Hostname())
	for i, m := range f.members {
		mu, err := url.Parse(m.key)
		if err != nil || mu.Scheme != u.Scheme || mu.Port() != u.Port() || net.ParseIP(mu.Hostname()) != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ips, err := net.DefaultResolver.LookupIP(rctx, "ip", mu.Hostname())
		cancel()
		for _, a := range ips {
			if err == nil && a.Equal(ip) {
				return i
			}
		}
	}
	return -1
}

// buffered reads resp's body into memory (a small error answer) so resp
// can be returned after the connection is released.
func buffered(resp *http.Response) *http.Response {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	return resp
}

// notSent reports whether err shows that the request never left: the
// connection was refused or could not be made.
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// permanent reports whether err is a configuration problem that another
// try cannot mend: a certificate the CA does not vouch for.
func permanent(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		inval   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &inval)
}

// notLeaderMessage says what to do about a not_leader answer that reached
// the caller: a single address is a follower (list them all), a group
// found no leader in time.
func (c *Client) notLeaderMessage(msg, leader string) string {
	if f, ok := c.hc.Transport.(*failover); ok {
		if leader != "" && f.index(context.Background(), leader) < 0 {
			return fmt.Sprintf("%s; the leader is %s, which is not in the controller list %s: add it to --controller or %s", msg, leader, f.addrs, EnvController)
		}
		return fmt.Sprintf("%s; no controller of %s took the call within %s: is a majority of the group up? (gpuq controllers)", msg, f.addrs, f.timeout)
	}
	if leader != "" {
		return fmt.Sprintf("%s; the leader is %s: list every controller in --controller or %s, comma-separated, to follow the leader", msg, leader, EnvController)
	}
	return fmt.Sprintf("%s; the group is electing a leader: retry, and list every controller in --controller or %s, comma-separated, to follow the leader", msg, EnvController)
}

// Controllers lists the controller group's members and its leader, as the
// controller that answers sees them (gpuq controllers, scontrol ping): GET
// /v1/controllers. A single controller lists itself as the leader.
func (c *Client) Controllers(ctx context.Context) (ControllersResponse, error) {
	var out ControllersResponse
	err := c.do(ctx, http.MethodGet, "/controllers", nil, nil, &out)
	return out, err
}

// groupErr drops the URL a group client's error is wrapped in: it names
// no controller (the failover transport's error names the one that
// failed).
func (c *Client) groupErr(err error) error {
	var ue *url.Error
	if _, ok := c.hc.Transport.(*failover); ok && errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// MemberAnswer is one configured controller's own answer to GET
// /v1/controllers (ControllersOfEach).
type MemberAnswer struct {
	Addr string // as configured
	Resp ControllersResponse
	Err  error
}

// ControllersOfEach asks every configured controller address for GET
// /v1/controllers, concurrently, each within timeout, so the caller has
// each member's own term, commit and applied index (a member knows only
// its own). A client over one address asks it alone.
func (c *Client) ControllersOfEach(ctx context.Context, timeout time.Duration) []MemberAnswer {
	f, ok := c.hc.Transport.(*failover)
	if !ok {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		res, err := c.Controllers(rctx)
		// The address as configured: c.base of a unix socket is the
		// placeholder http://gpud.
		return []MemberAnswer{{Addr: c.addr, Resp: res, Err: err}}
	}
	out := make([]MemberAnswer, len(f.members))
	done := make(chan struct{})
	for i := range f.members {
		go func() {
			defer func() { done <- struct{}{} }()
			m := &f.members[i]
			out[i].Addr = m.addr
			out[i].Err = memberControllers(ctx, c, m, timeout, &out[i].Resp)
		}()
	}
	for range f.members {
		<-done
	}
	return out
}

// memberControllers sends GET /v1/controllers to m alone (no failover).
func memberControllers(ctx context.Context, c *Client, m *member, timeout time.Duration, out *ControllersResponse) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	one := &Client{base: c.base, hc: &http.Client{Transport: single{m}}, Token: c.Token, tls: c.tls}
	res, err := one.Controllers(ctx)
	*out = res
	return err
}

// single sends every request to one member.
type single struct{ m *member }

func (s single) RoundTrip(req *http.Request) (*http.Response, error) { return s.m.send(req) }

// AddController adds a member to the controller group (POST
// /v1/controllers, admin): start it first with join = true.
func (c *Client) AddController(ctx context.Context, m ControllerMember) (ControllersResponse, error) {
	var out ControllersResponse
	err := c.do(ctx, http.MethodPost, "/controllers", nil, m, &out)
	return out, err
}

// RemoveController removes member id from the controller group (DELETE
// /v1/controllers/{id}, admin).
func (c *Client) RemoveController(ctx context.Context, id string) (ControllersResponse, error) {
	var out ControllersResponse
	err := c.do(ctx, http.MethodDelete, "/controllers/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}
