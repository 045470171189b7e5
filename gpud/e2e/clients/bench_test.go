package clients

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	trivialJobs(b, e2etest.StartCluster(b, 2, "--cpus", "8"))
}

// BenchmarkTrivialJobThroughputPrepared is BenchmarkTrivialJobThroughput
// with node.toml prepared_containers = 4 (the jobs share one shape).
func BenchmarkTrivialJobThroughputPrepared(b *testing.B) {
	trivialJobs(b, e2etest.StartCluster(b, 2, "--cpus", "8", "--node-config", preparedNodeConfig(b, 4)))
}

func trivialJobs(b *testing.B, c *e2etest.Cluster) {
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
	// How many started in a prepared container (the agents' JSON log).
	var all, prepared int
	for _, l := range strings.Split(c.Log.String(), "\n") {
		if strings.Contains(l, "job container started") {
			all++
			if strings.Contains(l, `"prepared":true`) {
				prepared++
			}
		}
	}
	if all > 0 {
		b.ReportMetric(100*float64(prepared)/float64(all), "%prepared")
	}
}

// BenchmarkIdleSubmitToRunning submits one container job at a time to an
// idle two-node cluster and waits for it to end before the next: the time
// from the submit call to the job's first instruction (its script writes
// the time, in ns, as it begins), p50 and p99 in ms. "cold" makes each
// job's container when it starts; "prepared" has node.toml
// prepared_containers = 1, so after the first job of the shape each
// starts in a container prepared while the cluster was idle.
func BenchmarkIdleSubmitToRunning(b *testing.B) {
	for _, mode := range []string{"cold", "prepared"} {
		b.Run(mode, func(b *testing.B) {
			extra := []string{"--cpus", "8"}
			if mode == "prepared" {
				extra = append(extra, "--node-config", preparedNodeConfig(b, 1))
			}
			c := e2etest.StartCluster(b, 2, extra...)
			work := b.TempDir()
			cl := c.Client()
			ctx := context.Background()
			js := spec.JobSpec{Name: "first", Script: "#!/bin/sh\ndate +%s%N > \"$SLURM_SUBMIT_DIR/began-$GPUD_JOB_ID\"\n",
				WorkDir: work, SubmitDir: work, Output: filepath.Join(work, "t-%j.out"), TimeLimit: spec.Duration(time.Minute)}
			var took []time.Duration
			for i := 0; i < b.N+1; i++ { // the first makes the shape known
				t0 := time.Now()
				resp, err := cl.Submit(ctx, api.SubmitRequest{Job: js})
				if err != nil {
					b.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				j, err := cl.WaitJob(wctx, resp.ID)
				cancel()
				if err != nil || j.State != spec.StateCompleted {
					b.Fatalf("job %d: %v %s %s", resp.ID, err, j.State, j.Reason)
				}
				raw, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("began-%d", resp.ID)))
				if err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				if i > 0 {
					took = append(took, time.Unix(0, ns).Sub(t0))
				}
				// Idle between jobs, as on a quiet cluster (and time for
				// the node to prepare the next container).
				time.Sleep(300 * time.Millisecond)
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "ms-p99")
		})
	}
}

// preparedNodeConfig is etc/node.toml with prepared_containers = k.
func preparedNodeConfig(b *testing.B, k int) string {
	base, err := os.ReadFile(e2etest.RepoPath(b, "etc/node.toml"))
	if err != nil {
		b.Fatal(err)
	}
	conf := strings.Replace(string(base), "\nprepared_containers = 0\n", fmt.Sprintf("\nprepared_containers = %d\n", k), 1)
	if conf == string(base) {
		b.Fatal("etc/node.toml lacks prepared_containers = 0")
	}
	p := filepath.Join(b.TempDir(), "node.toml")
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
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
