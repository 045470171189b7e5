package clients

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkGpusubmitBinary runs the gpusubmit binary once per iteration,
// the way a user's shell loop does, against a cluster whose jobs stay
// pending (no nodes), and reports acknowledged submissions per second.
func BenchmarkGpusubmitBinary(b *testing.B) {
	c := e2etest.StartCluster(b, 0)
	work := b.TempDir()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		r := c.CLI(work, "gpusubmit", "--parsable", "--wrap", "true")
		if r.Code != 0 {
			b.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
}

// BenchmarkTrivialJobThroughput runs trivial jobs end to end (submit,
// schedule, containerd container, exit, accounting) on two nodes and
// reports finished jobs per second. Compare with runtime/containerd's
// BenchmarkBareContainerd on the same machine.
func BenchmarkTrivialJobThroughput(b *testing.B) {
	c := e2etest.StartCluster(b, 2, "--cpus", "8")
	work := b.TempDir()
	cl := c.Client()
	ctx := context.Background()
	js := spec.JobSpec{
		Name:      "trivial",
		Script:    "#!/bin/sh\ntrue\n",
		WorkDir:   work,
		SubmitDir: work,
		Output:    filepath.Join(work, "t-%j.out"),
		Requeue:   true,
		TimeLimit: spec.Duration(time.Minute),
	}
	b.ResetTimer()
	start := time.Now()
	ids := make([]spec.JobID, 0, b.N)
	for range b.N {
		resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, resp.ID)
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			j, err := cl.WaitJob(wctx, id)
			if err != nil || j.State != spec.StateCompleted {
				b.Errorf("job %d: %v %s %s", id, err, j.State, j.Reason)
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// submitConcurrently submits n copies of js over the API from 8
// goroutines, as many clients at once would; a refused submission fails
// the benchmark. The benchmarks that need a large queue fill it alike.
func submitConcurrently(b *testing.B, cl *api.Client, js spec.JobSpec, n int64) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= n {
				if _, err := cl.Submit(context.Background(), api.SubmitRequest{Job: js}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkGpuqList100k times the gpuq binary listing a queue of 100,000
// pending jobs (the squeue-like default view) against gpud standalone.
func BenchmarkGpuqList100k(b *testing.B) {
	const n = 100000
	c := e2etest.StartCluster(b, 0)
	work := b.TempDir()
	cl := c.Client()
	js := spec.JobSpec{Name: "queued", Script: "#!/bin/sh\ntrue\n", WorkDir: work, SubmitDir: work, Requeue: true}
	submitConcurrently(b, cl, js, n)
	b.ResetTimer()
	for b.Loop() {
		r := c.CLI(work, "gpuq", "--noheader")
		if r.Code != 0 {
			b.Fatalf("gpuq: exit %d: %s", r.Code, r.Stderr)
		}
		if lines := strings.Count(r.Stdout, "\n"); lines != n {
			b.Fatalf("gpuq listed %d jobs, want %d", lines, n)
		}
	}
}
