package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/store"
)

// benchScript returns a shell script of about size bytes.
func benchScript(size int) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "echo \"step %d of the job, with some text to make a line\"\n", i)
	}
	return b.String()
}

// BenchmarkArraySubmit is issue 12's hole 4: alice submits an array with
// a big script to a controller on a real state.db (SQLite, WAL,
// synchronous=FULL) while bob lists jobs and submits a small job in a
// loop. It reports the submit's wall time (the owner loop holds the
// whole commit), bob's worst and median request latency during it, and
// the bytes state.db and its WAL hold afterwards.
//
//	go test -run '^$' -bench 'ArraySubmit/tasks=10000/' -benchtime 3x ./gpud/controller/
func BenchmarkArraySubmit(b *testing.B) {
	for _, tc := range []struct{ tasks, script int }{{1000, 1 << 20}, {10000, 1 << 20}} {
		b.Run(fmt.Sprintf("tasks=%d/script=%dKiB", tc.tasks, tc.script>>10), func(b *testing.B) {
			script := benchScript(tc.script)
			env := make([]string, 60)
			for i := range env {
				env[i] = fmt.Sprintf("VAR_%02d=%s", i, strings.Repeat("v", 40))
			}
			var submitMs, dbMB []float64
			var other []time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				st, err := store.Open(context.Background(), filepath.Join(dir, "state.db"))
				if err != nil {
					b.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.MaxSubmitJobsPerUser = 0
				c, err := New(cfg, st, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				b.StartTimer()

				var wg sync.WaitGroup
				stop := make(chan struct{})
				var lat []time.Duration
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						t := time.Now()
						var err error
						if i%2 == 0 {
							_, err = c.ListJobs(ctx, JobFilter{Users: []string{"bob"}})
						} else {
							_, err = c.Submit(ctx, bob, spec.JobSpec{Name: "small", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Hold: true})
						}
						if err != nil {
							b.Error(err)
							return
						}
						lat = append(lat, time.Since(t))
						time.Sleep(5 * time.Millisecond)
					}
				})
				time.Sleep(20 * time.Millisecond) // bob is being served
				t := time.Now()
				ids, err := c.SubmitAll(ctx, alice, spec.JobSpec{Name: "big", Script: script, Env: env, WorkDir: "/tmp",
					Array: fmt.Sprintf("0-%d", tc.tasks-1), Hold: true})
				d := time.Since(t)
				close(stop)
				wg.Wait()
				if err != nil {
					b.Fatal(err)
				}
				if len(ids) != tc.tasks {
					b.Fatalf("array made %d jobs, want %d", len(ids), tc.tasks)
				}
				b.StopTimer()
				submitMs = append(submitMs, float64(d.Microseconds())/1000)
				other = append(other, lat...)
				var size int64
				for _, f := range []string{"state.db", "state.db-wal"} {
					if fi, err := os.Stat(filepath.Join(dir, f)); err == nil {
						size += fi.Size()
					}
				}
				dbMB = append(dbMB, float64(size)/(1<<20))
				cancel()
				<-done
				st.Close()
				b.StartTimer()
			}
			slices.Sort(other)
			b.ReportMetric(slices.Min(submitMs), "submit-min-ms")
			b.ReportMetric(slices.Max(submitMs), "submit-max-ms")
			if len(other) > 0 {
				b.ReportMetric(float64(other[len(other)/2].Microseconds())/1000, "other-p50-ms")
				b.ReportMetric(float64(other[len(other)-1].Microseconds())/1000, "other-max-ms")
			}
			b.ReportMetric(slices.Max(dbMB), "db+wal-MB")
		})
	}
}

// BenchmarkPendingJobHeap is issue 12's hole 10 measurement: the
// controller's heap per pending job at 100,000 held jobs of one user,
// submitted one by one (each with its own copy of a 60-variable, ~3 KiB
// environment, as gpusubmit exports by default) or as arrays of 1,000
// tasks (which share the script and environment). The store keeps
// nothing, so this is the controller's own memory: jobs, views, queues.
//
//	go test -run '^$' -bench PendingJobHeap -benchtime 1x ./gpud/controller/
func BenchmarkPendingJobHeap(b *testing.B) {
	const pending = 100000
	for _, tc := range []struct {
		name  string
		array int
	}{{"plain", 0}, {"array1000", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			var perJob float64
			for b.Loop() {
				store := newFakeStore()
				store.discard = true
				h := newHarness(b, store, func(c *Config) { c.MaxSubmitJobsPerUser = 0 })
				ctx := context.Background()
				goruntime.GC()
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				mkEnv := func() []string {
					env := make([]string, 60)
					for i := range env {
						env[i] = fmt.Sprintf("VAR_%02d=%s", i, strings.Repeat("v", 40))
					}
					return env
				}
				var wg sync.WaitGroup
				var next atomic.Int64
				per := max(tc.array, 1)
				for range 4 {
					wg.Go(func() {
						for next.Add(int64(per)) <= pending {
							js := spec.JobSpec{Name: "held", Script: "#!/bin/sh\n#SBATCH --gpus=1\nsrun python train.py --epochs 10\n",
								Env: mkEnv(), WorkDir: "/home/alice/work", SubmitDir: "/home/alice/work", Hold: true}
							if tc.array > 0 {
								js.Array = fmt.Sprintf("0-%d", tc.array-1)
							}
							if _, err := h.c.SubmitAll(ctx, alice, js); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				h.settle()
				n := 0
				_ = h.c.query(ctx, func() error { n = len(h.c.st.pending); return nil })
				if n != pending {
					b.Fatalf("%d jobs pending, want %d", n, pending)
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				perJob = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
				h.stop()
			}
			b.ReportMetric(perJob, "heapB/pending-job")
		})
	}
}
