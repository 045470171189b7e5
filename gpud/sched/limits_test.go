package sched

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// TestLimitsCounters: limits counts running jobs and GPUs per (QOS,
// user), per (QOS, account) and per account over every QOS, refuses the
// job that would pass a limit with the reason and a sentence, and frees
// the count when a job ends.
func TestLimitsCounters(t *testing.T) {
	t.Parallel()
	qos := []QOS{{Name: "normal", MaxJobsPerUser: 2, MaxGPUsPerAccount: 6}, {Name: "high"}}
	l := newLimits(qos, []AccountLimit{{Account: "lab", MaxJobs: 3}})
	if !l.on {
		t.Fatal("limits with per-user and account counts are not on")
	}
	j := func(user, account, q string, gpus int) *Job {
		return &Job{User: user, Account: account, QOS: q, Req: spec.Resources{Nodes: 1, GPUsPerNode: gpus}}
	}
	check := func(jb *Job) string {
		reason, detail := l.check(jb, &qos[0])
		if jb.QOS == "high" {
			reason, detail = l.check(jb, &qos[1])
		}
		if reason == "" {
			return ""
		}
		return reason + ": " + detail
	}
	l.add("normal", "alice", "lab", 2)
	l.add("normal", "alice", "lab", 2)
	for _, tc := range []struct {
		job  *Job
		want string
	}{
		{j("alice", "lab", "normal", 1), "QOSLimit: user alice at QOS normal max 2 jobs"},
		{j("bob", "lab", "normal", 2), ""},
		{j("bob", "lab", "normal", 3), "AccountLimit: account lab would exceed QOS normal max 6 GPUs"},
		{j("bob", "other", "normal", 7), "AccountLimit: job exceeds QOS normal max 6 GPUs per account"},
		{j("alice", "lab", "high", 8), ""}, // another QOS: only the account's 3 jobs count
	} {
		if got := check(tc.job); got != tc.want {
			t.Errorf("%s/%s/%s %d GPUs: %q; want %q", tc.job.User, tc.job.Account, tc.job.QOS, tc.job.Req.GPUsPerNode, got, tc.want)
		}
	}
	l.add("high", "carol", "lab", 1) // the account's third running job, in another QOS
	if got := check(j("alice", "lab", "high", 1)); got != "AccountLimit: account lab at max 3 running jobs" {
		t.Errorf("fourth job of lab: %q; want the account's max 3 running jobs", got)
	}
	l.remove("normal", "alice", "lab", 2)
	if got := check(j("alice", "lab", "normal", 1)); got != "" {
		t.Errorf("after one of alice's jobs ended: %q; want none", got)
	}
	// Without limits that count, nothing is counted; wall time and
	// GPU-hour budgets still hold.
	off := newLimits([]QOS{{Name: "normal"}}, []AccountLimit{{Account: "lab", MaxWall: time.Hour}})
	off.add("normal", "alice", "lab", 8)
	if off.on || off.users != nil {
		t.Errorf("limits without counting limits: on %v, counters %v", off.on, off.users)
	}
	long := j("alice", "lab", "normal", 1)
	long.TimeLimit = 2 * time.Hour
	if r, d := off.check(long, &QOS{Name: "normal"}); r != spec.ReasonAccountLimit || d != "time limit over account lab max wall 1h0m0s" {
		t.Errorf("2 h job under a 1 h account max wall: %q %q", r, d)
	}
}
