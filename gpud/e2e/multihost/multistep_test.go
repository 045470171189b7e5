package multihost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestMultiHostSteps: steps across two hosts (network namespaces, a
// containerd each, the agents' step listeners over the bridge) survive a
// kill -9 of either node agent, a batch script starts only on a whole gang
// (issue 25 D), and srun in a task on the second host spans both hosts.
// The node timeout is 30s (etc/gpud.toml's), longer than an agent's 10s
// away.
//
// GPUD_TEST_STEP_KILLS=N repeats the agent kill N times for each node
// (make test-step-kills: 10).
func TestMultiHostSteps(t *testing.T) {
	e2etest.RequireNetns(t)
	start := time.Now()
	mh := startMultiHostWith(t, mhOptions{gpuHosts: []string{"gpu1", "gpu2"}, nodeTimeout: "30s"})
	t.Logf("two-host cluster up in %v", time.Since(start).Round(time.Millisecond))
	t.Run("NestedSrun", mh.testNestedSrun)
	t.Run("AgentKill", mh.testStepAgentKill)
	t.Run("AgentKillAtStart", mh.testAgentKillAtStart)
	t.Run("GangStart", mh.testGangStart)
}

// nestedBatch runs a step on the second host whose task runs srun over
// both hosts.
const nestedBatch = `#!/bin/bash
srun -N1 -w gpu2 bash -c 'echo "outer on $SLURMD_NODENAME step $SLURM_STEP_ID"; srun -N2 -n2 -l bash -c "echo inner on \$SLURMD_NODENAME step \$SLURM_STEP_ID"; echo "inner rc=$?"'
echo "srun rc=$?"
`

// testNestedSrun: srun in a task on the allocation's second host reaches
// that host's agent, spans both hosts, and its step is numbered by the
// first node (step 1 after step 0), so no two steps share a number.
func (mh *multiHost) testNestedSrun(t *testing.T) {
	mh.sub(t)
	mh.writeScript("nested.sh", nestedBatch)
	id := mh.submit("-N", "2", "-w", "gpu1,gpu2", "--time", "2", "--output", "nested-%j.out", "nested.sh")
	j := e2etest.WaitJob(t, mh.c.Client(), id, 2*time.Minute, "nested job ended", func(j spec.Job) bool { return j.State.Terminal() })
	b, _ := os.ReadFile(filepath.Join(mh.work, fmt.Sprintf("nested-%d.out", id)))
	out := string(b)
	for _, want := range []string{"outer on gpu2 step 0\n", "0: inner on gpu1 step 1\n", "1: inner on gpu2 step 1\n", "inner rc=0\n", "srun rc=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("nested srun output lacks %q", want)
		}
	}
	if t.Failed() || j.State != spec.StateCompleted {
		t.Fatalf("job %d %s; output:\n%s", id, j.State, out)
	}
	t.Logf("nested srun from gpu2 over both hosts:\n%s", out)
}

// killStepScript is a 2-host step fed 60 numbered lines on its stdin, a
// quarter second apart (15s: they outlast an agent's 10s away): task 0
// (gpu1) echoes each line it reads and exits 3 at the input's end, task
// 1 (gpu2) writes its own 60 lines at the same pace and exits 4.
const killStepScript = `#!/bin/bash
for i in $(seq 1 60); do echo "$i"; sleep 0.25; done |
srun -N2 -l bash -c 'if [ "$SLURM_PROCID" = 0 ]; then while read -r l; do echo "line $l"; done; exit 3; fi; for i in $(seq 1 60); do echo "line $i"; sleep 0.25; done; exit 4'
echo "srun rc=$?"
`

// testStepAgentKill: kill -9 of either node agent during a 2-host step,
// restarted 10s later: the step completes with every line of both tasks
// once (task 0's are its stdin's, so srun's input kept flowing to it;
// one input line in flight at the kill of gpu1's agent may be lost), each
// task's exit code, and srun's exit code (the worst, 4).
func (mh *multiHost) testStepAgentKill(t *testing.T) {
	mh.sub(t)
	runs := 1
	if v := os.Getenv("GPUD_TEST_STEP_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("GPUD_TEST_STEP_KILLS=%q: want a number of runs ≥ 1", v)
		}
		runs = n
	}
	mh.writeScript("kill-step.sh", killStepScript)
	for _, victim := range []string{"gpu2", "gpu1"} {
		for i := range runs {
			took := mh.stepAgentKill(t, victim)
			t.Logf("kill -9 of %s's agent, run %d/%d: step complete, every line and exit code, %v after the kill", victim, i+1, runs, took.Round(time.Millisecond))
			if t.Failed() {
				return
			}
		}
	}
}

// stepAgentKill runs killStepScript and kills victim's agent once the
// second task's output flows; it returns the time from the kill to the
// job's end.
func (mh *multiHost) stepAgentKill(t *testing.T, victim string) time.Duration {
	id := mh.submit("-N", "2", "-w", "gpu1,gpu2", "--time", "5", "--output", "kill-%j.out", "kill-step.sh")
	outFile := filepath.Join(mh.work, fmt.Sprintf("kill-%d.out", id))
	e2etest.WaitFor(t, 2*time.Minute, "both tasks' output", func() bool {
		b, _ := os.ReadFile(outFile)
		return strings.Contains(string(b), "0: line 3\n") && strings.Contains(string(b), "1: line 3\n")
	})
	n := mh.nodes[victim]
	n.stopAgent(syscall.SIGKILL)
	killed := time.Now()
	time.Sleep(10 * time.Second)
	n.startAgent(t, mh)
	j := e2etest.WaitJob(t, mh.c.Client(), id, 3*time.Minute, "the job's end", func(j spec.Job) bool { return j.State.Terminal() })
	took := time.Since(killed)
	b, _ := os.ReadFile(outFile)
	out := string(b)
	var problems []string
	if j.State != spec.StateCompleted || j.Attempt != 1 {
		problems = append(problems, fmt.Sprintf("job %s in attempt %d, want COMPLETED in its first", j.State, j.Attempt))
	}
	// srun's input is not acknowledged (docs/architecture.md): a line
	// the killed agent srun talks to (gpu1's) had read but not yet
	// written to task 0 is lost with it. One such line is allowed and
	// logged; a line twice, or more lost, is a failure.
	inputLost := 0
	for task := range 2 {
		for i := 1; i <= 60; i++ {
			n := strings.Count(out, fmt.Sprintf("%d: line %d\n", task, i))
			if n == 0 && task == 0 && victim == "gpu1" && inputLost == 0 {
				inputLost++
				t.Logf("job %d: input line %d was in flight at the kill of %s's agent and is lost (srun's input is not acknowledged)", id, i, victim)
				continue
			}
			if n != 1 {
				problems = append(problems, fmt.Sprintf("task %d's line %d appears %d times", task, i, n))
			}
		}
	}
	for _, want := range []string{"srun: error: gpu1: task 0: Exited with exit code 3\n", "srun: error: gpu2: task 1: Exited with exit code 4\n", "srun rc=4\n"} {
		if n := strings.Count(out, want); n != 1 {
			problems = append(problems, fmt.Sprintf("%q appears %d times, want once", want, n))
		}
	}
	if len(problems) > 0 {
		t.Errorf("kill -9 of %s's agent during job %d's step:\n  %s\noutput:\n%s", victim, id, strings.Join(problems, "\n  "), out)
		for name, n := range mh.nodes {
			t.Logf("gpud node %s log:\n%s", name, n.log.String())
		}
	}
	return took
}

// gangStartScript notes when it starts (the attempt's first line), runs a step
// on both hosts and then holds the allocation: the first attempt until the
// test's cut requeues it, a later one a few seconds.
const gangStartScript = `#!/bin/bash
echo "script start $(date +%s.%N) restart $SLURM_RESTART_COUNT"
srun -N2 -n2 -l printenv SLURMD_NODENAME
echo "srun rc=$?"
# The first attempt holds the allocation until the cut ends it (gpu2 DOWN
# after the 30s node timeout); a fixed sleep raced that timeout.
if [ "$SLURM_RESTART_COUNT" = 0 ]; then sleep 600; else sleep 5; fi
`

// testGangStart is issue 25's scenario D: gpu2's link is cut while a
// 2-host job runs, until gpu2 is DOWN and the job requeued; once the link
// is back, the job's next attempt must not start its script before gpu2
// holds its part (its container runs), and its srun runs on both hosts.
func (mh *multiHost) testGangStart(t *testing.T) {
	mh.sub(t)
	mh.writeScript("gangstart.sh", gangStartScript)
	id := mh.submit("-N", "2", "-w", "gpu1,gpu2", "--time", "5", "--output", "gangstart-%j.out", "gangstart.sh")
	outFile := filepath.Join(mh.work, fmt.Sprintf("gangstart-%d.out", id))
	cl := mh.c.Client()
	e2etest.WaitFor(t, 2*time.Minute, "attempt 1's step", func() bool {
		b, _ := os.ReadFile(outFile)
		return strings.Contains(string(b), "srun rc=")
	})
	victim := mh.nodes["gpu2"]
	cut := time.Now()
	mh.net.SetLink(victim.host, false)
	linkUp := false
	defer func() {
		if !linkUp {
			mh.net.SetLink(victim.host, true)
		}
	}()
	mh.waitNode("gpu2", time.Minute, func(s spec.NodeState) bool { return s == spec.NodeDown })
	e2etest.WaitJob(t, cl, id, time.Minute, "the job requeued", func(j spec.Job) bool { return j.Attempt >= 2 || j.State == spec.StatePending })
	time.Sleep(3 * time.Second)
	mh.net.SetLink(victim.host, true)
	linkUp = true
	t.Logf("gpu2's link was cut for %v", time.Since(cut).Round(time.Millisecond))
	j := e2etest.WaitJob(t, cl, id, 4*time.Minute, "the job's end", func(j spec.Job) bool { return j.State.Terminal() })
	b, _ := os.ReadFile(outFile)
	out := string(b)
	// Each attempt's script start against gpu2's part's start.
	starts := regexp.MustCompile(`(?m)^script start (\d+\.\d+) restart (\d+)$`).FindAllStringSubmatch(out, -1)
	if len(starts) < 2 {
		t.Fatalf("job %d ran its script %d times, want a second attempt after the cut; output:\n%s", id, len(starts), out)
	}
	for _, m := range starts {
		at, _ := strconv.ParseFloat(m[1], 64)
		attempt, _ := strconv.Atoi(m[2])
		attempt++
		part := agentLogTime(victim.log.String(), "job container started", fmt.Sprintf("%d.%d", id, attempt))
		script := time.Unix(0, int64(at*1e9))
		if part.IsZero() || script.Before(part) {
			t.Errorf("attempt %d's script started at %v, before gpu2 held its part (its container started at %v)",
				attempt, script.Format(time.RFC3339Nano), part.Format(time.RFC3339Nano))
		}
	}
	last := out[strings.LastIndex(out, "script start"):]
	if j.State != spec.StateCompleted || !strings.Contains(last, "0: gpu1\n") || !strings.Contains(last, "1: gpu2\n") || !strings.Contains(last, "srun rc=0\n") {
		t.Errorf("job %d ended %s; its last attempt's step did not run on both hosts", id, j.State)
	}
	mh.checkGangAccounting(t, id, len(starts))
	if t.Failed() {
		t.Logf("output:\n%s\ngpu1's log:\n%s\ngpu2's log:\n%s", out, mh.nodes["gpu1"].log.String(), victim.log.String())
		return
	}
	t.Logf("job %d: %d attempts, each script started once both hosts held their parts:\n%s", id, len(starts), out)
}

// checkGangAccounting: accounting has the requeued job's attempts (every
// one but the last REQUEUED), the job COMPLETED in the last, and that
// attempt's own steps: its batch step on gpu1 and its step 0 on both
// hosts, COMPLETED, started in that attempt (a dead attempt's steps never
// count for it). sacct's rows are logged as a user sees them.
func (mh *multiHost) checkGangAccounting(t *testing.T, id spec.JobID, attempts int) {
	t.Helper()
	var j api.AcctJob
	e2etest.WaitFor(t, time.Minute, "the job's accounting record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		jobs, err := mh.c.Client().AcctJobs(ctx, api.AcctFilter{IDs: []spec.JobID{id}, AttemptHistory: true, Steps: true})
		if err != nil || len(jobs) != 1 || !jobs[0].State.Terminal() {
			return false
		}
		j = jobs[0]
		return true
	})
	hist := j.AttemptHistory
	if j.State != spec.StateCompleted || len(hist) != attempts {
		t.Errorf("accounting: job %d %s with %d attempts, want COMPLETED after %d (its script's starts)", id, j.State, len(hist), attempts)
		return
	}
	for _, a := range hist[:len(hist)-1] {
		if a.State != spec.StateRequeued {
			t.Errorf("accounting: attempt %d ended %s (%s), want REQUEUED", a.Attempt, a.State, a.Reason)
		}
	}
	last := hist[len(hist)-1]
	want := map[string][]string{spec.StepBatch: {"gpu1"}, "0": {"gpu1", "gpu2"}}
	for _, s := range j.Steps {
		nodes, ok := want[s.ID]
		if !ok {
			t.Errorf("accounting: job %d has step %s (%s), not one its last attempt ran", id, s.ID, s.State)
			continue
		}
		delete(want, s.ID)
		if s.State != spec.StateCompleted || !slices.Equal(s.Nodes, nodes) || s.StartTime.Before(last.StartTime.Time) {
			t.Errorf("accounting: step %d.%s %s on %v from %v, want COMPLETED on %v from attempt %d's start %v",
				id, s.ID, s.State, s.Nodes, s.StartTime.Time, nodes, last.Attempt, last.StartTime.Time)
		}
	}
	for s := range want {
		t.Errorf("accounting: job %d's last attempt (%d) has no step %s", id, last.Attempt, s)
	}
	sacct := mh.loginRun(mh.ca, mh.token, "sacct", "-P", "-j", fmt.Sprint(id), "-o", "JobID,State,ExitCode,NodeList,Start,End")
	dup := mh.loginRun(mh.ca, mh.token, "gpuq", "acct", "-D", "-p", "-j", fmt.Sprint(id), "-o", "jobid,attempt,state,reason,nodelist,start,end")
	t.Logf("sacct -j %d:\n%s\ngpuq acct -D -j %d:\n%s", id, sacct.Stdout+sacct.Stderr, id, dup.Stdout+dup.Stderr)
}

// agentLogTime is the time of the first line of a node agent's JSON log
// with message msg for allocation allocID (zero if none).
func agentLogTime(log, msg, allocID string) time.Time {
	for line := range strings.Lines(log) {
		var e struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			AllocID string    `json:"alloc_id"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == msg && e.AllocID == allocID {
			return e.Time
		}
	}
	return time.Time{}
}

// startKillScript runs step 0 over both hosts as its first command; its
// last command succeeds whatever srun did, as a batch script's often does.
const startKillScript = `#!/bin/bash
echo "script start restart $SLURM_RESTART_COUNT"
srun -N2 -n2 -l bash -c 'for i in 1 2 3; do echo "line $i on $SLURMD_NODENAME"; done'
echo "srun rc=$?"
`

// testAgentKillAtStart: kill -9 of the batch node's agent (gpu1's) while
// srun starts step 0, restarted 10s later (a TestChaosShort run found such
// a job COMPLETED with no step 0 and none of its lines: the agent had
// recorded gpu1's part of the step and died before creating its task,
// which the restarted agent then reported lost). The step is not lost: the
// job ends COMPLETED with step 0's lines from both hosts in its last
// attempt (the task never created is started by the restarted agent; a
// step whose tasks' fate is unknown fails the attempt, which is requeued).
// The kill comes at the moment gpu1's agent records its part of the step
// (the window that run hit), at the moment it records the step, and 300ms
// after the container started.
func (mh *multiHost) testAgentKillAtStart(t *testing.T) {
	mh.sub(t)
	mh.writeScript("start-kill.sh", startKillScript)
	victim := mh.nodes["gpu1"]
	for _, at := range []string{"step-0.tasks.json", "step-0.json", "300ms"} {
		id := mh.submit("-N", "2", "-w", "gpu1,gpu2", "--time", "5", "--output", "start-kill-%j.out", "start-kill.sh")
		outFile := filepath.Join(mh.work, fmt.Sprintf("start-kill-%d.out", id))
		if d, err := time.ParseDuration(at); err == nil {
			deadline := time.Now().Add(2 * time.Minute)
			for agentLogTime(victim.log.String(), "job container started", fmt.Sprintf("%d.1", id)).IsZero() {
				if time.Now().After(deadline) {
					t.Fatalf("job %d's container did not start on gpu1 within 2m", id)
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(d)
		} else {
			// Polled without sleeping: the part's record comes
			// milliseconds before its task's process.
			record := filepath.Join(victim.dir, "state", "jobs", fmt.Sprintf("gpud-%d-1-gpu1", id), at)
			deadline := time.Now().Add(2 * time.Minute)
			for _, err := os.Stat(record); err != nil; _, err = os.Stat(record) {
				if time.Now().After(deadline) {
					t.Fatalf("gpu1's agent never wrote %s", record)
				}
			}
		}
		victim.stopAgent(syscall.SIGKILL)
		killed := time.Now()
		oldLog := victim.log.String()
		time.Sleep(10 * time.Second)
		victim.startAgent(t, mh)
		j := e2etest.WaitJob(t, mh.c.Client(), id, 3*time.Minute, "the job's end", func(j spec.Job) bool { return j.State.Terminal() })
		b, _ := os.ReadFile(outFile)
		out := string(b)
		last := out[max(0, strings.LastIndex(out, "script start")):]
		var problems []string
		if j.State != spec.StateCompleted {
			problems = append(problems, fmt.Sprintf("the job ended %s (%s)", j.State, j.Reason))
		}
		for _, want := range []string{"0: line 1 on gpu1\n", "0: line 3 on gpu1\n", "1: line 1 on gpu2\n", "1: line 3 on gpu2\n", "srun rc=0\n"} {
			if !strings.Contains(last, want) {
				problems = append(problems, fmt.Sprintf("its last attempt's output lacks %q", want))
			}
		}
		if len(problems) > 0 {
			t.Errorf("kill -9 of gpu1's agent at %s of job %d: the job ended %s in attempt %d:\n  %s\noutput:\n%s\ngpu1's log before the kill:\n%s\ngpu1's log after:\n%s\ngpu2's log:\n%s",
				at, id, j.State, j.Attempt, strings.Join(problems, "\n  "), out, oldLog, victim.log.String(), mh.nodes["gpu2"].log.String())
			return
		}
		t.Logf("kill -9 of gpu1's agent at %s of job %d: COMPLETED in attempt %d, %v after the kill; output:\n%s",
			at, id, j.Attempt, time.Since(killed).Round(time.Millisecond), out)
	}
}
