package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/plot"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/sim/trace"
	"github.com/gpud/gpud/gpud/spec"
)

// twinConfig has every feature the replay must follow: QOS tiers with
// requeue preemption, multifactor priority with fairshare over an
// account tree, backfill with a depth and a window, two partitions. The
// harness plays no heartbeats: node_timeout is beyond any run's span, and
// so is a third of it, past which a silent node gets no new jobs
// (lateAfter; at 1000h the nodes of a run longer than 333 simulated hours,
// 8,000 submissions, all went UNKNOWN and the queue grew to the end).
const twinConfig = `version = 1
default_qos = "normal"
default_account = "physics"
[controller]
node_timeout = "100000h"
min_job_age = "1000h"
[scheduler]
interval = "30s"
max_jobs_per_cycle = 1000
backfill_depth = 20
backfill_window = "12h"
[scheduler.priority]
weight_age = 1000
weight_fairshare = 10000
weight_job_size = 500
weight_partition = 1000
weight_qos = 10000
max_age = "1d"
[fairshare]
decay_half_life = "12h"
[limits]
max_submit_jobs_per_user = 100000
[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true
default_time = "1h"
max_time = "UNLIMITED"
[[partition]]
name = "short"
nodes = ["n01", "n02", "n03", "n04"]
priority_tier = 1
default_time = "30m"
max_time = "2h"
[[qos]]
name = "low"
priority = 0
preempt_mode = "off"
[[qos]]
name = "normal"
priority = 100
preempt = ["low"]
preempt_mode = "requeue"
[[qos]]
name = "high"
priority = 1000
preempt = ["low"]
preempt_mode = "requeue"
[[account]]
name = "physics"
shares = 3
[[account]]
name = "ml"
shares = 2
[[account]]
name = "bio"
shares = 1
`

// twinJobSpec is one generated submission and how it will run.
type twinJobSpec struct {
	at      time.Duration
	who     Caller
	js      spec.JobSpec
	runtime time.Duration
	fail    bool
	// dependOn is the index of an earlier submission (afterok), or -1.
	dependOn int
}

// twinWorkload generates n submissions over span: users in three
// accounts, three QOS, two partitions, 1–8 GPUs and two-node jobs,
// arrays with %MAX, afterok chains and failing jobs, submitted at
// distinct whole seconds.
func twinWorkload(seed uint64, n int, span time.Duration) []twinJobSpec {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	users := []struct {
		who     Caller
		account string
	}{
		{Caller{UID: 2001, GID: 2001, User: "ada", Known: true}, "physics"},
		{Caller{UID: 2002, GID: 2002, User: "bo", Known: true}, "physics"},
		{Caller{UID: 2003, GID: 2003, User: "cy", Known: true}, "ml"},
		{Caller{UID: 2004, GID: 2004, User: "di", Known: true}, "ml"},
		{Caller{UID: 2005, GID: 2005, User: "ed", Known: true}, "bio"},
	}
	step := int64(span/time.Second) / int64(n)
	var out []twinJobSpec
	at := int64(0)
	for len(out) < n {
		at += 1 + rng.Int64N(2*step)
		u := users[rng.IntN(len(users))]
		qos := "normal"
		switch x := rng.IntN(100); {
		case x < 20:
			qos = "low"
		case x < 25:
			qos = "high"
		}
		part, nodes := "gpu", 1
		gpus := []int{1, 1, 1, 2, 2, 4, 8}[rng.IntN(7)]
		if rng.IntN(10) == 0 {
			nodes, gpus = 2, 8
		}
		// Run times from 2 minutes to 6 hours, most short; limits
		// over-ask by 1–3× in whole minutes.
		run := time.Duration(120+int64(math.Exp(rng.Float64()*math.Log(180))*120)) * time.Second
		limit := (time.Duration(float64(run)*(1+2*rng.Float64())) + time.Minute).Truncate(time.Minute)
		if rng.IntN(6) == 0 && nodes == 1 && run < 90*time.Minute {
			part, limit = "short", min(limit, 2*time.Hour)
		}
		js := spec.JobSpec{Name: "j" + strconv.Itoa(len(out)), Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Partition: part, QOS: qos,
			Account: u.account, TimeLimit: spec.Duration(limit), Resources: spec.Resources{Nodes: nodes, CPUsPerNode: 2 * gpus, GPUsPerNode: gpus}}
		s := twinJobSpec{at: time.Duration(at) * time.Second, who: u.who, js: js, runtime: run, fail: rng.IntN(15) == 0, dependOn: -1}
		if len(out) > 0 && rng.IntN(12) == 0 {
			s.dependOn = len(out) - 1 - rng.IntN(min(len(out), 20))
		}
		if rng.IntN(25) == 0 && nodes == 1 {
			k := 2 + rng.IntN(5)
			s.js.Array = fmt.Sprintf("0-%d%%%d", k, 1+rng.IntN(2))
			s.dependOn = -1
		}
		out = append(out, s)
	}
	return out
}

// twinTime is the controller's clock in the fidelity run: whole seconds
// from a fixed epoch, so accounting's whole-second times lose nothing.
var twinT0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// runTwinController runs the workload on a controller over ends it
// reports itself, playing the nodes' side the way an agent does: after
// every owner operation it reads the assignments of the nodes whose
// generation moved (what an agent's long-poll returns), a new allocation
// is a start whose exit comes runtime later, an allocation told to stop
// (preempted) exits at once. The periodic cycle runs at every interval.
// The accounting goes to dbPath.
func runTwinController(t *testing.T, cfg Config, work []twinJobSpec, nodes, gpus int, dbPath string) {
	db, err := accounting.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h := newHarnessAt(t, newFakeStore(), func(c *Config) { *c = cfg }, twinT0, WithRecorder(db))
	ctx := context.Background()
	for i := range nodes {
		name := fmt.Sprintf("n%02d", i+1)
		inv := spec.Inventory{Name: name, CPUs: 64, MemMiB: 512 << 10}
		for g := range gpus {
			inv.GPUs = append(inv.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100"})
		}
		if _, err := h.c.Register(ctx, root, inv); err != nil {
			t.Fatal(err)
		}
	}
	// Every event is answered by a full cycle (the replay's too).
	if err := h.c.query(ctx, func() error { h.c.sched.incMin = 1000 * time.Hour; return nil }); err != nil {
		t.Fatal(err)
	}
	settle := func() {
		if err := h.c.query(ctx, func() error {
			for h.c.sched.dirty {
				h.c.cycle(ctx)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A node's exit report for one part of an allocation.
	type exit struct {
		node string
		ev   NodeEvent
	}
	// report delivers exits in one owner operation, so that no cycle
	// runs between them (the replay answers one second's events, and a
	// cycle's preempted victims, with one cycle).
	report := func(exits []exit) {
		if err := h.c.call(ctx, func(tx *txn) error {
			for _, x := range exits {
				h.c.applyEvent(tx, x.node, x.ev)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A run's end: when its allocation exits by itself.
	type end struct {
		at    time.Duration
		id    spec.JobID
		alloc string
		nodes []string
	}
	var ends []end
	// live: the allocations started and not yet exited (an end whose
	// allocation was preempted meanwhile is dropped); stopping: the
	// allocation parts told to stop whose exit was reported.
	live := map[string]bool{}
	stopped := map[[2]string]bool{}
	gens := map[string]uint64{}
	ids := make([]spec.JobID, len(work))
	runtime := map[spec.JobID]time.Duration{}
	fails := map[spec.JobID]bool{}
	depends := map[spec.JobID]spec.JobID{}
	starts, stops := 0, 0
	interval := cfg.SchedInterval
	nextTick := interval
	wall := time.Now()
	next := 0
	// scan reads the assignments of the nodes whose generation changed
	// (the controller bumps it at every start and stop it orders there):
	// it queues the end of each new allocation and reports the exit of
	// each part told to stop, then settles and scans again until the
	// controller orders nothing more.
	scan := func(now time.Duration) {
		for {
			var exits []exit
			if err := h.c.query(ctx, func() error {
				for _, name := range h.c.st.nodeNames() {
					n := h.c.st.nodes[name]
					if n.gen == gens[name] {
						continue
					}
					gens[name] = n.gen
					for _, a := range h.c.assignments(n) {
						id := a.Alloc.ID
						switch {
						case a.Stop:
							if a.StopState != spec.StatePreempted {
								t.Errorf("job %d on %s told to stop as %s: the workload only preempts", a.Job.ID, name, a.StopState)
							}
							if !stopped[[2]string{id, name}] {
								stopped[[2]string{id, name}] = true
								delete(live, id)
								exits = append(exits, exit{node: name, ev: NodeEvent{Seq: 1, AllocID: id, JobID: a.Job.ID, Kind: EventExited,
									State: a.StopState, Signal: 15}})
							}
						case !live[id] && !stopped[[2]string{id, name}]:
							if a.Job.Alloc == nil || a.Job.Alloc.ID != id || len(a.Alloc.Nodes) == 0 {
								t.Fatalf("job %d's assignment on %s has no allocation of its own", a.Job.ID, name)
							}
							if _, ok := runtime[a.Job.ID]; !ok {
								t.Fatalf("job %d started on %s but was never submitted", a.Job.ID, name)
							}
							live[id] = true
							starts++
							e := end{at: now + runtime[a.Job.ID], id: a.Job.ID, alloc: id}
							for _, p := range a.Alloc.Nodes {
								e.nodes = append(e.nodes, p.Node)
							}
							ends = append(ends, e)
						}
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			slices.SortFunc(ends, func(a, b end) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id)) })
			if len(exits) == 0 {
				return
			}
			stops++
			report(exits)
			settle()
		}
	}
	setClock := func(d time.Duration) {
		h.mu.Lock()
		h.now = twinT0.Add(d)
		h.mu.Unlock()
	}
	for next < len(work) || len(ends) > 0 {
		now := nextTick
		if len(ends) > 0 && ends[0].at < now {
			now = ends[0].at
		}
		if next < len(work) && work[next].at < now {
			now = work[next].at
		}
		setClock(now)
		// Ends first, then submissions, then the periodic cycle: the
		// replay's order within an instant. Every end of the instant in
		// one owner operation: the replay answers them with one cycle.
		var exits []exit
		for len(ends) > 0 && ends[0].at == now {
			e := ends[0]
			ends = ends[1:]
			if !live[e.alloc] {
				continue // preempted since
			}
			delete(live, e.alloc)
			state, code := spec.StateCompleted, 0
			if fails[e.id] {
				state, code = spec.StateFailed, 1
			}
			for _, n := range e.nodes {
				exits = append(exits, exit{n, NodeEvent{Seq: 1, AllocID: e.alloc, JobID: e.id, Kind: EventExited, State: state, ExitCode: code}})
			}
		}
		// The instant's submissions (distinct seconds: at most one) go in
		// the same owner operation as its ends, so that one cycle answers
		// them all, as the replay does: accounting's whole seconds do not
		// say which came first, and a controller whose cycles are paced
		// answers what arrived in the same second together.
		var subs []twinJobSpec
		for next < len(work) && work[next].at == now {
			w := work[next]
			if w.dependOn >= 0 {
				w.js.Depend = "afterok:" + strconv.Itoa(int(ids[w.dependOn]))
			}
			subs = append(subs, w)
			next++
		}
		if len(exits) > 0 || len(subs) > 0 {
			var made [][]spec.JobID
			if err := h.c.call(ctx, func(tx *txn) error {
				for _, x := range exits {
					h.c.applyEvent(tx, x.node, x.ev)
				}
				made = made[:0]
				for _, w := range subs {
					id, err := h.c.submitIn(tx, w.who, w.js, "")
					if err != nil {
						return fmt.Errorf("submit %s: %w", w.js.Name, err)
					}
					made = append(made, id)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for k, w := range subs {
				k0 := next - len(subs) + k
				id := made[k][0]
				ids[k0] = id
				if w.dependOn >= 0 {
					depends[id] = ids[w.dependOn]
				}
				for _, tid := range made[k] {
					runtime[tid] = w.runtime
					fails[tid] = w.fail
				}
				if (k0+1)%max(len(work)/10, 1) == 0 {
					pending := 0
					if err := h.c.query(ctx, func() error { pending = len(h.c.st.pending); return nil }); err != nil {
						t.Fatal(err)
					}
					t.Logf("controller: %d of %d submitted at %s of virtual time, %d pending, %d running, %s wall", k0+1, len(work), now, pending, len(live),
						time.Since(wall).Round(time.Second))
				}
			}
			settle()
			scan(now)
		}
		if now == nextTick {
			h.tick <- twinT0.Add(now)
			nextTick += interval
			settle()
			scan(now)
		}
	}
	// Every job ended: nothing is left running, pending or stopping.
	if err := h.c.query(ctx, func() error {
		// Only jobs whose afterok can no longer be met (their
		// dependency failed) may wait on, as in Slurm without
		// kill_invalid_depend.
		// A job whose dependency is such a job waits on too.
		for id, rec := range h.c.st.pending {
			dep, ok := depends[id]
			if ok && (rec.job.Reason == spec.ReasonDependencyNeverSatisfied || rec.job.Reason == spec.ReasonDependency && h.c.st.pending[dep] != nil) {
				continue
			}
			return fmt.Errorf("the run ended with job %d pending (%s, depending on %d)", id, rec.job.Reason, dep)
		}
		if len(live) > 0 {
			return fmt.Errorf("the run ended with %d allocations live", len(live))
		}
		for _, name := range h.c.st.nodeNames() {
			if a := h.c.st.nodes[name].allocs; len(a) > 0 {
				return fmt.Errorf("node %s still holds %d allocations", name, len(a))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller: %d runs started, %d rounds of preempted exits", starts, stops)
	h.stop()
}

// readTwinAccounting reads the accounting back as gpud simulate does.
func readTwinAccounting(t *testing.T, path string) []api.AcctJob {
	db, err := accounting.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	recs, err := db.Jobs(ctx, accounting.Filter{NoUsage: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]spec.JobID, len(recs))
	for i := range recs {
		ids[i] = recs[i].ID
	}
	att, err := db.Attempts(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]api.AcctJob, len(recs))
	for i := range recs {
		out[i] = api.AcctJob{AcctRecord: recs[i], AttemptHistory: att[recs[i].ID]}
	}
	return out
}

// The twin is faithful to the live controller: a workload with arrays,
// dependencies, QOS preemption, backfill and fairshare runs on a
// controller over simulated days (its nodes reporting exits in
// virtual time), its accounting is replayed through gpud/sim's twin
// under the same configuration, and at least 99% of the jobs start in
// the replay within one scheduling interval of their real start.
// GPUD_TWIN_JOBS sets the workload's size (make bench-twin: 50,000).
func TestTwinMatchesController(t *testing.T) {
	// make test's size: what a loaded 2-core machine runs in about a
	// minute (under -race, a quarter of the jobs over half a day); make
	// bench-twin runs 50,000 jobs (the bar).
	n, span, nodes := 400, 24*time.Hour, 12
	if testing.Short() || raceDetector {
		n, span = 200, 12*time.Hour
	}
	if s := os.Getenv("GPUD_TWIN_JOBS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("GPUD_TWIN_JOBS=%q: give a number of jobs", s)
		}
		// Over days, 25 submissions a simulated day per node: about 70%
		// of the GPUs offered, so the queue forms and drains (at 33 a
		// day per node the preempted reruns overload the cluster and
		// the queue grows for as long as the run lasts). 20 nodes, so
		// that 10% more is whole nodes (docs/simulator.md's what-if).
		nodes = 20
		span = max(24*time.Hour, time.Duration(n)*24*time.Hour/time.Duration(25*nodes))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(path, []byte(twinConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := config.LoadController(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FromConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if late := max(2*cfg.HeartbeatInterval, cfg.NodeTimeout/3); span+span/2 > late {
		t.Fatalf("%d jobs span %s of simulated time: over two thirds of %s, after which nodes that never heartbeat are not responding (the harness sends no heartbeats); raise twinConfig's node_timeout", n, span, late)
	}
	const gpus = 8
	work := twinWorkload(32, n, span)
	dbPath := filepath.Join(dir, "accounting.db")
	wall := time.Now()
	runTwinController(t, cfg, work, nodes, gpus, dbPath)
	ctlWall := time.Since(wall)
	recs := readTwinAccounting(t, dbPath)
	if out := os.Getenv("GPUD_TWIN_OUT"); out != "" {
		// What gpud simulate --from-accounting needs to replay this run
		// (docs/simulator.md's example): the accounting, the
		// configuration and the inventory.
		keepTwinRun(t, out, dbPath, nodes, gpus)
	}

	jobs, stats, err := trace.FromAccounting(recs, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	rp := cfg.ReplayPolicy()
	var inv []sched.Node
	for i := range nodes {
		name := fmt.Sprintf("n%02d", i+1)
		sn := sched.Node{Name: name, CPUs: 64, MemMiB: 512 << 10, Partitions: rp.PartitionsOf(name)}
		for g := range gpus {
			sn.GPUs = append(sn.GPUs, sched.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100"})
		}
		inv = append(inv, sn)
	}
	pol := sim.TwinPolicy{Config: rp.Config, QOS: rp.QOS, Partitions: rp.Partitions, DownPartitions: rp.DownPartitions,
		BasePriority: rp.BasePriority, Interval: cfg.SchedInterval, Accounts: rp.Accounts, Fairshare: rp.Fairshare,
		AccountLimits: rp.AccountLimits}
	r, err := sim.RunTwin(jobs, sim.TwinOptions{Nodes: inv, Policy: pol, Start: twinT0})
	if err != nil {
		t.Fatal(err)
	}
	within, started, preempted, backfilled, deps, arrays := 0, 0, 0, 0, 0, 0
	type miss struct {
		id         spec.JobID
		real, repl time.Duration
	}
	var misses []miss
	var diffs []time.Duration // replay − real start of each job started in both
	for i := range r.Jobs {
		j, res := &r.Jobs[i], &r.Res[i]
		preempted += res.Preempted
		if res.Backfilled {
			backfilled++
		}
		if j.Depend != "" {
			deps++
		}
		if j.ArrayMax > 0 {
			arrays++
		}
		if j.RealStart.IsZero() != !res.Started {
			misses = append(misses, miss{j.ID, j.RealStart.Sub(twinT0), res.Start.Sub(twinT0)})
			continue
		}
		if j.RealStart.IsZero() {
			continue
		}
		started++
		diffs = append(diffs, res.Start.Sub(j.RealStart))
		if d := res.Start.Sub(j.RealStart); d.Abs() <= cfg.SchedInterval {
			within++
		} else {
			misses = append(misses, miss{j.ID, j.RealStart.Sub(twinT0), res.Start.Sub(twinT0)})
		}
	}
	share := float64(within) / float64(max(started, 1))
	t.Logf("%d jobs (%d records: %d with dependencies, %d array tasks with %%MAX), %d started; controller run %s, replay %s (%d cycles); "+
		"replay: %d preemptions, %d backfilled; %.2f%% within one interval (%s) of the real start",
		stats.Replayed, stats.Records, deps, arrays, started, ctlWall.Round(time.Millisecond), r.Wall.Round(time.Millisecond), r.Cycles,
		preempted, backfilled, 100*share, cfg.SchedInterval)
	hist := twinHistogram(diffs, cfg.SchedInterval)
	for _, b := range hist.bins {
		t.Logf("replay − real start %-16s %6d jobs", b.label, b.n)
	}
	if out := os.Getenv("GPUD_TWIN_OUT"); out != "" {
		f, err := os.Create(filepath.Join(out, "twin_fidelity.svg"))
		if err != nil {
			t.Fatal(err)
		}
		bars := plot.Bars{Title: fmt.Sprintf("replay − real start, %d jobs on the live controller (interval %s)", len(diffs), cfg.SchedInterval),
			XLabel: "jobs"}
		for _, b := range hist.bins {
			bars.Labels, bars.Values = append(bars.Labels, b.label), append(bars.Values, float64(b.n))
		}
		if err := plot.WriteSVG(f, bars); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for k, m := range misses {
		if k == 10 {
			t.Logf("... and %d more", len(misses)-10)
			break
		}
		j := &r.Jobs[slices.IndexFunc(r.Jobs, func(x sim.TwinJob) bool { return x.ID == m.id })]
		t.Logf("job %d: real start %s, replay %s (submit %s, run %s, limit %s, %s/%s/%s, array %d.%d %%%d, depend %q, %d real attempts, req %+v)",
			m.id, m.real, m.repl, j.Submit.Sub(twinT0), j.Runtime, j.TimeLimit, j.User, j.QOS, j.Partition, j.ArrayJobID, j.ArrayTaskID, j.ArrayMax,
			j.Depend, j.RealAttempts, j.Req)
	}
	if preempted == 0 || backfilled == 0 || deps == 0 || arrays == 0 {
		t.Errorf("the workload must exercise preemption (%d), backfill (%d), dependencies (%d) and arrays (%d)", preempted, backfilled, deps, arrays)
	}
	if share < 0.99 {
		t.Errorf("%.2f%% of %d jobs started within one scheduling interval of their real start, want ≥ 99%%", 100*share, started)
	}
}

// keepTwinRun copies the run's accounting and configuration into dir and
// writes its inventory as gpuq nodes --json prints it.
func keepTwinRun(t *testing.T, dir, dbPath string, nodes, gpus int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	var inv []spec.Node
	for i := range nodes {
		name := fmt.Sprintf("n%02d", i+1)
		n := spec.Node{Inventory: spec.Inventory{Name: name, CPUs: 64, MemMiB: 512 << 10}}
		for g := range gpus {
			n.GPUs = append(n.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100"})
		}
		inv = append(inv, n)
	}
	js, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"accounting.db": db, "gpud.toml": []byte(twinConfig), "nodes.json": js} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// twinBins is the distribution of replay − real start differences.
type twinBins struct {
	bins []struct {
		label string
		n     int
	}
}

// twinHistogram counts differences into bins around one scheduling
// interval: exact (same second), within the interval either way, and
// wider bands beyond it.
func twinHistogram(diffs []time.Duration, interval time.Duration) twinBins {
	edges := []struct {
		label  string
		lo, hi time.Duration // lo < d <= hi
	}{
		{"< -1h", math.MinInt64, -time.Hour - 1},
		{"-1h .. -5m", -time.Hour - 1, -5*time.Minute - 1},
		{"-5m .. -iv", -5*time.Minute - 1, -interval - 1},
		{"-iv .. -1s", -interval - 1, -time.Second},
		{"0 (same s)", -time.Second, 0},
		{"1s .. iv", 0, interval},
		{"iv .. 5m", interval, 5 * time.Minute},
		{"5m .. 1h", 5 * time.Minute, time.Hour},
		{"> 1h", time.Hour, math.MaxInt64},
	}
	var h twinBins
	for _, e := range edges {
		h.bins = append(h.bins, struct {
			label string
			n     int
		}{e.label, 0})
	}
	for _, d := range diffs {
		for i, e := range edges {
			if d > e.lo && d <= e.hi {
				h.bins[i].n++
				break
			}
		}
	}
	return h
}
