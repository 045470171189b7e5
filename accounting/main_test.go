package accounting

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gpud/gpud/gpud/spec"
)

// database/sql starts a goroutine per pool; goleak checks Close stops them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the epoch of test times; at(s) is s seconds after it.
var t0 = time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)

func at(sec int64) spec.Time { return spec.NewTime(t0.Add(time.Duration(sec) * time.Second)) }

func openTest(t testing.TB, opts ...Option) *DB {
	t.Helper()
	db, err := Open(t.TempDir()+"/accounting.db", opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// jobBuilder makes spec.Jobs for tests: MakeJob(id).User("bob").Ran(...).Obj().
type jobBuilder struct{ j spec.Job }

// MakeJob is a pending job of alice in account ml, partition gpu, submitted at t0.
func MakeJob(id spec.JobID) *jobBuilder {
	b := &jobBuilder{}
	b.j.ID = id
	b.j.Name = "train"
	b.j.User, b.j.UID = "alice", 1000
	b.j.Account, b.j.Partition, b.j.QOS = "ml", "gpu", "normal"
	b.j.State = spec.StatePending
	b.j.SubmitTime = at(0)
	b.j.TimeLimit = spec.Duration(time.Hour)
	b.j.WorkDir = "/home/alice"
	b.j.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 8, MemMiB: 1024, GPUsPerNode: 1, GPUModel: "h100"}
	return b
}

func (b *jobBuilder) User(u string) *jobBuilder              { b.j.User = u; return b }
func (b *jobBuilder) Account(a string) *jobBuilder           { b.j.Account = a; return b }
func (b *jobBuilder) Partition(p string) *jobBuilder         { b.j.Partition = p; return b }
func (b *jobBuilder) State(s spec.JobState) *jobBuilder      { b.j.State = s; return b }
func (b *jobBuilder) Submit(sec int64) *jobBuilder           { b.j.SubmitTime = at(sec); return b }
func (b *jobBuilder) Begin(sec int64) *jobBuilder            { b.j.BeginTime = at(sec); return b }
func (b *jobBuilder) Resources(r spec.Resources) *jobBuilder { b.j.Resources = r; return b }
func (b *jobBuilder) End(sec int64, s spec.JobState) *jobBuilder {
	b.j.EndTime, b.j.State = at(sec), s
	return b
}

// Ran gives the job attempt's allocation started at start seconds, and
// makes it RUNNING; End ends it.
func (b *jobBuilder) Ran(attempt int, start int64, nodes ...spec.NodeAlloc) *jobBuilder {
	b.j.Attempt = attempt
	b.j.State = spec.StateRunning
	b.j.StartTime = at(start)
	b.j.Nodes, b.j.GPUs = nil, nil
	for _, n := range nodes {
		b.j.Nodes = append(b.j.Nodes, n.Node)
		b.j.GPUs = append(b.j.GPUs, n.GPUs...)
	}
	b.j.Alloc = &spec.Alloc{ID: "a" + string(rune('0'+attempt)), JobID: b.j.ID, Attempt: attempt, Nodes: nodes, StartTime: at(start)}
	return b
}

func (b *jobBuilder) Obj() spec.Job { return b.j }

func node(name string, cpus int, gpus ...string) spec.NodeAlloc {
	return spec.NodeAlloc{Node: name, CPUs: cpus, MemMiB: 1024, GPUs: gpus}
}

func record(t *testing.T, db *DB, jobs ...spec.Job) {
	t.Helper()
	if err := db.RecordJobs(context.Background(), jobs); err != nil {
		t.Fatalf("RecordJobs: %v", err)
	}
}

func jobs(t *testing.T, db *DB, f Filter) []Record {
	t.Helper()
	got, err := db.Jobs(context.Background(), f)
	if err != nil {
		t.Fatalf("Jobs(%+v): %v", f, err)
	}
	return got
}
