package controller

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/sched"
	"github.com/gpud/gpud/gpud/spec"
)

// SetBudgetUsage replaces the GPU-hours each account has used over its
// budget period (Account.BudgetPeriod). The controller does no I/O for
// it: the daemon queries accounting and calls this periodically. Safe
// from any goroutine; accounts not in used count as 0.
func (c *Controller) SetBudgetUsage(used map[string]float64) {
	m := maps.Clone(used)
	c.budget.Store(&m)
}

func (c *Controller) budgetUsed(account string) float64 {
	if m := c.budget.Load(); m != nil {
		return (*m)[account]
	}
	return 0
}

// checkAccountLimits refuses a submission of n jobs like j that breaks a
// limit of its account checked at submit: max wall, max submitted jobs,
// and a spent (or too small) GPU-hour budget. Running-GPU and
// running-job limits are left to the scheduler (AccountLimit).
func (c *Controller) checkAccountLimits(j *spec.Job, n int) error {
	a := c.cfg.account(j.Account)
	if a == nil || !a.limited() {
		return nil
	}
	tl := j.TimeLimit.Std()
	if a.MaxWall > 0 && (tl == 0 || tl > a.MaxWall) {
		asked := "UNLIMITED"
		if tl > 0 {
			asked = fmtDur(tl)
		}
		return spec.Errorf(spec.ErrRefused, "--time=%s exceeds account %s's max_wall of %s; ask for at most %s", asked, a.Name, fmtDur(a.MaxWall), fmtDur(a.MaxWall))
	}
	if a.MaxSubmitJobs > 0 {
		queued := 0
		for _, rec := range c.st.jobs {
			if rec.job.Account == a.Name && !rec.job.State.Terminal() {
				queued++
			}
		}
		if queued+n > a.MaxSubmitJobs {
			return spec.Errorf(spec.ErrRefused, "account %s has %d jobs pending or running and its max_submit_jobs is %d (this submission adds %d); wait for some to end or cancel some", a.Name, queued, a.MaxSubmitJobs, n)
		}
	}
	if a.MaxGPUHours > 0 {
		used := c.budgetUsed(a.Name)
		gpus := float64(max(j.Resources.Nodes, 1) * j.Resources.GPUsPerNode)
		if f := j.Resources.GPUFraction; f > 0 && f < 1 {
			gpus = 1
		}
		switch {
		case gpus == 0:
		case used >= a.MaxGPUHours:
			return spec.Errorf(spec.ErrRefused, "account %s has used %.1f GPU-hours of its max_gpu_hours budget of %g in the last %s; no GPU jobs until usage falls out of the window or an admin raises the budget", a.Name, used, a.MaxGPUHours, budgetWindow(a))
		case tl > 0 && gpus*tl.Hours() > a.MaxGPUHours:
			return spec.Errorf(spec.ErrRefused, "the job may use %.1f GPU-hours (%g GPUs × %s), more than account %s's whole max_gpu_hours budget of %g; ask for fewer GPUs or a shorter --time", gpus*tl.Hours(), gpus, fmtDur(tl), a.Name, a.MaxGPUHours)
		}
	}
	return nil
}

func budgetWindow(a *Account) string {
	if a.BudgetPeriod == 0 {
		return "(all history)"
	}
	return fmtDur(a.BudgetPeriod)
}

// accountLimits is the scheduler's view of the configured account limits.
func (c *Controller) accountLimits() []sched.AccountLimit {
	var out []sched.AccountLimit
	for i := range c.cfg.Accounts {
		a := &c.cfg.Accounts[i]
		if a.MaxGPUs == 0 && a.MaxJobs == 0 && a.MaxWall == 0 && a.MaxGPUHours == 0 {
			continue
		}
		out = append(out, sched.AccountLimit{Account: a.Name, MaxGPUs: a.MaxGPUs, MaxJobs: a.MaxJobs, MaxWall: a.MaxWall,
			MaxGPUHours: a.MaxGPUHours, UsedGPUHours: c.budgetUsed(a.Name)})
	}
	return out
}

// checkAccountAccess refuses a submission charged to an account that does
// not exist, or to one whose users list leaves who out (an account with
// no users list is open to all, like the default one). root and the
// account's coordinators may charge it. Without configured accounts there
// is nothing to check.
func (c *Controller) checkAccountAccess(who Caller, account string) error {
	if len(c.cfg.Accounts) == 0 || account == "" {
		return nil
	}
	a := c.cfg.account(account)
	if a == nil {
		names := make([]string, 0, len(c.cfg.Accounts))
		for _, x := range c.cfg.Accounts {
			names = append(names, x.Name)
		}
		return spec.Errorf(spec.ErrInvalid, "account %q does not exist; choose one of: %s", account, strings.Join(names, ", "))
	}
	if len(a.Users) == 0 || who.UID == 0 || slices.Contains(a.Users, who.User) || slices.Contains(a.Coordinators, who.User) {
		return nil
	}
	return spec.Errorf(spec.ErrPermissionDenied, "user %s may not charge account %s (its users: %s); submit with another -A/--account or ask an admin to add you to its users in gpud.toml",
		orDefault(who.User, fmt.Sprint(who.UID)), a.Name, strings.Join(a.Users, ", "))
}

// coordinates says whether user coordinates account.
func (c *Config) coordinates(user, account string) bool {
	a := c.account(account)
	return a != nil && user != "" && slices.Contains(a.Coordinators, user)
}

// limitChanges describes how the limits differ between old and new (for
// the reload message and so the audit log): one clause per changed key.
func limitChanges(old, new *Config) []string {
	var out []string
	type kv = map[string]string
	lim := func(c *Config) map[string]kv {
		m := map[string]kv{}
		for _, a := range c.Accounts {
			m["account "+a.Name] = kv{"max_gpus": fmt.Sprint(a.MaxGPUs), "max_jobs": fmt.Sprint(a.MaxJobs),
				"max_submit_jobs": fmt.Sprint(a.MaxSubmitJobs), "max_wall": fmtDur(a.MaxWall),
				"max_gpu_hours": fmt.Sprint(a.MaxGPUHours), "budget_period": fmtDur(a.BudgetPeriod),
				"coordinators": strings.Join(a.Coordinators, ",")}
		}
		for _, q := range c.QOS {
			m["qos "+q.Name] = kv{"max_gpus_per_user": fmt.Sprint(q.MaxGPUsPerUser), "max_jobs_per_user": fmt.Sprint(q.MaxJobsPerUser),
				"max_wall": fmtDur(q.MaxWall)}
		}
		return m
	}
	o, n := lim(old), lim(new)
	for _, name := range slices.Sorted(maps.Keys(n)) {
		was, ok := o[name]
		if !ok {
			out = append(out, name+" added")
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(n[name])) {
			if was[k] != n[name][k] {
				out = append(out, fmt.Sprintf("%s %s %s→%s", name, k, orDefault(was[k], `""`), orDefault(n[name][k], `""`)))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o)) {
		if _, ok := n[name]; !ok {
			out = append(out, name+" removed")
		}
	}
	return out
}
