package sched

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

// The must-show scenario through the incremental API.
func TestStateSubmitAndEnd(t *testing.T) {
	t.Parallel()
	n := node("n1", 64, 100000, "h100", 8)
	for i := range 4 {
		n.GPUs[i].Free = false
	}
	n.FreeCPUs, n.Allocs = 60, 1
	snap := &Snapshot{Nodes: []Node{n},
		Running: []RunningJob{{ID: 1, Start: t0, TimeLimit: 10 * time.Minute,
			Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 4, GPUs: []string{"GPU-n1-0", "GPU-n1-1", "GPU-n1-2", "GPU-n1-3"}}}}},
		Jobs: []Job{job(2, 1, 8, func(j *Job) { j.TimeLimit = 30 * time.Minute })}}
	now := t0.Add(time.Minute)
	st, plan := NewState(snap, now, Config{})
	if err := VerifyPlan(snap, now, Config{}, plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Reservations) != 1 || !plan.Reservations[0].Start.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("reservations %+v, want job 2 at +10m", plan.Reservations)
	}
	p := st.Submit(job(3, 1, 2, func(j *Job) { j.TimeLimit = time.Minute; j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 || !p.Starts[0].Backfilled {
		t.Errorf("submit of a short job: %+v, want it started, backfilled under job 2's reservation", p)
	}
	p = st.Submit(job(4, 1, 2, func(j *Job) { j.TimeLimit = time.Hour; j.SubmitTime = now }), now)
	if len(p.Starts) != 0 || len(p.Pending) != 1 || p.Pending[0].Reason != spec.ReasonReservation {
		t.Errorf("submit of a long job: %+v, want pending with Reservation", p)
	}
	// Job 1 ends early: job 2 (8 GPUs) still waits for job 3; job 3 ends: 2 starts.
	p = st.End(1, now.Add(time.Second))
	if len(p.Starts) != 0 {
		t.Errorf("end of job 1 started %+v while job 3 holds 2 GPUs", p.Starts)
	}
	p = st.End(3, now.Add(2*time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 2 || len(p.Starts[0].Nodes[0].GPUs) != 8 || p.Starts[0].Backfilled {
		t.Errorf("end of job 3: %+v, want job 2 on 8 GPUs, not backfilled (its own reservation)", p)
	}
}

// Slurm's -p a,b through the incremental API: a submitted job that cannot
// start in its first partition starts in its alternative (Submit), and a
// waiting one starts in its alternative when a node there frees (End).
func TestStatePartitionAlternatives(t *testing.T) {
	t.Parallel()
	a, b := node("a1", 8, 1000, "h100", 2), node("b1", 8, 1000, "h100", 2)
	a.Partitions, b.Partitions = []string{"a"}, []string{"b"}
	inA := func(j *Job) { j.Partition, j.TimeLimit = "a", time.Hour }
	snap := &Snapshot{Nodes: []Node{a, b}, Jobs: []Job{job(1, 1, 2, inA), job(2, 1, 2, func(j *Job) { j.Partition, j.TimeLimit = "b", time.Hour })}}
	st, plan := NewState(snap, t0, Config{})
	if err := VerifyPlan(snap, t0, Config{}, plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Starts) != 2 {
		t.Fatalf("full cycle started %+v, want jobs 1 and 2", plan.Starts)
	}
	// Both nodes busy: job 3 (a,b) waits.
	now := t0.Add(time.Second)
	p := st.Submit(job(3, 1, 2, inA, func(j *Job) { j.Alternatives = []string{"b"}; j.SubmitTime = now }), now)
	if len(p.Starts) != 0 {
		t.Fatalf("job 3 started %+v with both nodes busy", p.Starts)
	}
	// Job 2 ends: b1 frees and job 3 starts there, in partition b.
	p = st.End(2, now.Add(time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 || p.Starts[0].Partition != "b" || p.Starts[0].Nodes[0].Node != "b1" {
		t.Fatalf("end of job 2: %+v, want job 3 on b1 in partition b", p.Starts)
	}
	// b1 busy again, a1 busy: job 4 (b,a) waits; job 1 ends and it starts in a.
	p = st.Submit(job(4, 1, 2, func(j *Job) {
		j.Partition, j.Alternatives, j.TimeLimit, j.SubmitTime = "b", []string{"a"}, time.Hour, now
	}), now.Add(2*time.Second))
	if len(p.Starts) != 0 {
		t.Fatalf("job 4 started %+v with both nodes busy", p.Starts)
	}
	p = st.End(1, now.Add(3*time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 4 || p.Starts[0].Partition != "a" {
		t.Fatalf("end of job 1: %+v, want job 4 in partition a", p.Starts)
	}
	// A submitted job that fits only in its alternative starts at once.
	c := node("c1", 8, 1000, "h100", 2)
	c.Partitions = []string{"c"}
	snap2 := &Snapshot{Nodes: []Node{a, c}, Jobs: []Job{job(1, 1, 2, inA)}}
	st2, _ := NewState(snap2, t0, Config{})
	p = st2.Submit(job(5, 1, 2, inA, func(j *Job) { j.Alternatives = []string{"c"}; j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].Partition != "c" {
		t.Fatalf("submit of job 5: %+v, want it started in partition c", p.Starts)
	}
}

// Resume goes on where a full cycle's start limit stopped: the starts of
// a capped full cycle and of the Resumes that follow it are exactly those
// of one uncapped cycle (same jobs, nodes and GPUs), and a job submitted
// meanwhile behind the held-back jobs waits its turn rather than jumping
// ahead of them.
func TestStateResume(t *testing.T) {
	t.Parallel()
	var nodes []Node
	for i := range 4 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), 64, 100000, "h100", 8))
	}
	hour := func(j *Job) { j.TimeLimit = time.Hour }
	var jobs []Job
	for id := spec.JobID(1); id <= 40; id++ {
		g := []int{1, 2, 1, 4}[id%4]
		jobs = append(jobs, job(id, 1, g, hour))
	}
	// A 2-node gang in the middle of the queue and one that cannot fit
	// now: a reservation among the held-back jobs.
	jobs = append(jobs, job(41, 1, 8, hour, func(j *Job) { j.Req.Nodes = 2; j.SubmitTime = t0.Add(15 * time.Second) }))
	snap := &Snapshot{Nodes: nodes, Jobs: jobs}
	want := Schedule(snap, t0, Config{})
	if len(want.Starts) < 12 {
		t.Fatalf("uncapped cycle started %d jobs; the test needs more than 3 limits' worth", len(want.Starts))
	}
	cfg := Config{MaxStartsPerCycle: 4}
	st, plan := NewState(snap, t0, cfg)
	if len(plan.Starts) != 4 || !st.Capped() {
		t.Fatalf("capped cycle: %d starts, capped %v; want 4, true", len(plan.Starts), st.Capped())
	}
	got := plan.Starts
	resumes := 0
	for st.Capped() {
		p, ok := st.Resume(t0)
		if !ok {
			t.Fatal("Resume stopped for a preemptor; there is none")
		}
		if len(p.Starts) > 4 {
			t.Fatalf("resume started %d jobs, over the limit of 4", len(p.Starts))
		}
		got = append(got, p.Starts...)
		if resumes++; resumes > 100 {
			t.Fatal("Resume never reached the end of the queue")
		}
	}
	if len(got) != len(want.Starts) {
		t.Fatalf("capped cycle and resumes started %d jobs, an uncapped cycle %d", len(got), len(want.Starts))
	}
	for i := range got {
		if fmt.Sprint(got[i]) != fmt.Sprint(want.Starts[i]) {
			t.Errorf("start %d: %+v, want %+v (as the uncapped cycle)", i, got[i], want.Starts[i])
		}
	}

	// Capped again, with room for every job: a low-priority job submitted
	// now waits behind the held-back jobs (it would fit), a high-priority
	// one is decided at once.
	st, _ = NewState(&Snapshot{Nodes: nodes, Jobs: jobs[:12]}, t0, cfg)
	now := t0.Add(time.Minute) // job 100 is the newest: last in the queue
	p := st.Submit(job(100, 1, 1, hour, func(j *Job) { j.SubmitTime = now }), now)
	if len(p.Starts) != 0 || len(p.Pending) != 1 || p.Pending[0].Reason != spec.ReasonPriority {
		t.Errorf("submit behind held-back jobs: %+v, want pending with Priority", p)
	}
	p = st.Submit(job(101, 1, 1, hour, func(j *Job) { j.SubmitTime = now; j.Priority = 1000 }), now)
	if len(p.Starts) != 1 || p.Starts[0].JobID != 101 {
		t.Errorf("submit ahead of held-back jobs: %+v, want job 101 started", p)
	}
	var resumed []spec.JobID
	for st.Capped() {
		p, _ := st.Resume(now)
		for _, s := range p.Starts {
			resumed = append(resumed, s.JobID)
		}
	}
	if !slices.Contains(resumed, 100) {
		t.Errorf("resumes started %v; want job 100 among them in its turn", resumed)
	}
}

// A job running at the full cycle that ends early gives its GPUs back for
// good: a pending job whose time limit outlasts the ended job's starts on
// them at once. Before, End held them again from the ended job's expected
// end on, so no such job could take them until the next full cycle.
func TestStateEndFreesPastExpectedEnd(t *testing.T) {
	t.Parallel()
	// n1 runs job 1 (1h limit) on GPU 0 and job 3 (3h) on GPU 1; job 2
	// (both GPUs) holds a reservation there from job 3's end; job 4 (one
	// GPU, 2h) waits behind it.
	n := node("n1", 64, 100000, "h100", 2)
	n.GPUs[0].Free, n.GPUs[1].Free = false, false
	n.FreeCPUs, n.Allocs = 62, 2
	run := func(id spec.JobID, gpu string, limit time.Duration) RunningJob {
		return RunningJob{ID: id, Start: t0, TimeLimit: limit, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, GPUs: []string{gpu}}}}
	}
	hours := func(h int) func(*Job) { return func(j *Job) { j.TimeLimit = time.Duration(h) * time.Hour } }
	snap := &Snapshot{Nodes: []Node{n}, Running: []RunningJob{run(1, "GPU-n1-0", time.Hour), run(3, "GPU-n1-1", 3*time.Hour)},
		Jobs: []Job{job(2, 1, 2, hours(1)), job(4, 1, 1, hours(2))}}
	cfg := Config{BackfillDepth: 1}
	st, plan := NewState(snap, t0.Add(time.Second), cfg)
	if len(plan.Starts) != 0 || len(plan.Reservations) != 1 || plan.Reservations[0].JobID != 2 {
		t.Fatalf("full cycle: starts %+v reservations %+v, want none and job 2's", plan.Starts, plan.Reservations)
	}
	// Job 1 ends early: GPU 0 is free for 3h, until job 2's reservation.
	p := st.End(1, t0.Add(5*time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 4 || p.Starts[0].Nodes[0].GPUs[0] != "GPU-n1-0" {
		t.Fatalf("end of job 1: %+v, want job 4 started on GPU-n1-0", p)
	}
}

// TestStateNeverOverAllocates drives a State with random ends, submits and
// resumes after a capped full cycle, and checks that no start takes a GPU
// or CPUs that a running job holds.
func TestStateNeverOverAllocates(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		var nodes []Node
		for i := range 3 {
			nodes = append(nodes, node(fmt.Sprintf("n%d", i), 16, 100000, "h100", 4))
		}
		limits := []time.Duration{10 * time.Minute, time.Hour, 2 * time.Hour}
		used := map[string]bool{} // GPU UUIDs held
		cpus := map[string]int{}  // CPUs held per node
		held := map[spec.JobID][]spec.NodeAlloc{}
		snap := &Snapshot{Nodes: nodes}
		// Node 0 runs two jobs at the snapshot.
		for id := spec.JobID(1); id <= 2; id++ {
			g := fmt.Sprintf("GPU-n0-%d", id-1)
			snap.Nodes[0].GPUs[id-1].Free = false
			snap.Nodes[0].FreeCPUs -= 2
			snap.Nodes[0].Allocs++
			a := []spec.NodeAlloc{{Node: "n0", CPUs: 2, GPUs: []string{g}}}
			snap.Running = append(snap.Running, RunningJob{ID: id, Start: t0, TimeLimit: limits[id%3], Nodes: a})
			used[g], cpus["n0"], held[id] = true, cpus["n0"]+2, a
		}
		next := spec.JobID(10)
		newJob := func(at time.Time) Job {
			next++
			return job(next, 1+r.IntN(3), []int{1, 2, 4}[r.IntN(3)], func(j *Job) {
				j.TimeLimit, j.SubmitTime = limits[r.IntN(3)], at
				if r.IntN(6) == 0 {
					j.Req.Nodes = 2
				}
			})
		}
		for range 25 {
			snap.Jobs = append(snap.Jobs, newJob(t0))
		}
		take := func(p Plan) {
			for _, s := range p.Starts {
				for _, na := range s.Nodes {
					for _, g := range na.GPUs {
						if used[g] {
							t.Fatalf("seed %d: job %d given %s, held by another job", seed, s.JobID, g)
						}
						used[g] = true
					}
					if cpus[na.Node] += na.CPUs; cpus[na.Node] > 16 {
						t.Fatalf("seed %d: job %d takes node %s past its 16 CPUs", seed, s.JobID, na.Node)
					}
				}
				held[s.JobID] = s.Nodes
			}
		}
		now := t0.Add(time.Second)
		cfg := Config{MaxStartsPerCycle: 3, BackfillDepth: 4}
		st, plan := NewState(snap, now, cfg)
		take(plan)
		for range 200 {
			now = now.Add(time.Duration(r.IntN(120)) * time.Second)
			switch op := r.IntN(3); {
			case op == 0 && len(held) > 0:
				ids := slices.Sorted(maps.Keys(held))
				id := ids[r.IntN(len(ids))]
				for _, na := range held[id] {
					for _, g := range na.GPUs {
						delete(used, g)
					}
					cpus[na.Node] -= na.CPUs
				}
				delete(held, id)
				take(st.End(id, now))
			case op == 1:
				take(st.Submit(newJob(now), now))
			default:
				if st.Capped() {
					p, _ := st.Resume(now)
					take(p)
				}
			}
		}
	}
}

// Resume never preempts: it stops before a held-back job whose QOS may
// preempt and says so, leaving that job to a full cycle.
func TestStateResumeStopsAtPreemptor(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Nodes: []Node{node("n1", 64, 100000, "h100", 8)},
		QOS: []QOS{{Name: "low"}, {Name: "high", Preempt: []string{"low"}}}}
	for id := spec.JobID(1); id <= 4; id++ {
		snap.Jobs = append(snap.Jobs, job(id, 1, 1, func(j *Job) {
			j.TimeLimit, j.QOS = time.Hour, "low"
			if id == 3 {
				j.QOS = "high"
			}
		}))
	}
	st, plan := NewState(snap, t0, Config{MaxStartsPerCycle: 1})
	if len(plan.Starts) != 1 || plan.Starts[0].JobID != 1 {
		t.Fatalf("capped cycle started %+v, want job 1", plan.Starts)
	}
	p, ok := st.Resume(t0)
	if !ok || len(p.Starts) != 1 || p.Starts[0].JobID != 2 {
		t.Fatalf("first resume: %+v ok=%v, want job 2 started, ok", p.Starts, ok)
	}
	p, ok = st.Resume(t0)
	if ok || len(p.Starts) != 0 || !st.Capped() {
		t.Fatalf("resume at job 3 (QOS high, may preempt): %+v ok=%v capped=%v, want nothing, false, still capped", p.Starts, ok, st.Capped())
	}
}

// TestStateThroughEmptyQueueMatchesFullCycle: a State with no job pending,
// told every job end (each at its time limit at the latest, as nodes stop
// jobs there), answers a submission at any later time — hours past the
// controller's scheduling interval — exactly as a full cycle over a
// snapshot taken then: the same start on the same GPUs, or the same
// reason, reservation and expected start. The controller keeps a State
// through an empty queue past its interval on this (schedState.ageless).
func TestStateThroughEmptyQueueMatchesFullCycle(t *testing.T) {
	t.Parallel()
	limits := []time.Duration{10 * time.Minute, time.Hour, 3 * time.Hour, 0}
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 7))
		running := map[spec.JobID]RunningJob{}
		// snapshot is what a controller would read at now: the nodes
		// with what the running jobs hold, and the running jobs.
		snapshot := func(now time.Time, jobs ...Job) *Snapshot {
			snap := &Snapshot{Jobs: jobs}
			for i := range 4 {
				snap.Nodes = append(snap.Nodes, node(fmt.Sprintf("n%d", i), 32, 100000, "h100", 8))
			}
			for _, id := range slices.Sorted(maps.Keys(running)) {
				rj := running[id]
				snap.Running = append(snap.Running, rj)
				for _, na := range rj.Nodes {
					n := &snap.Nodes[na.Node[1]-'0']
					n.FreeCPUs -= na.CPUs
					n.FreeMemMiB -= na.MemMiB
					n.Allocs++
					for _, g := range na.GPUs {
						n.GPUs[g[len(g)-1]-'0'].Free = false
					}
				}
			}
			return snap
		}
		cfg := Config{BackfillDepth: 8, Priority: priority.Config{Weights: priority.Weights{JobSize: 1000, Age: 100}, MaxAge: 24 * time.Hour}}
		now := t0
		next := spec.JobID(1)
		newJob := func() Job {
			next++
			return job(next, 1+r.IntN(4), []int{1, 2, 4, 8}[r.IntN(4)], func(j *Job) {
				j.TimeLimit, j.SubmitTime = limits[r.IntN(len(limits))], now
				if r.IntN(8) == 0 {
					j.Req.Nodes = 2
				}
			})
		}
		var st *State
		var built time.Time
		rebuild := func() {
			var p Plan
			st, p = NewState(snapshot(now), now, cfg)
			built = now
			if len(p.Starts)+len(p.Pending)+len(p.Reservations) > 0 {
				t.Fatalf("seed %d: a full cycle with nothing pending planned %+v", seed, p)
			}
		}
		end := func(id spec.JobID, at time.Time) {
			delete(running, id)
			if p := st.End(id, at); len(p.Starts)+len(p.Pending)+len(p.Reservations)+len(p.Preemptions) > 0 {
				t.Fatalf("seed %d: end of job %d with nothing pending planned %+v", seed, id, p)
			}
		}
		rebuild()
		aged, compared, waited, compacted := 0, 0, 0, 0
		for step := range 300 {
			// Time passes, minutes to hours; jobs that reach their limit
			// end there, in order.
			later := now.Add(time.Duration(r.IntN(4*3600)) * time.Second)
			if r.IntN(3) > 0 {
				later = now.Add(time.Duration(r.IntN(600)) * time.Second)
			}
			for {
				var first spec.JobID
				var at time.Time
				for id, rj := range running {
					if e := rj.Start.Add(rj.TimeLimit); rj.TimeLimit > 0 && !e.After(later) && (first == 0 || e.Before(at) || e.Equal(at) && id < first) {
						first, at = id, e
					}
				}
				if first == 0 {
					break
				}
				if at.After(now) {
					now = at
				}
				end(first, now)
			}
			now = later
			if ids := slices.Sorted(maps.Keys(running)); len(ids) > 0 && r.IntN(3) == 0 {
				end(ids[r.IntN(len(ids))], now) // ends early
				continue
			}
			// One to three jobs submitted together (one batch), of
			// different priorities: a full cycle decides the largest
			// first (job size weight), whatever their ids' order.
			jobs := make([]Job, 1+r.IntN(3))
			for i := range jobs {
				jobs[i] = newJob()
			}
			want := func() Plan { _, p := NewState(snapshot(now, jobs...), now, cfg); return p }()
			if r.IntN(3) == 0 {
				// What the controller does when nothing is pending: the
				// answers must not change.
				if !st.Compact(now) {
					t.Fatalf("seed %d step %d: Compact with nothing pending refused", seed, step)
				}
				compacted++
			}
			got := st.SubmitAll(slices.Clone(jobs), now)
			if now.Sub(built) > time.Hour {
				aged++
			}
			compared++
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("seed %d step %d: jobs %+v submitted at +%s into an empty queue: full cycle (-) vs State (+):\n%s",
					seed, step, jobs, now.Sub(t0), diff)
			}
			for _, s := range got.Starts {
				running[s.JobID] = RunningJob{ID: s.JobID, Start: now, TimeLimit: jobs[s.JobID-jobs[0].ID].TimeLimit, Nodes: s.Nodes}
			}
			if len(got.Starts) < len(jobs) {
				waited++
				rebuild() // some would wait: the queue is not empty any more
			}
		}
		if aged < 50 || compared < 100 || waited == 0 || compacted < 20 {
			t.Fatalf("seed %d: %d submissions compared, %d of them over an hour after the full cycle, %d left waiting, %d after a Compact: too few to say anything", seed, compared, aged, waited, compacted)
		}
	}
}

// TestStateCompactKeepsSizeOfWhatRuns: a State told thousands of
// submissions and ends, its queue emptying after each, holds an entry per
// submission and profile steps per start and end (the controller dropped
// it after maxKeptEvents for that, and the next submissions waited for a
// full cycle after their commit); compacted whenever nothing is pending,
// its queue is empty and its profiles have the steps of what runs, and it
// still starts what fits and reserves for what waits (that it answers as
// a full cycle would is TestStateThroughEmptyQueueMatchesFullCycle's).
func TestStateCompactKeepsSizeOfWhatRuns(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("n1", 64, 100000, "h100", 8), node("n2", 64, 100000, "h100", 8)}
	limit := func(j *Job) { j.TimeLimit = time.Hour }
	for _, compact := range []bool{false, true} {
		st, _ := NewState(&Snapshot{Nodes: nodes}, t0, Config{})
		now := t0
		var running []spec.JobID // started, oldest first
		for id := spec.JobID(1); id <= 4000; id++ {
			now = now.Add(time.Second)
			if len(running) == 12 {
				st.End(running[0], now)
				running = running[1:]
			}
			if compact && !st.Compact(now) {
				t.Fatalf("job %d: Compact with nothing pending refused", id)
			}
			p := st.Submit(job(id, 1, 1, limit, func(j *Job) { j.SubmitTime = now }), now)
			if len(p.Starts) != 1 {
				t.Fatalf("job %d on 16 GPUs, 12 of them busy: %+v, want it started", id, p)
			}
			running = append(running, id)
		}
		steps := 0
		for _, w := range st.c.nodes {
			steps += w.prof.Steps()
		}
		if !compact {
			if len(st.c.queue) != 4000 || steps < 4000 {
				t.Fatalf("not compacted: %d queued, %d profile steps; want 4000 and at least 4000 (else this test shows nothing)", len(st.c.queue), steps)
			}
			continue
		}
		// 12 running, each a step at its start and one at its end.
		if len(st.c.queue) != 1 || steps > 2*(12+2) {
			t.Fatalf("compacted after each end: %d queued, %d profile steps; want 1 and at most %d", len(st.c.queue), steps, 2*(12+2))
		}
		// It still starts what fits and reserves for what waits.
		st.Compact(now)
		now = now.Add(time.Second)
		jobs := []Job{job(5001, 1, 4, limit, func(j *Job) { j.SubmitTime = now }), job(5002, 1, 8, limit, func(j *Job) { j.SubmitTime = now })}
		got := st.SubmitAll(jobs, now)
		if len(got.Starts) != 1 || got.Starts[0].JobID != 5001 || len(got.Pending) != 1 || got.Pending[0].Reason != spec.ReasonResources || got.Pending[0].ExpectedStart.IsZero() {
			t.Fatalf("4 then 8 GPUs with 4 free: %+v, want the 4-GPU job started and the other waiting for Resources with an expected start", got)
		}
	}
}

// TestStateCompactForgetsStartedBlockers: a job that waited ("Resources",
// the cycle's first blocked job, with a reservation) and then started in
// an End leaves the State marked as having a blocked job: the next job
// that does not fit got "Priority" and no reservation where a full cycle
// gives "Resources" and an expected start. Compact, with nothing pending,
// forgets it.
func TestStateCompactForgetsStartedBlockers(t *testing.T) {
	t.Parallel()
	nodes := []Node{node("n1", 8, 100000, "h100", 1)}
	limit := func(j *Job) { j.TimeLimit = time.Hour }
	cfg := Config{BackfillDepth: 1}
	st, plan := NewState(&Snapshot{Nodes: nodes, Jobs: []Job{job(1, 1, 1, limit), job(2, 1, 1, limit)}}, t0, cfg)
	if len(plan.Starts) != 1 || len(plan.Pending) != 1 || plan.Pending[0].Reason != spec.ReasonResources {
		t.Fatalf("full cycle: %+v, want job 1 started and job 2 waiting for Resources", plan)
	}
	at := t0.Add(time.Minute)
	if p := st.End(1, at); len(p.Starts) != 1 || p.Starts[0].JobID != 2 {
		t.Fatalf("end of job 1: %+v, want job 2 started", p)
	}
	now := t0.Add(2 * time.Minute)
	j3 := job(3, 1, 1, limit, func(j *Job) { j.SubmitTime = now })
	snap := &Snapshot{Nodes: []Node{node("n1", 8, 100000, "h100", 1)}, Jobs: []Job{j3},
		Running: []RunningJob{{ID: 2, Start: at, TimeLimit: time.Hour, Nodes: plan.Starts[0].Nodes}}}
	snap.Nodes[0].GPUs[0].Free = false
	snap.Nodes[0].FreeCPUs--
	snap.Nodes[0].Allocs++
	_, want := NewState(snap, now, cfg)
	if !st.Compact(now) {
		t.Fatal("Compact with nothing pending refused")
	}
	got := st.SubmitAll([]Job{j3}, now)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("job 3 behind job 2 on the only GPU: full cycle (-) vs compacted State (+):\n%s", diff)
	}
	if p := st.End(2, now.Add(time.Minute)); len(p.Starts) != 1 || p.Starts[0].JobID != 3 {
		t.Fatalf("end of job 2: %+v, want job 3 started", p)
	}
	if st.Compact(now.Add(time.Minute)) != true {
		t.Fatal("Compact with nothing pending refused")
	}
	st.SubmitAll([]Job{job(4, 1, 1, limit), job(5, 1, 1, limit)}, now.Add(2*time.Minute))
	if st.Compact(now.Add(2 * time.Minute)) {
		t.Fatal("Compact with job 5 pending (and reserved) did not refuse")
	}
}

// TestStateEndLetsAFailedShapeFitAgain: a shape that once failed to place
// (job 2 behind job 1 on the only GPU) is memoised as failing; an end
// frees the GPU, so the next job of that shape, submitted after the queue
// emptied, starts at once. Before End cleared the memo's failure, job 3
// stayed pending ("Priority") on the free GPU until the next full cycle.
func TestStateEndLetsAFailedShapeFitAgain(t *testing.T) {
	t.Parallel()
	snap := &Snapshot{Nodes: []Node{node("n1", 8, 100000, "h100", 1)},
		Jobs: []Job{job(1, 1, 1), job(2, 1, 1)}}
	st, plan := NewState(snap, t0, Config{})
	if len(plan.Starts) != 1 || plan.Starts[0].JobID != 1 {
		t.Fatalf("full cycle: %+v, want job 1 started", plan.Starts)
	}
	if p := st.End(1, t0.Add(time.Second)); len(p.Starts) != 1 || p.Starts[0].JobID != 2 {
		t.Fatalf("end of job 1: %+v, want job 2 started", p)
	}
	if p := st.End(2, t0.Add(2*time.Second)); len(p.Starts) != 0 {
		t.Fatalf("end of job 2: %+v, want no start (nothing pending)", p)
	}
	now := t0.Add(3 * time.Second)
	p := st.Submit(job(3, 1, 1, func(j *Job) { j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 {
		t.Errorf("submit of job 3 with the GPU free: %+v, want it started", p)
	}
}

// TestStateEndReturnsLimitCounts: a job the State started counts against
// its user's QOS limit until it ends; its end gives the count back, so
// the user's waiting job starts in that End. Before, only jobs running
// at the full cycle gave theirs back: the waiting job stayed held
// ("QOSLimit") until the next full cycle.
func TestStateEndReturnsLimitCounts(t *testing.T) {
	t.Parallel()
	user := func(j *Job) { j.User, j.QOS = "alice", "normal" }
	snap := &Snapshot{Nodes: []Node{node("n1", 8, 100000, "h100", 4)},
		QOS:  []QOS{{Name: "normal", MaxJobsPerUser: 1}},
		Jobs: []Job{job(1, 1, 1, user), job(2, 1, 1, user)}}
	st, plan := NewState(snap, t0, Config{})
	if len(plan.Starts) != 1 || plan.Starts[0].JobID != 1 {
		t.Fatalf("full cycle: %+v, want job 1 started, job 2 held by the limit", plan.Starts)
	}
	p := st.End(1, t0.Add(time.Second))
	if len(p.Starts) != 1 || p.Starts[0].JobID != 2 {
		t.Fatalf("end of job 1: %+v, want job 2 started (alice under her limit again)", p)
	}
	// Job 2, started by the State, gives its count back too.
	st.End(2, t0.Add(2*time.Second))
	now := t0.Add(3 * time.Second)
	p = st.Submit(job(3, 1, 1, func(j *Job) { user(j); j.SubmitTime = now }), now)
	if len(p.Starts) != 1 || p.Starts[0].JobID != 3 {
		t.Errorf("submit of alice's job 3 with none of hers running: %+v, want it started", p)
	}
}

// TestStateStaleAfterPartialEnd: an End that frees a GPU share (or MIG
// slices) leaves the State stale, since it cannot give them back; an End
// of whole GPUs does not. (TestDynamicMIG in gpud/e2e/jobs shows what a
// State kept past such an end did: slices spread 5+3 over two GPUs that a
// full cycle packs 7+1.)
func TestStateStaleAfterPartialEnd(t *testing.T) {
	t.Parallel()
	n := node("n1", 8, 100000, "h100", 2)
	n.GPUs[0].Free, n.GPUs[0].FreeFraction = false, 0.5
	n.GPUs[1].Free = false
	n.FreeCPUs, n.Allocs = 6, 2
	snap := &Snapshot{Nodes: []Node{n}, Running: []RunningJob{
		{ID: 1, Start: t0, TimeLimit: time.Hour, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, GPUs: []string{"GPU-n1-0"}, GPUFraction: 0.5}}},
		{ID: 2, Start: t0, TimeLimit: time.Hour, Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 1, GPUs: []string{"GPU-n1-1"}}}},
	}}
	st, _ := NewState(snap, t0.Add(time.Second), Config{})
	st.End(2, t0.Add(2*time.Second))
	if st.Stale() {
		t.Fatal("stale after the end of a whole-GPU job")
	}
	st.End(1, t0.Add(3*time.Second))
	if !st.Stale() {
		t.Fatal("not stale after the end of a job holding a GPU share")
	}
}
