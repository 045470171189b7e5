package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// liveJob is a job as gpud loadtest's live burst submits and places it
// (about 1.1 KB of JSON in its row).
func liveJob(id spec.JobID, now time.Time) *spec.Job {
	node := fmt.Sprintf("lt%05d", int(id)%1000)
	gpu := "GPU-" + node + "-1"
	return &spec.Job{ID: id, User: "loadtest", UID: 60000, GID: 60000, State: spec.StateRunning,
		JobSpec: spec.JobSpec{Name: "lt", Partition: "gpu", QOS: "normal", Account: "default",
			Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", SubmitDir: "/tmp", Output: "/dev/null",
			Resources: spec.Resources{Nodes: 1, CPUsPerNode: 1, MemMiB: 1024, GPUsPerNode: 1},
			TimeLimit: spec.Duration(time.Hour)},
		Priority: 10000000, SubmitTime: spec.NewTime(now), Attempt: 1,
		Nodes: []string{node}, GPUs: []string{gpu},
		Alloc: &spec.Alloc{ID: fmt.Sprintf("%d.1", id), JobID: id, Attempt: 1, StartTime: spec.NewTime(now),
			Nodes: []spec.NodeAlloc{{Node: node, Addr: node, CPUs: 1, MemMiB: 1024, GPUs: []string{gpu}}}},
		StdoutPath: "/dev/null", StderrPath: "/dev/null"}
}

// liveMix makes the batches gpud loadtest's live burst commits, perCommit
// jobs of each kind per commit: a job's submission and placement (a new
// row, its payload and the call's audit entry), its start on the node
// (the row again, StartTime and the batch step), its end ~1,000 jobs
// later (the row again, COMPLETED), and the audit entries of the commit
// before forgotten.
type liveMix struct {
	perCommit int
	jobs      map[spec.JobID]*spec.Job
	id        spec.JobID
	now       time.Time
	entry     []byte
	forget    []int64
}

func newLiveMix(perCommit int) *liveMix {
	return &liveMix{perCommit: perCommit, jobs: map[spec.JobID]*spec.Job{}, id: 1, now: time.Unix(1_800_000_000, 0),
		entry: []byte(`{"time":"2026-12-07T16:46:28.297835432Z","user":"loadtest","call":"POST /v1/jobs","` + strings.Repeat("x", 150) + `"}`)}
}

// commit applies the next batch to s.
func (m *liveMix) commit(ctx context.Context, s *Store) error {
	k := m.perCommit
	var batch []*spec.Job
	audits := make([][]byte, 0, k)
	for range k {
		id := m.id
		j := liveJob(id, m.now)
		m.jobs[id] = j
		batch = append(batch, j)
		audits = append(audits, m.entry)
		if o := m.jobs[id-spec.JobID(k)]; o != nil {
			started := *o
			started.StartTime = spec.NewTime(m.now)
			started.Steps = []spec.Step{{ID: "batch", Name: "batch", State: spec.StateRunning, StartTime: spec.NewTime(m.now), Nodes: o.Nodes, NTasks: 1, CPUs: 1, GPUs: 1}}
			m.jobs[o.ID] = &started
			batch = append(batch, &started)
		}
		if o := m.jobs[id-1000]; o != nil {
			ended := *o
			ended.State, ended.Reason, ended.EndTime = spec.StateCompleted, "COMPLETED", spec.NewTime(m.now)
			batch = append(batch, &ended)
			delete(m.jobs, o.ID)
		}
		m.id++
	}
	m.now = m.now.Add(time.Millisecond)
	seqs, err := s.ApplyAudited(ctx, batch, nil, m.id, audits, m.forget)
	m.forget = seqs
	return err
}

// BenchmarkLiveMix commits what gpud loadtest's live burst commits per
// job (liveMix), perCommit jobs of each kind in each commit. It reports
// the CPU and the bytes written per job (WAL frames, checkpoints).
func BenchmarkLiveMix(b *testing.B) {
	for _, k := range []int{3, 6, 12} {
		b.Run(fmt.Sprintf("perCommit=%d", k), func(b *testing.B) {
			ctx := context.Background()
			s, err := Open(ctx, filepath.Join(b.TempDir(), "state.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			m := newLiveMix(k)
			cpu0, w0 := processCPU(b), written(b)
			for b.Loop() {
				if err := m.commit(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N*k), "cpu-µs/job")
			b.ReportMetric(float64(written(b)-w0)/float64(b.N*k), "written-B/job")
			b.ReportMetric(0, "ns/op")
		})
	}
}
