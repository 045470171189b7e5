package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// tapRT keeps the raw lines of the assignments answers that go through
// it; with stripDeltas it drops the deltas parameter, as a controller
// from before the delta lines ignores it.
type tapRT struct {
	next        http.RoundTripper
	stripDeltas bool

	mu    sync.Mutex
	lines []string
}

func (c *tapRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/assignments") {
		return c.next.RoundTrip(r)
	}
	if c.stripDeltas {
		r = r.Clone(r.Context())
		q := r.URL.Query()
		q.Del("deltas")
		r.URL.RawQuery = q.Encode()
	}
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &tapBody{ReadCloser: resp.Body, rt: c}
	}
	return resp, err
}

type tapBody struct {
	io.ReadCloser
	rt      *tapRT
	partial []byte
}

func (b *tapBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.partial = append(b.partial, p[:n]...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.rt.mu.Lock()
		b.rt.lines = append(b.rt.lines, string(b.partial[:i]))
		b.rt.mu.Unlock()
		b.partial = b.partial[i+1:]
	}
	return n, err
}

// rawLine is what the test reads of a line as sent.
type rawLine struct {
	Generation  uint64            `json:"generation"`
	Delta       bool              `json:"delta"`
	Base        uint64            `json:"base"`
	Assignments []json.RawMessage `json:"assignments"`
	Removed     []string          `json:"removed"`
}

// line waits for the stream's line of generation gen (its raw form).
func (c *tapRT) line(t *testing.T, gen uint64) rawLine {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.mu.Lock()
		lines := slices.Clone(c.lines)
		c.mu.Unlock()
		for _, l := range lines {
			var r rawLine
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("a line of the stream is not JSON: %v: %s", err, l)
			}
			if r.Generation == gen {
				return r
			}
		}
	}
	t.Fatalf("no line of generation %d on the stream", gen)
	return rawLine{}
}

func tapped(c *api.Client, stripDeltas bool) *tapRT {
	rt := &tapRT{next: c.HTTPClient().Transport, stripDeltas: stripDeltas}
	c.HTTPClient().Transport = rt
	return rt
}

// sameAsPoll fails unless got (a set the watch stream made) is the node's
// set as a poll answers it: the same generation and the same assignments,
// each byte for byte but its start (within startTolerance: the stream
// keeps the start it sent while the controller's reading of it moves by
// nanoseconds).
func sameAsPoll(t *testing.T, c *api.Client, node string, got api.AssignmentsResponse) {
	t.Helper()
	poll, err := c.Assignments(ctxT(t), node, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if poll.Generation != got.Generation || len(poll.Assignments) != len(got.Assignments) {
		t.Fatalf("the stream's set: gen %d, %d assignments; the poll's: gen %d, %d", got.Generation, len(got.Assignments), poll.Generation, len(poll.Assignments))
	}
	for i := range poll.Assignments {
		w, g := poll.Assignments[i], got.Assignments[i]
		if d := w.Alloc.StartTime.Sub(g.Alloc.StartTime.Time).Abs(); d >= time.Millisecond {
			t.Fatalf("allocation %s: the stream's start %v, the poll's %v", w.Alloc.ID, g.Alloc.StartTime, w.Alloc.StartTime)
		}
		w.Alloc.StartTime, g.Alloc.StartTime = spec.Time{}, spec.Time{}
		if wb, gb := w.AppendJSON(nil), g.AppendJSON(nil); !bytes.Equal(wb, gb) {
			t.Fatalf("assignment %d differs:\nstream %s\npoll   %s", i, gb, wb)
		}
	}
}

// deltaWatch starts a test server with node n1 (4 GPUs) registered and
// follows n1's watch stream through a tapped client (stripDeltas: the
// deltas parameter taken off its requests, as a controller from before
// them ignores it); stop ends the stream, whose end comes on done.
func deltaWatch(t *testing.T, stripDeltas bool) (c *api.Client, rt *tapRT, frames <-chan api.AssignmentsResponse, done <-chan error, stop func()) {
	t.Helper()
	addr, _ := servertest.TestServer(t, nil)
	c = client(t, addr)
	rt = tapped(c, stripDeltas)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 4)); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	frames, done = watch(wctx, c, "n1", 20*time.Second)
	return c, rt, frames, done, stop
}

// TestWatchDeltaLines: with deltas (the client asks) a stream's first line
// is the whole set and each next one only what changed: a placement
// carries the new job alone, a cancel the cancelled one alone, a node's
// own exit its allocation's ID in removed (on the next change's line), a
// running job's new time limit that job alone (it wakes the stream: the
// node enforces the limit);
// the set the client makes of them is, at every line, the set a poll
// answers.
func TestWatchDeltaLines(t *testing.T) {
	c, rt, frames, done, stop := deltaWatch(t, false)
	defer stop()
	ctx := ctxT(t)
	first := nextFrame(t, frames, "the first answer")
	if l := rt.line(t, first.Generation); l.Delta {
		t.Fatalf("the first line is a delta: %+v", l)
	}
	sameAsPoll(t, c, "n1", first)
	submit := func() spec.JobID {
		t.Helper()
		js := jobSpec("train")
		js.Resources.GPUsPerNode = 1
		sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			t.Fatal(err)
		}
		return sub.ID
	}
	// next waits for the frame after gen and checks it and its line:
	// a delta on gen carrying changed jobs and removing removed.
	next := func(prev api.AssignmentsResponse, what string, changed []spec.JobID, removed []string) api.AssignmentsResponse {
		t.Helper()
		f := nextFrame(t, frames, what)
		sameAsPoll(t, c, "n1", f)
		l := rt.line(t, f.Generation)
		if !l.Delta || l.Base != prev.Generation {
			t.Fatalf("%s: line delta %v on %d; want a delta on %d", what, l.Delta, l.Base, prev.Generation)
		}
		var ids []spec.JobID
		for _, raw := range l.Assignments {
			var a api.Assignment
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, a.Job.ID)
		}
		if !slices.Equal(ids, changed) || !slices.Equal(l.Removed, removed) {
			t.Fatalf("%s: the line carries jobs %v and removes %q; want jobs %v, removed %q", what, ids, l.Removed, changed, removed)
		}
		return f
	}
	a := submit()
	f := next(first, "placing job a", []spec.JobID{a}, nil)
	b := submit()
	f = next(f, "placing job b", []spec.JobID{b}, nil)
	if len(f.Assignments) != 2 {
		t.Fatalf("after two placements the set holds %d assignments", len(f.Assignments))
	}
	if _, err := c.JobAction(ctx, a, "cancel", api.JobActionRequest{}); err != nil {
		t.Fatal(err)
	}
	f = next(f, "cancelling job a", []spec.JobID{a}, nil)
	if !f.Assignments[0].Stop || f.Assignments[0].Job.ID != a || f.Assignments[1].Stop {
		t.Fatalf("after the cancel: %+v; want a stopped, b running", f.Assignments)
	}
	// The node reports a's end: it wakes nothing (TestOwnExitWakesNothing);
	// the next change's line drops it.
	aAlloc := f.Assignments[0].Alloc.ID
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{{Seq: 1, Node: "n1", AllocID: aAlloc, JobID: a, Kind: api.EventExited, State: spec.StateCancelled, Time: spec.NewTime(time.Now())}}); err != nil {
		t.Fatal(err)
	}
	d := submit()
	f = next(f, "placing job d after a's end", []spec.JobID{d}, []string{aAlloc})
	if len(f.Assignments) != 2 || f.Assignments[0].Job.ID != b || f.Assignments[1].Job.ID != d {
		t.Fatalf("after a's end and d's placement: %d assignments; want b and d", len(f.Assignments))
	}
	// A signal changes b's assignment alone.
	if _, err := c.JobAction(ctx, b, "cancel", api.JobActionRequest{Signal: "USR1"}); err != nil {
		t.Fatal(err)
	}
	f = next(f, "signalling job b", []spec.JobID{b}, nil)
	if f.Assignments[0].Signal != "USR1" {
		t.Fatalf("after the signal: %+v; want b signalled", f.Assignments[0])
	}
	// A new time limit wakes the stream (the node enforces it): its line
	// carries b alone.
	limit := spec.Duration(2 * time.Hour)
	if _, err := c.UpdateJob(ctx, spec.JobRef{ID: b}, api.JobUpdateRequest{TimeLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	f = next(f, "a new time limit of job b", []spec.JobID{b}, nil)
	if f.Assignments[0].Job.TimeLimit != limit {
		t.Fatalf("after the update: b's time limit %v, want %v", f.Assignments[0].Job.TimeLimit, limit)
	}
	next(f, "placing job e", []spec.JobID{submit()}, nil)
	stop()
	<-done
}

// TestWatchDeltasBothWaysCompatible: a stream asked without deltas (an
// agent from before them; or a controller from before them, which ignores
// the parameter) is whole sets, line after line, and the client that
// asked for deltas takes them as such.
func TestWatchDeltasBothWaysCompatible(t *testing.T) {
	c, rt, frames, done, stop := deltaWatch(t, true)
	defer stop()
	ctx := ctxT(t)
	f := nextFrame(t, frames, "the first answer")
	for i := range 3 {
		js := jobSpec("train")
		js.Resources.GPUsPerNode = 1
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: js}); err != nil {
			t.Fatal(err)
		}
		f = nextFrame(t, frames, "a placement")
		sameAsPoll(t, c, "n1", f)
		if l := rt.line(t, f.Generation); l.Delta || len(l.Assignments) != i+1 {
			t.Fatalf("placement %d: the line is delta %v with %d assignments; want the whole set, %d", i+1, l.Delta, len(l.Assignments), i+1)
		}
	}
	stop()
	<-done
}
