package controller

import (
	"context"
	"slices"
	"time"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/sched/fairshare"
	"github.com/gpud/gpud/gpud/sched/priority"
	"github.com/gpud/gpud/gpud/spec"
)

// JobPriority is one pending job's priority and every factor of it
// (gpuq prio), with what identifies the job to a reader.
type JobPriority struct {
	JobID     spec.JobID
	User      string
	Account   string
	Partition string
	QOS       string
	Nice      int
	priority.Result
}

// Priorities computes the priority of every pending job the scheduler
// would consider now, in the order it would consider them (highest
// first), from the same snapshot a cycle builds. Array tasks held back by
// their array's %MAX limit are not in the snapshot and so not listed.
// With every multifactor weight zero, Total is the plain job priority and
// the factors are zero.
func (c *Controller) Priorities(ctx context.Context) ([]JobPriority, error) {
	var out []JobPriority
	err := c.query(ctx, func() error {
		// snapshot updates the scheduler's bookkeeping for the apply that
		// follows it in a cycle; a query must leave it as it was.
		saved := c.sched
		saved.arrayLimited = slices.Clone(c.sched.arrayLimited)
		saved.active = slices.Clone(c.sched.active)
		defer func() { c.sched = saved }()
		now := c.now()
		snap := c.snapshot(now)
		jobs := make(map[spec.JobID]*sched.Job, len(snap.Jobs))
		for i := range snap.Jobs {
			jobs[snap.Jobs[i].ID] = &snap.Jobs[i]
		}
		prios := sched.Priorities(snap, now, c.schedConfig())
		out = make([]JobPriority, 0, len(prios))
		for _, p := range prios {
			jp := JobPriority{JobID: p.JobID, Result: p.Result}
			if rec := c.st.jobs[p.JobID]; rec != nil {
				j := &rec.job
				jp.User, jp.Account, jp.Partition, jp.QOS, jp.Nice = j.User, j.Account, j.Partition, j.QOS, j.Nice
			} else if j := jobs[p.JobID]; j != nil {
				jp.User, jp.Account, jp.Partition, jp.QOS, jp.Nice = j.User, j.Account, j.Partition, j.QOS, j.Nice
			}
			out = append(out, jp)
		}
		return nil
	})
	return out, err
}

// Fairshare computes the fairshare report (gpuq share) now: the
// configured accounts and their users with shares, raw and decayed usage
// and the Fair Tree factor. Usage is every ended attempt in accounting
// (without accounting: every attempt the controller saw end, endedUsage)
// plus the jobs running now (see fairshareUsage).
func (c *Controller) Fairshare(ctx context.Context) (*fairshare.Report, error) {
	var rep *fairshare.Report
	err := c.query(ctx, func() error {
		rep = c.fairshareReport(c.now())
		return nil
	})
	return rep, err
}

// fairshareConfig is the billing and decay policy.
func (c *Controller) fairshareConfig() fairshare.Config {
	return fairshare.Config{HalfLife: max(c.cfg.FairshareHalfLife, 0), ModelWeights: c.cfg.FairshareModelWeights}
}

// fairshareReport builds the report from the account tree, the ended
// usage (the feed's, or without a feed the controller's own: endedUsage)
// and the jobs running now.
func (c *Controller) fairshareReport(now time.Time) *fairshare.Report {
	var past []fairshare.Past
	usage := c.fairshareUsage()
	if c.feed != nil {
		var covered uint64
		past, covered = c.feed.past()
		usage = c.unfedSince(covered, usage)
		usage = append(usage, c.batchEnded...)
		slices.SortFunc(usage, func(a, b fairshare.Usage) int { return a.Start.Compare(b.Start) })
	} else {
		past = c.endedPast()
	}
	return fairshare.ComputeWithPast(c.fairshareTree(past, usage), past, usage, now, c.fairshareConfig())
}

// fairshareTree maps the configured accounts onto the fairshare tree,
// sub-accounts under their parents. Users listed in an account have one share
// each; so does any other user with usage or a pending job in it (users
// of the default account are usually listed nowhere).
func (c *Controller) fairshareTree(past []fairshare.Past, usage []fairshare.Usage) *fairshare.Tree {
	base := c.cfg.fairshareAccounts()
	t := &base
	idx := make(map[string]int, len(t.Accounts))
	seen := map[[2]string]bool{}
	for i, a := range t.Accounts {
		idx[a.Name] = i
		for _, u := range a.Users {
			seen[[2]string{a.Name, u.Name}] = true
		}
	}
	add := func(account, user string) {
		i, ok := idx[account]
		if !ok || user == "" || seen[[2]string{account, user}] {
			return
		}
		seen[[2]string{account, user}] = true
		t.Accounts[i].Users = append(t.Accounts[i].Users, fairshare.User{Name: user, Shares: 1})
	}
	for i := range past {
		add(past[i].Account, past[i].User)
	}
	for i := range usage {
		add(usage[i].Account, usage[i].User)
	}
	var lastAccount, lastUser string
	for _, rec := range c.st.pending {
		// Pending jobs come mostly in runs of one user's (their strings
		// shared, state.share): a pair just added costs a comparison, not
		// a map lookup hashing both strings (5 % of the controller's CPU
		// with 100,000 jobs queued, gpud loadtest's profile).
		if rec.job.Account == lastAccount && rec.job.User == lastUser {
			continue
		}
		lastAccount, lastUser = rec.job.Account, rec.job.User
		add(lastAccount, lastUser)
	}
	for i := range t.Accounts {
		slices.SortStableFunc(t.Accounts[i].Users, func(a, b fairshare.User) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
	}
	return t
}

// fairshareUsage is the GPU usage of the current attempt of every job
// holding resources now, from its start to now, found through the nodes'
// allocations; ended attempts are billed elsewhere (the feed's totals,
// or endedUsage). GPUs count as accounting bills them: a MIG slice by
// its profile's fraction, a share by its fraction, the model the node
// reported for the device.
func (c *Controller) fairshareUsage() []fairshare.Usage {
	var ids []spec.JobID
	for _, n := range c.st.nodes {
		for _, id := range n.allocs {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var out []fairshare.Usage
	for _, id := range ids {
		rec := c.st.jobs[id]
		if rec == nil {
			continue
		}
		j := &rec.job
		if j.StartTime.IsZero() || j.Alloc == nil || j.State == spec.StatePending || j.State.Terminal() {
			continue
		}
		u, ok := attemptUsage(j)
		if !ok {
			continue
		}
		for _, n := range j.Alloc.Nodes {
			if m := c.gpuModel(n.Node, n.GPUs); m != "" {
				u.Model = m
			}
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b fairshare.Usage) int { return a.Start.Compare(b.Start) })
	return out
}

// attemptUsage is the fairshare usage of j's current attempt (started,
// with an allocation; End set when it ended), with the model it asked
// for; false when it bills nothing.
func attemptUsage(j *spec.Job) (fairshare.Usage, bool) {
	if j.StartTime.IsZero() || j.Alloc == nil {
		return fairshare.Usage{}, false
	}
	u := fairshare.Usage{Account: j.Account, User: j.User, Start: j.StartTime.Time,
		Model: j.Resources.GPUModel, Profile: j.Resources.GPUProfile}
	if j.State.Terminal() {
		u.End = j.EndTime.Time
		if u.End.IsZero() {
			return fairshare.Usage{}, false
		}
	}
	for _, n := range j.Alloc.Nodes {
		if n.GPUFraction > 0 {
			u.Fraction += n.GPUFraction
		} else {
			u.GPUs += float64(len(n.GPUs))
		}
	}
	return u, u.GPUs > 0 || u.Fraction > 0
}

// gpuModel is the model node reported for the first of uuids ("" if
// unknown).
func (c *Controller) gpuModel(node string, uuids []string) string {
	n := c.st.nodes[node]
	if n == nil || len(uuids) == 0 {
		return ""
	}
	for _, g := range n.inv.GPUs {
		if g.UUID == uuids[0] {
			return g.Model
		}
	}
	return ""
}
