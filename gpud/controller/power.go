package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// Power saving (Slurm's power_save and CLOUD nodes; docs/power.md). The
// scheduler core decides (sched.PlanPower: which powered-down nodes the
// pending jobs need, which idle nodes to power down); this file keeps
// each node's power state (spec.NodePower, an admin record: durable and
// replicated like a drain), runs the site's programs after the decision
// is committed, and judges their timeouts. A node powering up that has not
// registered within ResumeTimeout, or whose resume program failed, is
// marked DOWN with the reason; the jobs that waited for it were never
// started there (they stay PENDING while their nodes power up), so the
// next plan places them elsewhere or powers up other nodes: nothing is
// stuck on a node that did not come.

// PowerConfig is [power] of gpud.toml.
type PowerConfig struct {
	// ResumeProgram and SuspendProgram: absolute path, then arguments;
	// nil disables that half.
	ResumeProgram, SuspendProgram []string
	// SuspendTime 0 never powers idle nodes down.
	SuspendTime, ResumeTimeout, SuspendTimeout time.Duration
	// ResumeRate and SuspendRate are nodes per minute; 0 means no bound.
	ResumeRate, SuspendRate int
	// ExcNodes and the nodes of ExcParts are never powered down.
	ExcNodes, ExcParts []string
	// User runs the programs ("" the controller's own user).
	User string
	// Nodes are declared before they register (CLOUD nodes).
	Nodes []CloudNode
}

// CloudNode is a node declared in [[power.nodes]].
type CloudNode struct {
	Name     string
	CPUs     int
	MemMiB   int64
	GPUs     int
	GPUModel string
	Features []string
}

func (p *PowerConfig) enabled() bool { return len(p.ResumeProgram) > 0 || len(p.SuspendProgram) > 0 }

// PowerRun is one run of the resume or suspend program.
type PowerRun struct {
	// Action is "resume" or "suspend".
	Action string
	// Program is the program and its arguments; Nodes the node list, a
	// hostlist expression appended as the last argument.
	Program []string
	Nodes   string
	User    string
	// Timeout ends a program still running after it (resume_timeout or
	// suspend_timeout): the nodes are judged by then anyway.
	Timeout time.Duration
}

// WithPowerProgram sets what runs the resume and suspend programs
// (gpud/daemon: a process as the configured user, its output logged).
// It returns when the program has exited; an error from a resume marks
// its nodes DOWN.
func WithPowerProgram(f func(ctx context.Context, r PowerRun) error) Option {
	return func(c *Controller) { c.runPower = f }
}

// powerState is the owner's power bookkeeping that is not durable: when
// each node became idle, and the recent power actions (for the rates).
type powerState struct {
	idleSince          map[string]time.Time
	resumed, suspended []time.Time
}

// powerOf is node name's power state.
func (c *Controller) powerOf(name string) spec.PowerState {
	if p := c.admin.power[name]; p != nil {
		return p.State
	}
	return spec.PowerOn
}

// setPower records name's power state in tx (PowerOn drops the record).
func (c *Controller) setPower(tx *txn, name string, st spec.PowerState, now time.Time, deadline time.Time) {
	if st == spec.PowerOn {
		if c.admin.power[name] != nil {
			delete(c.admin.power, name)
			tx.saveAdmin(spec.AdminPower, name, nil)
		}
		return
	}
	p := &spec.NodePower{Name: name, State: st, Since: spec.NewTime(now)}
	if !deadline.IsZero() {
		p.Deadline = spec.NewTime(deadline)
	}
	c.admin.power[name] = p
	tx.saveAdmin(spec.AdminPower, name, p)
	tx.bump[name] = true
	c.sched.dirty, c.sched.full = true, true
}

func decodePower(r spec.AdminRecord) (*spec.NodePower, error) {
	var p spec.NodePower
	if err := json.Unmarshal(r.Data, &p); err != nil {
		return nil, fmt.Errorf("decode node %s's power state: %w", r.Name, err)
	}
	return &p, nil
}

// declareCloudNodes adds the [[power.nodes]] that have never registered,
// powered down, with the resources their declaration gives (after load
// and reconfigure).
func (c *Controller) declareCloudNodes() {
	for _, d := range c.cfg.Power.Nodes {
		if c.st.nodes[d.Name] != nil {
			continue
		}
		inv := spec.Inventory{Name: d.Name, CPUs: d.CPUs, MemMiB: d.MemMiB, Features: slices.Clone(d.Features)}
		for i := range d.GPUs {
			// Placeholders until the node registers its own; nothing is
			// ever allocated on a node before it has registered.
			inv.GPUs = append(inv.GPUs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-declared-%s-%d", d.Name, i), Model: d.GPUModel})
		}
		c.st.addNode(&spec.Node{Inventory: inv, State: spec.NodeIdle}, c.leadSince)
		c.heardRec(d.Name).up.Store(false)
		if c.admin.power[d.Name] == nil {
			// Not saved until it changes: the configuration says it.
			c.admin.power[d.Name] = &spec.NodePower{Name: d.Name, State: spec.PoweredDown, Since: spec.NewTime(c.now())}
		}
	}
}

// powerOff says whether node name is not powered on: its silence is not
// judged (housekeep).
func (c *Controller) powerOff(name string) bool { return c.powerOf(name) != spec.PowerOn }

// exempt lists the nodes never powered down.
func (c *Controller) exempt() []string {
	out := slices.Clone(c.cfg.Power.ExcNodes)
	for _, part := range c.cfg.Power.ExcParts {
		for _, p := range c.cfg.Partitions {
			if p.Name != part {
				continue
			}
			if len(p.Nodes) == 0 {
				return c.st.nodeNames() // every node
			}
			out = append(out, p.Nodes...)
		}
	}
	return out
}

// rateLeft is what a per-minute rate leaves now, given the recent
// actions (trimmed to the last minute); -1: no bound.
func rateLeft(rate int, recent *[]time.Time, now time.Time) int {
	*recent = slices.DeleteFunc(*recent, func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	if rate <= 0 {
		return -1
	}
	return max(rate-len(*recent), 0)
}

// powerTick judges the power timeouts, plans (sched.PlanPower) and
// applies the plan into tx (housekeep, on the leader). The programs run
// once tx is committed.
func (c *Controller) powerTick(tx *txn, now time.Time) {
	pc := &c.cfg.Power
	if !pc.enabled() {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(c.admin.power)) {
		p := c.admin.power[name]
		n := c.st.nodes[name]
		if n == nil || p.Deadline.IsZero() || now.Before(p.Deadline.Time) {
			continue
		}
		switch p.State {
		case spec.PoweringUp:
			c.resumeFailed(tx, n, fmt.Sprintf("not registered within resume_timeout (%s) of its resume", pc.ResumeTimeout), now)
		case spec.PoweringDown:
			c.setPower(tx, name, spec.PoweredDown, now, time.Time{})
			c.log.Info("node powered down", "node", name)
		}
	}
	// Idle since: a node is idle from the tick that sees it without
	// allocations.
	ps := &c.power
	if ps.idleSince == nil {
		ps.idleSince = map[string]time.Time{}
	}
	for _, name := range c.st.nodeNames() {
		n := c.st.nodes[name]
		if len(n.allocs) > 0 || c.powerOff(name) {
			delete(ps.idleSince, name)
		} else if _, ok := ps.idleSince[name]; !ok {
			ps.idleSince[name] = now
		}
	}
	var snap *sched.Snapshot
	switch {
	case len(c.st.pending) > 0:
		// The snapshot updates the scheduler's bookkeeping for the apply
		// that follows it in a cycle; planning power must leave it as it
		// was.
		saved := c.sched
		saved.arrayLimited = slices.Clone(c.sched.arrayLimited)
		saved.active = slices.Clone(c.sched.active)
		snap = c.snapshot(now)
		c.sched = saved
	case pc.SuspendTime > 0:
		// Nothing to power up: the nodes alone say what is idle.
		snap = &sched.Snapshot{Nodes: make([]sched.Node, 0, len(c.st.nodes))}
		for _, name := range c.st.nodeNames() {
			sn, _ := c.schedNode(name)
			snap.Nodes = append(snap.Nodes, sn)
		}
	default:
		return
	}
	cfg := c.schedConfig()
	plan := sched.PlanPower(snap, now, cfg, sched.PowerConfig{
		SuspendTime: pc.SuspendTime,
		Exempt:      c.exempt(),
		MaxResume:   rateLeft(pc.ResumeRate, &ps.resumed, now),
		MaxSuspend:  rateLeft(pc.SuspendRate, &ps.suspended, now),
	})
	if len(plan.Resume) > 0 {
		if len(pc.ResumeProgram) == 0 {
			c.log.Warn("pending jobs need powered-down nodes but [power] resume_program is empty", "nodes", hostlist.Compress(plan.Resume))
		} else {
			c.powerUp(tx, plan.Resume, now, "jobs "+waitingIDs(plan.Waiting))
		}
	}
	if len(plan.Suspend) > 0 && len(pc.SuspendProgram) > 0 {
		c.powerDown(tx, plan.Suspend, now, fmt.Sprintf("idle for suspend_time (%s)", pc.SuspendTime))
	}
}

func waitingIDs(ws []sched.PowerWait) string {
	ids := make([]string, 0, len(ws))
	for _, w := range ws {
		ids = append(ids, fmt.Sprint(w.JobID))
	}
	return strings.Join(ids, ",")
}

// powerUp marks names POWERING_UP and queues the resume program.
func (c *Controller) powerUp(tx *txn, names []string, now time.Time, why string) {
	pc := &c.cfg.Power
	for _, name := range names {
		c.setPower(tx, name, spec.PoweringUp, now, now.Add(pc.ResumeTimeout))
		c.power.resumed = append(c.power.resumed, now)
	}
	list := hostlist.Compress(names)
	c.log.Info("powering up nodes", "nodes", list, "for", why, "resume_timeout", pc.ResumeTimeout)
	tx.power = append(tx.power, PowerRun{Action: "resume", Program: pc.ResumeProgram, Nodes: list, User: pc.User, Timeout: pc.ResumeTimeout})
}

// powerDown marks names POWERING_DOWN and queues the suspend program. The
// nodes are idle: nothing is placed on them from now on.
func (c *Controller) powerDown(tx *txn, names []string, now time.Time, why string) {
	pc := &c.cfg.Power
	for _, name := range names {
		n := c.st.nodes[name]
		n.late = false
		c.heardRec(name).up.Store(false)
		c.setPower(tx, name, spec.PoweringDown, now, now.Add(pc.SuspendTimeout))
		c.power.suspended = append(c.power.suspended, now)
		c.nodeEvent(tx, name, spec.NodeEventPowerDown, why, "gpud")
	}
	list := hostlist.Compress(names)
	c.log.Info("powering down nodes", "nodes", list, "because", why)
	if len(pc.SuspendProgram) > 0 {
		tx.power = append(tx.power, PowerRun{Action: "suspend", Program: pc.SuspendProgram, Nodes: list, User: pc.User, Timeout: pc.SuspendTimeout})
	}
}

// resumeFailed marks a node that did not come up DOWN (sinfo "down~"): it
// stays powered down, and the scheduler plans around it until an admin
// resumes it (scontrol update State=RESUME or POWER_UP) or its agent
// registers after all.
func (c *Controller) resumeFailed(tx *txn, n *nodeRec, why string, now time.Time) {
	name := n.inv.Name
	c.setPower(tx, name, spec.PoweredDown, now, time.Time{})
	if !n.down {
		c.markDown(tx, n, "resume failed: "+why, now)
	}
	tx.kick = true
}

// powerRegistered is called when node n registers: a node powering up
// (or powered down and started by someone else) is on.
func (c *Controller) powerRegistered(tx *txn, n *nodeRec, now time.Time) {
	name := n.inv.Name
	p := c.admin.power[name]
	if p == nil {
		return
	}
	switch p.State {
	case spec.PoweringUp:
		c.log.Info("node powered up", "node", name, "took", now.Sub(p.Since.Time).Round(time.Millisecond))
	case spec.PoweredDown:
		c.log.Warn("node registered while powered down; taking it as powered up", "node", name)
	default:
		return // powering down: its agent is being stopped
	}
	c.setPower(tx, name, spec.PowerOn, now, time.Time{})
	c.nodeEvent(tx, name, spec.NodeEventPowerUp, "registered", "gpud")
	delete(c.power.idleSince, name) // idle from the next tick
}

// queuePower hands committed program runs to their goroutines.
func (c *Controller) queuePower(runs []PowerRun) {
	if c.runPower == nil {
		return
	}
	for _, r := range runs {
		select {
		case c.powerQueue <- r:
		default:
			c.log.Error("power program queue full; program not run", "action", r.Action, "nodes", r.Nodes)
		}
	}
}

// powerLoop runs each queued program in a goroutine of its own (a resume
// may take minutes; suspends must not wait behind it) until ctx ends,
// then waits for them.
func (c *Controller) powerLoop(ctx context.Context) {
	var running []chan struct{}
	defer func() {
		for _, d := range running {
			<-d
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.powerQueue:
			done := make(chan struct{})
			running = slices.DeleteFunc(running, func(d chan struct{}) bool {
				select {
				case <-d:
					return true
				default:
					return false
				}
			})
			running = append(running, done)
			go func() {
				defer close(done)
				c.runPowerProgram(ctx, r)
			}()
		}
	}
}

// runPowerProgram runs r; a failed resume marks its nodes that are still
// powering up DOWN at once (not only at resume_timeout).
func (c *Controller) runPowerProgram(ctx context.Context, r PowerRun) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, max(r.Timeout, 10*time.Second))
	err := c.runPower(pctx, r)
	cancel()
	if err == nil {
		c.log.Info("power program done", "action", r.Action, "nodes", r.Nodes, "took", time.Since(start).Round(time.Millisecond))
		return
	}
	c.log.Error("power program failed", "action", r.Action, "nodes", r.Nodes, "err", err)
	if r.Action != "resume" || ctx.Err() != nil {
		return
	}
	names, _ := hostlist.Expand(r.Nodes)
	_ = c.call(ctx, func(tx *txn) error {
		now := c.now()
		for _, name := range names {
			if n := c.st.nodes[name]; n != nil && c.powerOf(name) == spec.PoweringUp {
				c.resumeFailed(tx, n, err.Error(), now)
			}
		}
		return nil
	})
}

// Node states scontrol update takes for power saving.
const (
	statePowerUp   = "POWER_UP"
	statePowerDown = "POWER_DOWN"
)

// updatePower applies State=POWER_UP or POWER_DOWN to n (UpdateNodes).
func (c *Controller) updatePower(tx *txn, n *nodeRec, state, actor string, now time.Time) error {
	name := n.inv.Name
	pc := &c.cfg.Power
	switch state {
	case statePowerUp:
		switch c.powerOf(name) {
		case spec.PoweringUp:
			return nil
		case spec.PowerOn:
			return spec.Errorf(spec.ErrConflict, "node %s is powered on already", name)
		case spec.PoweringDown:
			return spec.Errorf(spec.ErrConflict, "node %s is powering down; power it up after suspend_timeout (%s)", name, pc.SuspendTimeout)
		}
		if len(pc.ResumeProgram) == 0 {
			return spec.Errorf(spec.ErrConflict, "no [power] resume_program is configured to power node %s up", name)
		}
		if n.down {
			c.nodeEvent(tx, name, spec.NodeEventUp, "POWER_UP by "+actor, actor)
			n.down, n.downReason = false, ""
			tx.saveNode(n)
		}
		c.powerUp(tx, []string{name}, now, "scontrol update State=POWER_UP by "+actor)
	case statePowerDown:
		switch c.powerOf(name) {
		case spec.PoweredDown, spec.PoweringDown:
			return nil
		case spec.PoweringUp:
			return spec.Errorf(spec.ErrConflict, "node %s is powering up; power it down once it is up", name)
		}
		if len(n.allocs) > 0 {
			return spec.Errorf(spec.ErrConflict, "node %s runs jobs; drain it (State=DRAIN) and power it down once they end", name)
		}
		if len(pc.SuspendProgram) == 0 {
			return spec.Errorf(spec.ErrConflict, "no [power] suspend_program is configured to power node %s down", name)
		}
		c.powerDown(tx, []string{name}, now, "scontrol update State=POWER_DOWN by "+actor)
	}
	return nil
}
