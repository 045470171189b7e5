package server_test

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/slurm"
)

// BenchmarkSacct100k runs `sacct -P -a -S 2025-01-01` (gpuq/slurm, output
// counted and discarded) against a controller whose accounting holds
// 100,000 ended jobs: the accounting query, the JSON over the unix socket,
// the client's decoding and formatting, all but process start. The
// default fields and -l (23 fields).
func BenchmarkSacct100k(b *testing.B) {
	const n = 100000
	db, err := accounting.Open(filepath.Join(b.TempDir(), "accounting.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	at := func(s int) spec.Time { return spec.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	batch := make([]spec.Job, 0, 1000)
	for id := 1; id <= n; id++ {
		batch = append(batch, spec.Job{ID: spec.JobID(id),
			JobSpec: spec.JobSpec{Name: "train", Account: fmt.Sprintf("acct%d", id%50), Partition: "gpu", TimeLimit: spec.Duration(2 * time.Hour)},
			User:    fmt.Sprintf("u%d", id%1000), UID: uint32(1000 + id%1000), State: spec.StateCompleted,
			SubmitTime: at(id * 30), StartTime: at(id*30 + 60), EndTime: at(id*30 + 3660), Attempt: 1,
			Alloc: &spec.Alloc{ID: fmt.Sprintf("a%d", id), JobID: spec.JobID(id), Attempt: 1, StartTime: at(id*30 + 60),
				Nodes: []spec.NodeAlloc{{Node: fmt.Sprintf("gpu%02d", id%64), CPUs: 8, MemMiB: 65536, GPUs: []string{fmt.Sprintf("GPU-%d", id)}}}}})
		if len(batch) == cap(batch) {
			if err := db.RecordJobs(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	addr, _, _ := servertest.Start(b, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"default", []string{"-P", "-a", "-S", "2025-01-01"}},
		{"long", []string{"-P", "-a", "-S", "2025-01-01", "-l"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var out countWriter
			for b.Loop() {
				out = 0
				c := &slurm.Cmd{Name: "sacct", Args: bc.args, Stdout: &out, Stderr: io.Discard, Now: time.Now(), Controller: addr, User: "root"}
				if err := c.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			if out < n*30 {
				b.Fatalf("sacct wrote %d bytes for %d jobs", out, n)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/op")
		})
	}
}
