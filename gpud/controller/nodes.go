package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/health"
	"github.com/gpud/gpud/gpud/spec"
)

// reasonNotResponding marks a node DOWN for missed heartbeats; a heartbeat
// or registration brings such a node back by itself.
const reasonNotResponding = "not responding"

func requireRoot(who Caller, what string) error {
	if who.root() {
		return nil
	}
	return spec.Errorf(spec.ErrPermissionDenied, "%s needs root (you are uid %d); ask an operator", what, who.UID)
}

func (c *Controller) node(name string) (*nodeRec, error) {
	n := c.st.nodes[name]
	if n == nil {
		return nil, spec.Errorf(spec.ErrNotFound, "node %q is not registered; the node agent must register first", name)
	}
	return n, nil
}

// Register creates or updates a node from its agent's inventory and
// returns the heartbeat interval the agent must use. A DOWN node comes
// back; a drained one stays drained.
func (c *Controller) Register(ctx context.Context, who Caller, inv spec.Inventory) (time.Duration, error) {
	return c.RegisterRunning(ctx, who, inv, nil)
}

// RegisterRunning is Register for an agent that says which allocations it
// has live containers for (running; nil from an agent that does not say),
// as its heartbeats do. A run that the node's silence interrupted
// (Job.Interrupted) and that the node still runs is resumed in the same
// step that brings the node back, before any scheduling cycle can see
// the node up and its job pending: else an agent back just past
// node_timeout (a restart, a healed link) registered, the kicked cycle
// started the job's next attempt, and the old run, alive, was fenced a
// heartbeat interval later, when its first heartbeat came.
func (c *Controller) RegisterRunning(ctx context.Context, who Caller, inv spec.Inventory, running []string) (time.Duration, error) {
	if err := requireRoot(who, "registering a node"); err != nil {
		return 0, err
	}
	if inv.Name == "" || strings.ContainsAny(inv.Name, "/ \t\n") {
		return 0, spec.Errorf(spec.ErrInvalid, "node name %q is empty or has a slash or space; set the node's name in node.toml", inv.Name)
	}
	if inv.CPUs < 0 || inv.MemMiB < 0 {
		return 0, spec.Errorf(spec.ErrInvalid, "node %s reports negative CPUs or memory", inv.Name)
	}
	var hb time.Duration
	h := c.noteHeard(inv.Name)
	if running != nil {
		h.running.Store(&running)
	}
	err := c.call(ctx, func(tx *txn) error {
		n := c.st.nodes[inv.Name]
		if n == nil {
			n = c.st.addNode(&spec.Node{Inventory: inv, State: spec.NodeIdle}, c.now())
		}
		n.inv = keepNICHealth(n.inv, keepGPUHealth(n.inv, inv))
		c.powerRegistered(tx, n, c.now()) // power.go
		n.lastHB = c.now()
		n.late = false
		if n.down {
			c.log.Info("node up", "node", inv.Name, "was", n.downReason)
			c.nodeEvent(tx, inv.Name, spec.NodeEventUp, "registered", "gpud")
		}
		n.down, n.downReason = false, ""
		c.heardRec(inv.Name).up.Store(true)
		tx.saveNode(n)
		tx.bump[inv.Name] = true
		tx.kick = true
		for _, id := range running {
			c.resumeInterrupted(tx, id, inv.Name)
		}
		hb = c.cfg.HeartbeatInterval
		return nil
	})
	return hb, err
}

// Now is the controller's wall clock (node agents translate the start
// times it stamps to their own clocks: api.AssignmentsResponse.Now).
func (c *Controller) Now() time.Time { return c.now() }

// NodeTimeout is how long a node may be silent before it is marked DOWN
// and its jobs are requeued or failed ([controller] node_timeout). Node
// agents learn it from their registration and heartbeat answers and stop
// sealing checkpoints once out of touch that long (split brain).
func (c *Controller) NodeTimeout() time.Duration { return time.Duration(c.nodeTimeout.Load()) }

// Heartbeat records that a node is alive. running lists the alloc ids the
// agent has containers for: a run of a job that this node's silence
// interrupted (Job.Interrupted) is resumed when the node lists it again
// before the job started elsewhere. A node marked DOWN for silence comes
// back.
//
// The heartbeat of a node that is registered and up changes nothing but
// its time, so it does not queue for the owner loop: it notes its arrival
// (an atomic) and returns. At 10,000 nodes that is 1,000 heartbeats/s
// that neither wait behind a scheduling cycle or commit (where a delayed
// heartbeat made housekeeping mark live nodes DOWN, docs/fleet.md) nor
// delay them. Only the first heartbeat after a (re)start and those of a
// DOWN node go through the loop.
func (c *Controller) Heartbeat(ctx context.Context, who Caller, name string, running []string) error {
	if err := requireRoot(who, "a node heartbeat"); err != nil {
		return err
	}
	h := c.noteHeard(name)
	h.running.Store(&running)
	if h.up.Load() && !h.resume.Load() {
		return nil
	}
	return c.call(ctx, func(tx *txn) error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		c.responding(tx, n)
		if !n.down {
			for _, id := range running {
				c.resumeInterrupted(tx, id, name)
			}
		}
		return nil
	})
}

// responding notes that node n answered now (a heartbeat, or events it
// delivered): a node marked DOWN for silence comes back.
func (c *Controller) responding(tx *txn, n *nodeRec) {
	name := n.inv.Name
	n.lastHB = c.now()
	if n.late {
		n.late = false
		tx.kick = true
		c.log.Info("node answers again", "node", name)
	}
	if n.down && n.downReason == reasonNotResponding {
		c.log.Info("node responding again", "node", name)
		c.nodeEvent(tx, name, spec.NodeEventUp, "responding again", "gpud")
		n.down, n.downReason = false, ""
		tx.saveNode(n)
		tx.bump[name] = true
		tx.kick = true
	}
	c.heardRec(name).up.Store(!n.down)
}

// keepGPUHealth returns inv with the health marks old had for the same
// GPUs: a re-registering agent reports its GPUs afresh, but a GPU taken out
// of service stays out until gpuq resume.
func keepGPUHealth(old, inv spec.Inventory) spec.Inventory {
	marks := map[string]string{}
	for _, g := range old.GPUs {
		if unhealthy(g) {
			marks[g.UUID] = g.Health
		}
		for _, m := range g.MIGSlices {
			if m.Health != "" && m.UUID != "" {
				marks[m.UUID] = m.Health
			}
		}
	}
	if len(marks) == 0 {
		return inv
	}
	inv.GPUs = slices.Clone(inv.GPUs)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if h, ok := marks[g.UUID]; ok && !unhealthy(*g) {
			g.Health = h
		}
		g.MIGSlices = slices.Clone(g.MIGSlices)
		for k := range g.MIGSlices {
			if h, ok := marks[g.MIGSlices[k].UUID]; ok && g.MIGSlices[k].Health == "" {
				g.MIGSlices[k].Health = h
			}
		}
	}
	return inv
}

// findSlice returns where MIG instance uuid is in inv: its GPU's index in
// inv.GPUs and its own in that GPU's MIGSlices.
func findSlice(inv spec.Inventory, uuid string) (gi, si int, ok bool) {
	if uuid == "" {
		return 0, 0, false
	}
	for i, g := range inv.GPUs {
		if k := slices.IndexFunc(g.MIGSlices, func(m spec.MIGSlice) bool { return m.UUID == uuid }); k >= 0 {
			return i, k, true
		}
	}
	return 0, 0, false
}

// dynamicSliceGPU returns the index in n.inv.GPUs of the dynamic MIG
// GPU whose instance uuid is (or was): the GPU of a running job's instance,
// else the GPU (of index gpu, when not -1) that went out for it (its mark
// names the instance; the job and the instance may be gone); -1 if none.
func (c *Controller) dynamicSliceGPU(n *nodeRec, uuid string, gpu int) int {
	if !strings.HasPrefix(uuid, "MIG-") {
		return -1
	}
	if gi, ok := c.sliceOwner(n, uuid); ok {
		return gi
	}
	return slices.IndexFunc(n.inv.GPUs, func(g spec.GPU) bool {
		return (gpu < 0 || g.Index == gpu) && strings.Contains(g.Health, uuid)
	})
}

// sliceOwner returns the index in inv.GPUs of the GPU a running job's MIG
// instance uuid on node n lives on: an instance a dynamic MIG GPU made
// for the job, which the node's inventory does not list.
func (c *Controller) sliceOwner(n *nodeRec, uuid string) (int, bool) {
	for _, allocID := range slices.Sorted(maps.Keys(n.allocs)) {
		rec := c.st.jobs[n.allocs[allocID]]
		if rec == nil {
			continue
		}
		part, ok := rec.livePart(n.inv.Name)
		if !ok {
			continue
		}
		for _, m := range part.MIG {
			if m.UUID == uuid {
				if i := slices.IndexFunc(n.inv.GPUs, func(g spec.GPU) bool { return g.UUID == m.GPU }); i >= 0 {
					return i, true
				}
			}
		}
	}
	return 0, false
}

func unhealthy(g spec.GPU) bool { return g.Health != "" && g.Health != "ok" }

// keepNICHealth is keepGPUHealth for RDMA NICs: a NIC gpud took out stays
// out over a re-registration until the agent's clean probe.
func keepNICHealth(old, inv spec.Inventory) spec.Inventory {
	marks := map[string]string{}
	for _, n := range old.NICs {
		if n.Health != "" {
			marks[n.Name] = n.Health
		}
	}
	if len(marks) == 0 {
		return inv
	}
	inv.NICs = slices.Clone(inv.NICs)
	for i := range inv.NICs {
		if h, ok := marks[inv.NICs[i].Name]; ok && inv.NICs[i].Health == "" {
			inv.NICs[i].Health = h
		}
	}
	return inv
}

// NICHealth applies a node's RDMA NIC health: problems are every NIC the
// agent holds out of service now (the whole list: a NIC gpud marked that
// is no longer listed passed the agent's clean probe and comes back).
// A NIC taken out is left out of the scheduler's view of the node, so jobs
// that need RDMA go elsewhere while the node keeps running the others, and
// the running jobs that use it are requeued (checkpointing first when they
// checkpoint; a hardware requeue, expedited when they ask). A person's
// mark (not "gpud:") is never lifted here.
func (c *Controller) NICHealth(ctx context.Context, who Caller, name string, problems []spec.NICProblem) error {
	if err := requireRoot(who, "reporting NIC health"); err != nil {
		return err
	}
	return c.call(ctx, func(tx *txn) error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		bad := map[string]string{}
		for _, p := range problems {
			if !slices.ContainsFunc(n.inv.NICs, func(x spec.NIC) bool { return x.Name == p.Name }) {
				c.log.Warn("node reports a problem with a NIC it did not register; ignored", "node", name, "nic", p.Name, "problem", p.Problem)
				continue
			}
			reason := p.Problem
			if !strings.HasPrefix(reason, health.ReasonPrefix) {
				reason = health.ReasonPrefix + "nic " + p.Name + " " + orDefault(p.Problem, "unhealthy")
			}
			bad[p.Name] = reason
		}
		nics := slices.Clone(n.inv.NICs)
		changed := false
		for i := range nics {
			nic := &nics[i]
			reason, isBad := bad[nic.Name]
			switch {
			case isBad && nic.Health == "":
				nic.Health, changed = reason, true
				c.log.Warn("RDMA NIC out of service", "node", name, "nic", nic.Name, "problem", reason)
				c.nodeEvent(tx, name, spec.NodeEventDrain, "NIC "+nic.Name+": "+reason, "gpud")
				nicName := nic.Name
				n.inv.NICs = nics
				c.moveJobs(tx, n, "node "+name+" "+reason, false, true, func(p spec.NodeAlloc) bool { return slices.Contains(p.NICs, nicName) })
			case !isBad && strings.HasPrefix(nic.Health, health.ReasonPrefix):
				c.log.Info("RDMA NIC back in service after a clean probe", "node", name, "nic", nic.Name, "was", nic.Health)
				c.nodeEvent(tx, name, spec.NodeEventResume, "NIC "+nic.Name+" passed its readmission probe", "gpud")
				nic.Health, changed = "", true
			}
		}
		if changed {
			n.inv.NICs = nics
			tx.saveNode(n)
			tx.bump[name] = true
			tx.kick = true
		}
		return nil
	})
}

// GPUHealth applies what a node's health model reports (gpud/health):
// problems are its GPUs to keep out of service now, events their history
// since its last answered heartbeat.
//
// A GPU with a problem is taken out of service: the scheduler places
// nothing more on it while the node's other GPUs keep scheduling, and the
// jobs running on it are requeued to run elsewhere, checkpointing first
// when they take checkpoints (a job submitted with --no-requeue keeps
// running). A problem whose action is drain-node also drains the node,
// unless a person drained it already: their reason stays. Reporting a GPU
// that is already out of service changes nothing. Every event goes to
// accounting (the GPU's history, by serial); a readmit event, sent after
// a clean probe, puts back in service a GPU that gpud took out (its mark
// starts "gpud:"), never one a person took out.
func (c *Controller) GPUHealth(ctx context.Context, who Caller, name string, problems []spec.GPUProblem, events []spec.GPUEvent) error {
	if err := requireRoot(who, "reporting GPU health"); err != nil {
		return err
	}
	return c.call(ctx, func(tx *txn) error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		for _, ev := range events {
			c.gpuEvent(tx, n, ev)
		}
		for _, p := range problems {
			c.gpuProblem(tx, n, p)
		}
		return nil
	})
}

// gpuProblem takes one GPU out of service (owner only).
func (c *Controller) gpuProblem(tx *txn, n *nodeRec, p spec.GPUProblem) {
	name := n.inv.Name
	i := slices.IndexFunc(n.inv.GPUs, func(g spec.GPU) bool { return g.UUID == p.UUID })
	if i < 0 {
		if gi, si, ok := findSlice(n.inv, p.UUID); ok {
			c.sliceProblem(tx, n, gi, si, p)
			return
		}
		// An instance the node made for a job on a dynamic MIG GPU: it
		// is destroyed with the job, so the GPU (its placements) goes
		// out instead, and is readmitted with its own probe.
		// Only the job on the instance moves: the fault is contained to
		// it; the GPU's other instances keep their jobs.
		if gi := c.dynamicSliceGPU(n, p.UUID, -1); gi >= 0 && strings.Contains(n.inv.GPUs[gi].Health, p.UUID) {
			return // out for it already; its job moved and the instance is gone
		}
		if gi, ok := c.sliceOwner(n, p.UUID); ok {
			c.log.Warn("fault of a MIG instance of a dynamic MIG GPU: the GPU goes out", "node", name, "mig_uuid", p.UUID, "gpu_uuid", n.inv.GPUs[gi].UUID)
			mig := p.UUID
			onSlice := func(a spec.NodeAlloc) bool {
				return slices.ContainsFunc(a.MIG, func(m spec.MIGSlice) bool { return m.UUID == mig })
			}
			if unhealthy(n.inv.GPUs[gi]) { // out already (another instance's fault): move this one's job
				c.moveJobs(tx, n, "node "+name+" "+orDefault(p.Problem, "MIG instance "+mig+" unhealthy"), false, true, onSlice)
				return
			}
			p.UUID, p.GPU = n.inv.GPUs[gi].UUID, ""
			c.gpuOut(tx, n, gi, p, onSlice)
			return
		}
	}
	if i < 0 {
		c.log.Warn("node reports a problem with a GPU it did not register; ignored", "node", name, "gpu_uuid", p.UUID, "problem", p.Problem)
		return
	}
	// The jobs on the GPU: whole or a share of it, or on its MIG instances.
	uuid := p.UUID
	c.gpuOut(tx, n, i, p, func(a spec.NodeAlloc) bool {
		return slices.Contains(a.GPUs, uuid) || slices.ContainsFunc(a.MIG, func(m spec.MIGSlice) bool { return m.GPU == uuid })
	})
}

// gpuOut takes GPU i of node n out of service for p and moves the jobs
// onPart matches (owner only).
func (c *Controller) gpuOut(tx *txn, n *nodeRec, i int, p spec.GPUProblem, onPart func(spec.NodeAlloc) bool) {
	name := n.inv.Name
	reason := p.Problem
	if !strings.HasPrefix(reason, health.ReasonPrefix) {
		// An agent without the health model: say which GPU.
		reason = fmt.Sprintf("GPU %d %s", n.inv.GPUs[i].Index, orDefault(p.Problem, "unhealthy"))
	}
	if p.Action == string(health.DrainNode) && !n.drain {
		n.drain, n.drainReason = true, reason
		c.log.Warn("node drained by its GPU health", "node", name, "reason", reason)
		c.nodeEvent(tx, name, spec.NodeEventDrain, reason, "gpud")
		c.moveJobs(tx, n, "node "+name+" drained: "+reason, false, true, func(spec.NodeAlloc) bool { return true })
		tx.saveNode(n)
		tx.kick = true
	}
	if unhealthy(n.inv.GPUs[i]) {
		return
	}
	n.inv.GPUs = slices.Clone(n.inv.GPUs) // published views share the old slice
	g := &n.inv.GPUs[i]
	g.Health = reason
	c.log.Warn("GPU out of service", "node", name, "gpu_uuid", g.UUID, "problem", g.Health)
	tx.saveNode(n)
	tx.kick = true
	c.moveJobs(tx, n, "node "+name+" "+g.Health, false, true, onPart)
}

// sliceProblem takes one MIG instance out of service: the scheduler
// places nothing more on it (sched skips an instance with Health set)
// while the GPU's other instances keep their jobs and keep scheduling,
// and the job running on it is requeued as gpuProblem requeues a GPU's.
func (c *Controller) sliceProblem(tx *txn, n *nodeRec, gi, si int, p spec.GPUProblem) {
	name := n.inv.Name
	reason := p.Problem
	if !strings.HasPrefix(reason, health.ReasonPrefix) {
		reason = fmt.Sprintf("GPU %d MIG instance %s %s", n.inv.GPUs[gi].Index, p.UUID, orDefault(p.Problem, "unhealthy"))
	}
	if n.inv.GPUs[gi].MIGSlices[si].Health != "" {
		return
	}
	n.inv.GPUs = slices.Clone(n.inv.GPUs) // published views share the old slices
	g := &n.inv.GPUs[gi]
	g.MIGSlices = slices.Clone(g.MIGSlices)
	g.MIGSlices[si].Health = reason
	c.log.Warn("MIG instance out of service", "node", name, "gpu_uuid", g.UUID, "mig_uuid", p.UUID, "problem", reason)
	tx.saveNode(n)
	tx.bump[name] = true
	tx.kick = true
	uuid := p.UUID
	c.moveJobs(tx, n, "node "+name+" "+reason, false, true, func(a spec.NodeAlloc) bool {
		return slices.ContainsFunc(a.MIG, func(m spec.MIGSlice) bool { return m.UUID == uuid })
	})
}

// gpuEvent records one GPU health event and applies a readmission
// (owner only).
func (c *Controller) gpuEvent(tx *txn, n *nodeRec, ev spec.GPUEvent) {
	name := n.inv.Name
	i := slices.IndexFunc(n.inv.GPUs, func(g spec.GPU) bool { return g.UUID == ev.UUID })
	if gi, si, ok := findSlice(n.inv, ev.UUID); i < 0 && ok {
		c.sliceEvent(tx, n, gi, si, ev)
		return
	}
	if i < 0 {
		// An instance a dynamic MIG GPU made for a job: the GPU's
		// history (the instance's UUID kept in the event).
		i = c.dynamicSliceGPU(n, ev.UUID, ev.GPU)
	}
	if i < 0 {
		c.log.Warn("node reports a health event of a GPU it did not register; ignored", "node", name, "gpu_uuid", ev.UUID, "kind", ev.Kind)
		return
	}
	g := n.inv.GPUs[i]
	ev.Node, ev.GPU, ev.Serial = name, g.Index, orDefault(g.Serial, ev.Serial)
	if ev.Time.IsZero() || ev.Time.After(c.now()) {
		ev.Time = spec.NewTime(c.now())
	}
	tx.nodeEvents = append(tx.nodeEvents, spec.NodeEvent{Time: ev.Time.Time, Node: name, Event: spec.NodeEventGPU, Actor: "gpud", GPU: &ev})
	c.gpuEventSeen(name, ev)
	if ev.Kind != spec.GPUEventReadmit {
		return
	}
	if ev.UUID != g.UUID && !strings.Contains(g.Health, ev.UUID) {
		return // an instance's readmission; the GPU is out for something else
	}
	if strings.HasPrefix(g.Health, health.ReasonPrefix) {
		n.inv.GPUs = slices.Clone(n.inv.GPUs)
		n.inv.GPUs[i].Health = ""
		c.log.Info("GPU back in service after a clean probe", "node", name, "gpu_uuid", g.UUID, "was", g.Health)
		tx.saveNode(n)
		tx.bump[name] = true
		tx.kick = true
	}
	// A node gpud drained for this GPU comes back with it.
	if _, gi, _, ok := health.ParseReason(n.drainReason); n.drain && ok && gi == g.Index {
		n.drain, n.drainReason = false, ""
		c.nodeEvent(tx, name, spec.NodeEventResume, "GPU "+strconv.Itoa(g.Index)+" passed its readmission probe", "gpud")
		tx.saveNode(n)
		tx.kick = true
	}
}

// sliceEvent is gpuEvent for a MIG instance: the event goes to its GPU's
// history (the GPU's serial; UUID the instance's), and a readmission puts
// the instance back in service.
func (c *Controller) sliceEvent(tx *txn, n *nodeRec, gi, si int, ev spec.GPUEvent) {
	name := n.inv.Name
	g := n.inv.GPUs[gi]
	ev.Node, ev.GPU, ev.Serial = name, g.Index, orDefault(g.Serial, ev.Serial)
	if ev.Time.IsZero() || ev.Time.After(c.now()) {
		ev.Time = spec.NewTime(c.now())
	}
	tx.nodeEvents = append(tx.nodeEvents, spec.NodeEvent{Time: ev.Time.Time, Node: name, Event: spec.NodeEventGPU, Actor: "gpud", GPU: &ev})
	c.gpuEventSeen(name, ev)
	if ev.Kind != spec.GPUEventReadmit || !strings.HasPrefix(g.MIGSlices[si].Health, health.ReasonPrefix) {
		return
	}
	c.log.Info("MIG instance back in service after a clean probe", "node", name, "gpu_uuid", g.UUID, "mig_uuid", ev.UUID, "was", g.MIGSlices[si].Health)
	n.inv.GPUs = slices.Clone(n.inv.GPUs)
	ms := slices.Clone(g.MIGSlices)
	ms[si].Health = ""
	n.inv.GPUs[gi].MIGSlices = ms
	tx.saveNode(n)
	tx.bump[name] = true
	tx.kick = true
}

// GPUsOut returns the node's GPUs that gpud's health model took out of
// service, for a registering agent to probe before they come back.
func (c *Controller) GPUsOut(ctx context.Context, name string) ([]spec.GPUProblem, error) {
	var out []spec.GPUProblem
	err := c.query(ctx, func() error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		for _, g := range n.inv.GPUs {
			if code, _, _, ok := health.ParseReason(g.Health); ok {
				out = append(out, spec.GPUProblem{UUID: g.UUID, Problem: g.Health, Code: code})
			}
			for _, m := range g.MIGSlices {
				if code, _, _, ok := health.ParseReason(m.Health); ok {
					out = append(out, spec.GPUProblem{UUID: m.UUID, GPU: g.UUID, Problem: m.Health, Code: code, Action: string(health.DrainSlice)})
				}
			}
		}
		return nil
	})
	return out, err
}

// moveJobs stops the running jobs that have a part on node n matching
// onPart and queues them again (same id and submit time), asking them to
// checkpoint first when they take checkpoints, the way gpuq requeue does.
// Jobs submitted with --no-requeue keep running, and with onlyCheckpointing
// so do jobs that do not checkpoint (they would lose their work). hw says
// the hardware is at fault (hardwareRequeue).
func (c *Controller) moveJobs(tx *txn, n *nodeRec, reason string, onlyCheckpointing, hw bool, onPart func(spec.NodeAlloc) bool) {
	for _, allocID := range slices.Sorted(maps.Keys(n.allocs)) {
		rec := c.st.jobs[n.allocs[allocID]]
		if rec == nil || rec.job.State != spec.StateRunning || !rec.job.Requeue {
			continue
		}
		if onlyCheckpointing && !checkpoints(&rec.job) {
			continue
		}
		part, ok := rec.livePart(n.inv.Name)
		if !ok || !onPart(part) {
			continue
		}
		c.log.Info("moving job off node", "job_id", rec.job.ID, "node", n.inv.Name, "reason", reason, "checkpoint_first", checkpoints(&rec.job))
		if hw {
			c.hardwareRequeue(rec)
		}
		c.stopToRequeue(tx, rec, reason)
		tx.saveJob(rec)
	}
}

// hardwareRequeue notes that rec is requeued because its hardware failed
// (a GPU or node gpud's health model took out, a node that failed): the
// requeue is not charged to the job (HWRequeues), and a job that asked for
// --requeue=expedite, or whose partition expedites, waits at top priority
// until it starts again, away from the drained GPU or node.
func (c *Controller) hardwareRequeue(rec *jobRec) {
	j := &rec.job
	j.HWRequeues++
	if p := c.cfg.partition(j.Partition); j.RequeueExpedite || p != nil && p.RequeueExpedite {
		j.Expedited = true
	}
}

// Assignment is the desired state of one allocation on one node (the
// fields of api.Assignment).
type Assignment struct {
	// Job is the job's published view (immutable: read it, never change
	// it), not a copy: ~1.4 KB per assignment per answer otherwise.
	Job *spec.Job
	// View is the view Job belongs to (its AppendJSON keeps the job's
	// encoding for the next answer).
	View       *JobView
	Alloc      spec.Alloc
	Stop       bool
	StopState  spec.JobState
	StopReason string
	// Checkpoint, with Stop, asks the node to checkpoint the job before
	// stopping it.
	Checkpoint bool
	// Signal, sent once per SignalSeq, is a user's scancel --signal.
	Signal    string
	SignalSeq int
	// MPIDefault is the site's srun --mpi (Config.MPIDefault).
	MPIDefault string
	// ClusterName is Config.ClusterName (SLURM_CLUSTER_NAME).
	ClusterName string
	// Gate is the job's partition's start gate (Partition.StartGate).
	Gate string
	// Het are the components of Job's heterogeneous job (het.go).
	Het []spec.HetComponent
}

// Assignments returns the node's generation and every allocation it
// should run or stop. It returns at once if the generation differs from
// after (newer, or older: the controller restarted), else waits up to
// wait for a change. The commit that changes the node answers the wait
// itself (bumpAnswering): the answer is the node's assignments as that
// commit left them, with no further turn of the owner loop (which would
// make a start wait for the next batch's commit before its node hears
// of it).
func (c *Controller) Assignments(ctx context.Context, who Caller, name string, after uint64, wait time.Duration) (uint64, []Assignment, error) {
	if err := requireRoot(who, "reading node assignments"); err != nil {
		return 0, nil, err
	}
	var timer *time.Timer
	for {
		var gen uint64
		var out []Assignment
		var changed chan struct{}
		var p *poller
		err := c.query(ctx, func() error {
			n, err := c.node(name)
			if err != nil {
				return err
			}
			gen = n.gen
			if gen == after && timer == nil && wait > 0 {
				changed = n.changed
				p = &poller{ch: make(chan pollAnswer, 1)}
				n.addPoller(p)
				return nil
			}
			out = c.assignments(n)
			return nil
		})
		if err != nil {
			// The query may not have run yet, and run later on the owner
			// (ctx ended while it waited in the queue: a poller gone): its
			// variables are not this goroutine's to read (-race saw it when
			// a node agent stopped mid-poll, ident_test.go). One it did add
			// is answered and dropped by the node's next change.
			return 0, nil, err
		}
		if changed == nil {
			return gen, out, nil
		}
		timer = time.NewTimer(wait)
		select {
		case a := <-p.ch:
			timer.Stop()
			return a.gen, a.out, nil
		case <-changed:
			// Answered with the bump (the answer is sent before changed
			// is closed), or bumped by a path that does not answer
			// (leadership, a reload): asked again below.
			select {
			case a := <-p.ch:
				timer.Stop()
				return a.gen, a.out, nil
			default:
			}
		case <-timer.C:
		case <-ctx.Done():
			p.gone.Store(true)
			timer.Stop()
			return 0, nil, ctx.Err()
		case <-c.stopped:
			p.gone.Store(true)
			timer.Stop()
			return 0, nil, spec.Errorf(spec.ErrUnavailable, "the gpud controller stopped; retry when it is back")
		}
		p.gone.Store(true)
		timer.Stop()
	}
}

// bumpAnswering bumps n's generation (a commit changed its assignments),
// first handing the polls waiting on it their answer: one list, made
// once, shared by them (read only).
func (c *Controller) bumpAnswering(n *nodeRec) {
	var waiting bool
	for _, p := range n.pollers {
		if !p.gone.Load() {
			waiting = true
			break
		}
	}
	if waiting {
		a := pollAnswer{gen: n.gen + 1, out: c.assignments(n)}
		for _, p := range n.pollers {
			if !p.gone.Load() {
				select {
				case p.ch <- a:
				default:
				}
			}
		}
	}
	n.bump()
}

func (c *Controller) assignments(n *nodeRec) []Assignment {
	// Sized once: growing the slice by appends allocated about twice
	// the answer.
	out := make([]Assignment, 0, len(n.allocs))
	now := c.now()
	for _, allocID := range slices.Sorted(maps.Keys(n.allocs)) {
		rec := c.st.jobs[n.allocs[allocID]]
		if rec == nil || rec.job.Alloc == nil || rec.job.Alloc.ID != allocID {
			continue
		}
		j := &rec.view.job
		// Alloc is a copy whose Nodes are shared: the owner replaces them,
		// never changes them in place (newView), and the answer only reads.
		a := Assignment{Job: j, View: rec.view, Alloc: *rec.job.Alloc, MPIDefault: c.cfg.MPIDefault, ClusterName: c.cfg.ClusterName, Gate: StartGateQuick,
			Het: c.hetComponents(&rec.job)}
		// The node measures the time limit from the start it is sent,
		// against the controller's clock as it answers (localStarts):
		// the start as it is on that clock now, however it was stepped.
		a.Alloc.StartTime = spec.NewTime(c.runs.start(allocID, a.Alloc.StartTime.Time, now))
		if p := c.cfg.partition(j.Partition); p != nil && p.StartGate != "" {
			a.Gate = p.StartGate
		}
		if rec.job.StopState != "" || rec.job.State.Terminal() {
			a.Stop = true
			a.StopState = cmp.Or(rec.job.StopState, spec.StateCancelled)
			a.StopReason = cmp.Or(rec.job.StopReason, rec.job.Reason)
			a.Checkpoint = rec.job.StopCheckpoint && !rec.job.State.Terminal()
		} else if rec.job.SignalName != "" && rec.job.SignalAlloc == allocID {
			a.Signal, a.SignalSeq = rec.job.SignalName, rec.job.SignalSeq
		}
		out = append(out, a)
	}
	return out
}

// NodeEvent is one allocation event from a node's outbox (the fields of
// api.AllocEvent).
type NodeEvent struct {
	Seq      uint64
	Node     string
	AllocID  string
	JobID    spec.JobID
	Kind     string
	Time     time.Time
	State    spec.JobState
	ExitCode int
	Signal   int
	Reason   string
	// For EventCheckpointed.
	CkptSeq   int
	CkptBytes int64
	// For EventStarted: the MIG UUIDs of the part's slices, in order,
	// and what the job's image cost the part (spec.NodeAlloc PullMS,
	// PullBytes).
	MIG               []string
	PullMS, PullBytes int64
	// For EventStepStarted and EventStepEnded.
	Step *spec.Step
	// For EventExited: the GPUs that failed the job's start gate.
	GateFailed []spec.GPUProblem
}

// Node event kinds.
const (
	EventStarted      = "started"
	EventExited       = "exited"
	EventCheckpointed = "checkpointed"
	EventStepStarted  = "step_started"
	EventStepEnded    = "step_ended"
)

// NodeEvents applies a node's events idempotently and returns the highest
// seq processed, after their effects are durable. Events of allocations
// that are not current (a requeued job's old run) are acknowledged and
// ignored.
func (c *Controller) NodeEvents(ctx context.Context, who Caller, name string, events []NodeEvent) (uint64, error) {
	if err := requireRoot(who, "reporting node events"); err != nil {
		return 0, err
	}
	for _, ev := range events {
		if ev.Node != "" && ev.Node != name {
			return 0, spec.Errorf(spec.ErrInvalid, "event %d names node %q but was posted for node %q", ev.Seq, ev.Node, name)
		}
	}
	var acked uint64
	c.noteHeard(name)
	err := c.call(ctx, func(tx *txn) error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		// A node that delivers events is alive: one marked DOWN for
		// silence is back before its events apply, so that a run its
		// silence interrupted can resume and take them.
		if n.down && n.downReason == reasonNotResponding {
			c.responding(tx, n)
		}
		for _, ev := range events {
			acked = max(acked, ev.Seq)
			c.applyEvent(tx, name, ev)
		}
		return nil
	})
	return acked, err
}

func (c *Controller) applyEvent(tx *txn, node string, ev NodeEvent) {
	rec := c.st.jobs[ev.JobID]
	if rec == nil {
		// A node speaks only for its own allocations.
		c.log.Warn("node event for a job that does not exist refused", "node", node, "job_id", ev.JobID, "alloc_id", ev.AllocID, "kind", ev.Kind)
		return
	}
	if rec.job.Alloc == nil && rec.job.Interrupted != nil && rec.job.Interrupted.Alloc.ID == ev.AllocID {
		// The run this node's silence interrupted reports back (a step,
		// its end): nothing else ran the job meanwhile, so it resumes,
		// and the event is applied to it rather than lost.
		c.resumeInterrupted(tx, ev.AllocID, node)
	}
	if rec.job.Alloc == nil || rec.job.Alloc.ID != ev.AllocID {
		c.log.Debug("stale node event ignored", "node", node, "job_id", ev.JobID, "alloc_id", ev.AllocID, "kind", ev.Kind)
		return
	}
	if ev.Kind == EventStepStarted || ev.Kind == EventStepEnded {
		// A step's end may come after its node's part ended (the
		// allocation was stopped under it): it is recorded all the same.
		c.stepEvent(tx, rec, node, ev) // steps.go
		return
	}
	part, ok := rec.livePart(node)
	if !ok {
		if !slices.ContainsFunc(rec.job.Alloc.Nodes, func(p spec.NodeAlloc) bool { return p.Node == node }) {
			c.log.Warn("node event for a job not allocated to this node refused", "node", node, "job_id", ev.JobID, "alloc_id", ev.AllocID, "kind", ev.Kind)
		}
		return
	}
	at := ev.Time
	if at.IsZero() {
		at = c.now()
	}
	switch ev.Kind {
	case EventStarted:
		if c.pullCost(rec, node, ev) { // images.go
			tx.saveJob(rec)
		}
		if part.Rank == 0 && !rec.job.State.Terminal() {
			rec.job.StartTime = spec.NewTime(at)
			batchStarted(&rec.job, part, at) // steps.go
			tx.saveJob(rec)
		}
		if len(ev.MIG) > 0 && c.migCreated(rec, node, ev.MIG) { // mig.go
			tx.saveJob(rec)
		}
	case EventCheckpointed:
		c.checkpointed(tx, rec, node, ev, at)
	case EventExited:
		if len(ev.GateFailed) > 0 && ev.State == spec.StateRequeued {
			c.gateFailed(tx, rec, node, ev, at)
			return
		}
		c.partEnded(tx, rec, node, exitInfo{state: ev.State, code: ev.ExitCode, signal: ev.Signal, reason: ev.Reason, at: at, reported: true})
	default:
		c.log.Warn("unknown node event kind ignored", "node", node, "kind", ev.Kind, "job_id", ev.JobID)
	}
}

// gateFailed ends a part whose GPUs failed the start gate on node: the
// job never ran there, so it is requeued as a hardware requeue (not
// charged as a restart; expedited when it asks), and the GPUs are taken
// out of service with their findings (after the part ended, so that the
// job is not also moved as a running one).
func (c *Controller) gateFailed(tx *txn, rec *jobRec, node string, ev NodeEvent, at time.Time) {
	if rec.job.StopState == "" && !rec.job.State.Terminal() {
		c.hardwareRequeue(rec)
	}
	c.log.Warn("job's GPUs failed the start gate; placing it again", "job_id", rec.job.ID, "node", node, "reason", ev.Reason)
	c.partEnded(tx, rec, node, exitInfo{state: spec.StateRequeued, reason: ev.Reason, at: at})
	if n := c.st.nodes[node]; n != nil {
		for _, p := range ev.GateFailed {
			c.gpuProblem(tx, n, p)
		}
	}
}

// checkpointed stores a sealed checkpoint a node reported as the job's
// newest. A re-sent event (same or older attempt and seq) changes nothing.
func (c *Controller) checkpointed(tx *txn, rec *jobRec, node string, ev NodeEvent, at time.Time) {
	j := &rec.job
	ref := spec.CheckpointRef{Attempt: rec.job.Alloc.Attempt, Seq: ev.CkptSeq, Time: spec.NewTime(at), Bytes: ev.CkptBytes}
	last := j.LastCheckpoint
	if ref.Attempt < last.Attempt || ref.Attempt == last.Attempt && ref.Seq <= last.Seq {
		return
	}
	j.LastCheckpoint = ref
	j.Checkpoints++
	tx.saveJob(rec)
	c.log.Info("job checkpointed", "job_id", j.ID, "node", node, "seq", ref.Seq, "bytes", ref.Bytes)
}

// Nodes lists every node by name.
func (c *Controller) Nodes(ctx context.Context) ([]spec.Node, error) {
	var out []spec.Node
	err := c.query(ctx, func() error {
		out = make([]spec.Node, 0, len(c.st.nodes))
		for _, name := range c.st.nodeNames() {
			out = append(out, c.nodeView(c.st.nodes[name]))
		}
		return nil
	})
	return out, err
}

// Node actions.
const (
	ActionDrain  = "drain"
	ActionResume = "resume"
)

// NodeAction drains or resumes a node (root only). A drained node starts
// no new jobs; its running jobs that take checkpoints (and allow requeue)
// checkpoint and are requeued to continue elsewhere, the others finish.
// Resume also clears DOWN and puts GPUs marked unhealthy back in service.
func (c *Controller) NodeAction(ctx context.Context, who Caller, name, action, reason string) (spec.Node, error) {
	if err := requireRoot(who, action+" of a node"); err != nil {
		return spec.Node{}, err
	}
	var out spec.Node
	err := c.call(ctx, func(tx *txn) error {
		n, err := c.node(name)
		if err != nil {
			return err
		}
		switch action {
		case ActionDrain:
			c.drainNode(tx, n, reason, who)
		case ActionResume:
			c.resumeNode(tx, n, reason, who)
		default:
			return spec.Errorf(spec.ErrInvalid, "unknown node action %q; use drain or resume", action)
		}
		c.log.Info("node "+action, "node", name, "reason", reason)
		tx.saveNode(n)
		tx.kick = true
		out = c.nodeView(n)
		return nil
	})
	return out, err
}

// drainNode drains n: no new jobs; its running jobs that checkpoint (and
// allow requeue) checkpoint and are requeued, the others finish.
func (c *Controller) drainNode(tx *txn, n *nodeRec, reason string, who Caller) {
	name := n.inv.Name
	n.drain = true
	n.drainReason = orDefault(reason, "drained by "+orDefault(who.User, "root"))
	c.moveJobs(tx, n, "node "+name+" drained: "+n.drainReason, true, false, func(spec.NodeAlloc) bool { return true })
	c.nodeEvent(tx, name, spec.NodeEventDrain, n.drainReason, orDefault(who.User, "root"))
}

// resumeNode puts n back in service: it clears drain, DOWN (an admin's
// too) and GPUs marked unhealthy.
func (c *Controller) resumeNode(tx *txn, n *nodeRec, reason string, who Caller) {
	name := n.inv.Name
	n.drain, n.drainReason = false, ""
	n.down, n.downReason = false, ""
	c.clearAdminState(tx, n) // admin.go
	n.lastHB = c.now()
	n.inv.GPUs = slices.Clone(n.inv.GPUs)
	for i := range n.inv.GPUs {
		n.inv.GPUs[i].Health = ""
	}
	n.inv.NICs = slices.Clone(n.inv.NICs)
	for i := range n.inv.NICs {
		n.inv.NICs[i].Health = ""
	}
	tx.bump[name] = true
	c.nodeEvent(tx, name, spec.NodeEventResume, reason, orDefault(who.User, "root"))
}

// Reconfigure reloads the configuration through the reload hook. On
// success the new config applies at once; on error the old one stays.
func (c *Controller) Reconfigure(ctx context.Context, who Caller) (string, error) {
	if err := requireRoot(who, "reconfigure"); err != nil {
		return "", err
	}
	if c.reload == nil {
		return "", spec.Errorf(spec.ErrConflict, "this controller has no configuration file to reload; restart it with --config")
	}
	cfg, err := c.reload()
	if err != nil {
		return "", fmt.Errorf("reload configuration (the old one stays in effect): %w", err)
	}
	return c.ApplyConfig(ctx, cfg)
}

// ApplyConfig makes cfg the running configuration at once: Reconfigure's
// second half, and how an HA member runs the configuration its group
// committed (the caller has checked who may).
func (c *Controller) ApplyConfig(ctx context.Context, cfg Config) (string, error) {
	cfg.normalize()
	var msg string
	err := c.call(ctx, func(tx *txn) error {
		changed := limitChanges(&c.cfg, &cfg)
		c.cfg, c.pol = cfg, cfg.SchedPolicy()
		c.nodeTimeout.Store(int64(cfg.NodeTimeout))
		c.published.Store(&cfg)
		diffs := c.setFilePartitions(tx) // admin.go: scontrol's live changes stay
		c.declareCloudNodes()            // power.go: nodes the new file declares
		c.recheckAccess()
		if n := len(c.st.ineligible); n > 0 {
			changed = append(changed, fmt.Sprintf("%d queued jobs may no longer run as they are (access rules) and wait saying why", n))
		}
		tx.kick = true
		for name := range c.st.nodes {
			tx.bump[name] = true
		}
		msg = fmt.Sprintf("configuration reloaded: %d partitions (%s), %d QOS", len(cfg.Partitions), strings.Join(cfg.partitionNames(), ", "), len(cfg.QOS))
		if len(changed) > 0 {
			msg += "; limits changed: " + strings.Join(changed, "; ")
		}
		if len(diffs) > 0 {
			msg += "; live changes that differ from the configuration file (scontrol update): " + strings.Join(diffs, "; ")
		}
		c.log.Info(msg)
		return nil
	})
	return msg, err
}

// noteHeard notes that a heartbeat of node name arrived now. It runs on
// the caller's goroutine, before the heartbeat waits for the owner loop:
// when the loop is behind (a long cycle or commit on a busy host), the
// heartbeats queued for it still count, and housekeep does not mark DOWN
// every node whose heartbeat is waiting in the queue. gpud loadtest saw
// that: 51 live nodes of 1,000 marked DOWN at the same instant during a
// 100,000-job drain, their jobs ended NODE_FAIL (docs/fleet.md).
//
// The time is kept as an offset from the controller's start on its
// monotonic clock: a step of the wall clock (NTP, a VM resumed) must not
// make every node look silent for the size of the step.
func (c *Controller) noteHeard(name string) *heardRec {
	h := c.heardRec(name)
	h.at.Store(int64(c.now().Sub(c.epoch)) + 1)
	return h
}

// heardRec is what the controller notes of a node's heartbeats off the
// owner loop.
type heardRec struct {
	// at is when the last heartbeat (or registration) arrived: 1 + its
	// offset from Controller.epoch; 0 for never.
	at atomic.Int64
	// up says the owner loop knows the node and it is not DOWN, so a
	// heartbeat need not go through the loop. Only the loop sets it:
	// true when it applies a registration or a heartbeat of a node that
	// is up, false when it marks the node DOWN or reloads its state.
	up atomic.Bool
	// resume says a run this node's silence interrupted may be resumed
	// (Job.Interrupted): its heartbeats go through the loop meanwhile.
	resume atomic.Bool
	// running is the alloc ids of the node's last heartbeat.
	running atomic.Pointer[[]string]
	// images is the node's image inventory; pulling says its last
	// report listed pulls (images.go).
	images  atomic.Pointer[nodeImages]
	pulling atomic.Bool
}

func (c *Controller) heardRec(name string) *heardRec {
	if v, ok := c.heard.Load(name); ok {
		return v.(*heardRec)
	}
	v, _ := c.heard.LoadOrStore(name, new(heardRec))
	return v.(*heardRec)
}

// heardAt is when node name's last heartbeat or registration arrived.
func (c *Controller) heardAt(name string) (time.Time, bool) {
	if v, ok := c.heard.Load(name); ok {
		if at := v.(*heardRec).at.Load(); at != 0 {
			return c.epoch.Add(time.Duration(at - 1)), true
		}
	}
	return time.Time{}, false
}

// lastHeard is the later of applied (the heartbeat the owner loop last
// applied) and the last one that arrived.
func (c *Controller) lastHeard(name string, applied time.Time) time.Time {
	if at, ok := c.heardAt(name); ok && at.After(applied) {
		return at
	}
	return applied
}

// overdue reports whether node n has been silent too long to be up. Only
// silence this controller observed while leading counts: a node it has
// not heard from since it took the lead (a failover, a restart) gets
// FailoverNodeGrace from then, when that is longer than node_timeout, to
// find it (Nomad's failover heartbeat TTL). What a node did before
// proves nothing: the agents were talking to the old leader, or to
// nobody while there was none. A node heard since is judged by
// node_timeout from its last heartbeat.
func (c *Controller) overdue(name string, n *nodeRec, now time.Time) (late, down bool) {
	last, heard := n.lastHB, false
	if at, ok := c.heardAt(name); ok {
		heard = !at.Before(c.leadSince)
		if at.After(last) {
			last = at
		}
	}
	limit := c.cfg.NodeTimeout
	if !heard {
		limit = max(limit, c.cfg.FailoverNodeGrace)
	}
	silent := now.Sub(last)
	return silent > c.lateAfter(), silent > limit
}

// lateAfter is how long a silent node still gets new jobs: two missed
// heartbeats (at least a third of node_timeout). Past it the node is
// not responding (UNKNOWN) until it answers: jobs placed on a node
// behind a cut link would start on their other nodes only.
func (c *Controller) lateAfter() time.Duration {
	return max(2*c.cfg.HeartbeatInterval, c.cfg.NodeTimeout/3)
}

// housekeep runs on every tick: it marks silent nodes DOWN (failing or
// requeuing their jobs) and flags the periodic scheduling cycle.
func (c *Controller) housekeep(ctx context.Context) {
	tx := newTxn()
	err := c.safely("housekeeping", func() error {
		now := c.now()
		for _, name := range c.st.nodeNames() {
			n := c.st.nodes[name]
			if n.down || c.powerOff(name) {
				continue // a powered-down node is silent by design (power.go)
			}
			switch late, down := c.overdue(name, n, now); {
			case down:
				n.late = false
				c.markDown(tx, n, reasonNotResponding, now)
			case late && !n.late:
				// No new work for it; its next heartbeat goes
				// through the owner loop, to bring it back.
				n.late = true
				c.heardRec(name).up.Store(false)
				c.sched.dirty, c.sched.full = true, true
				c.log.Warn("node not responding; no new jobs for it until it answers", "node", name, "silent_for", now.Sub(c.lastHeard(name, n.lastHB)).Round(time.Millisecond))
			}
		}
		c.powerTick(tx, now) // power.go
		if now.Sub(c.sched.lastPeriodic) >= c.cfg.SchedInterval {
			c.sched.lastPeriodic = now
			c.runs.prune(func(key string) bool {
				id, _, _ := strings.Cut(strings.TrimPrefix(key, "job:"), ".")
				jid, err := strconv.ParseUint(id, 10, 64)
				rec := c.st.jobs[spec.JobID(jid)]
				return err == nil && rec != nil && !rec.job.State.Terminal()
			})
			// The periodic full cycle revisits pending jobs (begin
			// times, fairshare, backfill); with none there is nothing
			// to decide, and its snapshot of every node was a fifth of
			// an idle 10,000-node controller's CPU (gpud loadtest).
			// Any change that can make a job pending runs its own cycle.
			if len(c.st.pending) > 0 {
				c.sched.dirty, c.sched.full = true, true
			}
			// Reservations' new occurrences reach accounting without a
			// cycle too (none runs with nothing pending).
			for _, name := range sortedKeys(c.admin.resvs) {
				c.noteResv(tx, c.admin.resvs[name], now)
			}
		}
		return nil
	})
	if err == nil {
		_ = c.commit(ctx, tx) // logged by commit; the next tick retries
	}
}

// markDown takes a node out of service and ends its parts of every job:
// NODE_FAIL, or back to the queue for jobs that allow requeue.
func (c *Controller) markDown(tx *txn, n *nodeRec, reason string, now time.Time) {
	c.log.Warn("node down", "node", n.inv.Name, "reason", reason, "jobs", len(n.allocs))
	n.down, n.downReason = true, reason
	c.heardRec(n.inv.Name).up.Store(false) // its next heartbeat goes through the loop, to bring it back
	c.nodeEvent(tx, n.inv.Name, spec.NodeEventDown, reason, "gpud")
	tx.saveNode(n)
	tx.bump[n.inv.Name] = true
	for _, allocID := range slices.Sorted(maps.Keys(n.allocs)) {
		rec := c.st.jobs[n.allocs[allocID]]
		if rec == nil {
			delete(n.allocs, allocID)
			continue
		}
		var run *spec.InterruptedRun
		if reason == reasonNotResponding {
			run = c.interruptible(rec, n.inv.Name)
			rec.silentParts = append(rec.silentParts, n.inv.Name)
		}
		c.partEnded(tx, rec, n.inv.Name, exitInfo{state: spec.StateNodeFail, reason: "node " + n.inv.Name + " " + reason, at: now, nodeFail: true})
		if run != nil && rec.job.State == spec.StatePending {
			run.At = spec.NewTime(now)
			rec.job.Interrupted = run
			c.keptRun(&rec.job) // endedusage.go
			c.st.interrupted[run.Alloc.ID] = rec.job.ID
			for _, p := range run.Alloc.Nodes {
				c.heardRec(p.Node).resume.Store(true)
			}
			tx.saveJob(rec)
			c.log.Info("job's run interrupted by node silence; it resumes if the node comes back with it before the job starts again",
				"job_id", rec.job.ID, "alloc_id", run.Alloc.ID, "node", n.inv.Name)
		}
	}
}

// PartitionView is a partition as clients see it: its configuration and
// its member nodes registered now.
type PartitionView struct {
	Name        string
	Default     bool
	State       string
	DefaultTime time.Duration
	MaxTime     time.Duration
	Members     []string
}

// Partitions lists the partitions who sees (a hidden partition who may
// not use is left out: access.go) in configuration order, each with its
// registered member nodes by name.
func (c *Controller) Partitions(ctx context.Context, who Caller) ([]PartitionView, error) {
	var out []PartitionView
	err := c.query(ctx, func() error {
		for _, p := range c.cfg.Partitions {
			if !c.cfg.partitionVisible(&p, who) {
				continue // hidden from who (access.go)
			}
			v := PartitionView{Name: p.Name, Default: p.Default, State: strings.ToUpper(cmp.Or(p.State, PartitionUp)),
				DefaultTime: p.DefaultTime, MaxTime: p.MaxTime, Members: []string{}}
			for _, name := range c.st.nodeNames() {
				if len(p.Nodes) == 0 || slices.Contains(p.Nodes, name) {
					v.Members = append(v.Members, name)
				}
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// ConfigView returns a copy of the accounting part of the configuration
// (accounts, QOS, defaults) as it is now, for read-only listings
// (sacctmgr).
func (c *Controller) ConfigView(ctx context.Context) (Config, error) {
	var out Config
	err := c.query(ctx, func() error {
		out = Config{DefaultAccount: c.cfg.DefaultAccount, DefaultQOS: c.cfg.DefaultQOS,
			Accounts: slices.Clone(c.cfg.Accounts), QOS: slices.Clone(c.cfg.QOS)}
		return nil
	})
	return out, err
}
