package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestRecorderBatchesEnds: jobs that end in separate commits reach the
// recorder in one batch when they end within its linger (one accounting
// transaction instead of one per commit); stopping flushes the batch.
// Before the linger each commit's ends were written at once (6 batches
// here, or nearly).
func TestRecorderBatchesEnds(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithRecordLinger(time.Hour))
	h.register("n1", 8)
	var ids []spec.JobID
	for range 6 {
		ids = append(ids, h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }))
	}
	for _, id := range ids {
		h.exit("n1", h.job(id), spec.StateCompleted, 0) // one commit each
	}
	h.stop() // flushes the recorder; it takes rec.mu, so lock only after
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	if h.rec.batches != 1 || len(h.rec.jobs) != len(ids) {
		t.Fatalf("recorder got %d jobs in %d batches, want %d in 1", len(h.rec.jobs), h.rec.batches, len(ids))
	}
}

// TestRecorderWritesFullBatchAtOnce: once recordBatchNow ended jobs are
// queued the recorder writes them without waiting for its linger.
func TestRecorderWritesFullBatchAtOnce(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithRecordLinger(time.Hour))
	const nodes, per = recordBatchNow / 8, 8
	for n := range nodes {
		h.register(fmt.Sprintf("n%d", n), per)
	}
	var ids []spec.JobID
	for range nodes * per {
		ids = append(ids, h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 }))
	}
	byNode := map[string][]NodeEvent{}
	for _, id := range ids {
		j := h.job(id)
		if j.State != spec.StateRunning {
			t.Fatalf("job %d is %s, want RUNNING", id, j.State)
		}
		node := j.Alloc.Nodes[0].Node
		byNode[node] = append(byNode[node], NodeEvent{Seq: uint64(len(byNode[node]) + 1), AllocID: j.Alloc.ID, JobID: id, Kind: EventExited, State: spec.StateCompleted})
	}
	for node, evs := range byNode {
		if _, err := h.c.NodeEvents(context.Background(), root, node, evs); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		h.rec.mu.Lock()
		got := len(h.rec.jobs)
		h.rec.mu.Unlock()
		if got == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recorder got %d of %d ended jobs within 30 s; with %d queued it should write at once", got, len(ids), recordBatchNow)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFlushRecordsWritesAtOnce: a reader of accounting (FlushRecords, as
// sacct's handler calls it) gets the ended jobs written without waiting
// for the recorder's linger.
func TestFlushRecordsWritesAtOnce(t *testing.T) {
	h := newHarnessAt(t, newFakeStore(), nil, t0, WithRecordLinger(time.Hour))
	h.register("n1", 8)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	h.exit("n1", h.job(id), spec.StateCompleted, 0)
	start := time.Now()
	h.c.FlushRecords(context.Background())
	h.rec.mu.Lock()
	got := len(h.rec.jobs)
	h.rec.mu.Unlock()
	if got != 1 {
		t.Fatalf("after FlushRecords (%v) the recorder has %d jobs, want the ended one", time.Since(start), got)
	}
	// Nothing queued: it returns at once all the same.
	h.c.FlushRecords(context.Background())
}
