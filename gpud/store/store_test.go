package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestApplyLoadRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)

	submit := spec.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC))
	j1 := &spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "a", Script: "#!/bin/sh\necho hi\n", TimeLimit: spec.Duration(time.Hour)},
		User: "alice", UID: 1000, State: spec.StatePending, SubmitTime: submit}
	j2 := &spec.Job{ID: 2, JobSpec: spec.JobSpec{Name: "b", Script: "x"}, User: "bob", State: spec.StateRunning,
		Alloc: &spec.Alloc{ID: "2.1", JobID: 2, Attempt: 1, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 2, GPUs: []string{"GPU-1"}}}}}
	n1 := &spec.Node{Inventory: spec.Inventory{Name: "n1", CPUs: 8, MemMiB: 1024, GPUs: []spec.GPU{{UUID: "GPU-1", Model: "h100"}}},
		State: spec.NodeDrain, Reason: "maintenance"}
	if err := s.Apply(ctx, []*spec.Job{j1, j2}, []*spec.Node{n1}, 3); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// An update replaces the row.
	j1b := *j1
	j1b.State = spec.StateCancelled
	if err := s.Apply(ctx, []*spec.Job{&j1b}, nil, 0); err != nil {
		t.Fatalf("Apply update: %v", err)
	}
	s.Close()

	s2 := open(t, path)
	jobs, nodes, next, err := s2.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff([]spec.Job{j1b, *j2}, jobs); diff != "" {
		t.Errorf("jobs (-want +got):\n%s", diff)
	}
	wantNode := spec.Node{Inventory: n1.Inventory, State: spec.NodeDrain, Reason: "maintenance"}
	if diff := cmp.Diff([]spec.Node{wantNode}, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if next != 3 {
		t.Errorf("next job id = %d, want 3", next)
	}
}

func TestLoadEmptyAndCounterNeverBehindJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	jobs, nodes, next, err := s.Load(ctx)
	if err != nil || len(jobs) != 0 || len(nodes) != 0 || next != 1 {
		t.Fatalf("Load on empty db = %v, %v, %d, %v; want nothing and next id 1", jobs, nodes, next, err)
	}
	if err := s.Apply(ctx, []*spec.Job{{ID: 41, State: spec.StatePending}}, nil, 5); err != nil {
		t.Fatal(err)
	}
	if _, _, next, err := s.Load(ctx); err != nil || next != 42 {
		t.Fatalf("next id = %d (%v), want 42 (past the highest stored job)", next, err)
	}
}

func TestApplyIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	if err := s.Apply(ctx, []*spec.Job{{ID: 1, State: spec.StatePending}}, nil, 2); err != nil {
		t.Fatal(err)
	}
	// A cancelled context fails the batch; nothing of it may be stored.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Apply(cctx, []*spec.Job{{ID: 2, State: spec.StatePending}, {ID: 3}}, nil, 4); err == nil {
		t.Fatal("Apply with a cancelled context succeeded")
	}
	jobs, _, next, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || next != 2 {
		t.Fatalf("after failed batch: %d jobs, next %d; want 1 job, next 2", len(jobs), next)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path)
	if _, err := s.db.ExecContext(ctx, `UPDATE schema_version SET version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(ctx, path); err == nil {
		t.Fatal("Open accepted a database with a newer schema version")
	}
}

func TestDurabilityPragmas(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "state.db"))
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
}

func BenchmarkApply8(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "state.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	id := spec.JobID(1)
	for b.Loop() {
		var batch []*spec.Job
		for range 8 {
			batch = append(batch, &spec.Job{ID: id, State: spec.StatePending, JobSpec: spec.JobSpec{Script: "#!/bin/sh\nsleep 1\n"}})
			id++
		}
		if err := s.Apply(ctx, batch, nil, id); err != nil {
			b.Fatal(err)
		}
	}
}
