package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

func TestMain(m *testing.M) { os.Exit(e2etest.Main(m, nil)) }

// TestChaos is the chaos suite (make test-chaos; docs/ha.md, "The chaos
// suite"). GPUD_CHAOS=1 runs it; GPUD_CHAOS_RUNS picks what, comma
// separated (default "suite"):
//
//	suite        a steady stream of submissions and 2-node jobs with
//	             steps through every fault below, then the checker
//	leadercut:N  N runs of the leader's link cut for 60 s under 2-node
//	             jobs running steps (issue 25's Must-show)
//	firstack:N   N cuts of the leader listed first in GPUD_CONTROLLER:
//	             how soon a submission is acknowledged, and squeue
//	clock        the suite's clock fault alone, under the stream: the
//	             leader's and a node's wall clocks stepped by an hour
//	             while jobs with time limits run (both ways)
//	agentkill:N  N runs each of kill -9 of the agent of the first and of
//	             the second node of a running 2-node step, restarted
//	             after 10 s (issue 25's Must-show)
//
// GPUD_CHAOS_SKIP names suite faults to leave out (comma separated:
// leader-kill, leader-cut, follower-cut, node-cut-15, node-cut-45,
// agent-kill, disk-full, lossy, clock); GPUD_CHAOS_REPORT is a directory
// for the clients' log and the fault table; GPUD_CHAOS_RAFT sets the
// members' Raft timeouts (cluster_test.go).
func TestChaos(t *testing.T) {
	if os.Getenv("GPUD_CHAOS") != "1" {
		t.Skip("SKIP (loud): the chaos suite runs with make test-chaos (GPUD_CHAOS=1): 20-30 minutes")
	}
	e2etest.RequireNetns(t)
	start := time.Now()
	c := startCluster(t)
	t.Logf("chaos cluster up in %s", time.Since(start).Round(time.Millisecond))
	runs := os.Getenv("GPUD_CHAOS_RUNS")
	if runs == "" {
		runs = "suite"
	}
	for _, r := range strings.Split(runs, ",") {
		name, arg, _ := strings.Cut(strings.TrimSpace(r), ":")
		n, _ := strconv.Atoi(arg)
		switch name {
		case "suite":
			t.Run("Suite", func(t *testing.T) { suite(t, c, suiteShape, suiteFaults) })
		case "leadercut":
			t.Run("LeaderCut", func(t *testing.T) { leaderCutRuns(t, c, max(n, 1)) })
		case "firstack":
			t.Run("FirstAck", func(t *testing.T) { firstAckCuts(t, c, max(n, 1)) })
		case "clock":
			t.Run("Clock", func(t *testing.T) { suite(t, c, shortShape, []step{clockFault}) })
		case "agentkill":
			t.Run("AgentKill", func(t *testing.T) { agentKillRuns(t, c, max(n, 1)) })
		default:
			t.Fatalf("GPUD_CHAOS_RUNS: unknown %q (suite, leadercut:N, firstack:N, clock, agentkill:N)", name)
		}
	}
}

// step is one fault of a run, by its GPUD_CHAOS_SKIP name.
type step struct {
	name string
	run  func(x *chaos)
}

// suiteFaults are the whole suite's faults, in order.
var suiteFaults = []step{
	{"leader-kill", (*chaos).leaderKill},
	{"leader-cut", func(x *chaos) { x.leaderCut(60 * time.Second) }},
	{"follower-cut", func(x *chaos) { x.followerCut(30 * time.Second) }},
	{"node-cut-15", func(x *chaos) { x.nodeCut(15 * time.Second) }},
	{"node-cut-45", func(x *chaos) { x.nodeCut(45 * time.Second) }},
	{"agent-kill", func(x *chaos) { x.agentKill(0); x.agentKill(1) }},
	{"disk-full", func(x *chaos) { x.diskFull(30 * time.Second) }},
	{"lossy", func(x *chaos) { x.lossy(30 * time.Second) }},
	clockFault,
}

// clockFault steps the leader's wall clock an hour forward and a node's
// an hour back while jobs with time limits run, then the other way round
// (another leader, perhaps, and another node).
var clockFault = step{"clock", func(x *chaos) { x.clockStep(time.Hour, -time.Hour, 0); x.clockStep(-time.Hour, time.Hour, 1) }}

// shortFaults are the part of the suite make test runs (TestChaosShort):
// the faults that found the most so far, in about two minutes: kill -9
// of the agent of each node of a running 2-node step (steps across an
// agent restart, a resent part start, issue 25 C), of the leader
// (failover, clients' budget, exactly-once submissions) and a 20 s cut
// of the leader's link (clients and agents leave a member that does not
// answer; no job requeued for a controller fault, issue 25 A and B).
var shortFaults = []step{
	{"agent-kill", func(x *chaos) { x.agentKill(1); x.agentKill(0) }},
	{"leader-kill", (*chaos).leaderKill},
	{"leader-cut", func(x *chaos) { x.leaderCut(20 * time.Second) }},
}

// TestChaosShort is the part of the chaos suite that make test runs
// (shortFaults, a lighter stream; about two minutes where the machine is
// quiet): the same cluster and checker as TestChaos. -short skips it.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP (loud): -short: the short chaos run takes minutes")
	}
	if os.Getenv("GPUD_CHAOS") == "1" {
		t.Skip("SKIP (loud): make test-chaos runs the whole suite (TestChaos), these faults included")
	}
	e2etest.RequireNetns(t)
	start := time.Now()
	c := startCluster(t)
	t.Logf("chaos cluster up in %s", time.Since(start).Round(time.Millisecond))
	suite(t, c, shortShape, shortFaults)
	t.Logf("short chaos run: %s in all", time.Since(start).Round(time.Second))
}

// suite runs the stream through faults, then the checker.
func suite(t *testing.T, c *cluster, shape shape, faults []step) {
	c.t = t
	x := &chaos{c: c, w: newWorkload(c, controllers(c.ctl...))}
	x.w.shape = shape
	x.w.start()
	skip := map[string]bool{}
	for _, s := range strings.Split(os.Getenv("GPUD_CHAOS_SKIP"), ",") {
		skip[strings.TrimSpace(s)] = true
	}
	for _, step := range faults {
		if skip[step.name] {
			t.Logf("SKIP (loud): fault %s (GPUD_CHAOS_SKIP)", step.name)
			continue
		}
		step.run(x)
	}
	x.w.halt()
	x.drain()
	v := x.check()
	x.report(os.Getenv("GPUD_CHAOS_REPORT"), v)
	calls := x.w.snapshot()
	acked := 0
	for _, cl := range calls {
		if cl.acked() {
			acked++
		}
	}
	t.Logf("chaos: %d CLI calls, %d submissions acknowledged, %d jobs in accounting; faults:\n%s", len(calls), acked, len(v.records), x.table(v))
	for _, p := range v.problems {
		t.Error(p)
	}
}

// drain cancels the held probes and waits for the stream's jobs to end.
func (x *chaos) drain() {
	c := x.c
	var probes []string
	for _, cl := range x.w.snapshot() {
		if cl.Kind == "probe" {
			probes = append(probes, cl.Name)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if len(probes) > 0 {
		if _, err := c.admin.CancelJobs(ctx, api.CancelJobsRequest{Names: probes, Reason: "chaos probe"}); err != nil {
			c.t.Errorf("cancel the probes: %v", err)
		}
	}
	e2etest.WaitFor(c.t, 6*time.Minute, "the stream's jobs to end", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		jobs, err := c.admin.Jobs(ctx, api.JobFilter{})
		return err == nil && len(jobs) == 0
	})
}

// leaderCutRuns: n times, the leader's link cut for 60 s while two
// 2-node jobs run 90 s steps; each run must end with both jobs COMPLETED
// on their first attempt with every line of output and the step's exit
// status.
func leaderCutRuns(t *testing.T, c *cluster, n int) {
	c.t = t
	x := &chaos{c: c, w: newWorkload(c, controllers(c.ctl...))}
	var leaderAfter, nodesAfter []time.Duration
	for run := 1; run <= n; run++ {
		var names []string
		for k := range 2 {
			p := plan{name: fmt.Sprintf("lcut-%d-%d", run, k), gang: true, lines: 180, pace: "0.5", code: k + 1}
			x.w.mu.Lock()
			x.w.plans[p.name] = p
			x.w.mu.Unlock()
			cl := x.w.run("sbatch", p.name, "--parsable", "-J", p.name, "-N2", "-c", "1", "--mem=64M", "-t", "30",
				"gang.sh", strconv.Itoa(p.lines), p.pace, strconv.Itoa(p.code))
			if !cl.acked() {
				t.Fatalf("run %d: submit %s: exit %d: %s", run, p.name, cl.Code, cl.Stderr)
			}
			names = append(names, p.name)
		}
		if got := x.w.runningGangs(2, 3*time.Minute, 65*time.Second); len(got) < 2 {
			t.Fatalf("run %d: the two 2-node jobs did not run their steps with over 65 s of them left within 3 minutes", run)
		}
		old := c.waitLeader(time.Minute)
		f := x.begin("leader link cut 60s", old.id, true)
		c.net.SetLink(old.host, false)
		var l time.Duration
		e2etest.WaitFor(t, time.Minute, "a new leader", func() bool {
			nl := c.leader()
			if nl != nil && nl != old {
				l = time.Since(f.Start)
				return true
			}
			return false
		})
		leaderAfter = append(leaderAfter, l)
		// The agents reached the new leader: every node's last
		// heartbeat is after the cut.
		var nd time.Duration
		e2etest.WaitFor(t, 55*time.Second, "every node heard by the new leader", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nodes, err := c.admin.Nodes(ctx)
			if err != nil || len(nodes) != len(c.nodes) {
				return false
			}
			for _, nd := range nodes {
				if !nd.LastHeartbeat.After(f.Start.Add(l)) {
					return false
				}
			}
			nd = time.Since(f.Start)
			return true
		})
		nodesAfter = append(nodesAfter, nd)
		time.Sleep(time.Until(f.Start.Add(60 * time.Second)))
		c.net.SetLink(old.host, true)
		f.End = time.Now()
		x.settle(f)
		// Generous: on a loaded machine a 90 s step took over four
		// minutes (each of its 180 lines forks a sleep).
		e2etest.WaitFor(t, 10*time.Minute, "run's jobs to end", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			jobs, err := c.admin.Jobs(ctx, api.JobFilter{})
			if err != nil {
				return false
			}
			return !slices.ContainsFunc(jobs, func(j spec.Job) bool { return slices.Contains(names, j.Name) })
		})
		t.Logf("run %d: cut %s at %s; new leader after %.2fs; every node heard by it after %.2fs", run, old.id,
			f.Start.Format("15:04:05"), l.Seconds(), nd.Seconds())
	}
	v := x.check()
	x.report(os.Getenv("GPUD_CHAOS_REPORT"), v)
	requeued := 0
	for _, recs := range v.records {
		for _, r := range recs {
			requeued += max(len(r.AttemptHistory)-1, 0)
		}
	}
	t.Logf("leader link cut 60s x %d: new leader after %s; every node at the new leader after %s; jobs %d, requeued %d, problems %d",
		n, spread(leaderAfter), spread(nodesAfter), len(v.records), requeued, len(v.problems))
	for _, p := range v.problems {
		t.Error(p)
	}
}

// agentKillRuns: n times for the first node of a 2-node job (the batch
// script's, srun's own) and n times for the second, kill -9 of that
// node's agent while the job's step runs, started again after 10 s; each
// job must end COMPLETED on its first attempt with every line of both
// tasks and the step's exit status (the checker).
func agentKillRuns(t *testing.T, c *cluster, n int) {
	c.t = t
	x := &chaos{c: c, w: newWorkload(c, controllers(c.ctl...))}
	var took []time.Duration
	for run := 1; run <= 2*n; run++ {
		pos := (run - 1) % 2
		p := plan{name: fmt.Sprintf("akill-%d-%d", run, pos), gang: true, lines: 60, pace: "0.5", code: run % 3}
		x.w.mu.Lock()
		x.w.plans[p.name] = p
		x.w.mu.Unlock()
		cl := x.w.run("sbatch", p.name, "--parsable", "-J", p.name, "-N2", "-c", "1", "--mem=64M", "-t", "30",
			"gang.sh", strconv.Itoa(p.lines), p.pace, strconv.Itoa(p.code))
		if !cl.acked() {
			t.Fatalf("run %d: submit %s: exit %d: %s", run, p.name, cl.Code, cl.Stderr)
		}
		x.agentKill(pos)
		f := x.faults[len(x.faults)-1]
		e2etest.WaitFor(t, 10*time.Minute, "run's job to end", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			jobs, err := c.admin.Jobs(ctx, api.JobFilter{})
			return err == nil && !slices.ContainsFunc(jobs, func(j spec.Job) bool { return j.Name == p.name })
		})
		took = append(took, time.Since(f.Start))
		t.Logf("run %d: %s (the step's node %d) killed at %s; job ended %.1fs after", run, f.Target, pos, f.Start.Format("15:04:05"), time.Since(f.Start).Seconds())
	}
	v := x.check()
	x.report(os.Getenv("GPUD_CHAOS_REPORT"), v)
	requeued := 0
	for _, recs := range v.records {
		for _, r := range recs {
			requeued += max(len(r.AttemptHistory)-1, 0)
		}
	}
	t.Logf("agent kill -9 under a 2-node step, restarted after 10 s, %d runs on each node: job ended %s after the kill; jobs %d, requeued %d, problems %d",
		n, spread(took), len(v.records), requeued, len(v.problems))
	if requeued > 0 {
		t.Errorf("%d jobs requeued by an agent restart", requeued)
	}
	for _, p := range v.problems {
		t.Error(p)
	}
}

// firstAckCuts: n times, the leader (listed first in GPUD_CONTROLLER) is
// cut off; a submission is sent again and again from the login host,
// each a new process, and squeue too: how long after the cut the first
// submission is acknowledged, and how long squeue takes during the cut.
func firstAckCuts(t *testing.T, c *cluster, n int) {
	c.t = t
	var acks, sqs []time.Duration
	sqFail := 0
	for cut := 1; cut <= n; cut++ {
		l := c.waitLeader(time.Minute)
		addrs := controllers(append([]*member{l}, c.others(l)...)...)
		w := newWorkload(c, addrs)
		x := &chaos{c: c, w: w}
		f := x.begin("leader cut, listed first", l.id, true)
		c.net.SetLink(l.host, false)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for time.Since(f.Start) < 8*time.Second {
				w.run("squeue", "", "-h")
				time.Sleep(250 * time.Millisecond)
			}
		}()
		f.FirstAck = x.probeAcks("first", f.Start, 6*time.Second)
		<-done
		c.net.SetLink(l.host, true)
		for _, cl := range w.snapshot() {
			if cl.Kind == "squeue" {
				sqs = append(sqs, cl.Dur)
				if cl.Code != 0 {
					sqFail++
				}
			}
		}
		if f.FirstAck == 0 {
			t.Errorf("cut %d (%s): no submission acknowledged within 6 s", cut, l.id)
			f.FirstAck = time.Hour
		}
		acks = append(acks, f.FirstAck)
		t.Logf("cut %d: %s cut; first submission acknowledged %.2fs after the cut", cut, l.id, f.FirstAck.Seconds())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var probes []string
		for _, cl := range w.snapshot() {
			if cl.Kind == "probe" {
				probes = append(probes, cl.Name)
			}
		}
		_, _ = c.admin.CancelJobs(ctx, api.CancelJobsRequest{Names: probes, Reason: "chaos probe"})
		cancel()
		x.settle(f)
	}
	t.Logf("leader listed first and cut, %d cuts: first acknowledgement %s (p99 %.2fs); squeue during the cuts %s (p99 %.2fs), %d of %d failed",
		n, spread(acks), pct(acks, 99).Seconds(), spread(sqs), pct(sqs, 99).Seconds(), sqFail, len(sqs))
	if p := pct(acks, 99); p > 3*time.Second {
		t.Errorf("first acknowledgement after the cut: p99 %.2fs; want within 3 s", p.Seconds())
	}
	if p := pct(sqs, 99); p > 3*time.Second {
		t.Errorf("squeue during a cut: p99 %.2fs; want within 3 s", p.Seconds())
	}
	if sqFail > 0 {
		t.Errorf("%d squeue calls failed during the cuts", sqFail)
	}
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s) + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

// spread is "p50 X, max Y (min Z)".
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("min %.2fs, p50 %.2fs, max %.2fs", pct(ds, 0).Seconds(), pct(ds, 50).Seconds(), pct(ds, 100).Seconds())
}
