package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/priority"
)

// FromConfig maps a gpud.toml, loaded and validated by gpud/config (the
// one validation of a configuration file), onto the controller's Config.
// The policy the scheduler sees then comes from Config.SchedPolicy, the
// one mapping onto gpud/sched that the controller's cycles and
// gpud simulate --policy sched share.
func FromConfig(c config.Controller) (Config, error) {
	cc := Config{
		DefaultQOS:        c.DefaultQOS,
		DefaultAccount:    c.DefaultAccount,
		NodeTimeout:       c.Controller.NodeTimeout.Std(),
		FailoverNodeGrace: failoverNodeGrace(c.Controller.FailoverNodeGrace.Std()),
		HeartbeatInterval: c.Controller.HeartbeatInterval.Std(),
		SchedInterval:     c.Scheduler.Interval.Std(),
		AllowRootJobs:     c.Controller.AllowRootJobs,
		MPIDefault:        c.Controller.MPIDefault,
		ClusterName:       c.Auth.ClusterName,
		MinJobAge:         c.Controller.MinJobAge.Std(),
		BackfillWindow:    c.Scheduler.BackfillWindow.Std(),
		Priority: PriorityWeights{
			Age:       c.Scheduler.Priority.WeightAge,
			Fairshare: c.Scheduler.Priority.WeightFairshare,
			JobSize:   c.Scheduler.Priority.WeightJobSize,
			Partition: c.Scheduler.Priority.WeightPartition,
			QOS:       c.Scheduler.Priority.WeightQOS,
			MaxAge:    c.Scheduler.Priority.MaxAge.Std(),
		},
		MaxStartsPerCycle: c.Scheduler.MaxJobsPerCycle,
		BackfillDepth:     c.Scheduler.BackfillDepth,
		PreemptMinRuntime: c.Scheduler.PreemptMinRuntime.Std(),
		CheckpointGrace:   c.Scheduler.CheckpointGrace.Std(),
		SecretEnv:         c.Auth.SecretEnv,
		Privacy:           Privacy(c.Privacy),

		MaxSubmitBytes:        c.Limits.MaxSubmitBytes(),
		MaxSubmitJobsPerUser:  c.Limits.MaxSubmitJobsPerUser,
		MaxSubmitBytesPerUser: c.Limits.MaxSubmitBytesPerUser(),
		Power:                 powerFromConfig(c.Power),
	}
	for _, p := range c.Partitions {
		nodes := p.Nodes
		if slices.Contains(nodes, config.AllNodes) {
			nodes = nil
		}
		place, err := sched.ParsePlacement(p.Placement)
		if err != nil {
			// config.Placements and sched.Placements agree (a test checks),
			// so a validated file never gets here.
			return Config{}, fmt.Errorf("[[partition]] %q placement: %w", p.Name, err)
		}
		cc.Partitions = append(cc.Partitions, Partition{
			Name:            p.Name,
			Nodes:           nodes,
			Default:         p.Default,
			DefaultTime:     p.DefaultTime.Std(),
			MaxTime:         p.MaxTime.Std(),
			PriorityTier:    p.PriorityTier,
			State:           p.State,
			RequeueExpedite: p.RequeueExpedite,
			StartGate:       p.StartGate,
			Placement:       place,
			Idle:            idleFromConfig(p.IdlePolicy),

			AllowAccounts: p.AllowAccounts,
			DenyAccounts:  p.DenyAccounts,
			AllowGroups:   p.AllowGroups,
			AllowQOS:      p.AllowQOS,
			DenyQOS:       p.DenyQOS,
			Hidden:        p.Hidden,
		})
	}
	cc.FairshareHalfLife = c.Fairshare.DecayHalfLife.Std()
	cc.FairshareModelWeights = c.Fairshare.GPUModelWeights
	for _, a := range c.Accounts {
		cc.Accounts = append(cc.Accounts, Account{Name: a.Name, Parent: a.Parent, Shares: a.Shares, Users: a.Users,
			Coordinators: a.Coordinators, AllowQOS: a.AllowQOS, MaxGPUs: a.MaxGPUs, MaxJobs: a.MaxJobs, MaxSubmitJobs: a.MaxSubmitJobs,
			MaxWall: a.MaxWall.Std(), MaxGPUHours: a.MaxGPUHours, BudgetPeriod: a.Budget(), MaxSubmitJobsPerUser: a.MaxSubmitJobsPerUser})
	}
	for _, q := range c.QOS {
		cc.QOS = append(cc.QOS, QOS{
			Name:           q.Name,
			Priority:       int(q.Priority),
			Preempt:        q.Preempt,
			PreemptMode:    q.PreemptMode,
			MaxGPUsPerUser: q.MaxGPUsPerUser,
			MaxJobsPerUser: q.MaxJobsPerUser,
			MaxWall:        q.MaxWall.Std(),
			Idle:           idleFromConfig(q.IdlePolicy),

			MaxSubmitJobsPerUser: q.MaxSubmitJobsPerUser,
		})
	}
	cc.normalize()
	return cc, nil
}

func idleFromConfig(p config.IdlePolicy) IdlePolicy {
	return IdlePolicy{GPUUtil: p.IdleGPUUtil, After: p.IdleAfter.Std(), Action: p.IdleAction,
		Hook: strings.Fields(p.IdleHook)}
}

// SchedPolicy is a Config's scheduling policy in gpud/sched's terms.
type SchedPolicy struct {
	// Config is what every cycle passes to sched.
	Config sched.Config
	// QOS and Partitions are the tables every snapshot carries (shared:
	// sched only reads them).
	QOS        []sched.QOS
	Partitions []sched.Partition
	// JobQOS and JobPartition are those of a job that names none, and
	// JobPriority its base priority there (sched.Job.Priority, which
	// orders jobs when every multifactor weight is 0).
	JobQOS, JobPartition string
	JobPriority          int64
}

// SchedPolicy maps c onto gpud/sched. It is the only such mapping: the
// controller's cycles and gpud simulate --policy sched both use it, so a
// simulation runs the policy the controller would run.
func (c *Config) SchedPolicy() SchedPolicy {
	p := SchedPolicy{
		Config: sched.Config{
			MaxStartsPerCycle: c.MaxStartsPerCycle,
			BackfillDepth:     max(c.BackfillDepth, 0),
			BackfillWindow:    c.BackfillWindow,
			PreemptMinRuntime: c.PreemptMinRuntime,
			CheckpointGrace:   c.CheckpointGrace,
		},
		JobQOS:      c.DefaultQOS,
		JobPriority: c.basePriority(c.DefaultQOS, 0),
	}
	if w := c.Priority; w.Age != 0 || w.Fairshare != 0 || w.JobSize != 0 || w.Partition != 0 || w.QOS != 0 {
		// Nice weighs 2×maxNice so it moves the total by exactly one point
		// per unit of nice, as Slurm subtracts nice from the priority.
		p.Config.Priority = priority.Config{
			Weights: priority.Weights{Age: float64(w.Age), Fairshare: float64(w.Fairshare), JobSize: float64(w.JobSize),
				Partition: float64(w.Partition), QOS: float64(w.QOS), Nice: 2 * maxNice},
			MaxAge:  w.MaxAge,
			MaxNice: maxNice,
		}
	}
	for _, q := range c.QOS {
		sq := sched.QOS{Name: q.Name, Priority: int64(q.Priority), MaxGPUsPerUser: q.MaxGPUsPerUser,
			MaxJobsPerUser: q.MaxJobsPerUser, MaxWall: q.MaxWall}
		if q.PreemptMode != PreemptOff && len(q.Preempt) > 0 {
			sq.Preempt, sq.PreemptMode = q.Preempt, q.PreemptMode
		}
		p.QOS = append(p.QOS, sq)
	}
	for _, part := range c.Partitions {
		p.Partitions = append(p.Partitions, sched.Partition{Name: part.Name, Tier: part.PriorityTier, MaxTime: part.MaxTime,
			Placement: part.Placement})
	}
	if d := c.defaultPartition(); d != nil {
		p.JobPartition = d.Name
	}
	return p
}

// basePriority is a job's Priority in QOS qos with nice: QOS priority
// first, then nice (documented in README).
func (c *Config) basePriority(qos string, nice int) int64 {
	q, _ := c.qos(qos)
	return int64(q.Priority)*qosWeight - int64(nice)
}

// failoverNodeGrace maps failover_node_grace: "0s" asks for node_timeout
// alone, which Config spells as a negative grace (its zero is the
// default).
func failoverNodeGrace(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// powerFromConfig maps [power] (validated) onto PowerConfig.
func powerFromConfig(p config.Power) PowerConfig {
	pc := PowerConfig{
		ResumeProgram:  strings.Fields(p.ResumeProgram),
		SuspendProgram: strings.Fields(p.SuspendProgram),
		SuspendTime:    p.SuspendTime.Std(),
		ResumeTimeout:  p.ResumeTimeout.Std(),
		SuspendTimeout: p.SuspendTimeout.Std(),
		ResumeRate:     p.ResumeRate,
		SuspendRate:    p.SuspendRate,
		ExcNodes:       p.ExcludedNodes(),
		ExcParts:       slices.Clone(p.SuspendExcParts),
		User:           p.ProgramUser,
	}
	for _, d := range p.Nodes {
		for _, name := range d.ExpandNames() {
			pc.Nodes = append(pc.Nodes, CloudNode{Name: name, CPUs: d.CPUs, MemMiB: d.MemMiB(), GPUs: d.GPUs,
				GPUModel: d.GPUModel, Features: slices.Clone(d.Features)})
		}
	}
	return pc
}
