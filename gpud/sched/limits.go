package sched

import (
	"fmt"

	"github.com/gpud/gpud/gpud/spec"
)

// limits holds a cycle's QOS and account limits and counts the running
// jobs and GPUs against them: those running when the cycle began, and
// those it starts. Counters are kept only when some limit counts jobs or
// GPUs (on); the account limits on wall time and GPU-hours need none.
type limits struct {
	on bool
	// users counts per (QOS, user), accts per (QOS, account); counts
	// over every QOS live in accts under the QOS "" (no QOS has an empty
	// name).
	users map[[2]string]*counter
	accts map[[2]string]*counter
	// alim are the account limits by account.
	alim map[string]*AccountLimit
}

type counter struct{ gpus, jobs int }

func newLimits(qos []QOS, accountLimits []AccountLimit) limits {
	var l limits
	for i := range qos {
		if q := &qos[i]; q.MaxGPUsPerUser > 0 || q.MaxJobsPerUser > 0 || q.MaxGPUsPerAccount > 0 || q.MaxJobsPerAccount > 0 {
			l.on = true
		}
	}
	if len(accountLimits) > 0 {
		l.alim = make(map[string]*AccountLimit, len(accountLimits))
		for i := range accountLimits {
			a := &accountLimits[i]
			l.alim[a.Account] = a
			if a.MaxGPUs > 0 || a.MaxJobs > 0 {
				l.on = true
			}
		}
	}
	if l.on {
		l.users, l.accts = map[[2]string]*counter{}, map[[2]string]*counter{}
	}
	return l
}

// add counts a running job of gpus GPUs (a share or MIG slice counts as
// one) in QOS qos for user and account.
func (l *limits) add(qos, user, account string, gpus int) {
	if !l.on {
		return
	}
	for _, m := range []struct {
		m map[[2]string]*counter
		k [2]string
	}{{l.users, [2]string{qos, user}}, {l.accts, [2]string{qos, account}}, {l.accts, [2]string{"", account}}} {
		ct := m.m[m.k]
		if ct == nil {
			ct = &counter{}
			m.m[m.k] = ct
		}
		ct.gpus += gpus
		ct.jobs++
	}
}

// remove undoes add for a job that ended.
func (l *limits) remove(qos, user, account string, gpus int) {
	if !l.on {
		return
	}
	for _, ct := range []*counter{l.users[[2]string{qos, user}], l.accts[[2]string{qos, account}], l.accts[[2]string{"", account}]} {
		if ct != nil {
			ct.gpus -= gpus
			ct.jobs--
		}
	}
}

// check returns why j may not start now under its QOS q's per-user and
// per-account limits and its account's limits, or "", "".
func (l *limits) check(j *Job, q *QOS) (string, string) {
	if !l.on || q == nil {
		return l.accountLimit(j)
	}
	gpus := jobGPUs(j)
	if u := l.users[[2]string{q.Name, j.User}]; u != nil {
		if q.MaxJobsPerUser > 0 && u.jobs+1 > q.MaxJobsPerUser {
			return spec.ReasonQOSLimit, fmt.Sprintf("user %s at QOS %s max %d jobs", j.User, q.Name, q.MaxJobsPerUser)
		}
		if q.MaxGPUsPerUser > 0 && u.gpus+gpus > q.MaxGPUsPerUser {
			return spec.ReasonQOSLimit, fmt.Sprintf("user %s would exceed QOS %s max %d GPUs", j.User, q.Name, q.MaxGPUsPerUser)
		}
	} else if q.MaxGPUsPerUser > 0 && gpus > q.MaxGPUsPerUser {
		return spec.ReasonQOSLimit, fmt.Sprintf("job exceeds QOS %s max %d GPUs per user", q.Name, q.MaxGPUsPerUser)
	}
	if a := l.accts[[2]string{q.Name, j.Account}]; a != nil {
		if q.MaxJobsPerAccount > 0 && a.jobs+1 > q.MaxJobsPerAccount {
			return spec.ReasonAccountLimit, fmt.Sprintf("account %s at QOS %s max %d jobs", j.Account, q.Name, q.MaxJobsPerAccount)
		}
		if q.MaxGPUsPerAccount > 0 && a.gpus+gpus > q.MaxGPUsPerAccount {
			return spec.ReasonAccountLimit, fmt.Sprintf("account %s would exceed QOS %s max %d GPUs", j.Account, q.Name, q.MaxGPUsPerAccount)
		}
	} else if q.MaxGPUsPerAccount > 0 && gpus > q.MaxGPUsPerAccount {
		return spec.ReasonAccountLimit, fmt.Sprintf("job exceeds QOS %s max %d GPUs per account", q.Name, q.MaxGPUsPerAccount)
	}
	return l.accountLimit(j)
}

// accountLimit checks j against its account's limits over every QOS.
func (l *limits) accountLimit(j *Job) (string, string) {
	al := l.alim[j.Account]
	if al == nil {
		return "", ""
	}
	if al.MaxWall > 0 && (j.TimeLimit == 0 || j.TimeLimit > al.MaxWall) {
		return spec.ReasonAccountLimit, fmt.Sprintf("time limit over account %s max wall %s", al.Account, al.MaxWall)
	}
	gpus := jobGPUs(j)
	if al.MaxGPUHours > 0 && gpus > 0 {
		if al.UsedGPUHours >= al.MaxGPUHours {
			return spec.ReasonAccountLimit, fmt.Sprintf("account %s spent its GPU-hour budget (%.1f of %g)", al.Account, al.UsedGPUHours, al.MaxGPUHours)
		}
		if need := float64(gpus) * j.TimeLimit.Hours(); al.UsedGPUHours+need > al.MaxGPUHours {
			return spec.ReasonAccountLimit, fmt.Sprintf("job needs up to %.1f GPU-hours; account %s has %.1f of its %g left", need, al.Account, al.MaxGPUHours-al.UsedGPUHours, al.MaxGPUHours)
		}
	}
	var a counter
	if ct := l.accts[[2]string{"", j.Account}]; ct != nil {
		a = *ct
	}
	if al.MaxJobs > 0 && a.jobs+1 > al.MaxJobs {
		return spec.ReasonAccountLimit, fmt.Sprintf("account %s at max %d running jobs", al.Account, al.MaxJobs)
	}
	if al.MaxGPUs > 0 && a.gpus+gpus > al.MaxGPUs {
		return spec.ReasonAccountLimit, fmt.Sprintf("account %s would exceed max %d GPUs (%d running)", al.Account, al.MaxGPUs, a.gpus)
	}
	return "", ""
}

// limit checks the job's wall time against its QOS and partition, then
// the running jobs and GPUs counted against its QOS and account.
func (c *cycle) limit(j *Job) (string, string) {
	q := c.qos[j.QOS]
	if q != nil && q.MaxWall > 0 && (j.TimeLimit == 0 || j.TimeLimit > q.MaxWall) {
		return spec.ReasonQOSLimit, fmt.Sprintf("time limit over QOS %s max wall %s", q.Name, q.MaxWall)
	}
	if p := c.parts[j.Partition]; p != nil && p.MaxTime > 0 && (j.TimeLimit == 0 || j.TimeLimit > p.MaxTime) {
		return spec.ReasonQOSLimit, fmt.Sprintf("time limit over partition %s max time %s", p.Name, p.MaxTime)
	}
	return c.lim.check(j, q)
}
