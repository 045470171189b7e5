package node

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// follower plays a controller that is not the Raft leader: it answers
// every node-protocol call with 421 not_leader naming the leader.
type follower struct {
	addr string
	srv  *httptest.Server

	mu    sync.Mutex
	calls int
}

func newFollower(t *testing.T, leader string) *follower {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "f.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{addr: "unix://" + sock}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls++
		f.mu.Unlock()
		w.Header().Set(api.HeaderLeader, leader)
		writeJSON(w, http.StatusMisdirectedRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeNotLeader, Message: "not the leader"}})
	}))
	f.srv.Listener = l
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *follower) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// An agent pointed at [follower, leader] registers, polls its
// assignments and delivers its events through the leader, and its outbox
// keeps what the leader has not acknowledged until it has: nothing lost,
// nothing doubled, in order.
func TestAgentFollowsLeader(t *testing.T) {
	var f *follower
	e := newEnv(t, func(e *env) {
		leader := "unix://" + e.fc.srv.Listener.Addr().String()
		f = newFollower(t, leader)
		cl, err := api.NewClientWith(f.addr+","+leader, api.ClientOptions{FailoverTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e.fc.Client = cl
	})
	waitFor(t, "registered with the leader", func() bool { return len(e.fc.Registered()) == 1 }, e.on()...)
	e.fc.Set(asg(7, e.home))
	e.waitStarted(t, cid)
	waitFor(t, "started event at the leader", func() bool { return len(e.eventsOf("a7")) == 1 }, e.on()...)
	if f.Calls() == 0 {
		t.Fatal("the follower, first in the list, was never asked; the test proves nothing")
	}

	// The leader stops acknowledging (an election under way): the exit
	// waits in the outbox and arrives once the leader takes it.
	e.fc.Fail(epEvents, true)
	e.rt.Exit(cid, runtime.ExitStatus{Code: 3})
	waitFor(t, "failed deliveries", func() bool { return e.fc.Calls(epEvents) >= 3 }, e.on()...)
	e.fc.Fail(epEvents, false)
	waitFor(t, "exit delivered", func() bool { return len(e.eventsOf("a7")) == 2 }, e.on()...)
	if diff := cmp.Diff([]api.AllocEvent{started("a7", 7), exited("a7", 7, spec.StateFailed, 3, 0, "NonZeroExitCode")}, e.eventsOf("a7")); diff != "" {
		t.Errorf("a7 events (-want +got):\n%s", diff)
	}
	for i, ev := range e.fc.Events() {
		if ev.Seq != uint64(i+1) {
			t.Errorf("event %d has seq %d, want %d (in order, none lost or doubled)", i, ev.Seq, i+1)
		}
	}
}
