package controller

import (
	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
)

// ReplayPolicy is what a replay of the site's accounting (gpud simulate
// --from-accounting, gpud/sim's twin) needs of c besides SchedPolicy:
// the same mappings the controller's cycles use, so the replay runs the
// policy the controller would.
type ReplayPolicy struct {
	SchedPolicy
	// BasePriority is a job's sched.Job.Priority in a QOS with a nice.
	BasePriority func(qos string, nice int) int64
	// PartitionsOf lists the partitions node name belongs to.
	PartitionsOf func(node string) []string
	// DownPartitions start no job (DOWN, INACTIVE).
	DownPartitions []string
	// Accounts is the configured fairshare tree (listed users, one share
	// each); nil when the snapshot carries no fairshare (weight 0 or no
	// account configured). Fairshare is the billing and decay policy.
	Accounts  *fairshare.Tree
	Fairshare fairshare.Config
	// AccountLimits are the [[account]] limits (a GPU-hour budget's use
	// is the replay's to count: UsedGPUHours is 0).
	AccountLimits []sched.AccountLimit
}

// ReplayPolicy maps c for a replay.
func (c *Config) ReplayPolicy() ReplayPolicy {
	p := ReplayPolicy{SchedPolicy: c.SchedPolicy(), BasePriority: c.basePriority, PartitionsOf: c.partitionsOf,
		Fairshare: fairshare.Config{HalfLife: max(c.FairshareHalfLife, 0), ModelWeights: c.FairshareModelWeights}}
	for _, part := range c.Partitions {
		if part.State == PartitionDown || part.State == PartitionInactive {
			p.DownPartitions = append(p.DownPartitions, part.Name)
		}
	}
	if c.Priority.Fairshare != 0 && len(c.Accounts) > 0 {
		t := c.fairshareAccounts()
		p.Accounts = &t
	}
	for i := range c.Accounts {
		a := &c.Accounts[i]
		if a.MaxGPUs != 0 || a.MaxJobs != 0 || a.MaxWall != 0 || a.MaxGPUHours != 0 {
			p.AccountLimits = append(p.AccountLimits, sched.AccountLimit{Account: a.Name, MaxGPUs: a.MaxGPUs, MaxJobs: a.MaxJobs,
				MaxWall: a.MaxWall, MaxGPUHours: a.MaxGPUHours})
		}
	}
	return p
}

// fairshareAccounts is the configured account tree: sub-accounts under
// their parents, the users listed in each with one share.
func (c *Config) fairshareAccounts() fairshare.Tree {
	t := fairshare.Tree{Accounts: make([]fairshare.Account, 0, len(c.Accounts))}
	idx := make(map[string]bool, len(c.Accounts))
	for _, a := range c.Accounts {
		if idx[a.Name] {
			continue
		}
		idx[a.Name] = true
		fa := fairshare.Account{Name: a.Name, Parent: a.Parent, Shares: float64(max(a.Shares, 1))}
		seen := map[string]bool{}
		for _, u := range a.Users {
			if !seen[u] {
				seen[u] = true
				fa.Users = append(fa.Users, fairshare.User{Name: u, Shares: 1})
			}
		}
		t.Accounts = append(t.Accounts, fa)
	}
	return t
}
