package server_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// countRT counts the assignments requests that go through it; with
// strip, it drops the watch parameter, as a controller from before the
// watch stream ignores it (it answers the request as a long poll).
type countRT struct {
	next  http.RoundTripper
	n     atomic.Int64
	strip bool
}

func (c *countRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/assignments") {
		c.n.Add(1)
		if c.strip {
			r = r.Clone(r.Context())
			q := r.URL.Query()
			q.Del("watch")
			r.URL.RawQuery = q.Encode()
		}
	}
	return c.next.RoundTrip(r)
}

func counted(c *api.Client, strip bool) *countRT {
	rt := &countRT{next: c.HTTPClient().Transport, strip: strip}
	c.HTTPClient().Transport = rt
	return rt
}

// watch follows node's assignments on a watch stream until ctx ends; the
// answers come on the returned channel, the stream's end on the other.
func watch(ctx context.Context, c *api.Client, node string, wait time.Duration) (<-chan api.AssignmentsResponse, <-chan error) {
	frames := make(chan api.AssignmentsResponse, 64)
	done := make(chan error, 1)
	go func() {
		streamed, err := c.WatchAssignments(ctx, node, api.AssignmentsRequest{Wait: wait}, func(r *api.AssignmentsResponse) error {
			frames <- *r
			return nil
		})
		if err == nil && !streamed {
			err = errors.New("answered as a poll")
		}
		done <- err
	}()
	return frames, done
}

func nextFrame(t *testing.T, frames <-chan api.AssignmentsResponse, what string) api.AssignmentsResponse {
	t.Helper()
	select {
	case f := <-frames:
		return f
	case <-time.After(10 * time.Second):
		t.Fatalf("no watch stream answer within 10 s: %s", what)
	}
	return api.AssignmentsResponse{}
}

// TestWatchAssignmentsStream: a node's watch stream answers at once with
// its whole set, then at each change (a placement, a cancel), all on one
// request; it ends when the node goes.
func TestWatchAssignmentsStream(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	rt := counted(c, false)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	frames, done := watch(wctx, c, "n1", 20*time.Second)
	first := nextFrame(t, frames, "the first answer comes at once")
	if len(first.Assignments) != 0 || first.ControllerID == "" {
		t.Fatalf("first answer: %d assignments, controller %q; want none, and the controller's identity", len(first.Assignments), first.ControllerID)
	}
	js := jobSpec("train")
	js.Resources.GPUsPerNode = 2
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	placed := nextFrame(t, frames, "a placement")
	if placed.Generation <= first.Generation || len(placed.Assignments) != 1 || placed.Assignments[0].Job.ID != sub.ID || placed.Assignments[0].Stop {
		t.Fatalf("after the placement: gen %d (was %d), %+v; want a newer generation with job %d to run", placed.Generation, first.Generation, placed.Assignments, sub.ID)
	}
	if _, err := c.JobAction(ctx, sub.ID, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	stopped := nextFrame(t, frames, "a cancel")
	if stopped.Generation <= placed.Generation || len(stopped.Assignments) != 1 || !stopped.Assignments[0].Stop || stopped.Assignments[0].StopState != spec.StateCancelled {
		t.Fatalf("after the cancel: gen %d (was %d), %+v; want the job stopped CANCELLED", stopped.Generation, placed.Generation, stopped.Assignments)
	}
	if n := rt.n.Load(); n != 1 {
		t.Fatalf("%d assignments requests for three answers, want 1 (one stream)", n)
	}
	stop()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch stream went on after the node went")
	}
	// An agent that polls (from before the stream) is answered as before.
	res, err := c.Assignments(ctx, "n1", 0, 0)
	if err != nil || res.Generation != stopped.Generation || len(res.Assignments) != 1 {
		t.Fatalf("poll: gen %d, %d assignments, %v; want gen %d with the stopped job", res.Generation, len(res.Assignments), err, stopped.Generation)
	}
}

// TestWatchQuietStreamAnswersAfterWait: with no change a stream answers
// the unchanged set after wait (the node tells a quiet stream from a dead
// one, and reconciles as on a poll's timeout).
func TestWatchQuietStreamAnswersAfterWait(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	frames, _ := watch(ctx, c, "n1", time.Second)
	first := nextFrame(t, frames, "the first answer")
	again := nextFrame(t, frames, "the unchanged set after wait")
	if again.Generation != first.Generation {
		t.Fatalf("quiet stream's next answer: gen %d, want the same %d", again.Generation, first.Generation)
	}
}

// TestWatchAnsweredAsAPollByAnOlderController: a controller from before
// the watch stream ignores watch=1 and answers a long poll: the client
// hands that one answer over and says it did not stream, so the agent
// polls again.
func TestWatchAnsweredAsAPollByAnOlderController(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	rt := counted(c, true)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	var got []api.AssignmentsResponse
	streamed, err := c.WatchAssignments(ctx, "n1", api.AssignmentsRequest{Wait: 5 * time.Second}, func(r *api.AssignmentsResponse) error {
		got = append(got, *r)
		return nil
	})
	if err != nil || streamed || len(got) != 1 || rt.n.Load() != 1 {
		t.Fatalf("WatchAssignments against a polling controller: streamed %v, %d answers, %d requests, %v; want one poll's answer", streamed, len(got), rt.n.Load(), err)
	}
	poll, err := c.Assignments(ctx, "n1", 0, 0)
	if err != nil || poll.Generation != got[0].Generation {
		t.Fatalf("the poll's answer: gen %d, %v; want the same as the watch's %d", poll.Generation, err, got[0].Generation)
	}
}

// TestWatchEndsWhenItsCredentialIsRevoked: revoking the node's token ends
// its watch stream at once (its connection is closed), while another
// node's stream goes on.
func TestWatchEndsWhenItsCredentialIsRevoked(t *testing.T) {
	const joinToken = "0123456789abcdef0123456789abcdef-join"
	s := joinServer(t, joinToken)
	ctx := ctxT(t)
	n1, _ := joinWithCert(t, s, "n1", joinToken)
	tok := s.token(t, auth.Claims{User: "n3", Role: auth.RoleNode, Node: "n3"}, time.Hour)
	n3 := s.client(t, tok)
	if _, err := n1.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := n3.Register(ctx, inventory("n3", 1)); err != nil {
		t.Fatal(err)
	}
	f1, d1 := watch(ctx, n1, "n1", 30*time.Second)
	f3, d3 := watch(ctx, n3, "n3", 30*time.Second)
	nextFrame(t, f1, "n1's first answer")
	nextFrame(t, f3, "n3's first answer")
	claims, err := s.keys.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	s.srv.SetRevocations(nil, []string{claims.ID})
	select {
	case err := <-d3:
		var ae *api.Error
		if err == nil || errors.As(err, &ae) {
			t.Fatalf("n3's watch stream ended with %v; want its connection closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("n3's watch stream went on after its token was revoked")
	}
	// n1 (not revoked) hears of the new lists on its stream, which goes on.
	select {
	case err := <-d1:
		t.Fatalf("n1's watch stream (not revoked) ended: %v", err)
	case <-time.After(time.Second):
	}
}

// TestWatchEndsWhenItsTokenExpires: a watch stream opened with a node
// token ends when the token expires, not after watchMaxAge (10 min): no
// line goes out on a credential no new request would be taken with, and
// the node's next request with it is refused as expired.
func TestWatchEndsWhenItsTokenExpires(t *testing.T) {
	// Tokens taken for 1 s past their expiry (the clock skew; 2 min by
	// default), so the stream must end 1 s after it.
	keys, err := auth.NewKeys([]byte("0123456789abcdef0123456789abcdef"), "test", auth.WithSkew(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	s := secureServer(t, server.WithTokens(keys))
	ctx := ctxT(t)
	tok, err := keys.Issue(auth.Claims{User: "n1", Role: auth.RoleNode, Node: "n1"}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n1 := s.client(t, tok)
	if _, err := n1.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	// A quiet stream answers again only after its wait (30 s): an end
	// before that is the expiry's.
	frames, done := watch(ctx, n1, "n1", 30*time.Second)
	nextFrame(t, frames, "n1's first answer")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("n1's watch stream ended with %v; want its end at the token's expiry", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("n1's watch stream went on 20 s after its 3-s token (1-s skew) was issued")
	}
	_, err = n1.Assignments(ctx, "n1", 0, 0)
	wantStatus(t, "a poll with the expired token", err, 401, spec.ErrPermissionDenied, "expired")
}

// TestWatchEndsWhenLeadershipEnds: a watch stream on an HA group's leader
// ends when the member stops leading (no answer of a follower goes out on
// it), and the node's next request is answered not_leader, as a poll is.
func TestWatchEndsWhenLeadershipEnds(t *testing.T) {
	h := &electedHA{elected: true}
	h.inCharge.Store(time.Now().UnixNano())
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithHA(h)}})
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	frames, done := watch(ctx, c, "n1", time.Second)
	nextFrame(t, frames, "the leader's first answer")
	h.inCharge.Store(0) // no longer leading
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the stream ended with %v; want the controller's end (nil)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch stream went on after the member stopped leading")
	}
	for len(frames) > 0 {
		// Answers written before the change are fine; none comes after.
		<-frames
	}
	_, err := c.WatchAssignments(ctx, "n1", api.AssignmentsRequest{Wait: time.Second}, func(*api.AssignmentsResponse) error {
		t.Error("a follower answered the watch")
		return nil
	})
	if !errors.Is(err, spec.ErrNotLeader) {
		t.Fatalf("watch at a follower: %v; want not_leader", err)
	}
}

// TestWatchSlowReaderHoldsOnlyItsStream: a node that stops reading its
// watch stream holds back its own stream's next answer, never the
// controller: 200 changes of its jobs are made at the usual pace while it
// reads nothing, and once it reads again its stream catches up to the
// newest set with the changes in between coalesced (no queue of
// answers kept for it).
func TestWatchSlowReaderHoldsOnlyItsStream(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 8)); err != nil {
		t.Fatal(err)
	}
	var ids []spec.JobID
	for range 8 {
		js := jobSpec("big")
		js.Resources.GPUsPerNode = 1
		js.Comment = strings.Repeat("x", 4000) // each answer ~50 KB: the buffers fill
		sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.ID)
	}
	waitAssignment(t, c, "n1", func(a api.Assignment) bool { return a.Job.ID == ids[7] })
	release := make(chan struct{})
	var got atomic.Int64
	var last atomic.Int64 // the newest answer's signal seq of ids[0]
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := c.WatchAssignments(wctx, "n1", api.AssignmentsRequest{Wait: 30 * time.Second}, func(r *api.AssignmentsResponse) error {
			if got.Add(1) == 2 {
				<-release // stops reading after the first change
			}
			for _, a := range r.Assignments {
				if a.Job.ID == ids[0] {
					last.Store(int64(a.SignalSeq))
				}
			}
			return nil
		})
		done <- err
	}()
	const changes = 200
	began := time.Now()
	for i := range changes {
		start := time.Now()
		if _, err := c.JobAction(ctx, ids[i%len(ids)], "cancel", api.JobActionRequest{Signal: "USR1"}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("change %d took %s while a node did not read its watch stream", i, d)
		}
	}
	t.Logf("%d changes in %s while the node read nothing", changes, time.Since(began).Round(time.Millisecond))
	close(release)
	want := int64(changes / len(ids))
	for deadline := time.Now().Add(20 * time.Second); last.Load() != want; {
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not catch up: job %d's signal seq %d in its newest answer, want %d", ids[0], last.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := got.Load(); n >= changes {
		t.Fatalf("%d answers for %d changes made while the node read nothing; want the ones in between coalesced", n, changes)
	}
	t.Logf("%d answers for %d changes", got.Load(), changes)
	stop()
	<-done
}
