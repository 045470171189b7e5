package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime"
)

// SetIdentity makes the answers say controller identity id ("": none).
func (fc *fakeController) SetIdentity(id string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.ctl = id
	fc.changedLocked()
}

// Said is the identity the events call that delivered seq said.
func (fc *fakeController) Said(seq uint64) string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.said[seq]
}

// delivered returns alloc's delivered events, Seq kept.
func (e *env) delivered(alloc string) []api.AllocEvent {
	var out []api.AllocEvent
	for _, ev := range e.fc.Events() {
		if ev.AllocID == alloc {
			out = append(out, ev)
		}
	}
	return out
}

// TestControllerIdentity: the agent with a controller that says no
// identity (an older gpud) sends none; a first identity is adopted without
// a reset (the job keeps running, before and after an agent restart) and
// said with the events; a change of identity (the controller's state
// replaced) drops the undelivered events of the old one and lets the new
// state's job of the same allocation ID run, even with the same submit
// time (which the fingerprint alone could not tell apart); a controller
// that says none again (downgraded) gets events saying none.
func TestControllerIdentity(t *testing.T) {
	e := newEnv(t, nil)
	a := asg(7, e.home)
	a.Job.SubmitTime = spec.NewTime(t0)
	e.fc.Set(a)
	e.waitStarted(t, cid)
	waitFor(t, "a7's start delivered", func() bool { return len(e.delivered("a7")) == 1 }, e.on()...)
	if said := e.fc.Said(e.delivered("a7")[0].Seq); said != "" {
		t.Fatalf("events to a controller that says no identity said %q; an older controller refuses the field", said)
	}

	x, y := strings.Repeat("1", 32), strings.Repeat("2", 32)
	e.fc.SetIdentity(x)
	e.setAndWait(t, a)
	e.stop()
	e.start(t)
	e.setAndWait(t, a)
	if st, ok := e.rt.Status(cid); !ok || st != runtime.StatusRunning || len(e.rt.Starts()) != 1 {
		t.Fatalf("after a first identity and an agent restart: container %v %v, %d starts; want the job still running, started once", st, ok, len(e.rt.Starts()))
	}
	if id := e.agent.ob.controllerID(); id != x {
		t.Fatalf("the outbox keeps identity %q, want %q", id, x)
	}

	// The job ends while the controller cannot be reached: its exit is
	// recorded for x, undelivered.
	e.fc.Fail(epEvents, true)
	e.rt.Exit(cid, runtime.ExitStatus{Code: 3})
	waitFor(t, "a7's container deleted", func() bool { _, ok := e.rt.Status(cid); return !ok }, e.on()...)
	evs, err := e.agent.ob.pending(context.Background(), 10)
	if err != nil || len(evs) != 1 || evs[0].Kind != api.EventExited {
		t.Fatalf("pending events %+v, %v; want the exit", evs, err)
	}

	// The controller's state is replaced: job 7 is another job, with the
	// same allocation ID and (here) the same submit time.
	// The events call is back only once the agent heard the new identity:
	// the controller refuses events that say another (gpud/server), which
	// this fake does not; here the agent itself must not deliver them.
	e.fc.SetIdentity(y)
	e.fc.Set(a)
	waitFor(t, "the agent serves "+y, func() bool { return e.agent.ob.controllerID() == y }, e.on()...)
	e.fc.Fail(epEvents, false)
	waitFor(t, "the new state's job 7 started", func() bool { return len(e.rt.Starts()) == 2 }, e.on()...)
	e.waitStarted(t, cid)
	waitFor(t, "the new job's start delivered", func() bool { return len(e.delivered("a7")) == 2 }, e.on()...)
	if got := e.delivered("a7")[1]; got.Kind != api.EventStarted || e.fc.Said(got.Seq) != y {
		t.Fatalf("delivered after the change: %+v saying %q; want the new job's start saying %q (never the old job's exit)", got, e.fc.Said(got.Seq), y)
	}

	// Downgraded to a controller that says none.
	e.fc.SetIdentity("")
	e.setAndWait(t, a)
	e.rt.Exit(cid, runtime.ExitStatus{})
	waitFor(t, "the new job's exit delivered", func() bool { return len(e.delivered("a7")) == 3 }, e.on()...)
	got := e.delivered("a7")[2]
	if got.Kind != api.EventExited || got.ExitCode != 0 || e.fc.Said(got.Seq) != "" {
		t.Fatalf("last delivered %+v saying %q; want the new job's exit 0 saying none", got, e.fc.Said(got.Seq))
	}
}

// TestOutboxKeepsIdentityAndTags: outbox.db keeps the identity served
// and, after a change, the old one's allocations apart (tagged, ended
// ones forgotten, events dropped), across a reopen; the first identity is
// adopted without a change, and an identity coming back (a restored
// state) takes its own allocations back.
func TestOutboxKeepsIdentityAndTags(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	now := time.Unix(1.7e9, 0)
	open := func() *outbox {
		t.Helper()
		ob, err := openOutbox(ctx, TestLogger(t), dir, now)
		if err != nil {
			t.Fatal(err)
		}
		return ob
	}
	ob := open()
	x, y := strings.Repeat("a", 32), strings.Repeat("b", 32)
	if old, n, err := ob.serve(ctx, x, nil, now); err != nil || old != "" || n != 0 {
		t.Fatalf("first identity: old %q, dropped %d, %v; want adopted without a change", old, n, err)
	}
	ev := func(alloc string, kind string) api.AllocEvent {
		return api.AllocEvent{Node: "n", AllocID: alloc, JobID: 1, Kind: kind, Time: spec.NewTime(now)}
	}
	for _, e := range []api.AllocEvent{ev("1.1", api.EventStarted), ev("1.1", api.EventExited), ev("2.1", api.EventStarted)} {
		if _, err := ob.record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	ob = open()
	if ob.controllerID() != x {
		t.Fatalf("kept identity after reopen %q, want %q", ob.controllerID(), x)
	}
	// The first is delivered (its row's delete waits for a commit).
	evs, err := ob.pending(ctx, 10)
	if err != nil || len(evs) != 3 {
		t.Fatalf("pending %+v, %v; want the 3 events", evs, err)
	}
	if err := ob.ack(ctx, evs[0].Seq); err != nil {
		t.Fatal(err)
	}
	// 3.1 runs here without a row yet (its runner had not started it).
	old, n, err := ob.serve(ctx, y, []liveAlloc{{id: "2.1", job: 2}, {id: "3.1", job: 3}}, now)
	if err != nil || old != x || n != 2 {
		t.Fatalf("change to %s: old %q, dropped %d, %v; want %q and the 2 undelivered events", y, old, n, err, x)
	}
	check := func(when string) {
		t.Helper()
		if evs, err := ob.pending(ctx, 10); err != nil || len(evs) != 0 {
			t.Fatalf("%s: pending %+v, %v; want none", when, evs, err)
		}
		if rec, _ := ob.alloc(ctx, "1.1"); rec.Exited || ob.exitedHere("1.1", 0) {
			t.Fatalf("%s: the old identity's ended 1.1 is still known: %+v", when, rec)
		}
		for _, id := range []string{"2.1", "3.1"} {
			if ob.foreignOf(id) != x {
				t.Fatalf("%s: %s is of %q, want the old identity %q", when, id, ob.foreignOf(id), x)
			}
		}
	}
	check("after the change")
	// An old runner's exit is a local record, never queued.
	if _, err := ob.record(ctx, ev("2.1", api.EventExited)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := ob.alloc(ctx, "2.1"); !rec.Exited {
		t.Fatalf("the old runner's exit is not kept: %+v", rec)
	}
	ob.Close()
	ob = open()
	defer ob.Close()
	if ob.controllerID() != y {
		t.Fatalf("kept identity after reopen %q, want %q", ob.controllerID(), y)
	}
	check("after a reopen")
	// x comes back (its state restored): its running 3.1 is its own again.
	if old, _, err := ob.serve(ctx, x, nil, now); err != nil || old != y {
		t.Fatalf("back to %s: old %q, %v", x, old, err)
	}
	if ob.foreignOf("3.1") != "" {
		t.Fatalf("3.1 is of %q once %s is back; want its own", ob.foreignOf("3.1"), x)
	}
}
