package ha

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

func testFSM(t *testing.T) *fsm {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "state.db"), store.Replica())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	acct, err := accounting.Open(filepath.Join(dir, "accounting.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { acct.Close() })
	return &fsm{log: slog.New(slog.DiscardHandler), state: st, acct: acct, dir: filepath.Join(dir, "snapwork"), apis: map[string]string{}}
}

func testRows(t *testing.T, s *store.Store, first spec.JobID, n int) *store.Rows {
	t.Helper()
	var jobs []*spec.Job
	for i := range n {
		jobs = append(jobs, &spec.Job{ID: first + spec.JobID(i), JobSpec: spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", Env: []string{"A=b"}},
			User: "alice", UID: 1000, State: spec.StatePending})
	}
	node := &spec.Node{Inventory: spec.Inventory{Name: "n1", CPUs: 4}, State: spec.NodeDrain, Reason: "why"}
	r, err := s.Encode(jobs, []*spec.Node{node}, first+spec.JobID(n))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A commit's rows come out of the log as the leader encoded them; a
// damaged entry is refused, not misread.
func TestRowsEntryRoundTrip(t *testing.T) {
	f := testFSM(t)
	r := testRows(t, f.state, 1, 3)
	data := appendRows(nil, r)
	if data[0] != binaryMark || data[1] != binState {
		t.Fatalf("entry starts % x; want the binary mark and kind", data[:2])
	}
	got, err := decodeRows(data[2:])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("decoded rows differ (-encoded +decoded):\n%s", diff)
	}
	for _, cut := range []int{3, len(data) / 2, len(data) - 1} {
		if _, err := decodeRows(data[2:cut]); err == nil {
			t.Errorf("an entry cut at %d of %d bytes decoded", cut, len(data))
		}
	}
	if _, err := decodeRows(append(data[2:len(data):len(data)], 0)); err == nil {
		t.Error("an entry with a byte after its last row decoded")
	}
	// A count larger than the entry could hold is refused before any
	// allocation.
	if _, err := decodeRows([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Error("an entry claiming 4 billion payload rows decoded")
	}
}

// The FSM applies binary commits and still applies the JSON commits an
// older gpud logged (a group upgraded in place replays them); ApplyBatch
// applies a run of commits in one transaction, and gives each entry of a
// batch its own answer.
func TestFSMAppliesBinaryJSONAndBatches(t *testing.T) {
	ctx := context.Background()
	leader := testFSM(t)
	f := testFSM(t)
	old, err := json.Marshal(command{Kind: kindState, NextID: 3, Jobs: []*spec.Job{
		{ID: 1, JobSpec: spec.JobSpec{Script: "s"}, User: "bob", State: spec.StatePending},
		{ID: 2, JobSpec: spec.JobSpec{Script: "s"}, User: "bob", State: spec.StatePending}}})
	if err != nil {
		t.Fatal(err)
	}
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: old},
		{Index: 2, Type: raft.LogConfiguration, Data: []byte("not ours")},
		{Index: 3, Type: raft.LogCommand, Data: appendRows(nil, testRows(t, leader.state, 3, 2))},
		{Index: 4, Type: raft.LogCommand, Data: appendRows(nil, testRows(t, leader.state, 5, 2))},
		{Index: 5, Type: raft.LogCommand, Data: []byte{binaryMark, binState, 7}},
		{Index: 6, Type: raft.LogCommand, Data: appendRows(nil, testRows(t, leader.state, 7, 1))},
	}
	out := f.ApplyBatch(logs)
	if len(out) != len(logs) {
		t.Fatalf("ApplyBatch answered %d of %d entries", len(out), len(logs))
	}
	for i, res := range out {
		if bad := i == 4; bad != (res != nil) {
			t.Errorf("entry %d: %v; want an error only for the damaged entry 5", logs[i].Index, res)
		}
	}
	jobs, nodes, next, err := f.state.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 7 || next != 8 || len(nodes) != 1 || nodes[0].Reason != "why" {
		t.Fatalf("after the batch: %d jobs, next id %d, nodes %+v; want 7 jobs, 8, n1 drained", len(jobs), next, nodes)
	}
	if jobs[0].Script != "s" || jobs[6].Script != "#!/bin/sh\ntrue\n" || jobs[6].User != "alice" {
		t.Errorf("jobs 1 and 7: %+v, %+v", jobs[0], jobs[6])
	}
	if n := f.applied.Load(); n != 5 {
		t.Errorf("applied = %d; want 5 (every command entry)", n)
	}
	// One at a time (raft without batching, and the leader's own path).
	g := testFSM(t)
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			g.Apply(l)
		}
	}
	gj, _, _, err := g.state.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jobs, gj); diff != "" {
		t.Errorf("Apply one by one and ApplyBatch differ (-batch +single):\n%s", diff)
	}
}
