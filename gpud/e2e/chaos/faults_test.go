package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
	"golang.org/x/sys/unix"
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

// clockStep steps the machine's wall clock forward by step for d and back.
// Linux cannot step one namespace's CLOCK_REALTIME (time namespaces offset
// only the monotonic and boot clocks), so this steps every member and
// node at once; it runs only where the machine is the test's own
// (GPUD_CHAOS_CLOCK=1, as .ci/run sets).
func (x *chaos) clockStep(step, d time.Duration) {
	if os.Getenv("GPUD_CHAOS_CLOCK") != "1" {
		x.c.t.Log("SKIP (loud): clock step: it steps the whole machine's clock (no namespace has a clock of its own); set GPUD_CHAOS_CLOCK=1 on a machine of the test's own (CI does)")
		return
	}
	l := x.c.waitLeader(time.Minute)
	setClock(x.c, step)
	f := x.begin(fmt.Sprintf("wall clock stepped +%s for %s", step, d), l.id, true)
	time.Sleep(d)
	setClock(x.c, -step)
	f.End = time.Now()
	x.settle(f)
}

func setClock(c *cluster, by time.Duration) {
	ts := unix.NsecToTimespec(time.Now().Add(by).UnixNano())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		c.t.Fatalf("step the clock by %s: %v", by, err)
	}
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
