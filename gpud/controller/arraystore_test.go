package controller

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// storeHarness is a harness over the real SQLite store at path.
func storeHarness(t *testing.T, path string) (*harness, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, rec: &fakeRecorder{}, now: t0, tick: make(chan time.Time)}
	c, err := New(DefaultConfig(), st, WithClock(h.clock), WithTicker(h.tick), WithRecorder(h.rec),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	stopped := false
	h.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			st.Close()
		}
	}
	t.Cleanup(h.stop)
	return h, st
}

// The script, environment, args and comment an array stores once in
// state.db reach everything that needs them: the node an array task is
// dispatched to (also after a requeue), and a controller restarted from
// state.db, whose tasks then share one copy in memory.
func TestArrayPayloadThroughStoreAndRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	h, _ := storeHarness(t, path)
	ctx := context.Background()
	h.register("n1", 1)
	js := spec.JobSpec{Name: "arr", Script: "#!/bin/sh\necho the-array-script\n" + strings.Repeat("# pad\n", 1000),
		Args: []string{"--flag"}, Env: []string{"A=1", "B=two"}, Comment: "shared comment", WorkDir: "/tmp", Array: "0-4",
		Requeue: true}
	js.Resources.GPUsPerNode = 1
	ids, err := h.c.SubmitAll(ctx, alice, js)
	if err != nil {
		t.Fatal(err)
	}
	payloadOK := func(where string, j spec.Job) {
		t.Helper()
		if j.Script != js.Script || !slices.Equal(j.Env, js.Env) || !slices.Equal(j.Args, js.Args) || j.Comment != js.Comment {
			t.Errorf("%s: job %d has script %d bytes, env %v, args %v, comment %q; want the array's", where, j.ID, len(j.Script), j.Env, j.Args, j.Comment)
		}
	}
	running := func(h *harness) spec.Job {
		t.Helper()
		h.settle()
		as := h.assignments("n1")
		if len(as) != 1 {
			t.Fatalf("n1 has %d assignments, want 1", len(as))
		}
		return *as[0].Job
	}
	first := running(h)
	payloadOK("dispatched to n1", first)

	// Requeue: the next attempt gets the payload too.
	if _, err := h.c.JobAction(ctx, alice, first.ID, ActionRequeue, "again"); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", first, spec.StateCancelled, 0)
	again := running(h)
	payloadOK("after a requeue", again)
	h.exit("n1", again, spec.StateCompleted, 0)
	h.settle()
	h.stop()

	// Restart from state.db (every acknowledged change is committed, as
	// after kill -9).
	h2, _ := storeHarness(t, path)
	h2.register("n1", 1)
	var tasks []*jobRec
	if err := h2.c.query(ctx, func() error {
		for _, id := range ids {
			tasks = append(tasks, h2.c.st.jobs[id])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range tasks {
		payloadOK("after restart", rec.job)
	}
	if unsafe.StringData(tasks[0].job.Script) != unsafe.StringData(tasks[4].job.Script) {
		t.Errorf("after restart the tasks hold separate copies of the script")
	}
	payloadOK("dispatched after restart", running(h2))
}
