package controller

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/spec"
)

// TestFairshareWithoutAccountingBillsEveryAttempt: a controller without
// accounting's usage feed bills every attempt that ended, the one a
// requeue threw away included (as the feed, gpuq report and gpud
// simulate do), decayed as fairshare.Compute decays the same stretches;
// restarted, it knows what its state store holds: each ended job's last
// attempt (endedusage.go).
func TestFairshareWithoutAccountingBillsEveryAttempt(t *testing.T) {
	ctx := context.Background()
	store := newFakeStore()
	halfLife := func(c *Config) { fairshareConfig(c); c.FairshareHalfLife = time.Hour }
	h := newHarnessAt(t, store, halfLife, t0)
	h.register("n1", 4)

	// alice: 2 GPUs for an hour, requeued, then 30 minutes more.
	a := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 2 })
	first := h.job(a)
	h.skip(time.Hour)
	if _, err := h.c.JobAction(ctx, alice, a, ActionRequeue, "again"); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", first, spec.StateCancelled, 0)
	second := h.job(a)
	if second.State != spec.StateRunning || second.Attempt != 2 {
		t.Fatalf("requeued job = %s attempt %d, want RUNNING attempt 2", second.State, second.Attempt)
	}
	// bob: 1 GPU, still running at the end.
	b := h.submit(bob, func(j *spec.JobSpec) { j.Account = "chemistry"; j.Resources.GPUsPerNode = 1 })
	bobJob := h.job(b)
	if bobJob.State != spec.StateRunning {
		t.Fatalf("bob's job = %s, want RUNNING", bobJob.State)
	}
	h.skip(30 * time.Minute)
	h.exit("n1", second, spec.StateCompleted, 0)
	if j := h.job(a); j.State != spec.StateCompleted {
		t.Fatalf("alice's job = %s, want COMPLETED", j.State)
	}
	h.skip(10 * time.Minute)
	now := h.clock()

	rep, err := h.c.Fairshare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fairshare.Config{HalfLife: time.Hour}
	want := fairshare.Compute(&fairshare.Tree{Accounts: []fairshare.Account{{Name: "physics", Shares: 1, Users: []fairshare.User{{Name: "alice", Shares: 1}}},
		{Name: "chemistry", Shares: 1, Users: []fairshare.User{{Name: "bob", Shares: 1}}}}}, []fairshare.Usage{
		{Account: "physics", User: "alice", Start: first.StartTime.Time, End: first.StartTime.Add(time.Hour), GPUs: 2, Model: "h100"},
		{Account: "physics", User: "alice", Start: second.StartTime.Time, End: second.StartTime.Add(30 * time.Minute), GPUs: 2, Model: "h100"},
		{Account: "chemistry", User: "bob", Start: bobJob.StartTime.Time, GPUs: 1, Model: "h100"},
	}, now, cfg)
	rows := func(r *fairshare.Report) map[string]fairshare.Row {
		out := map[string]fairshare.Row{}
		for _, row := range r.Rows {
			if row.User != "" {
				out[row.User] = row
			}
		}
		return out
	}
	got, exp := rows(rep), rows(want)
	if w := 2 * (time.Hour + 30*time.Minute).Seconds(); math.Abs(got["alice"].RawUsage-w) > 1e-6 {
		t.Errorf("alice's usage = %v GPU-s, want %v (both attempts; the last alone is %v)", got["alice"].RawUsage, w, 2*(30*time.Minute).Seconds())
	}
	for _, u := range []string{"alice", "bob"} {
		g, e := got[u], exp[u]
		if math.Abs(g.RawUsage-e.RawUsage) > 1e-6 || math.Abs(g.EffectiveUsage-e.EffectiveUsage) > 1e-9*e.EffectiveUsage || g.Factor != e.Factor {
			t.Errorf("%s: raw %v decayed %v factor %v; fairshare.Compute over the same stretches: raw %v decayed %v factor %v",
				u, g.RawUsage, g.EffectiveUsage, g.Factor, e.RawUsage, e.EffectiveUsage, e.Factor)
		}
	}
	h.stop()

	// Restarted without accounting: the store holds alice's job with its
	// last attempt only, and bob's running job.
	h2 := newHarnessAt(t, store, fairshareConfig, now)
	got2 := rawUsage(t, h2)
	if w := 2 * (30 * time.Minute).Seconds(); math.Abs(got2["alice"]-w) > 1e-6 {
		t.Errorf("alice's usage after a restart without accounting = %v GPU-s, want %v (the store's last attempt)", got2["alice"], w)
	}
	if w := (40 * time.Minute).Seconds(); math.Abs(got2["bob"]-w) > 1e-6 {
		t.Errorf("bob's usage after restart = %v GPU-s, want %v (running, up to now)", got2["bob"], w)
	}
	// Ends after the restart are billed on top of what it rebuilt.
	h2.exit("n1", bobJob, spec.StateCompleted, 0)
	if j := h2.job(b); j.State != spec.StateCompleted {
		t.Fatalf("bob's job = %s, want COMPLETED", j.State)
	}
	h2.mu.Lock()
	h2.now = h2.now.Add(time.Hour)
	h2.mu.Unlock()
	got3 := rawUsage(t, h2)
	if w := (40 * time.Minute).Seconds(); math.Abs(got3["bob"]-w) > 1e-6 || math.Abs(got3["alice"]-got2["alice"]) > 1e-6 {
		t.Errorf("an hour after bob's job ended: bob %v GPU-s (want %v), alice %v (want %v)", got3["bob"], w, got3["alice"], got2["alice"])
	}
}

// BenchmarkFairshareNoFeed is a cycle's fairshare report on a controller
// without a usage feed that remembers N ended jobs and runs a few: its
// cost must not grow with N (it walked and sorted every ended job at
// every cycle before the controller kept their usage, endedusage.go).
func BenchmarkFairshareNoFeed(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("ended=%d", n), func(b *testing.B) {
			store := newFakeStore()
			users := []Caller{alice, bob}
			accounts := []string{"physics", "chemistry"}
			for i := range n {
				id := spec.JobID(i + 1)
				start := t0.Add(time.Duration(i) * time.Minute)
				store.jobs[id] = spec.Job{ID: id, JobSpec: spec.JobSpec{Account: accounts[i%2]}, User: users[i%2].User,
					State: spec.StateCompleted, SubmitTime: spec.NewTime(start), StartTime: spec.NewTime(start), EndTime: spec.NewTime(start.Add(time.Hour)),
					Alloc: &spec.Alloc{ID: fmt.Sprintf("%d.1", id), JobID: id, Attempt: 1, Nodes: []spec.NodeAlloc{{Node: "n1", GPUs: []string{"GPU-n1-0"}}}}}
			}
			store.next = spec.JobID(n + 1)
			h := newHarnessAt(b, store, func(c *Config) { fairshareConfig(c); c.FairshareHalfLife = 12 * time.Hour },
				t0.Add(time.Duration(n)*time.Minute+2*time.Hour))
			h.register("n1", 8)
			for i := range 4 {
				h.submit(users[i%2], func(j *spec.JobSpec) { j.Account = accounts[i%2]; j.Resources.GPUsPerNode = 2 })
			}
			h.settle()
			b.ResetTimer()
			if err := h.c.query(context.Background(), func() error {
				now := h.c.now()
				for range b.N {
					if rep := h.c.fairshareReport(now); len(rep.Rows) != 4 {
						return fmt.Errorf("report has %d rows, want 4", len(rep.Rows))
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestEndedAttemptCountsInItsOwnBatch: fairshare computed in the batch
// where an attempt ends (a cycle the batch runs before its commit,
// cycleInBatch, when its pacing says one is due) already bills it, with
// a usage feed or without. Before, it counted from the commit on (the
// recorder's unfed usage, or a no-feed sum kept at the commit): whether
// a cycle saw it depended on the wall clock.
func TestEndedAttemptCountsInItsOwnBatch(t *testing.T) {
	for _, fed := range []bool{false, true} {
		t.Run(fmt.Sprintf("feed=%v", fed), func(t *testing.T) {
			var opts []Option
			var gate chan struct{}
			if fed {
				db, err := accounting.Open(t.TempDir() + "/accounting.db")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				gate = make(chan struct{})
				opts = append(opts, WithRecorder(&gatedRecorder{db: db, open: gate}), WithUsageSource(db))
			}
			h := newHarnessAt(t, newFakeStore(), func(c *Config) { fairshareConfig(c); c.SchedInterval = time.Hour }, t0, opts...)
			if gate != nil {
				t.Cleanup(func() { close(gate) }) // before the harness stops (and flushes)
			}
			h.register("n1", 4)
			a := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 2 })
			run := h.job(a)
			h.mu.Lock()
			h.now = h.now.Add(time.Hour)
			h.mu.Unlock()
			var got float64
			if err := h.c.call(context.Background(), func(tx *txn) error {
				h.c.applyEvent(tx, "n1", NodeEvent{Seq: 1, AllocID: run.Alloc.ID, JobID: a, Kind: EventExited, State: spec.StateCompleted})
				if st := h.c.st.jobs[a].job.State; st != spec.StateCompleted {
					return fmt.Errorf("job %d = %s after its exit, want COMPLETED", a, st)
				}
				for _, r := range h.c.fairshareReport(h.c.now()).Rows {
					if r.User == "alice" {
						got = r.RawUsage
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := 2 * time.Hour.Seconds(); math.Abs(got-want) > 1e-6 {
				t.Errorf("alice's usage in the batch her job ended in = %v GPU-s, want %v", got, want)
			}
			// And once, after the commit.
			if got, want := rawUsage(t, h)["alice"], 2*time.Hour.Seconds(); math.Abs(got-want) > 1e-6 {
				t.Errorf("alice's usage after the commit = %v GPU-s, want %v", got, want)
			}
		})
	}
}

// TestResumedRunIsBilledOnce: without a feed, a run that node silence
// interrupted (its attempt ended by a requeue, and billed) and that then
// resumes is the same attempt: it is billed once, from its start, not
// once up to the interruption and again from its start.
func TestResumedRunIsBilledOnce(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { fairshareConfig(c); c.NodeTimeout = 30 * time.Second })
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Requeue = true; j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	h.advance(31 * time.Second)
	if got := h.job(id); got.State != spec.StatePending || got.Interrupted == nil {
		t.Fatalf("job = %s interrupted %v, want PENDING keeping its run", got.State, got.Interrupted)
	}
	if got := rawUsage(t, h)["alice"]; math.Abs(got-31) > 1e-6 {
		t.Errorf("alice's usage with her run interrupted at 31 s = %v GPU-s, want 31", got)
	}
	h.heartbeat("n1", j.Alloc.ID)
	resumed := h.job(id)
	if resumed.State != spec.StateRunning || resumed.Attempt != 1 {
		t.Fatalf("after n1 came back: job = %s attempt %d, want RUNNING attempt 1", resumed.State, resumed.Attempt)
	}
	h.mu.Lock()
	h.now = t0.Add(50 * time.Second)
	h.mu.Unlock()
	if got := rawUsage(t, h)["alice"]; math.Abs(got-50) > 1e-6 {
		t.Errorf("alice's usage 50 s into her resumed run = %v GPU-s, want 50 (once)", got)
	}
	h.mu.Lock()
	h.now = t0.Add(100 * time.Second)
	h.mu.Unlock()
	h.exit("n1", resumed, spec.StateCompleted, 0)
	if got := h.job(id); got.State != spec.StateCompleted {
		t.Fatalf("job = %s, want COMPLETED", got.State)
	}
	if got := rawUsage(t, h)["alice"]; math.Abs(got-100) > 1e-6 {
		t.Errorf("alice's usage after her resumed run ended at 100 s = %v GPU-s, want 100 (once)", got)
	}
}
