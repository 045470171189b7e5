package node

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
)

func TestOutboxDurableAndOrdered(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	evs := []api.AllocEvent{
		{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)},
		{Node: "n", AllocID: "a2", JobID: 2, Kind: api.EventStarted, Time: spec.NewTime(t0)},
		{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventExited, Time: spec.NewTime(t0), State: spec.StateFailed, ExitCode: 3, Reason: "exit code 3"},
	}
	for i, ev := range evs {
		seq, err := ob.record(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if seq != uint64(i+1) {
			t.Errorf("seq of event %d = %d, want %d", i, seq, i+1)
		}
		evs[i].Seq = seq
	}
	if err := ob.markStopping(ctx, "a2", 2, spec.StatePreempted, "preempted", t0); err != nil {
		t.Fatal(err)
	}
	// A second stop reason does not replace the first.
	if err := ob.markStopping(ctx, "a2", 2, spec.StateCancelled, "cancelled", t0); err != nil {
		t.Fatal(err)
	}
	if err := ob.ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened, as after a crash: unacknowledged events, in order, and
	// allocation records survive; seqs are never reused.
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	got, err := ob.pending(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs[1:], got); diff != "" {
		t.Errorf("pending after reopen (-want +got):\n%s", diff)
	}
	if err := ob.ack(ctx, 3); err != nil {
		t.Fatal(err)
	}
	seq, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a3", JobID: 3, Kind: api.EventStarted, Time: spec.NewTime(t0)})
	if err != nil || seq != 4 {
		t.Errorf("seq after acking everything = %d, %v; want 4", seq, err)
	}
	for id, want := range map[string]allocRecord{
		"a1": {Started: true, Exited: true},
		"a2": {Started: true, StopState: spec.StatePreempted, StopWhy: "preempted"},
		"a9": {},
	} {
		got, err := ob.alloc(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("alloc %s (-want +got):\n%s", id, diff)
		}
	}
}

func TestOutboxPrunesOldExits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []api.AllocEvent{
		{AllocID: "old", Kind: api.EventExited, Time: spec.NewTime(t0)},
		{AllocID: "running", Kind: api.EventStarted, Time: spec.NewTime(t0)},
	} {
		if _, err := ob.record(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	ob, err = openOutbox(ctx, slog.Default(), dir, t0.Add(exitedRetention+time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if r, _ := ob.alloc(ctx, "old"); r.Exited {
		t.Error("exit older than the retention is still remembered")
	}
	if r, _ := ob.alloc(ctx, "running"); !r.Started {
		t.Error("a started allocation was pruned")
	}
}

// TestOutboxPrivate: outbox.db and its -wal and -shm are 0600 (they hold
// every job's events); files an older agent left 0644 are tightened at
// open with a log line. Before statefile.DB they were 0644.
func TestOutboxPrivate(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	for _, p := range []string{path, path + "-wal"} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	ob, err := openOutbox(ctx, slog.New(slog.NewTextHandler(&logs, nil)), dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if _, err := ob.record(ctx, api.AllocEvent{Kind: api.EventStarted, AllocID: "a1", JobID: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if p == path+"-shm" && os.IsNotExist(err) {
			continue // exclusive locking: the WAL index lives in the agent's memory
		}
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s mode %#o, want 0600", filepath.Base(p), m)
		}
	}
	if !strings.Contains(logs.String(), "made it private") || !strings.Contains(logs.String(), path+"-wal") {
		t.Errorf("log = %q; want a line for each file tightened", logs.String())
	}
}

// TestMemoryOutboxKeepsOrderAndIsolation checks the loadtest's in-memory
// outbox: events in seq order until acknowledged, allocation records, and
// two agents' outboxes apart.
func TestMemoryOutboxKeepsOrderAndIsolation(t *testing.T) {
	ctx := t.Context()
	a, err := openMemoryOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := openMemoryOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, id := range []string{"a1", "a2"} {
		if _, err := a.record(ctx, api.AllocEvent{Node: "mem-a", AllocID: id, JobID: spec.JobID(i + 1), Kind: api.EventStarted, Time: spec.NewTime(t0)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got, err := a.pending(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != 2 || got[0].AllocID != "a2" {
		t.Errorf("pending after ack 1 = %+v, want only a2 at seq 2", got)
	}
	if rec, err := a.alloc(ctx, "a1"); err != nil || !rec.Started {
		t.Errorf("alloc a1 = %+v, %v; want started", rec, err)
	}
	if got, err := b.pending(ctx, 10); err != nil || len(got) != 0 {
		t.Errorf("other node's outbox has %d events (%v); want none", len(got), err)
	}
}

// TestMemoryOutboxAnswersLikeSQLite runs one sequence of outbox calls on
// outbox.db and on the memory outbox and compares every answer: the
// loadtest's agents must behave as a real node's do.
func TestMemoryOutboxAnswersLikeSQLite(t *testing.T) {
	ctx := t.Context()
	disk, err := openOutbox(ctx, slog.Default(), t.TempDir(), t0)
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	mem, err := openMemoryOutbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	type answer struct {
		Seq     uint64
		Rec     allocRecord
		Events  []api.AllocEvent
		StepID  int
		Err     bool
		Comment string
	}
	run := func(ob *outbox) []answer {
		var out []answer
		rec := func(ev api.AllocEvent) {
			seq, err := ob.record(ctx, ev)
			out = append(out, answer{Seq: seq, Err: err != nil, Comment: "record " + ev.Kind + " " + ev.AllocID})
		}
		look := func(id string) {
			r, err := ob.alloc(ctx, id)
			out = append(out, answer{Rec: r, Err: err != nil, Comment: "alloc " + id})
		}
		pend := func(limit int) {
			evs, err := ob.pending(ctx, limit)
			out = append(out, answer{Events: evs, Err: err != nil, Comment: "pending"})
		}
		steps := func(id string, n int) {
			first, err := ob.reserveStepIDs(ctx, id, n)
			out = append(out, answer{StepID: first, Err: err != nil, Comment: "steps " + id})
		}
		u := api.UsageSample{ID: "n/a1/1", Attempt: 1, Start: spec.NewTime(t0), End: spec.NewTime(t0.Add(time.Second)), CPUSeconds: 0.5, GPUs: 1, PowerW: 300}
		rec(api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0), MIG: []string{"MIG-1"}})
		rec(api.AllocEvent{Node: "n", AllocID: "a2", JobID: 2, Kind: api.EventStarted, Time: spec.NewTime(t0)})
		rec(api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventUsage, Time: spec.NewTime(t0.Add(time.Second)), Usage: &u})
		look("a1")
		look("none")
		out = append(out, answer{Err: ob.markStopping(ctx, "a2", 2, spec.StatePreempted, "preempted", t0) != nil, Comment: "stop a2"})
		out = append(out, answer{Err: ob.markStopping(ctx, "a2", 2, spec.StateCancelled, "cancelled", t0) != nil, Comment: "stop a2 again"})
		out = append(out, answer{Err: ob.markStopping(ctx, "a3", 3, spec.StateCancelled, "never started", t0) != nil, Comment: "stop a3"})
		out = append(out, answer{Err: ob.markSignal(ctx, "a1", 1, 4, t0) != nil, Comment: "signal a1"})
		out = append(out, answer{Err: ob.markNotice(ctx, "a1", 2) != nil, Comment: "notice a1"})
		out = append(out, answer{Err: ob.markNotice(ctx, "a1", 5) != nil, Comment: "notice a1 again"})
		look("a2")
		look("a3")
		look("a1")
		rec(api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventExited, Time: spec.NewTime(t0.Add(2 * time.Second)), State: spec.StateFailed, ExitCode: 3, Reason: "NonZeroExitCode"})
		look("a1")
		pend(2)
		pend(100)
		out = append(out, answer{Err: ob.ack(ctx, 2) != nil, Comment: "ack 2"})
		pend(100)
		out = append(out, answer{Err: ob.ack(ctx, 4) != nil, Comment: "ack all"})
		pend(100)
		// Seqs go on from the last one, acknowledged or not.
		rec(api.AllocEvent{Node: "n", AllocID: "a2", JobID: 2, Kind: api.EventExited, Time: spec.NewTime(t0), State: spec.StatePreempted, Reason: "preempted"})
		pend(100)
		out = append(out, answer{Err: ob.ack(ctx, 1) != nil, Comment: "ack an old seq"})
		pend(100)
		steps("a1", step.IDBlock)
		steps("a1", step.IDBlock)
		steps("a2", 1)
		// The controller's identity (ident.go).
		serve := func(id string, live ...liveAlloc) {
			old, n, err := ob.serve(ctx, id, live, t0)
			out = append(out, answer{Err: err != nil, Comment: fmt.Sprintf("serve %s: old %q, %d dropped", id, old, n)})
		}
		foreign := func(id string) {
			out = append(out, answer{Comment: "foreign " + id + ": " + ob.foreignOf(id) + " " + ob.controllerID()})
		}
		x, y := strings.Repeat("1", 32), strings.Repeat("2", 32)
		serve(x) // the first: adopted
		rec(api.AllocEvent{Node: "n", AllocID: "a5", JobID: 5, Kind: api.EventStarted, Time: spec.NewTime(t0)})
		steps("a5", 1)
		serve(y, liveAlloc{id: "a5", job: 5}, liveAlloc{id: "a9", job: 9})
		pend(100)
		for _, id := range []string{"a1", "a2", "a3", "a5", "a9"} {
			foreign(id)
			look(id)
		}
		steps("a1", 1) // a1 ended under x: forgotten, numbered afresh
		steps("a5", 1)
		rec(api.AllocEvent{Node: "n", AllocID: "a5", JobID: 5, Kind: api.EventExited, Time: spec.NewTime(t0), State: spec.StateCancelled})
		pend(100)
		look("a5")
		rec(api.AllocEvent{Node: "n", AllocID: "a6", JobID: 6, Kind: api.EventStarted, Time: spec.NewTime(t0)})
		serve(x) // x's state back
		for _, id := range []string{"a3", "a5", "a6", "a9"} {
			foreign(id)
			look(id)
		}
		return out
	}
	want, got := run(disk), run(mem)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("memory outbox answers differ from outbox.db's (-disk +memory):\n%s", diff)
	}
}

// BenchmarkOutboxJobEvents is one job's outbox traffic: its started and
// exited events recorded, read back and acknowledged, and its record
// looked up, in outbox.db and in the memory outbox (WithMemoryOutbox).
func BenchmarkOutboxJobEvents(b *testing.B) {
	ctx := b.Context()
	for _, kind := range []string{"disk", "tmpfs", "memory"} {
		b.Run(kind, func(b *testing.B) {
			var ob *outbox
			var err error
			switch kind {
			case "disk":
				ob, err = openOutbox(ctx, slog.Default(), b.TempDir(), t0)
			case "tmpfs": // as the loadtest's agents: the fsync costs ~nothing, SQLite's CPU shows
				dir, derr := os.MkdirTemp("/dev/shm", "outbox-bench")
				if derr != nil {
					b.Skip("no /dev/shm:", derr)
				}
				defer os.RemoveAll(dir)
				ob, err = openOutbox(ctx, slog.Default(), dir, t0)
			default:
				ob, err = openMemoryOutbox(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer ob.Close()
			// As the agent: runners record without cancel (runnerDeps.record),
			// the send loop reads and acknowledges with its own context.
			rctx := context.WithoutCancel(ctx)
			cpu0 := processCPU()
			i := 0
			for b.Loop() {
				i++
				benchJobEvents(b, ob, ctx, rctx, i, "")
			}
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestStepIDsDurable: step numbers come from the outbox in reserved
// blocks: the same allocation never gets a number twice, even after the
// outbox is reopened (an agent restart), and each allocation counts from
// 0; numbers of an allocation the outbox forgot are dropped with it.
func TestStepIDsDurable(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)}); err != nil {
		t.Fatal(err)
	}
	first, err := ob.reserveStepIDs(ctx, "a1", 32)
	second, err2 := ob.reserveStepIDs(ctx, "a1", 32)
	other, err3 := ob.reserveStepIDs(ctx, "a2", 32)
	if err != nil || err2 != nil || err3 != nil || first != 0 || second != 32 || other != 0 {
		t.Fatalf("reservations a1 %d %d, a2 %d (%v %v %v); want 0, 32 and 0", first, second, other, err, err2, err3)
	}
	ob.Close()
	if ob, err = openOutbox(ctx, slog.Default(), dir, t0); err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if again, err := ob.reserveStepIDs(ctx, "a1", 32); err != nil || again != 64 {
		t.Errorf("after a reopen a1 reserves from %d (%v), want 64", again, err)
	}
	if again, err := ob.reserveStepIDs(ctx, "a2", 32); err != nil || again != 0 {
		t.Errorf("a2, never started here, was pruned: reserves from %d (%v), want 0", again, err)
	}
}

// TestNoticeSeqDurable: the last notify message written for an
// allocation survives a reopened outbox (an agent restart), so a
// re-adopted job does not get its messages twice; it is forgotten with
// the allocation.
func TestNoticeSeqDurable(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)}); err != nil {
		t.Fatal(err)
	}
	if err := ob.markNotice(ctx, "a1", 3); err != nil {
		t.Fatal(err)
	}
	ob.Close()
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ob.alloc(ctx, "a1"); err != nil || r.NoticeSeq != 3 || !r.Started {
		t.Fatalf("after reopening: %+v, %v; want NoticeSeq 3", r, err)
	}
	if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventExited, Time: spec.NewTime(t0), State: spec.StateCompleted}); err != nil {
		t.Fatal(err)
	}
	ob.Close()
	ob, err = openOutbox(ctx, slog.Default(), dir, t0.Add(exitedRetention+time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var n int
	if err := ob.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM notices`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("notices left after the allocation was pruned: %d (%v)", n, err)
	}
}

// TestOutboxMirrorMatchesTable runs random records, reads, acks and
// reopens on outbox.db and checks after each that pending (from the
// in-memory mirror while there is one) answers exactly what the events
// table holds, with the mirror's cap small enough to be passed and with
// the default one.
func TestOutboxMirrorMatchesTable(t *testing.T) {
	t.Parallel()
	for _, capRows := range []int{3, outboxMirrorCap} {
		t.Run(strconv.Itoa(capRows), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dir := t.TempDir()
			open := func() *outbox {
				ob, err := openOutbox(ctx, slog.Default(), dir, t0)
				if err != nil {
					t.Fatal(err)
				}
				ob.mirrorCap = capRows
				return ob
			}
			ob := open()
			defer func() { ob.Close() }()
			rng := rand.New(rand.NewPCG(uint64(capRows), 31))
			var last uint64
			var mirroredSeen, capPassed int
			for i := range 600 {
				switch op := rng.IntN(10); {
				case op < 5:
					kind := []string{api.EventStarted, api.EventExited, api.EventUsage}[rng.IntN(3)]
					ev := api.AllocEvent{Node: "n", AllocID: "a" + strconv.Itoa(rng.IntN(9)), JobID: spec.JobID(i), Kind: kind,
						Time: spec.NewTime(t0.Add(time.Duration(i) * time.Millisecond)), Reason: strings.Repeat("x", rng.IntN(4))}
					wasMirrored := ob.mirrored
					seq, err := ob.record(ctx, ev)
					if err != nil {
						t.Fatal(err)
					}
					if seq <= last {
						t.Fatalf("op %d: seq %d after %d", i, seq, last)
					}
					last = seq
					if wasMirrored && !ob.mirrored {
						capPassed++
					}
				case op < 8:
					got, err := ob.pending(ctx, 1+rng.IntN(6))
					if err != nil {
						t.Fatal(err)
					}
					if len(got) > 0 && rng.IntN(2) == 0 {
						if err := ob.ack(ctx, got[rng.IntN(len(got))].Seq); err != nil {
							t.Fatal(err)
						}
					}
				case op < 9:
					if last > 0 {
						if err := ob.ack(ctx, uint64(rng.IntN(int(last)+1))); err != nil {
							t.Fatal(err)
						}
					}
				default:
					if err := ob.Close(); err != nil {
						t.Fatal(err)
					}
					ob = open()
				}
				if ob.mirrored {
					mirroredSeen++
				}
				// What the table holds, read past the mirror.
				rows, err := ob.readRows(ctx, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				var want []api.AllocEvent
				for _, row := range rows {
					var ev api.AllocEvent
					if err := json.Unmarshal([]byte(row.body), &ev); err != nil {
						t.Fatal(err)
					}
					ev.Seq = row.seq
					want = append(want, ev)
				}
				got, err := ob.pending(ctx, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("op %d (mirrored %v): pending differs from the events table (-table +pending):\n%s", i, ob.mirrored, diff)
				}
			}
			if mirroredSeen == 0 {
				t.Error("the mirror was never used")
			}
			if capRows < outboxMirrorCap && capPassed == 0 {
				t.Errorf("the mirror's cap of %d rows was never passed", capRows)
			}
		})
	}
}

// TestOutboxKnownAllocsMatchTable: the outbox's in-memory set of
// allocation ids answers alloc and exitedHere as SQLite does, through
// random records, stop and signal marks, notices and reopens (with a
// 5-row cap that is passed, and the default): a write path that does
// not note its id first makes alloc answer an empty record where the
// table holds one, and this test fails.
func TestOutboxKnownAllocsMatchTable(t *testing.T) {
	t.Parallel()
	for _, capRows := range []int{5, outboxKnownCap} {
		t.Run(strconv.Itoa(capRows), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dir := t.TempDir()
			open := func() *outbox {
				ob, err := openOutbox(ctx, slog.Default(), dir, t0)
				if err != nil {
					t.Fatal(err)
				}
				ob.knownCap = capRows
				if err := ob.loadKnown(ctx); err != nil { // again, under this cap
					t.Fatal(err)
				}
				return ob
			}
			ob := open()
			defer func() { ob.Close() }()
			rng := rand.New(rand.NewPCG(uint64(capRows), 17))
			ids := make([]string, 12)
			for i := range ids {
				ids[i] = "a" + strconv.Itoa(i)
			}
			var answeredBySet, dropped int
			for i := range 400 {
				id := ids[rng.IntN(len(ids))]
				job := spec.JobID(1 + rng.IntN(5))
				now := t0.Add(time.Duration(i) * time.Millisecond)
				hadSet := ob.known != nil
				switch op := rng.IntN(12); {
				case op < 5:
					kind := []string{api.EventStarted, api.EventExited, api.EventUsage, api.EventCheckpointed}[rng.IntN(4)]
					if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: job, Kind: kind, Time: spec.NewTime(now)}); err != nil {
						t.Fatal(err)
					}
				case op < 7:
					if err := ob.markStopping(ctx, id, job, spec.StatePreempted, "why "+strconv.Itoa(i), now); err != nil {
						t.Fatal(err)
					}
				case op < 9:
					if err := ob.markSignal(ctx, id, job, i, now); err != nil {
						t.Fatal(err)
					}
				case op < 11:
					if err := ob.markNotice(ctx, id, i); err != nil {
						t.Fatal(err)
					}
				default:
					if err := ob.Close(); err != nil {
						t.Fatal(err)
					}
					ob = open()
				}
				if hadSet && ob.known == nil {
					dropped++
				}
				for _, id := range ids {
					want, err := ob.allocQuery(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					got, err := ob.alloc(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if got != want {
						t.Fatalf("op %d: alloc %s = %+v, the table holds %+v", i, id, got, want)
					}
					if ob.exitedHere(id, 0) && !want.Exited {
						t.Fatalf("op %d: exitedHere(%s) but the table says not exited", i, id)
					}
					if ob.known != nil {
						if _, ok := ob.known[id]; !ok || want.Exited == ob.exitedHere(id, 0) {
							answeredBySet++
						}
					}
				}
			}
			if answeredBySet == 0 {
				t.Error("the set never answered")
			}
			if capRows < outboxKnownCap && dropped == 0 {
				t.Errorf("the set's cap of %d ids was never passed", capRows)
			}
		})
	}
}

// BenchmarkOutboxAllocLookup: reconcile's lookups for an allocation the
// outbox does not hold (each new one) and for one whose exit is
// committed (listed until the controller applies it), answered by the
// known set ("known") or by SQLite ("sqlite", what alloc always did).
func BenchmarkOutboxAllocLookup(b *testing.B) {
	ctx := b.Context()
	ob, err := openOutbox(ctx, slog.Default(), b.TempDir(), t0)
	if err != nil {
		b.Fatal(err)
	}
	defer ob.Close()
	for i := range 200 { // a node's recent allocations
		id := "a" + strconv.Itoa(i)
		for _, k := range []string{api.EventStarted, api.EventExited} {
			if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: spec.JobID(i + 1), Kind: k, Time: spec.NewTime(t0)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("known", func(b *testing.B) {
		for b.Loop() {
			if r, err := ob.alloc(ctx, "new"); err != nil || r.Started {
				b.Fatal(r, err)
			}
			if !ob.exitedHere("a7", 0) {
				b.Fatal("a7 not known exited")
			}
		}
	})
	b.Run("sqlite", func(b *testing.B) {
		for b.Loop() {
			if r, err := ob.allocQuery(ctx, "new"); err != nil || r.Started {
				b.Fatal(r, err)
			}
			if r, err := ob.allocQuery(ctx, "a7"); err != nil || !r.Exited {
				b.Fatal(r, err)
			}
		}
	})
}

// TestOutboxHeldByOneAgent: outbox.db is held by the agent that opened
// it (exclusive locking): a second open of the same file fails with an
// error that says so and what to do, and succeeds once the first
// closed, with the first one's events.
func TestOutboxHeldByOneAgent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	first, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.record(ctx, api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)}); err != nil {
		t.Fatal(err)
	}
	second, err := openOutboxDSN(ctx, path, outboxDSN(path, 50*time.Millisecond), t0)
	if err == nil {
		second.Close()
		t.Fatal("a second open of a held outbox.db succeeded")
	}
	if !errors.Is(err, errOutboxLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("second open: %v; want errOutboxLocked naming %s and what to do", err, path)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err = openOutboxDSN(ctx, path, outboxDSN(path, 50*time.Millisecond), t0)
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	defer second.Close()
	got, err := second.pending(ctx, 10)
	if err != nil || len(got) != 1 || got[0].AllocID != "a1" {
		t.Errorf("pending after reopen: %+v, %v; want a1's start", got, err)
	}
}

// TestOutboxFromBeforeFingerprints: an outbox.db an agent wrote before
// allocations had fingerprints (no submit_ns column) opens with its rows
// (fingerprint 0: taken for whichever job the ID names, as before), and
// a fingerprint given afterwards is kept with the row it writes.
func TestOutboxFromBeforeFingerprints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE allocs (alloc_id TEXT PRIMARY KEY, job_id INTEGER NOT NULL, started INTEGER NOT NULL DEFAULT 0,
			exited INTEGER NOT NULL DEFAULT 0, stop_state TEXT NOT NULL DEFAULT '', stop_why TEXT NOT NULL DEFAULT '',
			signal_seq INTEGER NOT NULL DEFAULT 0, updated_ns INTEGER NOT NULL)`,
		`INSERT INTO allocs (alloc_id, job_id, started, exited, updated_ns) VALUES ('7.1', 7, 1, 1, ` + strconv.FormatInt(t0.UnixNano(), 10) + `)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ob.alloc(ctx, "7.1"); err != nil || !r.Exited || r.SubmitNS != 0 {
		t.Errorf("the older agent's row: %+v %v, want exited, no fingerprint", r, err)
	}
	ob.fingerprint("8.1", 42)
	for _, kind := range []string{api.EventStarted, api.EventExited} {
		if _, err := ob.record(ctx, api.AllocEvent{AllocID: "8.1", JobID: 8, Kind: kind, Time: spec.NewTime(t0)}); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	if r, err := ob.allocQuery(ctx, "8.1"); err != nil || !r.Started || !r.Exited || r.SubmitNS != 42 {
		t.Errorf("8.1 after a reopen: %+v %v, want started and exited with fingerprint 42", r, err)
	}
	if !ob.exitedHere("8.1", 42) || ob.exitedHere("8.1", 43) || !ob.exitedHere("7.1", 43) {
		t.Error("exitedHere: want 8.1 ended here as the job of fingerprint 42 only, 7.1 (no fingerprint) as any")
	}
}

// TestOutboxAcksFoldIntoRecords: an acknowledgement writes nothing by
// itself; its rows leave the events table with the next record's commit,
// or with flushAcks (the send loop, after a quiet while; Close), and
// pending never returns them again. Rows acknowledged but not deleted when
// the agent dies are sent again after the restart (the controller applies
// an event once), and no unacknowledged one is lost.
func TestOutboxAcksFoldIntoRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	table := func() []uint64 {
		t.Helper()
		var seqs []uint64
		rows, err := ob.db.QueryContext(ctx, `SELECT seq FROM events ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s uint64
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, s)
		}
		return seqs
	}
	pendingSeqs := func() []uint64 {
		t.Helper()
		evs, err := ob.pending(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, ev := range evs {
			seqs = append(seqs, ev.Seq)
		}
		return seqs
	}
	rec := func(id, kind string) {
		t.Helper()
		if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: 1, Kind: kind, Time: spec.NewTime(t0)}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, wantTable, wantPending []uint64, wantUnflushed bool) {
		t.Helper()
		if diff := cmp.Diff(wantTable, table()); diff != "" {
			t.Errorf("%s: events table (-want +got):\n%s", step, diff)
		}
		if diff := cmp.Diff(wantPending, pendingSeqs()); diff != "" {
			t.Errorf("%s: pending (-want +got):\n%s", step, diff)
		}
		if got := ob.unflushed(); got != wantUnflushed {
			t.Errorf("%s: unflushed = %v, want %v", step, got, wantUnflushed)
		}
	}
	rec("a1", api.EventStarted)
	rec("a2", api.EventStarted)
	rec("a1", api.EventExited)
	check("three recorded", []uint64{1, 2, 3}, []uint64{1, 2, 3}, false)
	if err := ob.ack(ctx, 2); err != nil {
		t.Fatal(err)
	}
	check("ack 2", []uint64{1, 2, 3}, []uint64{3}, true)
	rec("a2", api.EventExited)
	check("a record after ack 2", []uint64{3, 4}, []uint64{3, 4}, false)
	if r, err := ob.alloc(ctx, "a2"); err != nil || !r.Started || !r.Exited {
		t.Errorf("alloc a2 after the folded record = %+v, %v; want started and exited", r, err)
	}
	if err := ob.ack(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := ob.flushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	check("ack 3, flushed", []uint64{4}, []uint64{4}, false)
	if err := ob.ack(ctx, 1); err != nil { // an old one changes nothing
		t.Fatal(err)
	}
	check("ack 1 again", []uint64{4}, []uint64{4}, false)

	// Died after ack 4 (no flush): row 4 is sent again, seqs go on.
	if err := ob.ack(ctx, 4); err != nil {
		t.Fatal(err)
	}
	rec("a3", api.EventStarted) // seq 5, deletes 4
	if err := ob.ack(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := ob.db.Close(); err != nil { // as a kill -9: no flush
		t.Fatal(err)
	}
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	check("reopened after dying unflushed", []uint64{5}, []uint64{5}, false)
	if err := ob.ack(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := ob.Close(); err != nil { // a clean stop flushes
		t.Fatal(err)
	}
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	check("reopened after a clean stop", nil, nil, false)
	rec("a3", api.EventExited)
	check("seqs are never reused", []uint64{6}, []uint64{6}, false)
}

// benchJobEvents runs job i's events through ob as a node agent does:
// the allocation's lookup, its started and exited records (with rctx, the
// runner's context), each read back and acknowledged (with ctx, the send
// loop's).
func benchJobEvents(b *testing.B, ob *outbox, ctx, rctx context.Context, i int, reason string) {
	id := "a" + strconv.Itoa(i)
	if _, err := ob.alloc(ctx, id); err != nil {
		b.Fatal(err)
	}
	for _, k := range []string{api.EventStarted, api.EventExited} {
		if _, err := ob.record(rctx, api.AllocEvent{Node: "n", AllocID: id, JobID: spec.JobID(i), Kind: k, Time: spec.NewTime(t0), Reason: reason}); err != nil {
			b.Fatal(err)
		}
		evs, err := ob.pending(ctx, 100)
		if err != nil || len(evs) != 1 {
			b.Fatalf("pending: %d events, %v", len(evs), err)
		}
		if err := ob.ack(ctx, evs[0].Seq); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutboxManyAgents is BenchmarkOutboxJobEvents/tmpfs over 200
// outboxes in one process, each job on the next one in turn, as a
// loadtest process holds its agents' (their page caches and growing WAL
// files compete): a job's lookup, its two records, reads and acks, with
// the contexts the agent uses (runners record without cancel).
func BenchmarkOutboxManyAgents(b *testing.B) {
	ctx := context.WithoutCancel(b.Context())
	dir, err := os.MkdirTemp("/dev/shm", "outbox-bench-many")
	if err != nil {
		b.Skip(err)
	}
	defer os.RemoveAll(dir)
	const n = 200
	obs := make([]*outbox, n)
	for i := range obs {
		d := dir + "/" + strconv.Itoa(i)
		if err := os.Mkdir(d, 0o700); err != nil {
			b.Fatal(err)
		}
		if obs[i], err = openOutbox(ctx, slog.Default(), d, t0); err != nil {
			b.Fatal(err)
		}
		defer obs[i].Close()
	}
	var ru0, ru1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	i := 0
	for b.Loop() {
		i++
		benchJobEvents(b, obs[i%n], ctx, ctx, i, "a reason of some length to be like the real body of an event")
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(ru1.Stime.Nano()-ru0.Stime.Nano())/float64(b.N), "sys-ns/op")
}

// TestOutboxNewFileLayout: a new outbox.db gets 1 KiB pages and an allocs
// table without rowids (fewer bytes and pages per event's commit), in WAL
// mode with its index in the agent's memory (no -shm file); an outbox.db
// of an older agent (4 KiB pages, allocs with rowids) keeps its layout and
// works as before.
func TestOutboxNewFileLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	layout := func(ob *outbox) (pageSize int, journal, allocs string) {
		t.Helper()
		if err := ob.db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
			t.Fatal(err)
		}
		if err := ob.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
			t.Fatal(err)
		}
		if err := ob.db.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = 'allocs'`).Scan(&allocs); err != nil {
			t.Fatal(err)
		}
		return pageSize, journal, allocs
	}
	roundTrip := func(ob *outbox, id string) {
		t.Helper()
		for _, k := range []string{api.EventStarted, api.EventExited} {
			if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: 1, Kind: k, Time: spec.NewTime(t0), Reason: strings.Repeat("r", 2000)}); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := ob.allocQuery(ctx, id); err != nil || !r.Started || !r.Exited {
			t.Errorf("alloc %s = %+v, %v; want started and exited", id, r, err)
		}
		evs, err := ob.pending(ctx, 100)
		if err != nil || len(evs) < 2 || evs[len(evs)-1].Reason != strings.Repeat("r", 2000) {
			t.Errorf("pending: %d events, %v; want the two just recorded, whole (a row longer than a page)", len(evs), err)
		}
	}

	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	ps, journal, allocs := layout(ob)
	if ps != outboxPageSize || journal != "wal" || !strings.Contains(allocs, "WITHOUT ROWID") {
		t.Errorf("new outbox.db: page_size %d, journal_mode %s, allocs %q; want %d, wal, WITHOUT ROWID", ps, journal, allocs, outboxPageSize)
	}
	roundTrip(ob, "1.1")
	if _, err := os.Lstat(filepath.Join(dir, "outbox.db-shm")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outbox.db-shm: %v; want none (the WAL index in the agent's memory)", err)
	}
	ob.Close()
	ob, err = openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ob.allocQuery(ctx, "1.1"); err != nil || !r.Exited {
		t.Errorf("alloc 1.1 after a reopen = %+v, %v; want exited", r, err)
	}
	roundTrip(ob, "1.2")
	if _, err := os.Lstat(filepath.Join(dir, "outbox.db-shm")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("outbox.db-shm after a reopen: %v; want none", err)
	}
	ob.Close()

	// An older agent's outbox.db: made with SQLite's defaults.
	old := t.TempDir()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(old, "outbox.db")+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE allocs (alloc_id TEXT PRIMARY KEY, job_id INTEGER NOT NULL, started INTEGER NOT NULL DEFAULT 0,
		exited INTEGER NOT NULL DEFAULT 0, stop_state TEXT NOT NULL DEFAULT '', stop_why TEXT NOT NULL DEFAULT '',
		signal_seq INTEGER NOT NULL DEFAULT 0, updated_ns INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ob, err = openOutbox(ctx, slog.Default(), old, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ps, journal, allocs = layout(ob)
	if ps != 4096 || journal != "wal" || strings.Contains(allocs, "WITHOUT ROWID") {
		t.Errorf("older outbox.db: page_size %d, journal_mode %s, allocs %q; want its own 4096, wal, with rowids", ps, journal, allocs)
	}
	roundTrip(ob, "2.1")
}

// TestOutboxSeqsNeverReused: a new outbox.db's events table has no
// AUTOINCREMENT (whose sequence row is another page written with every
// event's commit); record numbers events on from the highest seq given,
// which events_seq keeps whenever the table may be left without it, so
// no seq comes again after the table was emptied by acknowledgements (a
// flush, then a kill -9) or by a change of controller identity. An older
// agent's outbox.db (AUTOINCREMENT) goes on from SQLite's sequence.
func TestOutboxSeqsNeverReused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ob.Close() }()
	var seqTables int
	if err := ob.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE name = 'sqlite_sequence'`).Scan(&seqTables); err != nil || seqTables != 0 {
		t.Errorf("new outbox.db: %d sqlite_sequence tables (%v), want none (no AUTOINCREMENT)", seqTables, err)
	}
	rec := func(id string, want uint64) {
		t.Helper()
		seq, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)})
		if err != nil {
			t.Fatal(err)
		}
		if seq != want {
			t.Errorf("record %s: seq %d, want %d", id, seq, want)
		}
	}
	kill := func() { // as a kill -9: nothing flushed, then a restart
		t.Helper()
		if err := ob.db.Close(); err != nil {
			t.Fatal(err)
		}
		if ob, err = openOutbox(ctx, slog.Default(), dir, t0); err != nil {
			t.Fatal(err)
		}
	}
	rec("1.1", 1)
	rec("2.1", 2)
	rec("3.1", 3)
	if err := ob.ack(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := ob.flushAcks(ctx); err != nil { // the table is empty now
		t.Fatal(err)
	}
	kill()
	if evs, err := ob.pending(ctx, 10); err != nil || len(evs) != 0 {
		t.Errorf("pending after the flush and a restart: %d events, %v; want none", len(evs), err)
	}
	rec("4.1", 4)

	// A change of controller identity drops the undelivered events.
	if _, _, err := ob.serve(ctx, "ctl-a", nil, t0); err != nil {
		t.Fatal(err)
	}
	rec("5.1", 5)
	if _, dropped, err := ob.serve(ctx, "ctl-b", nil, t0); err != nil || dropped != 2 {
		t.Fatalf("serve ctl-b: dropped %d, %v; want the 2 undelivered", dropped, err)
	}
	kill()
	rec("6.1", 6)

	// An older agent's outbox.db, its events table AUTOINCREMENT and
	// emptied (SQLite's sequence at 10).
	old := t.TempDir()
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(old, "outbox.db")+"?_journal_mode=WAL")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)`,
		`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) INSERT INTO events (body) SELECT '{}' FROM n`,
		`DELETE FROM events`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	ob.Close()
	dir = old
	if ob, err = openOutbox(ctx, slog.Default(), dir, t0); err != nil {
		t.Fatal(err)
	}
	rec("7.1", 11)
	var sq int64
	if err := ob.db.QueryRowContext(ctx, `SELECT seq FROM sqlite_sequence WHERE name = 'events'`).Scan(&sq); err != nil || sq != 11 {
		t.Errorf("older outbox.db's sequence: %d, %v; want 11 (an older agent goes on from there)", sq, err)
	}
	kill()
	rec("8.1", 12)
}

// TestOutboxRecordAll: events recorded together (a sampling's usage
// samples) are one transaction: consecutive seqs in their order, each
// read back and an exited one's allocation marked, all there after a
// kill -9 (the database closed without a flush); one that cannot be
// encoded fails the whole call and records none of them.
func TestOutboxRecordAll(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventStarted, Time: spec.NewTime(t0)}); err != nil {
		t.Fatal(err)
	}
	usage := func(alloc string, v float64) api.AllocEvent {
		return api.AllocEvent{Node: "n", AllocID: alloc, JobID: 1, Kind: api.EventUsage, Time: spec.NewTime(t0),
			Usage: &api.UsageSample{ID: alloc, GPUUtilAvg: v}}
	}
	bad := []api.AllocEvent{usage("a1", 1), usage("a2", math.NaN()), usage("a3", 3)}
	if err := ob.recordAll(ctx, bad, make([]uint64, len(bad))); err == nil {
		t.Fatal("recordAll with a NaN succeeded")
	}
	evs := []api.AllocEvent{usage("a1", 1), usage("a2", 2),
		{Node: "n", AllocID: "a1", JobID: 1, Kind: api.EventExited, Time: spec.NewTime(t0), State: spec.StateCompleted}}
	seqs := make([]uint64, len(evs))
	if err := ob.recordAll(ctx, evs, seqs); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{2, 3, 4}, seqs); diff != "" {
		t.Errorf("seqs (-want +got):\n%s", diff)
	}
	check := func(when string) {
		t.Helper()
		got, err := ob.pending(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, ev := range got {
			kinds = append(kinds, fmt.Sprintf("%d %s %s", ev.Seq, ev.AllocID, ev.Kind))
		}
		want := []string{"1 a1 started", "2 a1 usage", "3 a2 usage", "4 a1 exited"}
		if diff := cmp.Diff(want, kinds); diff != "" {
			t.Errorf("%s: pending (-want +got):\n%s", when, diff)
		}
		if r, err := ob.allocQuery(ctx, "a1"); err != nil || !r.Started || !r.Exited {
			t.Errorf("%s: alloc a1 = %+v, %v; want started and exited", when, r, err)
		}
	}
	check("recorded")
	if err := ob.db.Close(); err != nil { // as a kill -9: no flush
		t.Fatal(err)
	}
	if ob, err = openOutbox(ctx, slog.Default(), dir, t0); err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	check("reopened")
	if got, err := ob.record(ctx, usage("a2", 5)); err != nil || got != 5 {
		t.Errorf("the next record after the failed call's seqs = %d, %v; want 5 (none reused)", got, err)
	}
}

// TestOutboxGroupCommit: records that queue while a transaction runs
// (here: while the test holds it) are committed together in the next
// one, each answered with its own seq once that commit is done, in the
// order they queued; nothing is answered before its commit.
func TestOutboxGroupCommit(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ob, err := openOutbox(ctx, slog.Default(), dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	ob.mu.Lock() // a transaction in progress
	const n = 4
	seqs := make([]uint64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		// One at a time into the queue, so the order is known.
		wg.Add(1)
		go func() {
			defer wg.Done()
			seqs[i], errs[i] = ob.record(ctx, api.AllocEvent{Node: "n", AllocID: "a" + strconv.Itoa(i), JobID: spec.JobID(i), Kind: api.EventStarted, Time: spec.NewTime(t0)})
		}()
		waitFor(t, "record queued", func() bool {
			ob.qmu.Lock()
			defer ob.qmu.Unlock()
			return len(ob.queue) == i+1
		})
	}
	if c := ob.commits.Load(); c != 0 {
		t.Fatalf("%d commits while the transaction was held", c)
	}
	before := ob.commits.Load()
	ob.mu.Unlock()
	wg.Wait()
	for i := range n {
		if errs[i] != nil || seqs[i] != uint64(i+1) {
			t.Errorf("record %d: seq %d, %v; want %d", i, seqs[i], errs[i], i+1)
		}
	}
	if c := ob.commits.Load() - before; c != 1 {
		t.Errorf("%d commits for %d queued records, want 1", c, n)
	}
	if err := ob.db.Close(); err != nil { // as a kill -9
		t.Fatal(err)
	}
	if ob, err = openOutbox(ctx, slog.Default(), dir, t0); err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	evs, err := ob.pending(ctx, 100)
	if err != nil || len(evs) != n {
		t.Fatalf("after a kill -9: %d events, %v; want %d", len(evs), err, n)
	}
	for i, ev := range evs {
		if r, err := ob.allocQuery(ctx, ev.AllocID); ev.Seq != uint64(i+1) || ev.AllocID != "a"+strconv.Itoa(i) || err != nil || !r.Started {
			t.Errorf("event %d: seq %d alloc %s (started %v, %v)", i, ev.Seq, ev.AllocID, r.Started, err)
		}
	}
}

// BenchmarkOutboxConcurrentJobs is BenchmarkOutboxJobEvents with eight
// runners recording at once into one outbox (a node's jobs starting and
// ending together): what group commit saves. disk: each commit's fsync
// on the test's temp dir (a node's /var/lib/gpud); tmpfs: SQLite's CPU
// alone. Each op is one job's started and exited records and their ack.
func BenchmarkOutboxConcurrentJobs(b *testing.B) {
	for _, kind := range []string{"tmpfs", "disk"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			if kind == "tmpfs" {
				d, err := os.MkdirTemp("/dev/shm", "outbox-bench")
				if err != nil {
					b.Skip("no /dev/shm:", err)
				}
				defer os.RemoveAll(d)
				dir = d
			}
			ctx := context.WithoutCancel(b.Context())
			ob, err := openOutbox(ctx, slog.Default(), dir, t0)
			if err != nil {
				b.Fatal(err)
			}
			defer ob.Close()
			var next atomic.Int64
			cpu0 := processCPU()
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					id := "a" + strconv.FormatInt(i, 10)
					var seq uint64
					for _, k := range []string{api.EventStarted, api.EventExited} {
						if seq, err = ob.record(ctx, api.AllocEvent{Node: "n", AllocID: id, JobID: spec.JobID(i), Kind: k, Time: spec.NewTime(t0)}); err != nil {
							b.Error(err)
							return
						}
					}
					if err := ob.ack(ctx, seq); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
