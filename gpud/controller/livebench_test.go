package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkLiveBurst1000x8 is `make bench-fleet-live` inside the
// controller, without HTTP, TLS, agents or fsync (a store that keeps
// nothing): 1,000 nodes × 8 GPUs free, 8 submitters each submitting one
// 1-GPU job at a time (a round is their 8 calls, concurrent), and each
// job ending 6,000 starts after its own (3-s jobs at 2,000 starts/s), its
// exit sent as its node would. 20,000 submissions and 20,000 ends pass
// the kept State's event bound (maxKeptEvents). It reports the jobs not
// RUNNING when their submission returned (late: they waited for a cycle
// after their commit), the full cycles run during the burst, and the p99
// and longest round's wall time (ms), where a full cycle in a batch shows.
//
//	go test -run '^$' -bench LiveBurst1000x8 -benchtime 3x ./gpud/controller/
func BenchmarkLiveBurst1000x8(b *testing.B) {
	const nodes, gpus, jobs, running, submitters = 1000, 8, 20000, 6000, 8
	store := newFakeStore()
	store.discard = true
	h := newHarnessAt(b, store, func(c *Config) { c.MaxSubmitJobsPerUser = 0 }, t0)
	ctx := context.Background()
	seq := map[string]uint64{}
	for i := range nodes {
		name := fmt.Sprintf("n%04d", i)
		inv := spec.Inventory{Name: name, CPUs: 128, MemMiB: 2 << 20}
		for g := range gpus {
			inv.GPUs = append(inv.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "h100"})
		}
		if _, err := h.c.Register(ctx, root, inv); err != nil {
			b.Fatal(err)
		}
	}
	js := spec.JobSpec{Name: "j", Script: "x", WorkDir: "/tmp",
		Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1, CPUsPerNode: 1, MemMiB: 1024}, TimeLimit: spec.Duration(time.Hour)}
	end := func(j spec.Job) {
		node := j.Alloc.Nodes[0].Node
		seq[node]++
		if _, err := h.c.NodeEvents(ctx, root, node, []NodeEvent{{Seq: seq[node], AllocID: j.Alloc.ID, JobID: j.ID, Kind: EventExited, State: spec.StateCompleted}}); err != nil {
			b.Fatal(err)
		}
	}
	var late, full int
	var rounds []time.Duration
	for b.Loop() {
		h.settle()
		full0 := h.fullCycles()
		var started []spec.Job // oldest first
		var lateNow atomic.Int64
		for sent := 0; sent < jobs; sent += submitters {
			ids := make([]spec.JobID, submitters)
			began := time.Now()
			var wg sync.WaitGroup
			for k := range submitters {
				wg.Go(func() {
					id, err := h.c.Submit(ctx, alice, js)
					if err != nil {
						b.Error(err)
						return
					}
					ids[k] = id
					if j, err := h.c.Job(ctx, id); err != nil || j.State != spec.StateRunning {
						lateNow.Add(1)
					}
				})
			}
			wg.Wait()
			rounds = append(rounds, time.Since(began))
			for _, id := range ids {
				j, err := h.c.Job(ctx, id)
				if err == nil && j.State != spec.StateRunning {
					h.settle() // the cycle the owner loop runs after the commit
					j, err = h.c.Job(ctx, id)
				}
				if err != nil || j.State != spec.StateRunning {
					b.Fatalf("job %d not running after a cycle (%v, %v): the fleet has %d GPUs for %d jobs", id, j.State, err, nodes*gpus, running)
				}
				started = append(started, j)
			}
			for len(started) > running {
				end(started[0])
				started = started[1:]
			}
		}
		full += int(h.fullCycles() - full0)
		for _, j := range started {
			end(j)
		}
		late += int(lateNow.Load())
	}
	slices.Sort(rounds)
	n := float64(b.N)
	b.ReportMetric(float64(late)/n, "late/burst")
	b.ReportMetric(float64(full)/n, "fullcycles/burst")
	b.ReportMetric(float64(rounds[len(rounds)*99/100].Microseconds())/1000, "p99-round-ms")
	b.ReportMetric(float64(rounds[len(rounds)-1].Microseconds())/1000, "max-round-ms")
}
