package sched_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

var bt0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// xorshift is a seeded generator: benchmarks are reproducible.
type xorshift uint64

func (x *xorshift) intn(n int) int {
	*x ^= *x << 13
	*x ^= *x >> 7
	*x ^= *x << 17
	return int(uint64(*x) % uint64(n))
}

// benchCluster is nodes × 8 H100s, about half held by running jobs
// (ending within 8 h), every tenth node's GPUs empty and in dynamic MIG
// mode, and a queue of pending jobs: mostly 1, 2, 4 or 8 GPUs on one node,
// 5% gangs of 2–16 whole nodes, 10% one or two MIG slices (1g, 2g or 3g),
// time limits 10 min–8 h, 3 QOS (2% of pending jobs may preempt), 50
// accounts × 4 users with past usage. (Array tasks reach the core as
// ordinary jobs; the controller applies %MAX before the snapshot.)
func benchCluster(nodes, pending int) (*sched.Snapshot, sched.Config) {
	rng := xorshift(88172645463325252)
	migProfiles := sched.H100MIGProfiles()
	snap := &sched.Snapshot{QOS: []sched.QOS{{Name: "low", Priority: 0}, {Name: "normal", Priority: 100},
		{Name: "high", Priority: 1000, Preempt: []string{"low"}}}}
	var id spec.JobID
	for i := range nodes {
		n := sched.Node{Name: fmt.Sprintf("n%05d", i), State: spec.NodeMixed, Partitions: []string{"batch"},
			CPUs: 128, FreeCPUs: 128, MemMiB: 2 << 20, FreeMemMiB: 2 << 20}
		mig := i%10 == 9 // every tenth node: H100s in dynamic MIG mode, empty
		for g := range 8 {
			gpu := sched.GPU{UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "h100", Free: true, FreeFraction: 1}
			if mig {
				gpu.MIGEnabled, gpu.MIG = true, &sched.MIGGPU{Dynamic: true, Profiles: migProfiles}
			}
			n.GPUs = append(n.GPUs, gpu)
		}
		held := []int{0, 2, 4, 4, 6, 8}[rng.intn(6)]
		if mig {
			held = 0
		}
		if held > 0 {
			id++
			a := spec.NodeAlloc{Node: n.Name, CPUs: 8 * held, MemMiB: int64(held) << 16}
			for g := range held {
				n.GPUs[g].Free = false
				a.GPUs = append(a.GPUs, n.GPUs[g].UUID)
			}
			n.FreeCPUs -= a.CPUs
			n.FreeMemMiB -= a.MemMiB
			n.Allocs = 1
			snap.Running = append(snap.Running, sched.RunningJob{ID: id, Nodes: []spec.NodeAlloc{a},
				Start: bt0.Add(-time.Duration(rng.intn(120)) * time.Minute), TimeLimit: time.Duration(130+rng.intn(480)) * time.Minute,
				QOS: []string{"low", "normal"}[rng.intn(2)], Account: fmt.Sprintf("acct%d", rng.intn(50)), User: "u0"})
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	for a := range 50 {
		acct := fairshare.Account{Name: fmt.Sprintf("acct%d", a), Shares: float64(1 + a%5)}
		for u := range 4 {
			acct.Users = append(acct.Users, fairshare.User{Name: fmt.Sprintf("u%d", u), Shares: 1})
			snap.Usage = append(snap.Usage, fairshare.Usage{Account: acct.Name, User: fmt.Sprintf("u%d", u),
				Start: bt0.Add(-time.Duration(1+rng.intn(200)) * time.Hour), End: bt0.Add(-time.Duration(rng.intn(24)) * time.Hour),
				GPUs: float64(1 + rng.intn(64)), Model: "h100"})
		}
		snap.Accounts.Accounts = append(snap.Accounts.Accounts, acct)
	}
	for range pending {
		id++
		j := sched.Job{ID: id, Partition: "batch", SubmitTime: bt0.Add(-time.Duration(rng.intn(3600)) * time.Second),
			QOS: qosMix(rng.intn(100)), Account: fmt.Sprintf("acct%d", rng.intn(50)),
			User: fmt.Sprintf("u%d", rng.intn(4)), TimeLimit: time.Duration(10+rng.intn(470)) * time.Minute}
		g := []int{1, 1, 2, 4, 8}[rng.intn(5)]
		j.Req = spec.Resources{Nodes: 1, CPUsPerNode: 8 * g, MemMiB: int64(g) << 16, GPUsPerNode: g}
		switch rng.intn(20) {
		case 0:
			j.Req = spec.Resources{Nodes: 2 + rng.intn(15), CPUsPerNode: 64, MemMiB: 1 << 19, GPUsPerNode: 8}
		case 1, 2:
			j.Req = spec.Resources{Nodes: 1, CPUsPerNode: 4, MemMiB: 1 << 14, GPUsPerNode: 1 + rng.intn(2),
				GPUProfile: []string{"1g.10gb", "2g.20gb", "3g.40gb"}[rng.intn(3)]}
		}
		snap.Jobs = append(snap.Jobs, j)
	}
	cfg := sched.Config{Priority: priority.Config{Weights: priority.Weights{Age: 1000, Fairshare: 10000, JobSize: 500, QOS: 2000}},
		Fairshare: fairshare.Config{HalfLife: 7 * 24 * time.Hour}, BackfillWindow: 24 * time.Hour}
	return snap, cfg
}

// qosMix: 30% low, 68% normal, 2% high (which preempts low).
func qosMix(p int) string {
	switch {
	case p < 30:
		return "low"
	case p < 98:
		return "normal"
	}
	return "high"
}

func BenchmarkFullCycle(b *testing.B) {
	snap, cfg := benchCluster(10000, 100000)
	for _, depth := range []int{0, 1000, 100} {
		b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
			cfg := cfg
			cfg.BackfillDepth = depth
			var plan sched.Plan
			b.ReportAllocs()
			for b.Loop() {
				plan = sched.Schedule(snap, bt0, cfg)
			}
			b.ReportMetric(float64(len(plan.Starts)), "starts")
			b.ReportMetric(float64(len(plan.Reservations)), "reservations")
			b.ReportMetric(float64(len(plan.Preemptions)), "preemptions")
		})
	}
}

// BenchmarkPlacement: a full cycle (BackfillDepth 100) per placement; fgd
// scores every eligible node per start, so it runs on a tenth of the
// cluster and queue.
func BenchmarkPlacement(b *testing.B) {
	for _, p := range sched.Placements {
		nodes, pending := 10000, 100000
		if p == sched.PlaceFGD {
			nodes, pending = 1000, 10000
		}
		snap, cfg := benchCluster(nodes, pending)
		cfg.BackfillDepth, cfg.Placement = 100, p
		b.Run(fmt.Sprintf("%s/nodes=%d", p, nodes), func(b *testing.B) {
			var plan sched.Plan
			b.ReportAllocs()
			for b.Loop() {
				plan = sched.Schedule(snap, bt0, cfg)
			}
			b.ReportMetric(float64(len(plan.Starts)), "starts")
		})
	}
}

// BenchmarkIncremental: one event after a full cycle, through sched.State.
func BenchmarkIncremental(b *testing.B) {
	snap, cfg := benchCluster(10000, 100000)
	cfg.BackfillDepth = 100
	now := bt0.Add(time.Second)
	b.Run("submit", func(b *testing.B) {
		st, _ := sched.NewState(snap, bt0, cfg)
		id := spec.JobID(1 << 40)
		b.ReportAllocs()
		for b.Loop() {
			id++
			g := []int{1, 2, 4, 8}[id%4]
			st.Submit(sched.Job{ID: id, Partition: "batch", SubmitTime: now, QOS: "normal", Account: "acct1", User: "u1",
				TimeLimit: time.Hour, Req: spec.Resources{Nodes: 1, CPUsPerNode: 8 * g, MemMiB: int64(g) << 16, GPUsPerNode: g}}, now)
		}
	})
	b.Run("end", func(b *testing.B) {
		st, _ := sched.NewState(snap, bt0, cfg)
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			st.End(snap.Running[i%len(snap.Running)].ID, now)
			i++
		}
	})
}

// TestBenchClusterInvariants checks a scaled-down benchmark cluster (mixed
// sizes, gangs, preemption, fairshare, backfill) against VerifyPlan, and
// that State's incremental plans after it stay within capacity.
func TestBenchClusterInvariants(t *testing.T) {
	t.Parallel()
	snap, cfg := benchCluster(300, 3000)
	for _, depth := range []int{0, 50} {
		cfg.BackfillDepth = depth
		plan := sched.Schedule(snap, bt0, cfg)
		if err := sched.VerifyPlan(snap, bt0, cfg, plan); err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
		if len(plan.Starts) == 0 || len(plan.Reservations) == 0 || len(plan.Preemptions) == 0 {
			t.Errorf("depth %d: starts %d reservations %d preemptions %d; want some of each", depth,
				len(plan.Starts), len(plan.Reservations), len(plan.Preemptions))
		}
		st, full := sched.NewState(snap, bt0, cfg)
		if diff := len(full.Starts) - len(plan.Starts); diff != 0 {
			t.Errorf("NewState plan differs from Schedule by %d starts", diff)
		}
		for i := range 20 {
			st.End(snap.Running[i].ID, bt0.Add(time.Duration(i)*time.Second))
		}
	}
}

// BenchmarkAccountLimits is a full cycle (backfill depth 100) over 1000
// nodes and 10000 pending jobs without and with limits on all 50 accounts
// (running GPUs about twice what each holds, running jobs, max wall, a
// GPU-hour budget partly spent): the cost of the AccountLimit checks, and
// how many jobs they hold back.
func BenchmarkAccountLimits(b *testing.B) {
	base, cfg := benchCluster(1000, 10000)
	cfg.BackfillDepth = 100
	for _, limited := range []bool{false, true} {
		b.Run(fmt.Sprintf("limits=%v", limited), func(b *testing.B) {
			snap := *base
			if limited {
				for a := range 50 {
					snap.AccountLimits = append(snap.AccountLimits, sched.AccountLimit{Account: fmt.Sprintf("acct%d", a),
						MaxGPUs: 150, MaxJobs: 60, MaxWall: 7 * time.Hour, MaxGPUHours: 20000, UsedGPUHours: float64(a * 400)})
				}
			}
			var plan sched.Plan
			b.ReportAllocs()
			for b.Loop() {
				plan = sched.Schedule(&snap, bt0, cfg)
			}
			held := 0
			for _, p := range plan.Pending {
				if p.Reason == spec.ReasonAccountLimit {
					held++
				}
			}
			b.ReportMetric(float64(len(plan.Starts)), "starts")
			b.ReportMetric(float64(held), "account-limited")
		})
	}
}
