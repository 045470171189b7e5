package api_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// ctl is a controller of a test group: an httptest server whose answers
// the test sets (leader, follower naming a leader, electing, down) and
// which records what it was sent.
type ctl struct {
	t   *testing.T
	srv *httptest.Server
	URL string

	mu     sync.Mutex
	role   string // "leader", "follower", "unavailable"
	leader string // the Gpud-Leader a follower names
	reqs   []string
	auth   []string // Authorization headers received
	// hang, when set, is called by the leader before it answers (a long
	// poll, a crash mid-call).
	hang func(w http.ResponseWriter, r *http.Request) bool
}

func newCtl(t *testing.T, role string, tlsOn bool) *ctl {
	t.Helper()
	c := &ctl{t: t, role: role}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(c.serve))
	if tlsOn {
		c.srv.StartTLS()
	} else {
		c.srv.Start()
	}
	c.URL = c.srv.URL
	t.Cleanup(c.srv.Close)
	return c
}

func (c *ctl) set(role, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.role, c.leader = role, leader
}

func (c *ctl) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
	c.auth = append(c.auth, r.Header.Get("Authorization"))
	role, leader, hang := c.role, c.leader, c.hang
	c.mu.Unlock()
	switch role {
	case "follower":
		if r.Method == http.MethodGet && !strings.Contains(r.URL.Path, "/assignments") {
			// Reads come from the replica.
			w.Header().Set(api.HeaderStale, "true")
			w.Header().Set(api.HeaderLeader, leader)
			writeJSON(w, http.StatusOK, api.NodesResponse{Nodes: []spec.Node{{Inventory: spec.Inventory{Name: "from-" + c.URL}}}})
			return
		}
		w.Header().Set(api.HeaderLeader, leader)
		writeJSON(w, http.StatusMisdirectedRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeNotLeader, Message: "controller " + c.URL + " is not the leader"}})
	case "unavailable":
		writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeUnavailable, Message: "keeps no accounting"}})
	default:
		if hang != nil && !hang(w, r) {
			return
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
			writeJSON(w, http.StatusOK, api.SubmitResponse{ID: 42, IDs: []spec.JobID{42}})
		case strings.HasSuffix(r.URL.Path, "/assignments"):
			writeJSON(w, http.StatusOK, api.AssignmentsResponse{Generation: 7})
		default:
			writeJSON(w, http.StatusOK, api.NodesResponse{Nodes: []spec.Node{{Inventory: spec.Inventory{Name: "from-" + c.URL}}}})
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// requests returns what c was sent, and the Authorization headers.
func (c *ctl) requests() (reqs, auth []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reqs...), append([]string(nil), c.auth...)
}

func (c *ctl) count() int {
	r, _ := c.requests()
	return len(r)
}

// downAddr is an address nothing listens on.
func downAddr(t *testing.T, scheme string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return scheme + "://" + a
}

// caFile writes the httptest servers' certificate (one for all of them,
// as the members of a group share the cluster CA) as a CA file.
func caFile(t *testing.T, c *ctl) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.srv.Certificate().Raw})
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func list(addrs ...string) string { return strings.Join(addrs, ",") }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func submit(t *testing.T, cl *api.Client) error {
	t.Helper()
	_, err := cl.Submit(ctxT(t), api.SubmitRequest{Job: spec.JobSpec{Name: "j"}})
	return err
}

// A client over [follower, leader] sends a write to the follower, follows
// its not_leader answer to the leader, and from then on goes straight to
// the leader it remembers; the token goes to both (both are configured),
// over https with the group's CA.
func TestFailoverFollowsLeader(t *testing.T) {
	leader := newCtl(t, "leader", true)
	follower := newCtl(t, "follower", true)
	follower.set("follower", leader.URL)
	cl, err := api.NewClientWith(list(follower.URL, leader.URL), api.ClientOptions{CAFile: caFile(t, leader), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := submit(t, cl); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	freqs, fauth := follower.requests()
	lreqs, lauth := leader.requests()
	if len(freqs) != 1 || len(lreqs) != 3 {
		t.Errorf("follower got %q, leader %q; want the first submission redirected, the rest sent to the leader", freqs, lreqs)
	}
	for _, a := range append(fauth, lauth...) {
		if a != "Bearer tok" {
			t.Errorf("Authorization %q; want the token on every configured https member", a)
		}
	}
	// A node's long poll follows the leader too.
	follower.set("follower", leader.URL)
	cl2, err := api.NewClientWith(list(follower.URL, leader.URL), api.ClientOptions{CAFile: caFile(t, leader), Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl2.Assignments(ctxT(t), "n1", 0, time.Second)
	if err != nil || res.Generation != 7 {
		t.Fatalf("assignments: %+v %v; want generation 7 from the leader", res, err)
	}
}

// A not_leader answer that names an address the user did not configure is
// not followed: the request (and the token) never reaches it; the client
// tries the next configured address instead, and a single address reports
// the answer.
func TestFailoverIgnoresUnconfiguredLeader(t *testing.T) {
	stranger := newCtl(t, "leader", true)
	leader := newCtl(t, "leader", true)
	follower := newCtl(t, "follower", true)
	follower.set("follower", stranger.URL)
	ca := caFile(t, leader)
	cl, err := api.NewClientWith(list(follower.URL, leader.URL), api.ClientOptions{CAFile: ca, Token: "tok", FailoverTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(t, cl); err != nil {
		t.Fatalf("submit: %v", err)
	}
	if n := stranger.count(); n != 0 {
		t.Errorf("the unconfigured address named by the follower got %d requests; want none", n)
	}
	if n := leader.count(); n != 1 {
		t.Errorf("the next configured address got %d requests; want 1", n)
	}

	one, err := api.NewClientWith(follower.URL, api.ClientOptions{CAFile: ca, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	err = submit(t, one)
	if !errors.Is(err, spec.ErrNotLeader) || !strings.Contains(err.Error(), stranger.URL) || !strings.Contains(err.Error(), api.EnvController) {
		t.Errorf("single address at a follower: %v; want not_leader naming the leader and %s", err, api.EnvController)
	}
	if n := stranger.count(); n != 0 {
		t.Errorf("stranger got %d requests; want none", n)
	}

	// Every member names the unlisted leader: reported at once, saying
	// to add it, not retried for the failover time.
	leader.set("follower", stranger.URL)
	cl, err = api.NewClientWith(list(follower.URL, leader.URL), api.ClientOptions{CAFile: ca, Token: "tok", FailoverTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = submit(t, cl)
	if !errors.Is(err, spec.ErrNotLeader) || !strings.Contains(err.Error(), "not in the controller list") {
		t.Errorf("leader outside the list: %v; want not_leader saying to add it", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s; want it reported after one round", d)
	}
	if n := stranger.count(); n != 0 {
		t.Errorf("stranger got %d requests; want none", n)
	}
}

// A controller that is down is skipped for reads and for writes (the dial
// failed: nothing was sent), and the client remembers the one that answered.
func TestFailoverSkipsDownController(t *testing.T) {
	leader := newCtl(t, "leader", false)
	down := downAddr(t, "http")
	cl, err := api.NewClient(list(down, leader.URL))
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(t, cl); err != nil {
		t.Fatalf("submit with the first controller down: %v", err)
	}
	if _, err := cl.Nodes(ctxT(t)); err != nil {
		t.Fatalf("nodes with the first controller down: %v", err)
	}
	if n := leader.count(); n != 2 {
		t.Errorf("leader got %d requests; want 2", n)
	}

	// Every controller down: reported after the failover time, not hung.
	cl, err = api.NewClientWith(list(downAddr(t, "http"), downAddr(t, "http")), api.ClientOptions{FailoverTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = cl.Nodes(ctxT(t))
	if !errors.Is(err, spec.ErrUnavailable) || !strings.Contains(err.Error(), "no controller of") {
		t.Errorf("all down: %v; want unavailable saying no controller answered", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("all down took %s to report; want about the failover time", d)
	}
}

// During an election every member answers not_leader with no leader; the
// client backs off and retries until one becomes leader, within the
// failover time, or reports not_leader when none does.
func TestFailoverRidesOutElection(t *testing.T) {
	a := newCtl(t, "follower", false)
	b := newCtl(t, "follower", false)
	cl, err := api.NewClientWith(list(a.URL, b.URL), api.ClientOptions{FailoverTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// b wins the election after a few rounds.
		for b.count() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		b.set("leader", "")
	}()
	if err := submit(t, cl); err != nil {
		t.Fatalf("submit during an election: %v", err)
	}
	if a.count() < 2 || b.count() < 4 {
		t.Errorf("a got %d, b %d requests; want retries at both until b led", a.count(), b.count())
	}

	b.set("follower", "")
	cl, err = api.NewClientWith(list(a.URL, b.URL), api.ClientOptions{FailoverTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = submit(t, cl)
	if !errors.Is(err, spec.ErrNotLeader) || !strings.Contains(err.Error(), "no controller of") {
		t.Errorf("no leader: %v; want not_leader saying no controller took the call", err)
	}
}

// A write that reached a controller which then failed without answering
// may have been applied: it is not sent to the next controller, and the
// error says so. A read in the same situation is retried.
func TestFailoverDoesNotResendWrites(t *testing.T) {
	crash := func(w http.ResponseWriter, r *http.Request) bool {
		// Read the request, then drop the connection unanswered.
		hj, ok := w.(http.Hijacker)
		if !ok {
			return true
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
		return false
	}
	dying := newCtl(t, "leader", false)
	dying.hang = crash
	next := newCtl(t, "leader", false)
	cl, err := api.NewClient(list(dying.URL, next.URL))
	if err != nil {
		t.Fatal(err)
	}
	err = submit(t, cl)
	if err == nil || !strings.Contains(err.Error(), "may have carried out this POST /v1/jobs") {
		t.Errorf("submission to a controller that died answering: %v; want an error saying it may have been applied", err)
	}
	if n := next.count(); n != 0 {
		t.Errorf("the submission was sent again to the next controller (%d requests); want it reported, not resent", n)
	}
	nodes, err := cl.Nodes(ctxT(t))
	if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+next.URL {
		t.Errorf("read after the same failure: %v %v; want it answered by the next controller", nodes, err)
	}
}

// A submission carrying an Idempotency-Key is sent again, with the same
// key, after the connection broke before the answer (the controller may
// have made the job: it answers the resend with that job) and after a 503
// (a commit the group lost may still have been committed).
func TestFailoverResendsKeyedSubmissions(t *testing.T) {
	var keys []string
	var mu sync.Mutex
	crash := func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		keys = append(keys, r.Header.Get(api.HeaderIdempotencyKey))
		mu.Unlock()
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
			}
		}
		return false
	}
	record := func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		keys = append(keys, r.Header.Get(api.HeaderIdempotencyKey))
		mu.Unlock()
		return true
	}
	dying := newCtl(t, "leader", false)
	dying.hang = crash
	next := newCtl(t, "leader", false)
	next.hang = record
	cl, err := api.NewClient(list(dying.URL, next.URL))
	if err != nil {
		t.Fatal(err)
	}
	key := api.NewIdempotencyKey()
	r, err := cl.Submit(ctxT(t), api.SubmitRequest{Job: spec.JobSpec{Name: "j"}, IdempotencyKey: key})
	if err != nil || r.ID != 42 {
		t.Fatalf("keyed submission to a controller that died answering: %+v %v; want it resent and answered", r, err)
	}
	mu.Lock()
	if len(keys) != 2 || keys[0] != key || keys[1] != key {
		t.Errorf("keys sent: %q; want %q twice (the first send, then the resend)", keys, key)
	}
	mu.Unlock()

	// A 503 (the commit may have happened) is retried too.
	busy := newCtl(t, "unavailable", false)
	next2 := newCtl(t, "leader", false)
	cl, err = api.NewClient(list(busy.URL, next2.URL))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cl.Submit(ctxT(t), api.SubmitRequest{Job: spec.JobSpec{Name: "j"}, IdempotencyKey: key}); err != nil || r.ID != 42 {
		t.Errorf("keyed submission answered 503: %+v %v; want it resent to the next controller", r, err)
	}
	// Without a key the 503 is the answer.
	if cl, err = api.NewClient(list(busy.URL, next2.URL)); err != nil {
		t.Fatal(err)
	}
	if err := submit(t, cl); err == nil || next2.count() != 1 {
		t.Errorf("a submission without a key after a 503 was resent")
	}
}

// A read answered from the replica of a member that knows no leader (one
// cut off from the others: its replica stopped at the cut) is asked of
// the next address, and the leader's answer is taken; when every member
// answers stale, the first answer stands.
func TestFailoverStaleWithoutLeaderAsksOthers(t *testing.T) {
	cutoff := newCtl(t, "follower", false) // Gpud-Leader: ""
	leader := newCtl(t, "leader", false)
	cl, err := api.NewClient(list(cutoff.URL, leader.URL))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cl.Nodes(ctxT(t))
	if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+leader.URL {
		t.Errorf("read with the first member cut off: %v %v; want the leader's answer", nodes, err)
	}
	other := newCtl(t, "follower", false)
	cl, err = api.NewClient(list(cutoff.URL, other.URL))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err = cl.Nodes(ctxT(t))
	if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+cutoff.URL {
		t.Errorf("read with no leader anywhere: %v %v; want the first follower's answer", nodes, err)
	}
}

// A long poll cut by the leader's death is taken up by the next one.
func TestFailoverLongPollFollowsNewLeader(t *testing.T) {
	var polls atomic.Int32
	old := newCtl(t, "leader", false)
	old.hang = func(w http.ResponseWriter, r *http.Request) bool {
		polls.Add(1)
		hj, _ := w.(http.Hijacker)
		conn, _, err := hj.Hijack()
		if err == nil {
			time.Sleep(50 * time.Millisecond) // mid-poll
			conn.Close()
		}
		return false
	}
	next := newCtl(t, "follower", false)
	cl, err := api.NewClient(list(old.URL, next.URL))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for polls.Load() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		next.set("leader", "")
	}()
	res, err := cl.Assignments(ctxT(t), "n1", 3, 30*time.Second)
	if err != nil || res.Generation != 7 {
		t.Fatalf("assignments across a failover: %+v %v", res, err)
	}
}

// 503 to a read is tried at the others; to a write it is the answer (the
// call may be in flight on the leader); from every member it is reported
// at once rather than retried for the failover time.
func TestFailoverUnavailable(t *testing.T) {
	busy := newCtl(t, "unavailable", false)
	ok := newCtl(t, "leader", false)
	cl, err := api.NewClient(list(busy.URL, ok.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Nodes(ctxT(t)); err != nil {
		t.Errorf("read with a 503 member first: %v", err)
	}
	cl, _ = api.NewClient(list(busy.URL, ok.URL))
	if err := submit(t, cl); !errors.Is(err, spec.ErrUnavailable) {
		t.Errorf("write answered 503: %v; want it reported", err)
	}
	if n := ok.count(); n != 1 {
		t.Errorf("the other member got %d requests; want only the read", n)
	}
	busy2 := newCtl(t, "unavailable", false)
	cl, _ = api.NewClient(list(busy.URL, busy2.URL))
	start := time.Now()
	if _, err := cl.Nodes(ctxT(t)); !errors.Is(err, spec.ErrUnavailable) || !strings.Contains(err.Error(), "keeps no accounting") {
		t.Errorf("every member 503: %v; want the controllers' answer", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("every member 503 took %s; want it reported at once", d)
	}
}

// Lists: one address is the client of today (no retries, unix:// works);
// a repeated address and a bad one are usage errors.
func TestControllerLists(t *testing.T) {
	if got := api.SplitControllers(" https://c1:6817, ,https://c2:6817,"); strings.Join(got, "|") != "https://c1:6817|https://c2:6817" {
		t.Errorf("SplitControllers = %q", got)
	}
	for _, bad := range []string{
		"https://c1:6817,https://C1:6817",
		"https://c1,https://c1:443",
		"unix:///run/gpud/gpud.sock,unix:///run/gpud/../gpud/gpud.sock",
		"https://c1:6817,ftp://c2",
		",",
	} {
		if _, err := api.NewClient(bad); !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("NewClient(%q) = %v; want invalid", bad, err)
		}
	}
	// One address: no failover, an error at once.
	follower := newCtl(t, "follower", false)
	leader := newCtl(t, "leader", false)
	follower.set("follower", leader.URL)
	cl, err := api.NewClient(follower.URL + ",")
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(t, cl); !errors.Is(err, spec.ErrNotLeader) {
		t.Errorf("single address at a follower: %v; want not_leader", err)
	}
	if n := leader.count(); n != 0 {
		t.Errorf("a single-address client followed the leader (%d requests); want the answer reported", n)
	}
	// unix:// in a list, with the token kept off it and off plain http.
	dir, err := os.MkdirTemp("", "gpa")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "c.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	local := &ctl{t: t, role: "leader", URL: "unix://" + sock}
	local.srv = httptest.NewUnstartedServer(http.HandlerFunc(local.serve))
	local.srv.Listener.Close()
	local.srv.Listener = ln
	local.srv.Start()
	t.Cleanup(local.srv.Close)
	follower.set("follower", "unix://"+sock)
	cl, err = api.NewClientWith(list(follower.URL, "unix://"+sock), api.ClientOptions{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if err := submit(t, cl); err != nil {
		t.Fatalf("submit over [http follower, unix leader]: %v", err)
	}
	_, fa := follower.requests()
	_, la := local.requests()
	for _, a := range append(fa, la...) {
		if a != "" {
			t.Errorf("Authorization %q sent over plain http or a unix socket; want none", a)
		}
	}
}

// A read a follower answers from its replica is asked again of the leader,
// so a client reads its own writes; with the leader down the follower's
// (possibly stale) answer stands.
func TestFailoverReadsFromLeader(t *testing.T) {
	leader := newCtl(t, "leader", false)
	follower := newCtl(t, "follower", false)
	follower.set("follower", leader.URL)
	cl, err := api.NewClient(list(follower.URL, leader.URL))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		nodes, err := cl.Nodes(ctxT(t))
		if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+leader.URL {
			t.Fatalf("read: %v %v; want the leader's answer", nodes, err)
		}
	}
	if f, l := follower.count(), leader.count(); f != 1 || l != 2 {
		t.Errorf("follower got %d reads, leader %d; want 1 and 2 (the leader remembered)", f, l)
	}

	leader.srv.Close()
	cl, err = api.NewClient(list(follower.URL, leader.URL))
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cl.Nodes(ctxT(t))
	if err != nil || len(nodes) != 1 || nodes[0].Name != "from-"+follower.URL {
		t.Fatalf("read with the leader down: %v %v; want the follower's answer", nodes, err)
	}
}

// BenchmarkSubmit measures a submission's round trip over loopback through
// a single-address client and through a group client whose remembered
// member is the leader: the failover transport's cost per call (a request
// clone and a body rewind).
func BenchmarkSubmit(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.SubmitResponse{ID: 42, IDs: []spec.JobID{42}})
	}))
	defer srv.Close()
	down := downAddrB(b)
	for _, tc := range []struct{ name, addr string }{
		{"single", srv.URL},
		{"group", list(down, srv.URL, downAddrB(b))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cl, err := api.NewClient(tc.addr)
			if err != nil {
				b.Fatal(err)
			}
			req := api.SubmitRequest{Job: spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n"}}
			ctx := context.Background()
			if _, err := cl.Submit(ctx, req); err != nil { // finds the leader
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := cl.Submit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func downAddrB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return "http://" + a
}
