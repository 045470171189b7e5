package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/runtime"
	"github.com/gpud/gpud/runtime/fake"
)

// withStartedHold sets the send loop's bound on holding started events
// (sendhold.go); negative: no hold.
func withStartedHold(d time.Duration) Option { return func(o *options) { o.startedHold = d } }

// gatedRuntime is the fake runtime whose Start of a gated container waits
// until the test opens its gate (or the start's ctx ends): a runner held
// in its container's start, as containerd's slower starts hold one.
type gatedRuntime struct {
	*fake.Runtime
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func newGatedRuntime(rt *fake.Runtime, ids ...string) *gatedRuntime {
	g := &gatedRuntime{Runtime: rt, gates: map[string]chan struct{}{}}
	for _, id := range ids {
		g.gates[id] = make(chan struct{})
	}
	return g
}

func (g *gatedRuntime) Start(ctx context.Context, cfg runtime.TaskConfig) error {
	g.mu.Lock()
	gate := g.gates[cfg.ID]
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Runtime.Start(ctx, cfg)
}

func (g *gatedRuntime) open(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gate := g.gates[id]; gate != nil {
		close(gate)
		delete(g.gates, id)
	}
}

// postOf returns the index of the post that carried alloc's event of
// kind, or -1.
func postOf(posts [][]api.AllocEvent, alloc, kind string) int {
	for i, p := range posts {
		for _, ev := range p {
			if ev.AllocID == alloc && ev.Kind == kind {
				return i
			}
		}
	}
	return -1
}

// checkSeqOrder fails the test unless the posts carry events in seq order
// (each post ascending, each post after the one before).
func checkSeqOrder(t *testing.T, posts [][]api.AllocEvent) {
	t.Helper()
	var last uint64
	for i, p := range posts {
		for _, ev := range p {
			if ev.Seq <= last {
				t.Errorf("post %d carries seq %d after seq %d: out of order (posts %s)", i, ev.Seq, last, describePosts(posts))
			}
			last = ev.Seq
		}
	}
}

func describePosts(posts [][]api.AllocEvent) string {
	s := ""
	for i, p := range posts {
		s += fmt.Sprintf("[%d:", i)
		for _, ev := range p {
			s += fmt.Sprintf(" %d %s %s", ev.Seq, ev.AllocID, ev.Kind)
		}
		s += "]"
	}
	return s
}

// The started events of the jobs one assignments answer placed on the
// node go to the controller in one events post: the first runner's
// started event waits for the others' (sendhold.go). Without the hold
// the first one went alone, as soon as it was recorded, and the rest in
// a second post.
func TestStartedEventsOfOneAnswerGoInOnePost(t *testing.T) {
	var rt *gatedRuntime
	e := newEnv(t, func(e *env) {
		rt = newGatedRuntime(e.rt, "gpud-8-1-node-1", "gpud-9-1-node-1")
		e.rtOverride = rt
		e.opts = append(e.opts, withStartedHold(time.Minute)) // no bound within the test
	})
	e.fc.Set(asg(7, e.home), asg(8, e.home), asg(9, e.home))
	e.waitStarted(t, cid)
	// Job 7 is running and its started event recorded; 8 and 9 are held
	// in their containers' start. The send loop must hold 7's event, not
	// post it.
	waitHeldOrPosted(t, e, "a7")
	if posts := e.fc.Posts(); postOf(posts, "a7", api.EventStarted) >= 0 {
		t.Fatalf("job 7's started event was posted while jobs 8 and 9 of the same answer were still starting: posts %s", describePosts(posts))
	}
	rt.open("gpud-8-1-node-1")
	rt.open("gpud-9-1-node-1")
	waitRecorded(t, e, "a8", api.EventStarted)
	waitRecorded(t, e, "a9", api.EventStarted)
	// The hold's bound is a minute: job 7's exit sends the batch.
	e.rt.Exit(cid, runtime.ExitStatus{Code: 0})
	e.waitExited(t, "a7")
	posts := e.fc.Posts()
	p7, p8, p9 := postOf(posts, "a7", api.EventStarted), postOf(posts, "a8", api.EventStarted), postOf(posts, "a9", api.EventStarted)
	if p7 < 0 || p7 != p8 || p8 != p9 {
		t.Errorf("started events of jobs 7, 8, 9 went in posts %d, %d, %d; want one post (posts %s)", p7, p8, p9, describePosts(posts))
	}
	checkSeqOrder(t, posts)
}

// waitRecorded waits until the outbox holds alloc's event of kind,
// not yet delivered.
func waitRecorded(t *testing.T, e *env, alloc, kind string) {
	t.Helper()
	waitFor(t, alloc+"'s "+kind+" event recorded", func() bool {
		evs, err := e.agent.ob.pending(context.Background(), 100)
		if err != nil {
			t.Fatalf("read outbox: %v", err)
		}
		for _, ev := range evs {
			if ev.AllocID == alloc && ev.Kind == kind {
				return true
			}
		}
		return false
	}, e.on()...)
}

// An exited event is never held: it ends a hold at once and goes with
// the started events recorded before it, in seq order, while another
// runner of the answer is still starting.
func TestExitedEventEndsTheHold(t *testing.T) {
	var rt *gatedRuntime
	e := newEnv(t, func(e *env) {
		rt = newGatedRuntime(e.rt, "gpud-8-1-node-1")
		e.rtOverride = rt
		e.opts = append(e.opts, withStartedHold(time.Minute))
	})
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, cid)
	waitHeldOrPosted(t, e, "a7")
	// Job 7 ends while 8 is still starting: its exit must not wait for 8.
	e.rt.Exit(cid, runtime.ExitStatus{Code: 0})
	e.waitExited(t, "a7")
	posts := e.fc.Posts()
	if ps, pe := postOf(posts, "a7", api.EventStarted), postOf(posts, "a7", api.EventExited); ps < 0 || ps > pe {
		t.Errorf("job 7's started event in post %d, its exit in post %d; want the start no later (posts %s)", ps, pe, describePosts(posts))
	}
	if postOf(posts, "a8", api.EventStarted) >= 0 {
		t.Errorf("job 8's started event delivered before its container started (posts %s)", describePosts(posts))
	}
	rt.open("gpud-8-1-node-1")
	e.waitStarted(t, "gpud-8-1-node-1")
	e.rt.Exit("gpud-8-1-node-1", runtime.ExitStatus{Code: 0})
	e.waitExited(t, "a8")
	posts = e.fc.Posts()
	if ps, pe := postOf(posts, "a8", api.EventStarted), postOf(posts, "a8", api.EventExited); ps < 0 || ps > pe {
		t.Errorf("job 8's started event in post %d, its exit in post %d; want the start no later (posts %s)", ps, pe, describePosts(posts))
	}
	checkSeqOrder(t, posts)
}

// The hold is bounded: started events wait for company no longer than
// the bound, here while another runner is still in its container's start.
func TestStartedHoldIsBounded(t *testing.T) {
	var rt *gatedRuntime
	e := newEnv(t, func(e *env) {
		rt = newGatedRuntime(e.rt, "gpud-8-1-node-1")
		e.rtOverride = rt
		e.opts = append(e.opts, withStartedHold(20*time.Millisecond))
	})
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, cid)
	began := time.Now()
	waitFor(t, "job 7's started event delivered while job 8 is still starting", func() bool {
		return postOf(e.fc.Posts(), "a7", api.EventStarted) >= 0
	}, e.on()...)
	if e.agent.hold.holds.Load() == 0 {
		t.Errorf("job 7's started event was not held while job 8 started")
	}
	if postOf(e.fc.Posts(), "a8", api.EventStarted) >= 0 {
		t.Errorf("job 8's started event delivered before its container started")
	}
	t.Logf("delivered %v after job 7's container started", time.Since(began))
	rt.open("gpud-8-1-node-1")
	e.waitStarted(t, "gpud-8-1-node-1")
}

// A runner that ends without starting (its container's start fails)
// ends the hold it was part of: its exit goes at once, and the started
// events before it with it.
func TestFailedStartEndsTheHold(t *testing.T) {
	var rt *gatedRuntime
	e := newEnv(t, func(e *env) {
		rt = newGatedRuntime(e.rt, "gpud-8-1-node-1")
		e.rtOverride = rt
		e.rt.SetScript("gpud-8-1-node-1", fake.Script{StartErr: errors.New("no such image")})
		e.opts = append(e.opts, withStartedHold(time.Minute))
	})
	e.fc.Set(asg(7, e.home), asg(8, e.home))
	e.waitStarted(t, cid)
	waitHeldOrPosted(t, e, "a7")
	rt.open("gpud-8-1-node-1")
	e.waitExited(t, "a8")
	posts := e.fc.Posts()
	if ps, pe := postOf(posts, "a7", api.EventStarted), postOf(posts, "a8", api.EventExited); ps < 0 || ps != pe {
		t.Errorf("job 7's started event in post %d, job 8's failed start in post %d; want both in one (posts %s)", ps, pe, describePosts(posts))
	}
	checkSeqOrder(t, posts)
}

// waitHeldOrPosted waits until alloc's started event is held by the send
// loop or already posted: the agent has taken it, whichever way it went.
func waitHeldOrPosted(t *testing.T, e *env, alloc string) {
	t.Helper()
	waitFor(t, alloc+"'s started event held or posted", func() bool {
		return e.agent.hold.holds.Load() > 0 || postOf(e.fc.Posts(), alloc, api.EventStarted) >= 0
	}, e.on()...)
}
