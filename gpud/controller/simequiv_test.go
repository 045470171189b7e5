package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sim"
	"github.com/gpud/gpud/gpud/spec"
)

// equivConfig sets every knob the simulator's old copy of the mapping
// dropped or never had: backfill depth, starts per cycle, the nice weight
// (through the multifactor weights), a QOS limit and a partition's
// placement.
const equivConfig = `version = 1
[controller]
node_timeout = "1000h"
[scheduler]
interval = "24h"
max_jobs_per_cycle = 2
backfill_depth = 2
backfill_window = "12h"
[scheduler.priority]
weight_age = 500
weight_fairshare = 0
weight_job_size = 3000
weight_partition = 100
weight_qos = 1000
max_age = "1h"
[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true
default_time = "1h"
max_time = "UNLIMITED"
placement = "spread"
[[qos]]
name = "normal"
priority = 100
max_jobs_per_user = 2
preempt_mode = "off"
`

// step is what one instant's cycles decided: the starts (job → "node/gpu
// index" list) and every pending job's reason and expected start (as an
// offset from the start of the sequence; 0 for none).
type step struct {
	Starts  map[spec.JobID][]string
	Pending map[spec.JobID]string
}

// One configuration and one recorded sequence of submissions and ends
// give the same plans in the controller's cycles and in gpud simulate
// --policy sched: both take the policy from controller.FromConfig and
// Config.SchedPolicy. The simulator's own copy of the mapping (before
// there was one) lost the placement, the QOS limit, the backfill depth
// and the starts per cycle, and this test failed on it.
func TestSimulatorPlansMatchController(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpud.toml")
	if err := os.WriteFile(path, []byte(equivConfig), 0o600); err != nil {
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

	// The recorded sequence: submissions at distinct whole minutes; each
	// run time carries 2^i ns, so every end falls at its own instant
	// (a chain of runs sums distinct powers of two) and no two events
	// share one: the controller sees them one at a time, as the
	// simulator does.
	rng := rand.New(rand.NewPCG(7, 17))
	var jobs []sim.Job
	for i := range 28 {
		rt := time.Duration(5+rng.IntN(80))*time.Minute + time.Duration(1)<<i
		jobs = append(jobs, sim.Job{
			Name: fmt.Sprint(i + 1), Submit: time.Duration(i*3+rng.IntN(3)) * time.Minute, Runtime: rt,
			Estimate: rt + time.Duration(rng.IntN(30))*time.Minute, Nodes: 1, GPUsPerNode: 1 + rng.IntN(4),
			User: []string{"alice", "bob"}[rng.IntN(2)], Account: "default",
		})
	}
	nodes := []sim.NodeSpec{{Name: "n1", CPUs: 8, MemMiB: 1000, GPUs: 4, Model: "h100"},
		{Name: "n2", CPUs: 8, MemMiB: 1000, GPUs: 4, Model: "h100"}, {Name: "n3", CPUs: 8, MemMiB: 1000, GPUs: 4, Model: "h100"}}

	want := simulatorSteps(t, cfg, jobs, nodes)
	got := controllerSteps(t, cfg, jobs, nodes)
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Fatalf("plans per instant, simulator (-) vs controller (+):\n%s", diff)
	}
	starts := 0
	for _, s := range got {
		starts += len(s.Starts)
	}
	if starts != len(jobs) {
		t.Fatalf("%d starts, want every one of the %d jobs started once", starts, len(jobs))
	}
}

// simulatorSteps runs jobs through the simulator's sched policy, built
// as gpud simulate builds it.
func simulatorSteps(t *testing.T, cfg Config, jobs []sim.Job, nodes []sim.NodeSpec) map[time.Duration]step {
	sp := cfg.SchedPolicy()
	pol, err := sim.Named("sched", sp.Config, func(*sim.Job, time.Duration) int64 { return sp.JobPriority })
	if err != nil {
		t.Fatal(err)
	}
	pol.QOS, pol.Partitions, pol.JobQOS, pol.JobPartition = sp.QOS, sp.Partitions, sp.JobQOS, sp.JobPartition
	steps := map[time.Duration]step{}
	est, _ := sim.ParseEstimate("trace")
	_, err = sim.Run(jobs, sim.Options{Nodes: nodes, Estimate: est, Policy: pol, OnPlan: func(now time.Duration, plan sched.Plan) {
		s, ok := steps[now]
		if !ok {
			s = step{Starts: map[spec.JobID][]string{}}
		}
		for _, st := range plan.Starts {
			for _, na := range st.Nodes {
				for _, u := range na.GPUs { // "n1-gpu3"
					node, gpu, _ := strings.Cut(u, "-gpu")
					s.Starts[st.JobID] = append(s.Starts[st.JobID], node+"/"+gpu)
				}
			}
		}
		s.Pending = map[spec.JobID]string{} // the last cycle's word stands
		for _, p := range plan.Pending {
			s.Pending[p.JobID] = pendingView(p.Reason, p.ExpectedStart, sim.Epoch)
		}
		steps[now] = s
	}})
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

func pendingView(reason string, expected, epoch time.Time) string {
	if expected.IsZero() {
		return reason
	}
	return fmt.Sprintf("%s at %s", reason, expected.Sub(epoch))
}

// controllerSteps replays jobs on a controller: each job is submitted at
// its time and ends (its node reports it COMPLETED) its run time after
// the controller started it.
func controllerSteps(t *testing.T, cfg Config, jobs []sim.Job, nodes []sim.NodeSpec) map[time.Duration]step {
	h := newHarness(t, newFakeStore(), func(c *Config) { *c = cfg })
	for _, n := range nodes {
		h.register(n.Name, n.GPUs)
	}
	callers := map[string]Caller{"alice": alice, "bob": bob}
	ctx := context.Background()
	// Every event is answered by a full cycle, as in the simulator.
	if err := h.c.query(ctx, func() error { h.c.sched.incMin = time.Hour; return nil }); err != nil {
		t.Fatal(err)
	}
	type end struct {
		at  time.Duration
		job spec.Job
	}
	var ends []end
	steps := map[time.Duration]step{}
	next := 0
	for next < len(jobs) || len(ends) > 0 {
		var now time.Duration
		if next < len(jobs) && (len(ends) == 0 || jobs[next].Submit < ends[0].at) {
			now = jobs[next].Submit
		} else {
			now = ends[0].at
		}
		// Move the clock without a tick: no periodic cycle, no node
		// timeout.
		h.mu.Lock()
		h.now = t0.Add(now)
		h.mu.Unlock()
		switch {
		case len(ends) > 0 && ends[0].at == now:
			h.exit(ends[0].job.Nodes[0], ends[0].job, spec.StateCompleted, 0)
			ends = ends[1:]
		default:
			j := jobs[next]
			h.submit(callers[j.User], func(js *spec.JobSpec) {
				js.Resources.GPUsPerNode = j.GPUsPerNode
				js.TimeLimit = spec.Duration(j.Estimate)
			})
			next++
		}
		if len(ends) > 0 && ends[0].at == now || next < len(jobs) && jobs[next].Submit == now {
			t.Fatalf("two events at %s: the sequence must keep them apart", now)
		}
		s := step{Starts: map[spec.JobID][]string{}, Pending: map[spec.JobID]string{}}
		err := h.c.query(ctx, func() error {
			for h.c.sched.dirty { // a cycle that reached max_jobs_per_cycle asks for the next
				h.c.cycle(ctx)
			}
			for _, rec := range h.c.st.jobs {
				j := rec.job
				switch {
				case j.State == spec.StatePending:
					s.Pending[j.ID] = pendingView(j.Reason, j.ExpectedStart.Time, t0)
				case j.State == spec.StateRunning && j.StartTime.Equal(t0.Add(now)):
					for _, p := range j.Alloc.Nodes {
						for _, u := range p.GPUs { // "GPU-n1-3"
							node, gpu, _ := strings.Cut(strings.TrimPrefix(u, "GPU-"), "-")
							s.Starts[j.ID] = append(s.Starts[j.ID], node+"/"+gpu)
						}
					}
					ends = append(ends, end{at: now + jobs[j.ID-1].Runtime, job: j})
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(ends, func(a, b end) int { return int(a.at - b.at) })
		// The simulator runs no cycle while nothing is pending.
		if len(s.Pending) > 0 || len(s.Starts) > 0 {
			steps[now] = s
		}
	}
	return steps
}
