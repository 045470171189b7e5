package controller

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/spec"
)

// fairshareConfig: two accounts, no decay (so usage reads as plain
// GPU-seconds) and fairshare in the priority.
func fairshareConfig(c *Config) {
	multifactor(c)
	c.Accounts = []Account{{Name: "physics", Shares: 1, Users: []string{"alice"}}, {Name: "chemistry", Shares: 1, Users: []string{"bob"}}}
	c.FairshareHalfLife = 0
}

func rawUsage(t *testing.T, h *harness) map[string]float64 {
	t.Helper()
	rep, err := h.c.Fairshare(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, r := range rep.Rows {
		if r.User != "" {
			out[r.User] = r.RawUsage
		}
	}
	return out
}

// TestFairshareFromAccountingSurvivesRestart: fairshare usage comes from
// accounting.db (every attempt, including one thrown away by a requeue)
// plus the jobs running now, so a restarted controller, which has
// forgotten nothing but recomputes everything, reports the same usage,
// and the usage of ended jobs equals their GPU-hours in the report.
func TestFairshareFromAccountingSurvivesRestart(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	store := newFakeStore()
	h := newHarnessAt(t, store, fairshareConfig, t0, WithRecorder(db), WithUsageSource(db))
	h.register("n1", 4)
	skip := func(d time.Duration) { h.mu.Lock(); h.now = h.now.Add(d); h.mu.Unlock() }

	// alice: 2 GPUs for an hour, requeued, then 30 minutes more.
	a := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 2 })
	first := h.job(a)
	skip(time.Hour)
	if _, err := h.c.JobAction(ctx, alice, a, ActionRequeue, "again"); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", first, spec.StateCancelled, 0)
	second := h.job(a)
	if second.State != spec.StateRunning || second.Attempt != 2 {
		t.Fatalf("requeued job = %s attempt %d, want RUNNING attempt 2", second.State, second.Attempt)
	}
	// bob: 1 GPU, still running at the restart.
	b := h.submit(bob, func(j *spec.JobSpec) { j.Account = "chemistry"; j.Resources.GPUsPerNode = 1 })
	if j := h.job(b); j.State != spec.StateRunning {
		t.Fatalf("bob's job = %s, want RUNNING", j.State)
	}
	skip(30 * time.Minute)
	h.exit("n1", second, spec.StateCompleted, 0)
	if j := h.job(a); j.State != spec.StateCompleted {
		t.Fatalf("alice's job = %s, want COMPLETED", j.State)
	}
	h.stop() // flushes the recorder

	wantAlice := 2 * (time.Hour + 30*time.Minute).Seconds()
	// Restarted with the same state and accounting, 10 minutes later.
	later := h.clock().Add(10 * time.Minute)
	h2 := newHarnessAt(t, store, fairshareConfig, later, WithRecorder(db), WithUsageSource(db))
	got := rawUsage(t, h2)
	if math.Abs(got["alice"]-wantAlice) > 1e-6 {
		t.Errorf("alice's usage after restart = %v GPU-s, want %v (both attempts, from accounting)", got["alice"], wantAlice)
	}
	if want := (40 * time.Minute).Seconds(); math.Abs(got["bob"]-want) > 1e-6 {
		t.Errorf("bob's usage after restart = %v GPU-s, want %v (running, up to now)", got["bob"], want)
	}
	rows, err := db.Summary(ctx, accounting.Filter{Users: []string{"alice"}}, accounting.GroupByUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || math.Abs(rows[0].GPUHours*3600-got["alice"]) > 1e-6 {
		t.Errorf("report %+v disagrees with fairshare usage %v GPU-s", rows, got["alice"])
	}
	// bob's pending job ranks before alice's: less usage per share.
	pa := h2.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 4 })
	pb := h2.submit(bob, func(j *spec.JobSpec) { j.Account = "chemistry"; j.Resources.GPUsPerNode = 4 })
	if ja, jb := h2.job(pa), h2.job(pb); jb.Priority <= ja.Priority {
		t.Errorf("priorities after restart: bob %d, alice %d; want bob's higher (less past usage)", jb.Priority, ja.Priority)
	}
}

// TestRestartRecordsWhatAccountingLacks: a job that ended while
// accounting did not get it (the recorder's queue died with a kill -9) is
// recorded by the next controller, once.
func TestRestartRecordsWhatAccountingLacks(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	store := newFakeStore()
	h := newHarness(t, store, nil) // records into a fake: accounting never hears
	h.register("n1", 2)
	lost := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	kept := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	for _, id := range []spec.JobID{lost, kept} {
		h.exit("n1", h.job(id), spec.StateCompleted, 0)
	}
	h.stop()
	h.rec.mu.Lock()
	for _, j := range h.rec.jobs {
		if j.ID == kept {
			if err := db.RecordJobs(ctx, []spec.Job{j}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.rec.mu.Unlock()

	newHarnessAt(t, store, nil, h.clock(), WithRecorder(db))
	var rs []accounting.Record
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rs, err = db.Jobs(ctx, accounting.Filter{}); err != nil {
			t.Fatal(err)
		}
		if len(rs) >= 2 {
			break
		}
	}
	if len(rs) != 2 || rs[0].ID != lost || rs[1].ID != kept || rs[0].State != spec.StateCompleted || rs[0].GPUHours < 0 {
		t.Errorf("accounting after restart = %+v; want jobs %d and %d, COMPLETED, once each", rs, lost, kept)
	}
}

// TestFairshareWeighsGPUModels: with h100 weighing 2, an hour on one h100
// (the model the node reported; the job asked for any) is 2 GPU-hours of
// fairshare usage, from accounting.
func TestFairshareWeighsGPUModels(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	weights := func(c *Config) { fairshareConfig(c); c.FairshareModelWeights = map[string]float64{"h100": 2} }
	store := newFakeStore()
	h := newHarnessAt(t, store, weights, t0, WithRecorder(db), WithUsageSource(db))
	h.register("n1", 1)
	id := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 1 })
	j := h.job(id)
	h.mu.Lock()
	h.now = h.now.Add(time.Hour)
	h.mu.Unlock()
	h.exit("n1", j, spec.StateCompleted, 0)
	h.stop()
	h2 := newHarnessAt(t, store, weights, h.clock(), WithRecorder(db), WithUsageSource(db))
	if got, want := rawUsage(t, h2)["alice"], 2*3600.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("alice's usage = %v, want %v (one h100-hour weighing 2)", got, want)
	}
	rs, err := db.Jobs(context.Background(), accounting.Filter{})
	if err != nil || len(rs) != 1 || rs[0].GPUModel != "h100" {
		t.Errorf("accounting = %+v, %v; want the job billed as h100", rs, err)
	}
}
