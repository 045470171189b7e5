package controller

import (
	"slices"

	"github.com/gpud/gpud/gpud/spec"
)

// Privacy is gpud.toml's [privacy], Slurm's PrivateData: what a user
// (not an operator, admin or root) may see of other users. Every field
// false, as Slurm's default, shows everything but scripts, environments
// and paths (which only owners and operators ever see).
type Privacy struct {
	// Jobs: a user sees only their own jobs and those of the accounts
	// they coordinate (squeue, scontrol show job, sacct, sprio, the
	// nodes' job lists, gpuq top); another job is "not found".
	Jobs bool
	// Usage: a user sees only their own usage (and their coordinated
	// accounts' users'): sshare, sreport, gpuq top.
	Usage bool
	// Users: a user sees no other user by name in association listings
	// (sacctmgr, sshare), but in accounts they coordinate.
	Users bool
	// Accounts: a user sees only the accounts they belong to or
	// coordinate (sacctmgr, sshare, sreport).
	Accounts bool
}

// Viewer is what one caller may see, judged against the configuration
// as it was when the Viewer was made; safe from any goroutine. Every
// reader of the API (gpud/server's /v1 handlers, and through them Slurm's
// REST API) asks it; root, and operators (who reach the controller as
// root), see everything.
type Viewer struct {
	who Caller
	cfg *Config
}

// Viewer returns who's Viewer.
func (c *Controller) Viewer(who Caller) Viewer { return Viewer{who: who, cfg: c.published.Load()} }

// All says whether the viewer sees everything (root, operators).
func (v Viewer) All() bool { return v.who.root() }

// HidesJobs says whether some job may be hidden from the viewer
// ([privacy] jobs or usage, or a hidden partition it may not use), so
// that listings need not be filtered when none is.
func (v Viewer) HidesJobs() bool {
	if v.All() {
		return false
	}
	if v.cfg.Privacy.Jobs || v.cfg.Privacy.Usage {
		return true
	}
	for i := range v.cfg.Partitions {
		if !v.cfg.partitionVisible(&v.cfg.Partitions[i], v.who) {
			return true
		}
	}
	return false
}

// Privacy is the [privacy] the viewer is judged by.
func (v Viewer) Privacy() Privacy { return v.cfg.Privacy }

// Job says whether the viewer may see job j at all: not one in a hidden
// partition the viewer may not use (access.go), and with [privacy] jobs
// only their own and their coordinated accounts'.
func (v Viewer) Job(j *spec.Job) bool {
	if v.All() {
		return true
	}
	if p := v.cfg.partition(j.Partition); p != nil && !v.cfg.partitionVisible(p, v.who) {
		return false
	}
	return !v.cfg.Privacy.Jobs || v.who.Known && j.UID == v.who.UID || v.cfg.coordinates(v.who.User, j.Account)
}

// Usage says whether the viewer may see the usage of user in account
// (account "" for a user's usage in all of them).
func (v Viewer) Usage(user, account string) bool {
	if v.All() || !v.cfg.Privacy.Usage {
		return true
	}
	return user == v.who.User || account != "" && v.cfg.coordinates(v.who.User, account)
}

// User says whether the viewer may see user by name in account's
// association listings.
func (v Viewer) User(user, account string) bool {
	if v.All() || !v.cfg.Privacy.Users {
		return true
	}
	return user == v.who.User || v.cfg.coordinates(v.who.User, account)
}

// Account says whether the viewer may see account: under privacy, one
// that lists them (or lists no one) or that they coordinate.
func (v Viewer) Account(name string) bool {
	if v.All() || !v.cfg.Privacy.Accounts {
		return true
	}
	a := v.cfg.account(name)
	if a == nil {
		return false
	}
	return slices.Contains(a.Users, v.who.User) || slices.Contains(a.Coordinators, v.who.User) ||
		len(a.Users) == 0 && name == v.cfg.DefaultAccount
}

// Partition says whether the viewer sees partition name (a hidden one
// only if it may use it).
func (v Viewer) Partition(name string) bool {
	p := v.cfg.partition(name)
	return p == nil || v.cfg.partitionVisible(p, v.who)
}
