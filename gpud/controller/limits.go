package controller

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
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
	if err := c.checkAccountWall(j); err != nil {
		return err
	}
	if a := c.cfg.account(j.Account); a != nil && a.MaxSubmitJobs > 0 {
		if queued := c.st.active.account[a.Name]; queued+n > a.MaxSubmitJobs {
			return spec.Errorf(spec.ErrRefused, "account %s has %d jobs pending or running and its max_submit_jobs is %d (this submission adds %d); wait for some to end or cancel some", a.Name, queued, a.MaxSubmitJobs, n)
		}
	}
	return c.checkBudget(j)
}

// checkAccountWall refuses j's time limit if it exceeds its account's
// max_wall (a submission, scontrol update TimeLimit).
func (c *Controller) checkAccountWall(j *spec.Job) error {
	a := c.cfg.account(j.Account)
	if a == nil || a.MaxWall <= 0 {
		return nil
	}
	if tl := j.TimeLimit.Std(); tl == 0 || tl > a.MaxWall {
		asked := "UNLIMITED"
		if tl > 0 {
			asked = fmtDur(tl)
		}
		return spec.Errorf(spec.ErrRefused, "--time=%s exceeds account %s's max_wall of %s; ask for at most %s", asked, a.Name, fmtDur(a.MaxWall), fmtDur(a.MaxWall))
	}
	return nil
}

// checkBudget refuses a GPU job of an account whose max_gpu_hours budget
// is spent, or that could alone use more than the whole budget.
func (c *Controller) checkBudget(j *spec.Job) error {
	a := c.cfg.account(j.Account)
	if a == nil || a.MaxGPUHours <= 0 {
		return nil
	}
	tl := j.TimeLimit.Std()
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
	return nil
}

// checkQOSSubmitLimit refuses moving a job of a user into QOS j.QOS (a
// privileged scontrol update QOS=) when the user already has that QOS's
// max_submit_jobs_per_user jobs there.
func (c *Controller) checkQOSSubmitLimit(j *spec.Job, n int) error {
	q, ok := c.cfg.qos(j.QOS)
	if !ok || q.MaxSubmitJobsPerUser <= 0 || j.UID == 0 {
		return nil
	}
	if have := c.st.active.userQOS[scoped{j.UID, j.QOS}]; have+n > q.MaxSubmitJobsPerUser {
		return spec.Errorf(spec.ErrRefused, "user %s has %d jobs pending or running in QOS %s and its max_submit_jobs_per_user is %d; this job would exceed it",
			orDefault(j.User, fmt.Sprint(j.UID)), have, q.Name, q.MaxSubmitJobsPerUser)
	}
	return nil
}

// checkUserSubmitLimit refuses a submission of n jobs like j (array
// tasks count one each) that would take its user past the
// max_submit_jobs_per_user that applies: the job's QOS's, else its
// account's (each counting the user's jobs there), else the controller's
// default (counting all the user's jobs). Like Slurm's MaxSubmitJobs it
// counts pending and running jobs; root is not limited.
func (c *Controller) checkUserSubmitLimit(who Caller, j *spec.Job, n int) error {
	if who.UID == 0 {
		return nil
	}
	limit, have := c.cfg.MaxSubmitJobsPerUser, c.st.active.user[j.UID]
	key, where := "[limits] max_submit_jobs_per_user", ""
	if q, ok := c.cfg.qos(j.QOS); ok && q.MaxSubmitJobsPerUser > 0 {
		limit, have = q.MaxSubmitJobsPerUser, c.st.active.userQOS[scoped{j.UID, j.QOS}]
		key, where = fmt.Sprintf("QOS %s's max_submit_jobs_per_user", q.Name), " in QOS "+q.Name
	} else if a := c.cfg.account(j.Account); a != nil && a.MaxSubmitJobsPerUser > 0 {
		limit, have = a.MaxSubmitJobsPerUser, c.st.active.userAccount[scoped{j.UID, j.Account}]
		key, where = fmt.Sprintf("account %s's max_submit_jobs_per_user", a.Name), " in account "+a.Name
	}
	if limit <= 0 || have+n <= limit {
		return nil
	}
	what := "this job"
	if n > 1 {
		what = fmt.Sprintf("these %d jobs", n)
	}
	return spec.Errorf(spec.ErrRefused, "user %s has %d jobs pending or running%s and %s is %d, so %s would exceed it; wait for some to end, cancel some (gpuq cancel), submit fewer array tasks, or ask an administrator to raise the limit in gpud.toml",
		orDefault(j.User, fmt.Sprint(j.UID)), have, where, key, limit, what)
}

// submitSize is what a submission of n jobs like j stores in state.db
// (and holds in memory): the payload (script, args, environment), kept
// once per array, and each task's record (its comment included).
func submitSize(j *spec.Job, n int) (payload, perTask int64) {
	payload = payloadBytes(j)
	rec := *j
	rec.Script, rec.Args, rec.Env = "", nil, nil
	rec.ID, rec.ArrayJobID, rec.ArrayTaskID = math.MaxUint32, math.MaxUint32, n
	resolveOutput(&rec)
	// spec.Job.AppendJSON writes json.Marshal's bytes without reflection;
	// only their length is kept, so they go to a buffer on the stack.
	var buf [4096]byte
	return payload, int64(len(rec.AppendJSON(buf[:0])))
}

// checkSubmitSize refuses a submission of n jobs like j that would store
// more than MaxSubmitBytes.
func (c *Controller) checkSubmitSize(j *spec.Job, n int) error {
	limit := c.cfg.MaxSubmitBytes
	if limit <= 0 {
		return nil
	}
	payload, perTask := submitSize(j, n)
	if total := payload + int64(n)*perTask; total > limit {
		return spec.Errorf(spec.ErrRefused, "this submission would store %s (script, arguments and environment %s, plus %s for each of its %d jobs), more than the controller's max_submit_size of %s; split the array into smaller ones, shorten the environment (--export=NONE or a list of variables) or the script (run a program kept in a file), or ask an administrator to raise [limits] max_submit_size in gpud.toml",
			fmtBytes(total), fmtBytes(payload), fmtBytes(perTask), n, fmtBytes(limit))
	}
	return nil
}

// checkUserSubmitSize refuses a submission of n jobs like j that would
// take what its user's pending and running jobs store (activeCounts.bytes)
// past MaxSubmitBytesPerUser. root is not limited.
func (c *Controller) checkUserSubmitSize(who Caller, j *spec.Job, n int) error {
	limit := c.cfg.MaxSubmitBytesPerUser
	if limit <= 0 || who.UID == 0 {
		return nil
	}
	have := c.st.active.bytes[j.UID]
	adds := payloadBytes(j) + int64(n)*recordBytes(j)
	if have+adds <= limit {
		return nil
	}
	return spec.Errorf(spec.ErrRefused, "user %s's pending and running jobs store %s (scripts, environments and job records) and [limits] max_submit_size_per_user is %s; this submission would add %s. Wait for jobs to end, cancel some, submit arrays instead of many single jobs (an array stores its script once), shorten the environment (--export=NONE), or ask an administrator to raise the limit in gpud.toml",
		orDefault(j.User, fmt.Sprint(j.UID)), fmtBytes(have), fmtBytes(limit), fmtBytes(adds))
}

// checkRecordGrowth refuses an update that makes the record of rec's job
// (its comment, name) larger than the limits allow: max_submit_size for
// the job's own payload and record, max_submit_size_per_user for what
// its owner's pending and running jobs store. An update that does not
// grow the record, or a job of root's, passes. The payload (script,
// environment) cannot change after submission (gpud/store keeps it once
// per array), so an update rewrites only the job's row.
func (c *Controller) checkRecordGrowth(rec *jobRec, next *spec.Job) error {
	was := rec.charged
	if was == 0 {
		was = recordBytes(&rec.job)
	}
	now := recordBytes(next)
	if now <= was || next.UID == 0 {
		return nil
	}
	if limit := c.cfg.MaxSubmitBytes; limit > 0 && payloadBytes(next)+now > limit {
		return spec.Errorf(spec.ErrRefused, "job %d would store %s (its script, arguments and environment %s and its record %s), more than the controller's max_submit_size of %s; shorten the comment or name",
			next.ID, fmtBytes(payloadBytes(next)+now), fmtBytes(payloadBytes(next)), fmtBytes(now), fmtBytes(limit))
	}
	if limit := c.cfg.MaxSubmitBytesPerUser; limit > 0 && rec.charged != 0 {
		if have := c.st.active.bytes[next.UID]; have-was+now > limit {
			return spec.Errorf(spec.ErrRefused, "user %s's pending and running jobs store %s and [limits] max_submit_size_per_user is %s; this update would add %s. Shorten the comment or name, wait for jobs to end or cancel some",
				orDefault(next.User, fmt.Sprint(next.UID)), fmtBytes(have), fmtBytes(limit), fmtBytes(now-was))
		}
	}
	return nil
}

// fmtBytes writes a size in binary units ("64 MiB", "1.5 KiB").
func fmtBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n)/1024, 0
	for f >= 1024 && u < 5 {
		f, u = f/1024, u+1
	}
	return strings.TrimSuffix(strconv.FormatFloat(f, 'f', 1, 64), ".0") + " " + "KMGTPE"[u:u+1] + "iB"
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
				"max_submit_jobs_per_user": fmt.Sprint(a.MaxSubmitJobsPerUser),
				"coordinators":             strings.Join(a.Coordinators, ",")}
		}
		for _, q := range c.QOS {
			m["qos "+q.Name] = kv{"max_gpus_per_user": fmt.Sprint(q.MaxGPUsPerUser), "max_jobs_per_user": fmt.Sprint(q.MaxJobsPerUser),
				"max_wall": fmtDur(q.MaxWall), "max_submit_jobs_per_user": fmt.Sprint(q.MaxSubmitJobsPerUser)}
		}
		m["limits"] = kv{"max_submit_size": fmtBytes(c.MaxSubmitBytes), "max_submit_jobs_per_user": fmt.Sprint(c.MaxSubmitJobsPerUser),
			"max_submit_size_per_user": fmtBytes(c.MaxSubmitBytesPerUser)}
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
