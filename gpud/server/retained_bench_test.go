package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"testing"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkEndedJobRetained is what an ended job costs the controller's
// Go heap until it is purged (min_job_age, 5 minutes by default: at
// 2,000 jobs/s that is 600,000 ended jobs held at once), and what its
// whole life allocates: each op submits 1,000 one-GPU jobs through the
// API (16 submitters over the unix socket, the audit log on), and 10
// fake nodes of 8 GPUs take their assignments and post each job's
// started and exited events, as an agent does. After the last op it
// collects garbage and reports the heap grown since before the first,
// per job ended (retained-B/job), and the bytes and allocations per job
// of the whole process (alloc-B/job, allocs/job: server, controller and
// the clients alike). SQLite's own memory is C's and not counted.
//
//	go test -run '^$' -bench EndedJobRetained -benchtime 5x ./gpud/server/
func BenchmarkEndedJobRetained(b *testing.B) {
	const nodes, gpus, perOp, submitters = 10, 8, 1000, 16
	db, err := accounting.Open(filepath.Join(b.TempDir(), "accounting.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	// Logs go nowhere: through t.Log a benchmark would hold every line.
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	addr, _, _ := servertest.Start(b, nil, servertest.Options{
		ControllerOptions: []controller.Option{controller.WithLogger(log)},
		ServerOptions:     []server.Option{server.WithLogger(log), server.WithAudit(db, nil)}})
	c := client(b, addr)
	ctx := context.Background()
	for i := range nodes {
		if _, err := c.Register(ctx, inventory(fmt.Sprintf("n%02d", i), gpus)); err != nil {
			b.Fatal(err)
		}
	}
	seq := make([]uint64, nodes)
	// run submits n jobs and ends them all: a job starts when a GPU is
	// free, so the nodes end what they hold whenever the fleet is full.
	run := func(n int) {
		for done := 0; done < n; {
			batch := min(n-done, nodes*gpus)
			var wg sync.WaitGroup
			for k := range submitters {
				wg.Go(func() {
					for i := k; i < batch; i += submitters {
						js := jobSpec("ended")
						js.Resources.GPUsPerNode = 1
						if _, err := c.Submit(ctx, api.SubmitRequest{Job: js}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			ended := 0
			for ended < batch {
				for i := range nodes {
					node := fmt.Sprintf("n%02d", i)
					as, err := c.Assignments(ctx, node, 0, 0)
					if err != nil {
						b.Fatal(err)
					}
					var evs []api.AllocEvent
					for _, a := range as.Assignments {
						seq[i]++
						evs = append(evs, api.AllocEvent{Seq: seq[i], Node: node, AllocID: a.Alloc.ID, JobID: a.Job.ID, Kind: api.EventStarted})
						seq[i]++
						evs = append(evs, api.AllocEvent{Seq: seq[i], Node: node, AllocID: a.Alloc.ID, JobID: a.Job.ID, Kind: api.EventExited, State: spec.StateCompleted})
					}
					if len(evs) == 0 {
						continue
					}
					if _, err := c.Events(ctx, node, evs); err != nil {
						b.Fatal(err)
					}
					ended += len(evs) / 2
				}
			}
			done += batch
		}
	}
	run(perOp) // the first jobs' maps and caches, and the connection
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	jobs := 0
	for b.Loop() {
		run(perOp)
		jobs += perOp
	}
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	n := float64(jobs)
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "retained-B/job")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "alloc-B/job")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/job")
}
