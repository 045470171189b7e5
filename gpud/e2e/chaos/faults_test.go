package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/wallclock"
)

// fault is one injected fault as it happened: the checker and the fault
// table read it.
type fault struct {
	Name string
	// Controller faults touch the controller group only: no job may be
	// requeued while one lasts (unless a node fault overlaps it).
	Controller bool
	Target     string // member or node name
	// Nodes the fault touched (a node fault): their jobs may be requeued.
	Nodes []string
	// MayLose: the fault may end the runs on Nodes (a cut longer than
	// node_timeout): a job whose run it ended need not complete.
	MayLose    bool
	Start, End time.Time // the fault itself (from in place to healed)
	// Settled is when the cluster was whole again after it.
	Settled time.Time
	// FirstAck is how long after Start the first submission sent after
	// Start was acknowledged (controller faults; 0: not measured).
	FirstAck time.Duration
	Notes    []string
}

func (f *fault) note(format string, args ...any) {
	f.Notes = append(f.Notes, fmt.Sprintf(format, args...))
}

// chaos runs the faults against the cluster while w runs.
type chaos struct {
	c      *cluster
	w      *workload
	faults []*fault
}

func (x *chaos) begin(name, target string, controller bool, nodes ...string) *fault {
	f := &fault{Name: name, Target: target, Controller: controller, Nodes: nodes, Start: time.Now()}
	x.faults = append(x.faults, f)
	x.c.t.Logf("fault: %s (%s) at %s", name, target, f.Start.Format("15:04:05.000"))
	return f
}

// probeAcks submits probes from the login host, one after another, for
// d, and returns how long after from the first one sent after from was
// acknowledged (0: none).
func (x *chaos) probeAcks(tag string, from time.Time, d time.Duration) time.Duration {
	var first time.Duration
	for time.Since(from) < d {
		cl := x.w.probe(tag)
		if cl.acked() && first == 0 {
			first = cl.Start.Add(cl.Dur).Sub(from)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return first
}

// settle waits until the group has a leader every member follows and
// every node is up, and, while the stream runs, until its clients are
// answered again (a squeue from the login host sent after that).
func (x *chaos) settle(f *fault) {
	c := x.c
	c.waitLeader(2 * time.Minute)
	for _, n := range c.nodes {
		c.waitNode(n.name, 3*time.Minute, func(s spec.NodeState) bool { return s != "" && s != spec.NodeDown && s != spec.NodeUnknown })
	}
	f.Settled = time.Now()
	c.t.Logf("fault: %s settled %.1fs after it began", f.Name, f.Settled.Sub(f.Start).Seconds())
	if x.w.streaming() {
		e2etest.WaitFor(c.t, time.Minute, "the stream's squeue answered after "+f.Name, func() bool {
			return slices.ContainsFunc(x.w.snapshot(), func(cl call) bool {
				return cl.Kind == "squeue" && cl.Code == 0 && cl.Start.After(f.Settled)
			})
		})
	}
}

// leaderKill: kill -9 of the leader; it is started again after 10 s.
func (x *chaos) leaderKill() {
	l := x.c.waitLeader(time.Minute)
	l.stop(syscall.SIGKILL)
	f := x.begin("leader kill -9", l.id, true)
	f.FirstAck = x.probeAcks("kill", f.Start, 10*time.Second)
	x.c.startMember(l)
	f.End = time.Now()
	x.settle(f)
}

// leaderCut: the leader's link cut for d (it keeps running).
func (x *chaos) leaderCut(d time.Duration) {
	l := x.c.waitLeader(time.Minute)
	x.c.net.SetLink(l.host, false)
	f := x.begin(fmt.Sprintf("leader link cut %s", d), l.id, true)
	f.FirstAck = x.probeAcks("lcut", f.Start, 10*time.Second)
	time.Sleep(time.Until(f.Start.Add(d)))
	x.c.net.SetLink(l.host, true)
	f.End = time.Now()
	x.settle(f)
}

// followerCut: a follower's link cut for d.
func (x *chaos) followerCut(d time.Duration) {
	l := x.c.waitLeader(time.Minute)
	fl := x.c.others(l)[0]
	x.c.net.SetLink(fl.host, false)
	f := x.begin(fmt.Sprintf("follower link cut %s", d), fl.id, true)
	f.FirstAck = x.probeAcks("fcut", f.Start, 5*time.Second)
	time.Sleep(time.Until(f.Start.Add(d)))
	x.c.net.SetLink(fl.host, true)
	f.End = time.Now()
	x.settle(f)
}

// gangNode picks a node running a part of a 2-node job's step (waiting
// for one), rank pos of the job's nodes (0: the batch script's).
func (x *chaos) gangNode(pos int) (*node, spec.Job) {
	jobs := x.w.runningGangs(1, 3*time.Minute, 12*time.Second)
	if len(jobs) == 0 {
		x.c.t.Fatalf("no 2-node job ran a step within 3 minutes")
	}
	j := jobs[0]
	for _, n := range x.c.nodes {
		if n.name == j.Nodes[pos] {
			return n, j
		}
	}
	x.c.t.Fatalf("job %d runs on unknown node %s", j.ID, j.Nodes[pos])
	return nil, j
}

// nodeCut: a node's link cut for d, while it runs part of a 2-node step.
func (x *chaos) nodeCut(d time.Duration) {
	n, j := x.gangNode(1)
	x.c.net.SetLink(n.host, false)
	f := x.begin(fmt.Sprintf("node link cut %s", d), n.name, false, n.name)
	f.note("during job %d's step (nodes %s)", j.ID, strings.Join(j.Nodes, ","))
	// Longer than node_timeout, the node is DOWN and its jobs requeued
	// (that is their loss, and allowed); shorter, nothing may be lost.
	f.MayLose = d > 30*time.Second
	time.Sleep(d)
	x.c.net.SetLink(n.host, true)
	f.End = time.Now()
	x.settle(f)
}

// agentKill: kill -9 of the agent of node pos of a running 2-node step,
// started again after 10 s.
func (x *chaos) agentKill(pos int) {
	n, j := x.gangNode(pos)
	n.stopAgent(syscall.SIGKILL)
	f := x.begin(fmt.Sprintf("agent kill -9 (step's node %d)", pos), n.name, false, n.name)
	f.note("during job %d's step (nodes %s)", j.ID, strings.Join(j.Nodes, ","))
	time.Sleep(10 * time.Second)
	n.startAgent(x.c.t)
	f.End = time.Now()
	x.settle(f)
}

// diskFull fills the leader's state_dir (its own tmpfs) for d.
func (x *chaos) diskFull(d time.Duration) {
	l := x.c.waitLeader(time.Minute)
	fill := filepath.Join(l.stateDir(), "fill")
	// dd stops at ENOSPC: the file takes every free block.
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+fill, "bs=1M").CombinedOutput()
	f := x.begin(fmt.Sprintf("controller disk full %s", d), l.id, true)
	f.note("dd: %s", lastLine(string(out)))
	f.FirstAck = x.probeAcks("disk", f.Start, 10*time.Second)
	time.Sleep(time.Until(f.Start.Add(d)))
	if err := os.Remove(fill); err != nil {
		x.c.t.Errorf("free %s's disk: %v", l.id, err)
	}
	f.End = time.Now()
	x.settle(f)
}

// lossy puts packet loss (and, where the kernel has netem, added delay)
// on the leader's link for d.
func (x *chaos) lossy(d time.Duration) {
	l := x.c.waitLeader(time.Minute)
	how := x.c.degrade(l.host, "loss 10% delay 100ms 20ms")
	f := x.begin(fmt.Sprintf("leader link lossy %s", d), l.id, true)
	f.note("%s", how)
	f.FirstAck = x.probeAcks("loss", f.Start, 10*time.Second)
	time.Sleep(time.Until(f.Start.Add(d)))
	x.c.undegrade(l.host)
	f.End = time.Now()
	x.settle(f)
}

// The daemons' wall clocks: each member and agent follows a test offset
// in a file of its own (gpud/wallclock: Linux cannot step one namespace's
// CLOCK_REALTIME, and stepping this machine's would step every other
// test's). A step moves the daemon's wall reading and keeps its
// monotonic one, as a real step does; a restarted daemon keeps the
// offset, as a host keeps a stepped clock.

func (m *member) clock() string { return filepath.Join(m.dir, "clock") }
func (n *node) clock() string   { return filepath.Join(n.dir, "clock") }

// clockEnv is the daemons' environment: the test's own, and the file of
// its wall clock offset (made, "0s", on the first start).
func clockEnv(t *testing.T, file string) []string {
	if _, err := os.Stat(file); os.IsNotExist(err) {
		if err := os.WriteFile(file, []byte("0s\n"), 0o600); err != nil {
			t.Fatalf("clock offset file: %v", err)
		}
	}
	return append(os.Environ(), wallclock.EnvFile+"="+file)
}

// stepClock sets the wall clock offset of the daemon that reads file and
// waits until its log says it took it.
func (c *cluster) stepClock(who, file string, log func() string, off time.Duration) {
	said := "test wall clock stepped"
	before := strings.Count(log(), said)
	if err := os.WriteFile(file+".new", []byte(off.String()+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		c.t.Fatal(err)
	}
	e2etest.WaitFor(c.t, 30*time.Second, who+"'s clock stepped to "+off.String(), func() bool {
		return strings.Count(log(), said) > before
	})
}

// clockJob is one job of the clock fault: a time limit of a minute, and
// a script that prints its start (the real clock: a job's container is
// not stepped) and sleeps sleep seconds.
type clockJob struct {
	name  string
	id    spec.JobID
	sleep int
	ended time.Time // seen gone from the queue (the test's clock)
}

// clockStep: the leader's wall clock stepped by ctl and a node's by
// nodeStep while jobs with a one-minute limit run on that node, some
// started before the step and some after it; each job that sleeps past
// its limit must end TIMEOUT a minute after it started (not at once, not
// an hour late), each that fits must end COMPLETED, and no job may be
// requeued. Both clocks are stepped back once the jobs have ended.
func (x *chaos) clockStep(ctl, nodeStep time.Duration, nodeAt int) {
	c := x.c
	l := c.waitLeader(time.Minute)
	n := c.nodes[nodeAt%len(c.nodes)]
	tag := fmt.Sprintf("clk%+d", int(ctl.Hours()))
	var jobs []*clockJob
	submit := func(phase string) {
		for _, sleep := range []int{600, 40} {
			j := &clockJob{name: fmt.Sprintf("%s-%s-%d", tag, phase, sleep), sleep: sleep}
			cl := x.w.run("clock", j.name, "--parsable", "-J", j.name, "-w", n.name, "-c", "1", "--mem=64M", "-t", "1",
				"--wrap", fmt.Sprintf("echo start $(date +%%s.%%N); sleep %d; echo done", sleep))
			if !cl.acked() {
				c.t.Fatalf("submit %s: exit %d: %s", j.name, cl.Code, cl.Stderr)
			}
			j.id = cl.JobID
			jobs = append(jobs, j)
		}
	}
	started := func(js []*clockJob) {
		for _, j := range js {
			e2etest.WaitFor(c.t, 3*time.Minute, j.name+" to start", func() bool {
				_, ok := x.clockJobStart(j)
				return ok
			})
		}
	}
	submit("before")
	started(jobs)
	f := x.begin(fmt.Sprintf("wall clocks stepped: leader %s, node %s", ctl, nodeStep), l.id+","+n.name, true)
	c.stepClock(l.id, l.clock(), l.log.String, ctl)
	c.stepClock(n.name, n.clock(), func() string { return n.allLogs() }, nodeStep)
	submit("after")
	started(jobs[2:])
	e2etest.WaitFor(c.t, 6*time.Minute, "the clock fault's jobs to end", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		active, err := c.admin.Jobs(ctx, api.JobFilter{})
		if err != nil {
			return false
		}
		left := 0
		for _, j := range jobs {
			if !j.ended.IsZero() {
				continue
			}
			if slices.ContainsFunc(active, func(a spec.Job) bool { return a.ID == j.id }) {
				left++
			} else {
				j.ended = time.Now()
			}
		}
		return left == 0
	})
	c.stepClock(l.id, l.clock(), l.log.String, 0)
	c.stepClock(n.name, n.clock(), func() string { return n.allLogs() }, 0)
	f.End = time.Now()
	x.settle(f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, j := range jobs {
		recs, err := c.admin.AcctJobs(ctx, api.AcctFilter{IDs: []spec.JobID{j.id}, AttemptHistory: true})
		if err != nil || len(recs) != 1 {
			c.t.Errorf("clock fault: job %d (%s) in accounting: %v (%d records)", j.id, j.name, err, len(recs))
			continue
		}
		r := recs[0]
		began, _ := x.clockJobStart(j)
		ran := j.ended.Sub(began)
		f.note("job %s: %s after %.1fs (seen ended; started %s)", j.name, r.State, ran.Seconds(), began.Format("15:04:05"))
		c.t.Logf("clock fault: job %d %s: %s %.1fs after its script started", j.id, j.name, r.State, ran.Seconds())
		switch {
		case len(r.AttemptHistory) > 1:
			c.t.Errorf("clock fault: job %d (%s) was requeued (%d attempts): a clock step cost a running job", j.id, j.name, len(r.AttemptHistory))
		case j.sleep < 60 && r.State != spec.StateCompleted:
			c.t.Errorf("clock fault: job %d (%s) sleeps %d s under a 1-minute limit and ended %s (%s) after %.1fs; want COMPLETED",
				j.id, j.name, j.sleep, r.State, r.Reason, ran.Seconds())
		case j.sleep > 60 && r.State != spec.StateTimeout:
			c.t.Errorf("clock fault: job %d (%s) ended %s (%s); want TIMEOUT", j.id, j.name, r.State, r.Reason)
		case j.sleep > 60 && (ran < 30*time.Second || ran > 3*time.Minute):
			c.t.Errorf("clock fault: job %d (%s) timed out %.1fs after its script started; want about 60 s (a step moved its deadline)", j.id, j.name, ran.Seconds())
		}
	}
}

// clockJobStart is when j's script started, by the line it printed (0:
// not yet).
func (x *chaos) clockJobStart(j *clockJob) (time.Time, bool) {
	b, err := os.ReadFile(filepath.Join(x.c.work, fmt.Sprintf("slurm-%d.out", j.id)))
	if err != nil {
		return time.Time{}, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "start "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return time.Unix(0, int64(f*1e9)), true
			}
		}
	}
	return time.Time{}, false
}

// degrade makes h's link lossy and slow: netem both ways where the kernel
// has it, else packet loss with iptables (statistic match) only, which it
// says.
func (c *cluster) degrade(h *e2etest.Host, netem string) string {
	_ = exec.Command("modprobe", "sch_netem").Run()
	if err := c.net.TryNetem(h, netem); err == nil {
		return "netem " + netem
	} else {
		c.t.Logf("SKIP (loud): added delay: %v; packet loss only, with iptables", err)
	}
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		cmd := h.Command("iptables", "-A", chain, "-m", "statistic", "--mode", "random", "--probability", "0.1", "-j", "DROP")
		if out, err := cmd.CombinedOutput(); err != nil {
			c.t.Fatalf("iptables loss on %s: %v: %s", h.Name, err, out)
		}
	}
	return "iptables 10% loss both ways (no netem in this kernel: no added delay)"
}

func (c *cluster) undegrade(h *e2etest.Host) {
	_ = c.net.TryNetem(h, "")
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		_ = h.Command("iptables", "-F", chain).Run()
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
