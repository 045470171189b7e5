package controller

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkController100k is the scheduler issue's scale inside the
// controller: 10,000 nodes × 8 GPUs all busy with one 8-GPU job each,
// 100,000 pending jobs (1, 2, 4 and 8 GPUs, 2- and 4-node gangs, array
// tasks, all of them) with multifactor priority and backfill. It reports heap per
// pending job, and the wall time of a full cycle (snapshot, Schedule,
// apply) and of the event-triggered cycles after one submit and one end.
//
//	go test -run '^$' -bench Controller100k -benchtime 5x ./gpud/controller/
func BenchmarkController100k(b *testing.B) {
	const nodes, pending = 10000, 100000
	store := newFakeStore()
	store.discard = true
	h := newHarnessAt(b, store, func(c *Config) {
		c.Priority = PriorityWeights{Age: 1000, JobSize: 500, QOS: 2000}
		c.MaxSubmitJobsPerUser = 0 // 110,000 jobs of one user
		c.QOS = []QOS{{Name: "normal"}, {Name: "high", Priority: 100}}
	}, t0)
	ctx := context.Background()
	for i := range nodes {
		inv := spec.Inventory{Name: fmt.Sprintf("n%05d", i), CPUs: 128, MemMiB: 2 << 20}
		for g := range 8 {
			inv.GPUs = append(inv.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "h100"})
		}
		if _, err := h.c.Register(ctx, root, inv); err != nil {
			b.Fatal(err)
		}
	}
	// Jobs go in as arrays of 100 tasks: one submission (and one cycle at
	// most) per hundred jobs keeps the set-up to seconds; the tasks are
	// pending jobs like any other.
	submit := func(n int, mod func(i int, js *spec.JobSpec)) {
		for i := range n / 100 {
			js := spec.JobSpec{Name: "j", Script: "x", WorkDir: "/tmp", Array: "0-99"}
			mod(i, &js)
			if _, err := h.c.SubmitAll(ctx, alice, js); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Fill every node: the 100,000 then wait.
	submit(nodes, func(i int, js *spec.JobSpec) {
		js.Resources = spec.Resources{Nodes: 1, GPUsPerNode: 8, CPUsPerNode: 64}
		js.TimeLimit = spec.Duration(time.Duration(60+i*6) * time.Minute)
	})
	h.settle()
	var before goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	submitted := 0
	submit(pending, func(i int, js *spec.JobSpec) {
		g := []int{1, 2, 4, 8}[i%4]
		js.Resources = spec.Resources{Nodes: 1, GPUsPerNode: g, CPUsPerNode: 8 * g, MemMiB: int64(g) << 14}
		js.TimeLimit = spec.Duration(time.Duration(10+i*7%1440) * time.Minute)
		switch i % 10 {
		case 0:
			js.Resources.Nodes = 2 + i%3*2 // gangs of 2, 4 and 6 nodes
		case 1:
			js.QOS = "high"
		}
	})
	h.settle()
	if err := h.c.query(ctx, func() error { submitted = len(h.c.st.pending); return nil }); err != nil {
		b.Fatal(err)
	}
	var after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	perJob := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(submitted)

	force := func() {
		if err := h.c.query(ctx, func() error { h.c.sched.dirty, h.c.sched.full = true, true; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	lastDur := func() time.Duration {
		var d time.Duration
		_ = h.c.query(ctx, func() error { d = h.c.sched.lastDur; return nil })
		return d
	}
	b.Run("full", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			force()
			h.settle()
			total += lastDur()
		}
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/cycle")
		b.ReportMetric(perJob, "heapB/pending-job")
		b.ReportMetric(float64(submitted), "pending")
	})
	b.Run("submit", func(b *testing.B) {
		force()
		h.settle()
		var total time.Duration
		for b.Loop() {
			h.submit(alice, func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, GPUsPerNode: 2, CPUsPerNode: 16}
				js.TimeLimit = spec.Duration(time.Hour)
			})
			h.settle()
			total += lastDur()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/cycle")
	})
	b.Run("end", func(b *testing.B) {
		force()
		h.settle()
		var running []spec.Job
		_ = h.c.query(ctx, func() error {
			for _, rec := range h.c.st.jobs {
				if rec.job.State == spec.StateRunning && len(rec.job.Alloc.Nodes) == 1 {
					running = append(running, rec.job)
				}
			}
			return nil
		})
		var total time.Duration
		i := 0
		for b.Loop() {
			j := running[i%len(running)]
			i++
			h.exit(j.Alloc.Nodes[0].Node, j, spec.StateCompleted, 0)
			h.settle()
			total += lastDur()
		}
		b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/cycle")
	})
}
