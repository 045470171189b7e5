package sched

import (
	"maps"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// Power saving (Slurm's power_save and CLOUD nodes). A node that is not
// powered on runs nothing (the "power" filter), so Schedule never starts
// a job there. PlanPower is the second half: it plans the pending jobs as
// if every powered-down node and every node already powering up were on
// and idle, and the jobs that this places on such nodes say which nodes to
// power up (and which jobs wait for them). It also picks the powered-on
// nodes idle for SuspendTime to power down. Power states are input and
// decisions are output; the controller runs the site's programs, times
// them out and keeps the states.

// PowerConfig tunes PlanPower.
type PowerConfig struct {
	// SuspendTime is how long a powered-on node must stay idle before it
	// is powered down; 0 powers nothing down.
	SuspendTime time.Duration
	// Exempt are nodes never powered down (Slurm's SuspendExcNodes and
	// the nodes of SuspendExcParts).
	Exempt []string
	// MaxResume and MaxSuspend bound the nodes this call may power up or
	// down (what is left of ResumeRate and SuspendRate); < 0 means no
	// bound.
	MaxResume, MaxSuspend int
}

// PowerPlan is what PlanPower decided.
type PowerPlan struct {
	// Resume are the powered-down nodes to power up now, by name.
	Resume []string
	// Suspend are the idle powered-on nodes to power down now.
	Suspend []string
	// Waiting are the pending jobs planned on nodes that are powering up
	// (or that Resume powers up), with those nodes.
	Waiting []PowerWait
}

// PowerWait is a pending job that waits for nodes to power up.
type PowerWait struct {
	JobID spec.JobID
	// Nodes are all of the job's planned nodes; Coming those of them
	// that are not on yet.
	Nodes, Coming []string
}

// PlanPower decides which nodes to power up for the pending jobs of snap
// and which idle nodes to power down at now. snap is the cluster after
// the last scheduling cycle (its starts applied): a pending job that a
// powered-on node can hold is the scheduler's to start, not a reason to
// power anything up.
func PlanPower(snap *Snapshot, now time.Time, cfg Config, pc PowerConfig) PowerPlan {
	var plan PowerPlan
	coming := map[string]spec.PowerState{}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if (n.Power == spec.PoweredDown || n.Power == spec.PoweringUp) && n.State == spec.NodeIdle {
			coming[n.Name] = n.Power
		}
	}
	// Nodes some waiting job needs stay on, even idle.
	needed := map[string]bool{}
	if len(coming) > 0 && len(snap.Jobs) > 0 {
		hyp := *snap
		hyp.Nodes = make([]Node, len(snap.Nodes))
		for i, n := range snap.Nodes {
			if _, ok := coming[n.Name]; ok {
				n = upNode(n)
			}
			hyp.Nodes[i] = n
		}
		hcfg := cfg
		hcfg.MaxStartsPerCycle = 0
		resume := map[string]bool{}
		budget := pc.MaxResume
		for _, s := range Schedule(&hyp, now, hcfg).Starts {
			var names, up, down []string
			for _, a := range s.Nodes {
				names = append(names, a.Node)
				switch coming[a.Node] {
				case spec.PoweringUp:
					up = append(up, a.Node)
				case spec.PoweredDown:
					if !resume[a.Node] {
						down = append(down, a.Node)
					}
				}
			}
			if len(up)+len(down) == 0 {
				continue // it fits on nodes that are on: the scheduler's
			}
			if budget >= 0 && len(down) > budget {
				continue // all of a job's nodes or none: a partial power-up idles
			}
			if budget >= 0 {
				budget -= len(down)
			}
			for _, d := range down {
				resume[d] = true
			}
			for _, n := range names {
				needed[n] = true
			}
			plan.Waiting = append(plan.Waiting, PowerWait{JobID: s.JobID, Nodes: names, Coming: append(up, down...)})
		}
		plan.Resume = slices.Sorted(maps.Keys(resume))
	}
	if pc.SuspendTime > 0 {
		budget := pc.MaxSuspend
		for i := range snap.Nodes {
			n := &snap.Nodes[i]
			if budget == 0 {
				break
			}
			if n.Power != spec.PowerOn || n.State != spec.NodeIdle || n.Allocs > 0 || n.IdleSince.IsZero() ||
				now.Sub(n.IdleSince) < pc.SuspendTime || needed[n.Name] || slices.Contains(pc.Exempt, n.Name) {
				continue
			}
			plan.Suspend = append(plan.Suspend, n.Name)
			budget--
		}
		slices.Sort(plan.Suspend)
	}
	return plan
}

// upNode is n as it will be once powered up: on and idle, everything
// free (a powered-down node runs nothing).
func upNode(n Node) Node {
	n.Power = spec.PowerOn
	n.FreeCPUs, n.FreeMemMiB, n.Allocs = n.CPUs, n.MemMiB, 0
	n.GPUs = slices.Clone(n.GPUs)
	for k := range n.GPUs {
		g := &n.GPUs[k]
		if g.Profile == "" {
			g.Free, g.FreeFraction = true, 1
		}
	}
	return n
}
