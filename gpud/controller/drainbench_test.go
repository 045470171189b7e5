package controller

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkDrain1000x8 is issue 15's 100,000-job burst inside the
// controller, without HTTP, TLS or agents: 1,000 nodes × 8 GPUs, 100,000
// pending 1-GPU jobs. Each iteration ends every running job (8,000 exit
// events, one NodeEvents call per node from 16 goroutines, as the API's
// handlers would send them) and runs the scheduling cycle that starts the
// next 8,000. It reports starts/s of the controller alone (wall time) and
// starts per CPU second of the process (which holds on a shared machine),
// against gpud loadtest's figure, where the harness, TLS and HTTP share
// the same two cores.
//
//	go test -run '^$' -bench Drain1000x8 -benchtime 5x -cpuprofile cpu.out ./gpud/controller/
func BenchmarkDrain1000x8(b *testing.B) {
	const nodes, gpus, jobs = 1000, 8, 100000
	store := newFakeStore()
	store.discard = true
	h := newHarnessAt(b, store, func(c *Config) { c.MaxSubmitJobsPerUser = 0 }, t0)
	ctx := context.Background()
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("n%04d", i)
		inv := spec.Inventory{Name: names[i], CPUs: 128, MemMiB: 2 << 20}
		for g := range gpus {
			inv.GPUs = append(inv.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "h100"})
		}
		if _, err := h.c.Register(ctx, root, inv); err != nil {
			b.Fatal(err)
		}
	}
	for range jobs / 1000 {
		js := spec.JobSpec{Name: "j", Script: "x", WorkDir: "/tmp", Array: "0-999",
			Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1, CPUsPerNode: 1, MemMiB: 1024}, TimeLimit: spec.Duration(time.Hour)}
		if _, err := h.c.SubmitAll(ctx, alice, js); err != nil {
			b.Fatal(err)
		}
	}
	h.settle()
	seq := make([]uint64, nodes)
	running := func() map[string][]NodeEvent {
		out := map[string][]NodeEvent{}
		_ = h.c.query(ctx, func() error {
			for i, name := range names {
				n := h.c.st.nodes[name]
				for allocID, id := range n.allocs {
					if rec := h.c.st.jobs[id]; rec != nil && rec.job.State == spec.StateRunning {
						seq[i]++
						out[name] = append(out[name], NodeEvent{Seq: seq[i], AllocID: allocID, JobID: id, Kind: EventExited, State: spec.StateCompleted})
					}
				}
			}
			return nil
		})
		return out
	}
	started := 0
	var elapsed, cpu time.Duration
	for b.Loop() {
		evs := running()
		if len(evs) == 0 {
			b.Fatal("no job running: the queue drained; use a smaller -benchtime")
		}
		began, cpu0 := time.Now(), cpuTime()
		work := make(chan string, len(evs))
		for name := range evs {
			work <- name
		}
		close(work)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for name := range work {
					if _, err := h.c.NodeEvents(ctx, root, name, evs[name]); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
		h.settle()
		elapsed += time.Since(began)
		cpu += cpuTime() - cpu0
		n := 0
		for _, e := range evs {
			n += len(e)
		}
		started += n // every exit frees one GPU that a pending job takes
	}
	b.ReportMetric(float64(started)/elapsed.Seconds(), "starts/s")
	// Per CPU second of the process: the figure that holds on a shared
	// machine, where wall time depends on what else runs.
	b.ReportMetric(float64(started)/cpu.Seconds(), "starts/cpu-s")
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublishView is what the owner loop pays to publish one job's
// view (at every change: submit, start, end): a running 1-GPU job.
//
//	go test -run '^$' -bench PublishView -benchmem ./gpud/controller/
func BenchmarkPublishView(b *testing.B) {
	j := spec.Job{ID: 12345, JobSpec: spec.JobSpec{Name: "train", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Partition: "gpu",
		Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1, CPUsPerNode: 1, MemMiB: 1024}, TimeLimit: spec.Duration(time.Hour)},
		User: "alice", UID: 1001, GID: 1001, State: spec.StateRunning, Attempt: 1,
		SubmitTime: spec.NewTime(t0), StartTime: spec.NewTime(t0.Add(time.Second)),
		Alloc: &spec.Alloc{ID: "a12345", JobID: 12345, Attempt: 1, StartTime: spec.NewTime(t0.Add(time.Second)),
			Nodes: []spec.NodeAlloc{{Node: "n0001", CPUs: 1, MemMiB: 1024, GPUs: []string{"GPU-1-3"}}}}}
	for b.Loop() {
		_ = newView(&j)
	}
}
