package controller

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/sched/fairshare"
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
	// bob: 1 GPU, still running at the restart.
	b := h.submit(bob, func(j *spec.JobSpec) { j.Account = "chemistry"; j.Resources.GPUsPerNode = 1 })
	if j := h.job(b); j.State != spec.StateRunning {
		t.Fatalf("bob's job = %s, want RUNNING", j.State)
	}
	h.skip(30 * time.Minute)
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

// TestUsageFeedRefreshesCountOnce: a full read (daily totals up to the
// overlap, attempts after) and the incremental reads after it count every
// attempt once, and a newly ended attempt is picked up.
func TestUsageFeedRefreshesCountOnce(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	job := func(id spec.JobID, user string, start, end time.Duration) spec.Job {
		return spec.Job{ID: id, JobSpec: spec.JobSpec{Account: "physics"}, User: user, State: spec.StateCompleted, Attempt: 1,
			StartTime: spec.NewTime(t0.Add(start)), EndTime: spec.NewTime(t0.Add(end)),
			Alloc: &spec.Alloc{ID: "a", JobID: id, Attempt: 1, StartTime: spec.NewTime(t0.Add(start)),
				Nodes: []spec.NodeAlloc{{Node: "n1", GPUs: []string{"G1", "G2"}}}}}
	}
	// Days ago, an hour ago, and 5 minutes ago (inside the overlap).
	if err := db.RecordJobs(ctx, []spec.Job{job(1, "alice", 0, time.Hour), job(2, "alice", 70*time.Hour, 71*time.Hour),
		job(3, "bob", 71*time.Hour+50*time.Minute, 71*time.Hour+55*time.Minute)}); err != nil {
		t.Fatal(err)
	}
	f := &usageFeed{src: db}
	cfg := fairshare.Config{}
	now := t0.Add(72 * time.Hour)
	sum := func() map[string]float64 {
		out := map[string]float64{}
		for _, p := range first(f.past()) {
			out[p.User] += p.Raw
		}
		return out
	}
	want := map[string]float64{"alice": 2 * 2 * 3600, "bob": 2 * 300}
	for i, at := range []time.Time{now, now.Add(time.Minute), now.Add(2 * time.Minute)} {
		if err := f.refresh(ctx, at, cfg, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if got := sum(); math.Abs(got["alice"]-want["alice"]) > 1e-6 || math.Abs(got["bob"]-want["bob"]) > 1e-6 {
			t.Fatalf("refresh %d: usage %v, want %v", i, got, want)
		}
	}
	if err := db.RecordJobs(ctx, []spec.Job{job(4, "bob", 72*time.Hour, 72*time.Hour+time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := f.refresh(ctx, now.Add(3*time.Minute), cfg, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	want["bob"] += 2 * 60
	if got := sum(); math.Abs(got["bob"]-want["bob"]) > 1e-6 || math.Abs(got["alice"]-want["alice"]) > 1e-6 {
		t.Errorf("after a new attempt: usage %v, want %v", got, want)
	}
}

// lateFeedSetup is the late-record tests' start: an accounting.db with
// carol's one-minute job 1 ended at t0+10m, a feed that has read it (at
// t0+10m1s), job(id, end) making another such job ended at t0+end, and
// sum the feed's usage.
func lateFeedSetup(t *testing.T) (db *accounting.DB, job func(spec.JobID, time.Duration) spec.Job, f *usageFeed, sum func() float64) {
	t.Helper()
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	job = func(id spec.JobID, end time.Duration) spec.Job {
		start := end - time.Minute
		return spec.Job{ID: id, JobSpec: spec.JobSpec{Account: "physics"}, User: "carol", State: spec.StateCompleted, Attempt: 1,
			StartTime: spec.NewTime(t0.Add(start)), EndTime: spec.NewTime(t0.Add(end)),
			Alloc: &spec.Alloc{ID: "a", JobID: id, Attempt: 1, StartTime: spec.NewTime(t0.Add(start)),
				Nodes: []spec.NodeAlloc{{Node: "n1", GPUs: []string{"G1"}}}}}
	}
	ctx := context.Background()
	if err := db.RecordJobs(ctx, []spec.Job{job(1, 10*time.Minute)}); err != nil {
		t.Fatal(err)
	}
	f = &usageFeed{src: db}
	sum = func() float64 {
		s := 0.0
		for _, p := range first(f.past()) {
			s += p.Raw
		}
		return s
	}
	if err := f.refresh(ctx, t0.Add(10*time.Minute+time.Second), fairshare.Config{}, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	return db, job, f, sum
}

// TestUsageFeedLateRecordCountedOnce: most refreshes reread only a short
// overlap; an attempt that reaches accounting later than that (its end
// well before the latest end read) is counted at the next read of the
// whole overlap, exactly once.
func TestUsageFeedLateRecordCountedOnce(t *testing.T) {
	db, job, f, sum := lateFeedSetup(t)
	ctx, cfg, now := context.Background(), fairshare.Config{}, t0.Add(10*time.Minute+time.Second)
	// Job 2 ended 2 minutes before job 1 but is recorded only now.
	if err := db.RecordJobs(ctx, []spec.Job{job(2, 8*time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := f.refresh(ctx, now.Add(time.Second), cfg, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := sum(); math.Abs(got-60) > 1e-6 {
		t.Errorf("a short read: usage %g, want 60 (job 2 is outside the short overlap)", got)
	}
	for i, at := range []time.Time{now.Add(feedOverlapEvery), now.Add(feedOverlapEvery + time.Second), now.Add(2 * feedOverlapEvery)} {
		if err := f.refresh(ctx, at, cfg, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if got := sum(); math.Abs(got-120) > 1e-6 {
			t.Errorf("refresh %d after the overlap's reread: usage %g, want 120 (both jobs, once)", i, got)
		}
	}
}

// TestUsageFeedReadsLateFlushAtOnce: a refresh reaches back to the
// earliest end the recorder flushed since the last read (low), so an
// attempt that reached accounting late (its end well before the latest end
// read) is counted at the next short read, once, and later reads do not
// count it again; without low a short read reads only feedShortOverlap
// before the latest end (reading less is what the cut is for).
func TestUsageFeedReadsLateFlushAtOnce(t *testing.T) {
	db, job, f, sum := lateFeedSetup(t)
	ctx, cfg, now := context.Background(), fairshare.Config{}, t0.Add(10*time.Minute+time.Second)
	// Job 3 ended 2 s before job 1: a short read without low misses it.
	late := []spec.Job{job(3, 10*time.Minute-2*time.Second)}
	if err := db.RecordJobs(ctx, late); err != nil {
		t.Fatal(err)
	}
	if err := f.refresh(ctx, now.Add(time.Second), cfg, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := sum(); math.Abs(got-60) > 1e-6 {
		t.Fatalf("a short read without low: usage %g, want 60 (job 3 is outside feedShortOverlap)", got)
	}
	// Job 2 ended 2 minutes before job 1 and is flushed now: the read
	// reaches back to its end.
	flushed := []spec.Job{job(2, 8*time.Minute), {ID: 9, State: spec.StatePending}}
	if err := db.RecordJobs(ctx, flushed); err != nil {
		t.Fatal(err)
	}
	if err := f.refresh(ctx, now.Add(2*time.Second), cfg, 0, earliestEnd(flushed)); err != nil {
		t.Fatal(err)
	}
	if got := sum(); math.Abs(got-180) > 1e-6 {
		t.Errorf("the read after job 2's flush: usage %g, want 180 (jobs 1, 2 and 3)", got)
	}
	for i, at := range []time.Time{now.Add(3 * time.Second), now.Add(feedOverlapEvery), now.Add(2 * feedOverlapEvery)} {
		if err := f.refresh(ctx, at, cfg, 0, time.Time{}); err != nil {
			t.Fatal(err)
		}
		if got := sum(); math.Abs(got-180) > 1e-6 {
			t.Errorf("refresh %d after: usage %g, want 180 (each job once)", i, got)
		}
	}
}

// TestUsageTotalsDecayLikeAttempts: decaying a day's usage from its
// weighted midpoint, as the full read does, is within 0.1% of decaying
// each attempt, at a half-life of a week.
func TestUsageTotalsDecayLikeAttempts(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	var jobs []spec.Job
	for i := range 48 { // a day of attempts of 10 minutes to 6 hours
		start := time.Duration(i) * 30 * time.Minute
		end := start + time.Duration(10+i*7)*time.Minute
		jobs = append(jobs, spec.Job{ID: spec.JobID(i + 1), User: "alice", State: spec.StateCompleted, Attempt: 1,
			StartTime: spec.NewTime(t0.Add(start)), EndTime: spec.NewTime(t0.Add(end)),
			Alloc: &spec.Alloc{ID: "a", Attempt: 1, StartTime: spec.NewTime(t0.Add(start)), Nodes: []spec.NodeAlloc{{Node: "n", GPUs: []string{"G"}}}}})
	}
	if err := db.RecordJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	cfg := fairshare.Config{HalfLife: 7 * 24 * time.Hour}
	now := t0.Add(3 * 24 * time.Hour)
	exact := fairshare.Past{At: now}
	attempts, err := db.GPUUsage(ctx, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		exact.Add(&fairshare.Usage{GPUs: a.GPUs, Start: a.Start, End: a.End}, &cfg)
	}
	f := &usageFeed{src: db}
	if err := f.refresh(ctx, now, cfg, 0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	got, _ := f.past()
	if len(got) != 1 || math.Abs(got[0].Raw-exact.Raw) > 1e-6 || math.Abs(got[0].Decayed-exact.Decayed) > 1e-3*exact.Decayed {
		t.Errorf("feed %+v; per attempt raw %v decayed %v: want raw equal, decayed within 0.1%%", got, exact.Raw, exact.Decayed)
	}
}

// countingUsage is a UsageSource with nothing recorded that counts the
// reads.
type countingUsage struct{ reads atomic.Int32 }

func (u *countingUsage) GPUUsage(context.Context, time.Time) ([]spec.GPUUsage, error) {
	u.reads.Add(1)
	return nil, nil
}

func (u *countingUsage) GPUUsageTotals(context.Context, time.Time, time.Time) ([]spec.GPUUsageTotal, error) {
	return nil, nil
}

// TestUsageFeedWakesCoalesce: record flushes many times a second (each
// wakes the feed) cause one refresh per feedMinGap, not one each. Before,
// 50 wakes over half a second caused ~50 reads of accounting (9 % of the
// controller's CPU in gpud loadtest's 100,000-job drain).
func TestUsageFeedWakesCoalesce(t *testing.T) {
	src := &countingUsage{}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { c.SchedInterval = time.Hour }, t0, WithUsageSource(src))
	h.settle()
	first := src.reads.Load() // the start-up read
	for range 50 {
		h.c.wakeFeed()
		time.Sleep(10 * time.Millisecond)
	}
	if n := src.reads.Load() - first; n > 2 {
		t.Errorf("50 wakes in 0.5 s caused %d reads of accounting; want at most 2 (one per %s)", n, feedMinGap)
	}
	// The wakes are not lost: a refresh follows within the gap.
	deadline := time.Now().Add(5 * feedMinGap)
	for src.reads.Load() == first && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if src.reads.Load() == first {
		t.Errorf("no refresh within %s of the wakes", 5*feedMinGap)
	}
}

// first is a pair's first value.
func first[A, B any](a A, _ B) A { return a }

// gatedRecorder records into db only once open is closed.
type gatedRecorder struct {
	db   *accounting.DB
	open chan struct{}
}

func (r *gatedRecorder) RecordJobs(ctx context.Context, jobs []spec.Job) error {
	select {
	case <-r.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return r.db.RecordJobs(ctx, jobs)
}

// TestEndedUsageCountsBeforeTheFeedReadsIt: an attempt that has ended but
// that the usage feed has not yet read from accounting (the recorder is
// behind, or lingers) still bills its account, and once the feed has read
// it, it is billed once. Before, it counted nowhere in between (no longer
// running, not yet read), and a cycle then ordered that account's next
// job as if it had used nothing (TestFairshareOrdersAccounts, under load).
func TestEndedUsageCountsBeforeTheFeedReadsIt(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rec := &gatedRecorder{db: db, open: make(chan struct{})}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { fairshareConfig(c); c.SchedInterval = time.Hour }, t0,
		WithRecorder(rec), WithUsageSource(db))
	h.register("n1", 4)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 2 })
	first := h.job(a)
	h.mu.Lock()
	h.now = h.now.Add(time.Hour)
	h.mu.Unlock()
	h.exit("n1", first, spec.StateCompleted, 0)
	want := 2 * time.Hour.Seconds()
	if got := rawUsage(t, h)["alice"]; math.Abs(got-want) > 1e-6 {
		t.Fatalf("alice's usage with her ended job not yet in accounting = %v GPU-s, want %v", got, want)
	}
	close(rec.open)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p := h.c.feed.published.Load(); p != nil && p.covered >= 1 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the usage feed did not read the recorded job within 10 s")
		}
	}
	if got := rawUsage(t, h)["alice"]; math.Abs(got-want) > 1e-6 {
		t.Errorf("alice's usage once the feed read her job = %v GPU-s, want %v (once)", got, want)
	}
}

// TestRequeuedAttemptCountsBeforeTheFeedReadsIt: the attempt a requeue
// ended bills its account while accounting has not got it yet, as an
// attempt that ended the job does (TestEndedUsageCountsBeforeTheFeedReadsIt).
// Before, the requeue's record (the job PENDING again) gave no end time to
// the unfed usage, and the attempt counted nowhere until the feed read it.
func TestRequeuedAttemptCountsBeforeTheFeedReadsIt(t *testing.T) {
	db, err := accounting.Open(t.TempDir() + "/accounting.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	rec := &gatedRecorder{db: db, open: make(chan struct{})}
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { fairshareConfig(c); c.SchedInterval = time.Hour }, t0,
		WithRecorder(rec), WithUsageSource(db))
	t.Cleanup(func() { close(rec.open) })
	h.register("n1", 4)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Account = "physics"; j.Resources.GPUsPerNode = 2 })
	first := h.job(a)
	h.mu.Lock()
	h.now = h.now.Add(time.Hour)
	h.mu.Unlock()
	if _, err := h.c.JobAction(context.Background(), alice, a, ActionRequeue, "again"); err != nil {
		t.Fatal(err)
	}
	h.exit("n1", first, spec.StateCancelled, 0)
	if j := h.job(a); j.State != spec.StateRunning || j.Attempt != 2 {
		t.Fatalf("requeued job = %s attempt %d, want RUNNING attempt 2", j.State, j.Attempt)
	}
	want := 2 * time.Hour.Seconds() // the first attempt; the second has just started
	if got := rawUsage(t, h)["alice"]; math.Abs(got-want) > 1e-6 {
		t.Errorf("alice's usage with her requeued attempt not yet in accounting = %v GPU-s, want %v", got, want)
	}
}
