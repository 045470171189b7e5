package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// BenchmarkOwnerLoopHeld is how long one full scheduling cycle over a
// large queue holds the owner loop (no call answered meanwhile: no
// submission, exit or heartbeat), planned on the loop ("sync": flights
// off) and off it ("flight", flight.go), alternated in one controller:
// 1,000 nodes × 8 GPUs all busy, 92,000 pending 1-GPU jobs
// (bench-fleet-burst's queue after its first starts; -short: 100 nodes,
// 10,000 jobs). Each iteration runs one cycle of each: it makes the
// periodic full cycle due and sends no-op calls one after another until
// the cycle has landed. sync-held-ms and flight-held-ms are the longest
// a call waited, averaged over the iterations; *-cycle-ms the cycle
// from due to landed.
//
//	go test -run '^$' -bench OwnerLoopHeld -benchtime 5x ./gpud/controller/
func BenchmarkOwnerLoopHeld(b *testing.B) {
	nodes, gpus, jobs := 1000, 8, 100000
	if testing.Short() {
		nodes, jobs = 100, 10000
	}
	store := newFakeStore()
	store.discard = true
	h := newHarnessAt(b, store, func(c *Config) { c.MaxSubmitJobsPerUser = 0 }, t0)
	ctx := context.Background()
	for i := range nodes {
		inv := spec.Inventory{Name: fmt.Sprintf("n%04d", i), CPUs: 128, MemMiB: 2 << 20}
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
	// once runs one full cycle from due to landed, flights on or off.
	once := func(fly bool) (held, cycle time.Duration) {
		var before uint64
		if err := h.c.query(ctx, func() error {
			h.c.sched.asyncMin = time.Nanosecond
			if !fly {
				h.c.sched.asyncMin = 1000 * time.Hour
			}
			before = h.c.sched.snapID
			h.c.sched.dirty, h.c.sched.stale, h.c.sched.lastDur = true, true, 0
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		for done := false; !done; {
			t := time.Now()
			if err := h.c.query(ctx, func() error {
				done = h.c.sched.snapID > before && h.c.sched.flight == nil
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			held = max(held, time.Since(t))
		}
		return held, time.Since(began)
	}
	var held, cycle [2]time.Duration
	n := 0
	for b.Loop() {
		for i, fly := range []bool{false, true} {
			hd, cy := once(fly)
			held[i] += hd
			cycle[i] += cy
		}
		n++
	}
	flights := 0
	_ = h.c.query(ctx, func() error { flights = h.c.sched.flights; return nil })
	if flights < n {
		b.Fatalf("%d of %d full cycles planned off the owner loop", flights, n)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(held[0]), "sync-held-ms")
	b.ReportMetric(ms(held[1]), "flight-held-ms")
	b.ReportMetric(ms(cycle[0]), "sync-cycle-ms")
	b.ReportMetric(ms(cycle[1]), "flight-cycle-ms")
}
