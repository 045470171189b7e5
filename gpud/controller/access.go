package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// Access rules: who may run what where. They live here, in one place,
// and every path by which a job enters the queue or changes in it asks
// them (issue 24, hole 3: [[partition]] allow_accounts was parsed and
// never enforced, and scontrol update moved a job into the partition):
//   - submission (newJob): sbatch, arrays, srun/salloc allocations
//     (Interactive), jobs with dependencies, --test-only, -p a,b (a
//     partition the job may not use is never picked);
//   - scontrol update (UpdateJob), judged on the job as it would be;
//   - requeue by a user or operator (act), and a requeue by the system
//     (preemption, node failure), which marks the job ineligible;
//   - the queue after a reload or restart (recheckAccess): a queued job
//     that may no longer run waits with the rule's pending reason
//     (AccountNotAllowed, QOSNotAllowed, InvalidAccount, InvalidQOS)
//     instead of starting;
//   - and what callers see: a hidden partition that a caller may not use
//     does not exist for it (partitionVisible): not listed, its jobs not
//     shown, and naming it is answered as naming no partition.
//
// The rules are the job's: its owner, account and QOS decide, whoever
// acts (an operator cannot move a user's job into a partition the user
// may not use). Jobs of root pass every rule.

// accessRefusal is one rule a job breaks: the error its submitter sees,
// and the pending reason of a queued job that breaks it.
type accessRefusal struct {
	reason string
	err    error
}

// owner is whose job it is, for the access rules.
type owner struct {
	uid  uint32
	user string
	// groups are the owner's group names (primary and supplementary),
	// nil when unknown (allow_groups is then not judged: see groupsOf).
	groups []string
}

func ownerOf(j *spec.Job, groups []string) owner {
	return owner{uid: j.UID, user: j.User, groups: groups}
}

// callerGroups are who's group names as the server resolved them, for a
// job who owns; it remembers them for the owner's other jobs (an
// operator's update, a reload).
func (c *Controller) callerGroups(who Caller, uid uint32) []string {
	if who.UID != uid || !who.Known {
		return c.st.groups[uid]
	}
	if who.Groups != nil {
		c.st.groups[uid] = who.Groups
	}
	return who.Groups
}

// access checks job j of o against every access rule and returns those
// it breaks. Partition, account and QOS that do not exist are the
// callers' to report (noPartition, noQOS, checkAccountAccess) at entry;
// here they are reasons for a queued job.
func (c *Controller) access(j *spec.Job, o owner) []accessRefusal {
	if o.uid == 0 {
		return nil
	}
	var out []accessRefusal
	if p := c.cfg.partition(j.Partition); p != nil {
		out = append(out, c.partitionAccess(p, j.Account, j.QOS, o)...)
	}
	if err := c.checkAccountAccess(Caller{UID: o.uid, User: o.user, Known: true}, j.Account); err != nil {
		out = append(out, accessRefusal{spec.ReasonInvalidAccount, err})
	}
	if err := c.noQOS(j.QOS); err != nil {
		out = append(out, accessRefusal{spec.ReasonInvalidQOS, err})
	} else if a := c.cfg.account(j.Account); a != nil && len(a.AllowQOS) > 0 && !slices.Contains(a.AllowQOS, j.QOS) {
		out = append(out, accessRefusal{spec.ReasonInvalidQOS, spec.Errorf(spec.ErrPermissionDenied,
			"account %s may not use QOS %s (its allow_qos: %s); submit with -q one of those, or ask an admin to add %s to the account's allow_qos in gpud.toml",
			a.Name, j.QOS, strings.Join(a.AllowQOS, ", "), j.QOS)})
	}
	return out
}

// partitionAccess is p's rules for a job of account and qos of o.
func (c *Controller) partitionAccess(p *Partition, account, qos string, o owner) []accessRefusal {
	if o.uid == 0 {
		return nil
	}
	var out []accessRefusal
	deny := func(reason, format string, args ...any) {
		out = append(out, accessRefusal{reason, spec.Errorf(spec.ErrPermissionDenied, format, args...)})
	}
	switch {
	case len(p.AllowAccounts) > 0 && !slices.Contains(p.AllowAccounts, account):
		deny(spec.ReasonAccountNotAllowed, "account %s may not use partition %s (its allow_accounts: %s); submit with -A one of those accounts or to another partition",
			account, p.Name, strings.Join(p.AllowAccounts, ", "))
	case slices.Contains(p.DenyAccounts, account):
		deny(spec.ReasonAccountNotAllowed, "account %s may not use partition %s (it is in the partition's deny_accounts); submit with another -A or to another partition",
			account, p.Name)
	}
	if len(p.AllowGroups) > 0 && o.groups != nil && !slices.ContainsFunc(o.groups, func(g string) bool { return slices.Contains(p.AllowGroups, g) }) {
		deny(spec.ReasonAccountNotAllowed, "user %s may not use partition %s: only members of %s may; submit to another partition or ask an admin to add you to one of those groups",
			orDefault(o.user, fmt.Sprint(o.uid)), p.Name, strings.Join(p.AllowGroups, ", "))
	}
	switch {
	case len(p.AllowQOS) > 0 && !slices.Contains(p.AllowQOS, qos):
		deny(spec.ReasonQOSNotAllowed, "QOS %s may not be used in partition %s (its allow_qos: %s); submit with -q one of those or to another partition",
			qos, p.Name, strings.Join(p.AllowQOS, ", "))
	case slices.Contains(p.DenyQOS, qos):
		deny(spec.ReasonQOSNotAllowed, "QOS %s may not be used in partition %s (it is in the partition's deny_qos); submit with another -q or to another partition",
			qos, p.Name)
	}
	return out
}

// reentryErr is what a job must pass to go back into the queue by a
// user's or operator's requeue: the access rules, and the time limits a
// submission is refused for (partition max_time, account max_wall).
func (c *Controller) reentryErr(j *spec.Job, o owner) error {
	var errs []error
	for _, r := range c.access(j, o) {
		errs = append(errs, r.err)
	}
	if p := c.cfg.partition(j.Partition); p != nil {
		if err := overPartitionTime(p, j.TimeLimit.Std()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.checkAccountWall(j); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mayUsePartition says whether who (of groups) may submit some job to p:
// root (and operators, who act as root) or anyone the partition's groups
// admit who may charge one of the accounts it admits. Listings use it to
// hide a Hidden partition (partitionVisible).
func (c *Config) mayUsePartition(p *Partition, who Caller, groups []string) bool {
	if who.root() {
		return true
	}
	if len(p.AllowGroups) > 0 && groups != nil && !slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(p.AllowGroups, g) }) {
		return false
	}
	if len(p.AllowAccounts) == 0 && len(p.DenyAccounts) == 0 || len(c.Accounts) == 0 {
		return true
	}
	for _, a := range c.Accounts {
		if len(p.AllowAccounts) > 0 && !slices.Contains(p.AllowAccounts, a.Name) || slices.Contains(p.DenyAccounts, a.Name) {
			continue
		}
		if len(a.Users) == 0 || slices.Contains(a.Users, who.User) || slices.Contains(a.Coordinators, who.User) {
			return true
		}
	}
	return false
}

// partitionVisible says whether who sees partition p (and jobs in it):
// every partition but a Hidden one who may not use.
func (c *Config) partitionVisible(p *Partition, who Caller) bool {
	return !p.Hidden || c.mayUsePartition(p, who, who.Groups)
}

// visiblePartitionNames are the partitions who sees, for messages.
func (c *Config) visiblePartitionNames(who Caller) []string {
	var out []string
	for i := range c.Partitions {
		if c.partitionVisible(&c.Partitions[i], who) {
			out = append(out, c.Partitions[i].Name)
		}
	}
	return out
}

// recheckAccess judges every queued job against the access rules, after
// a restart or a reload changed them: one that breaks a rule waits with
// its reason (schedJob) until an update, or another reload, lets it run.
// Runs on the owner.
func (c *Controller) recheckAccess() {
	clear(c.st.ineligible)
	for id, rec := range c.st.pending {
		c.markAccess(id, rec)
	}
}

// markAccess judges the queued job rec (recheckAccess, a requeue).
func (c *Controller) markAccess(id spec.JobID, rec *jobRec) {
	delete(c.st.ineligible, id)
	if rs := c.access(&rec.job, ownerOf(&rec.job, c.st.groups[rec.job.UID])); len(rs) > 0 {
		c.st.ineligible[id] = rs[0]
	}
}
