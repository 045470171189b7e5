package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// gatedAudit is a real accounting database whose writes wait while the
// gate is closed (a slow disk), counting the writes that reached it.
type gatedAudit struct {
	*accounting.DB
	mu     sync.Mutex
	gate   chan struct{} // closed: writes pass
	writes atomic.Int64
}

func (g *gatedAudit) WriteAudits(ctx context.Context, ws []accounting.AuditWrite) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	g.writes.Add(1)
	<-gate
	return g.DB.WriteAudits(ctx, ws)
}

// TestAuditBackpressure: with the audit database stalled and its queue
// (4 entries) full, callers wait: no call is answered before its entry
// is written — to the audit log, or for a submission, with its job in
// state.db (at most the queue's length of those wait to be copied) —
// and once the database moves every call is answered and recorded;
// nothing is dropped.
func TestAuditBackpressure(t *testing.T) {
	g := &gatedAudit{DB: openAcct(t), gate: make(chan struct{})}
	var dropped atomic.Int64
	addr, ctl, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{
		server.WithAudit(g, func(n int) { dropped.Add(int64(n)) }), server.WithAuditBuffer(4)}})
	c := client(t, addr)
	ctx := ctxT(t)
	var open sync.Once
	openGate := func() {
		open.Do(func() {
			g.mu.Lock()
			close(g.gate)
			g.mu.Unlock()
		})
	}
	t.Cleanup(openGate) // a failed test still stops its server

	const calls = 24
	var answered atomic.Int64
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			_, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("bp" + strconv.Itoa(i))})
			answered.Add(1)
			errs <- err
		}()
	}
	// The writer holds one batch at the gate and the queue fills; the
	// other callers wait for room.
	deadline := time.Now().Add(10 * time.Second)
	for g.writes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let every caller reach the queue
	kept, err := ctl.CarriedAudits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := answered.Load()
	if len(kept) > 4 || n > int64(len(kept)) {
		t.Fatalf("%d calls answered while the audit log is stalled, %d entries kept in state.db; want at most 4 kept (the queue's length), every call answered among them",
			n, len(kept))
	}
	jobs, err := c.Jobs(ctx, api.JobFilter{All: true})
	if err != nil || len(jobs) != len(kept) {
		t.Fatalf("jobs while the audit log is stalled = %d, %v; want %d, those whose entries are kept (no call carried out before its entry is written)", len(jobs), err, len(kept))
	}
	// Each kept entry names its job, so one a kill leaves says which.
	targets := map[string]bool{}
	for _, k := range kept {
		var e accounting.AuditEntry
		if err := json.Unmarshal(k.Entry, &e); err != nil || e.Action != "POST /v1/jobs" || e.Result != "in progress" {
			t.Fatalf("kept entry %s: %v; want a submission in progress", k.Entry, err)
		}
		targets[e.Target] = true
	}
	for _, j := range jobs {
		if !targets["job "+strconv.FormatUint(uint64(j.ID), 10)] {
			t.Errorf("job %d: no kept entry names it (kept: %v)", j.ID, targets)
		}
	}
	t.Logf("%d of %d calls carried out with their entries kept in state.db while the audit log stalled, %d answered", len(kept), calls, n)
	openGate()
	for range calls {
		if err := <-errs; err != nil {
			t.Errorf("submit after the audit log moved again: %v", err)
		}
	}
	got, err := c.Audit(ctx, api.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, e := range got {
		if e.Action == "POST /v1/jobs" && e.Result == "200 ok" && strings.HasPrefix(e.Target, "job ") {
			ok++
		}
	}
	if ok != calls || len(got) != calls || dropped.Load() != 0 {
		t.Fatalf("audit log holds %d entries (%d complete submissions), %d dropped; want %d complete, none dropped: %+v",
			len(got), ok, dropped.Load(), calls, got)
	}
}

// TestAuditFullDisk: the accounting database on a full file system (a
// real SQLite on a small tmpfs). A state-changing call is refused with
// 503 saying that the audit log cannot be written, and is not carried
// out; once space is back calls are accepted and recorded. Submissions
// whose entries ride with their jobs in state.db are accepted until the
// log's first failed write, at most the audit queue's length (8 here)
// of them; each is in the log once it can be written.
func TestAuditFullDisk(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpud-audit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mountOver(t, dir, false, "4m")
	db, err := accounting.Open(filepath.Join(dir, "accounting.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var dropped atomic.Int64
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{
		server.WithAudit(db, func(n int) { dropped.Add(int64(n)) }), server.WithAuditBuffer(8)}})
	c := client(t, addr)
	ctx := ctxT(t)

	first, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("before")})
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			break
		}
	}
	f.Close()

	// Enough calls that the WAL's spare room, if any, runs out too.
	var refusal error
	var acked []spec.JobID
	for range 50 {
		sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("full")})
		if err != nil {
			refusal = err
			break
		}
		acked = append(acked, sub.ID)
	}
	if refusal == nil || len(acked) > 8 {
		t.Fatalf("%d submissions acknowledged with the audit log's disk full (refusal %v); want at most 8 (the audit queue), then a refusal", len(acked), refusal)
	}
	if !errors.Is(refusal, spec.ErrUnavailable) || !strings.Contains(refusal.Error(), "was not carried out") ||
		!strings.Contains(refusal.Error(), "audit log") || !strings.Contains(refusal.Error(), "full") {
		t.Fatalf("refusal with the audit disk full: %v; want unavailable, saying the call was not carried out because the audit log (disk full) cannot be written", refusal)
	}
	t.Logf("%d acknowledged after filling the disk, then refused with: %v", len(acked), refusal)
	jobs, err := c.Jobs(ctx, api.JobFilter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1+len(acked) {
		t.Fatalf("%d jobs after the refusal; want %d (the refused call was carried out unrecorded)", len(jobs), 1+len(acked))
	}
	_, err = c.JobAction(ctx, first.ID, "cancel", api.JobActionRequest{})
	if !errors.Is(err, spec.ErrUnavailable) {
		t.Fatalf("cancel with the audit disk full: %v; want unavailable", err)
	}
	if j, err := c.Job(ctx, first.ID); err != nil || j.State == spec.StateCancelled {
		t.Fatalf("job %d after a refused cancel: %s, %v; want it not cancelled", first.ID, j.State, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	after, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("after")})
	if err != nil {
		t.Fatalf("submit with space again: %v", err)
	}
	got, err := c.Audit(ctx, api.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	want := 2 + len(acked)
	if len(got) != want || dropped.Load() != 0 {
		t.Fatalf("audit log holds %d entries, %d dropped; want %d (each acknowledged call), none dropped: %+v", len(got), dropped.Load(), want, got)
	}
	for _, e := range got {
		if e.Result != "200 ok" {
			t.Errorf("entry %+v: want every recorded call complete (200 ok)", e)
		}
	}
	if last := got[len(got)-1]; last.Target != "job "+strconv.FormatUint(uint64(after.ID), 10) {
		t.Errorf("last entry %+v; want the submission of job %d", last, after.ID)
	}
}

// countedAudit is a real accounting database that counts transactions.
type countedAudit struct {
	*accounting.DB
	writes atomic.Int64
}

func (c *countedAudit) WriteAudits(ctx context.Context, ws []accounting.AuditWrite) error {
	c.writes.Add(1)
	return c.DB.WriteAudits(ctx, ws)
}

// TestAuditOutcomeRidesWithNextEntry: one submitter's calls one after
// another (sbatch in a shell loop) cost about one audit transaction each,
// not two: a call's outcome, which nobody waits for, shares the next
// call's entry's transaction. Every call still reads complete in the log.
func TestAuditOutcomeRidesWithNextEntry(t *testing.T) {
	db := &countedAudit{DB: openAcct(t)}
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAudit(db, nil)}})
	c := client(t, addr)
	ctx := ctxT(t)
	const calls = 40
	for i := range calls {
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("seq" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := db.writes.Load(); n > calls*3/2 {
		t.Errorf("%d audit transactions for %d calls one after another; want about one per call (outcome with the next entry)", n, calls)
	}
	got, err := c.Audit(ctx, api.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, e := range got {
		if e.Action == "POST /v1/jobs" && e.Result == "200 ok" {
			ok++
		}
	}
	if ok != calls {
		t.Errorf("%d of %d calls read complete in the audit log: %+v", ok, calls, got)
	}
}
