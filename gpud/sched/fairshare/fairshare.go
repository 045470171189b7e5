// Package fairshare computes hierarchical fairshare (root → accounts, to
// any depth → users) on billed GPU usage with exponential decay, ordered by Slurm's
// Fair Tree algorithm. It is pure: a function of the tree, the usage
// records and the time given.
package fairshare

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tree is the account hierarchy under an implicit root.
type Tree struct {
	Accounts []Account
}

// Account is one account with its shares among its siblings and its users.
// An account's siblings are the other accounts and the users under the
// same parent, as in Slurm.
type Account struct {
	Name string
	// Parent is the account this one is under; "" (or an account not in
	// the tree) puts it under the root.
	Parent string
	Shares float64
	Users  []User
}

// User is a user's association with an account, with shares among the
// account's users.
type User struct {
	Name   string
	Shares float64
}

// Usage is one stretch of resource use by an (account, user): a running job
// (End zero: still running, counted up to now) or a finished one.
type Usage struct {
	Account, User string
	Start, End    time.Time
	// GPUs held; with Profile set they are MIG slices of that profile and
	// each is billed its fraction of the GPU (SliceFraction).
	GPUs    float64
	Model   string
	Profile string
	// Fraction is set for a share of one non-MIG GPU; it replaces GPUs.
	Fraction float64
	CPUs     int
	MemMiB   int64
}

// Config is the billing and decay policy.
type Config struct {
	// HalfLife of the exponential decay; 0 means no decay.
	HalfLife time.Duration
	// ModelWeights bills a GPU-second of a model ("h100": 2); models not
	// listed weigh 1.
	ModelWeights map[string]float64
	// CPUWeight bills a CPU-second; MemWeightGiB a GiB-second.
	CPUWeight    float64
	MemWeightGiB float64
}

// Rate is the billed units per second of u.
func (c *Config) Rate(u *Usage) float64 {
	w := 1.0
	if mw, ok := c.ModelWeights[u.Model]; ok {
		w = mw
	}
	gpus := u.GPUs
	if u.Profile != "" {
		gpus *= SliceFraction(u.Profile)
	}
	if u.Fraction > 0 {
		gpus = u.Fraction
	}
	return gpus*w + float64(u.CPUs)*c.CPUWeight + float64(u.MemMiB)/1024*c.MemWeightGiB
}

// SliceFraction is the fraction of a GPU a MIG profile takes: the compute
// slices of "<g>g.<mem>gb" out of 7 (1g.10gb → 1/7, 3g.40gb → 3/7,
// 7g.80gb → 1). An unknown profile counts as a whole GPU.
func SliceFraction(profile string) float64 {
	g, _, ok := strings.Cut(profile, "g.")
	if !ok {
		return 1
	}
	n, err := strconv.Atoi(g)
	if err != nil || n <= 0 || n > 7 {
		return 1
	}
	return float64(n) / 7
}

// Billed returns u's raw billed units (GPU-seconds × weights) up to now and
// the same decayed to now with the half-life.
func (c *Config) Billed(u *Usage, now time.Time) (raw, decayed float64) {
	end := u.End
	if end.IsZero() || end.After(now) {
		end = now
	}
	if !end.After(u.Start) {
		return 0, 0
	}
	rate := c.Rate(u)
	secs := end.Sub(u.Start).Seconds()
	raw = rate * secs
	if c.HalfLife <= 0 {
		return raw, raw
	}
	// ∫ rate·2^(-(now-t)/H) dt from start to end.
	h := c.HalfLife.Seconds()
	a := now.Sub(end).Seconds()
	b := now.Sub(u.Start).Seconds()
	decayed = rate * h / math.Ln2 * (math.Exp2(-a/h) - math.Exp2(-b/h))
	return raw, decayed
}

// Row is one line of the report: an account (User empty) or a user in it.
type Row struct {
	Account string
	User    string `json:",omitempty"`
	// Parent is an account's parent account ("" under the root); Depth is
	// the row's level below the root (1 for top-level accounts).
	Parent string `json:",omitempty"`
	Depth  int
	// Shares as configured, and normalised among siblings.
	RawShares  float64
	NormShares float64
	// RawUsage is billed units undecayed; EffectiveUsage decayed.
	RawUsage       float64
	EffectiveUsage float64
	// NormUsage is EffectiveUsage over the siblings' total.
	NormUsage float64
	// LevelFS is NormShares / NormUsage (+Inf without usage).
	LevelFS float64
	// Factor is the Fair Tree factor in [0,1] (users only; accounts 0).
	Factor float64
}

// Report is the whole tree, accounts in Fair Tree order each followed by
// its users.
type Report struct {
	Rows []Row
	// factor by "account\x00user"
	factors map[string]float64
}

// Factor is the user's fairshare factor in [0,1]; an association not in
// the tree gets 0 (it ranks last).
func (r *Report) Factor(account, user string) float64 {
	if r == nil {
		return 0
	}
	return r.factors[account+"\x00"+user]
}

// Past is the billed usage of an (account, user) over stretches that
// have ended, summed by the caller and decayed to At: ended usage only
// decays from there on, so a caller can keep it between reports instead
// of handing over every stretch of history each time.
type Past struct {
	Account, User string
	// Raw is billed units undecayed, Decayed the same decayed to At.
	Raw, Decayed float64
	At           time.Time
}

// Add bills u (which must have ended by p.At) into p.
func (p *Past) Add(u *Usage, cfg *Config) {
	r, d := cfg.Billed(u, p.At)
	p.Raw += r
	p.Decayed += d
}

// DecayTo moves p's decayed usage forward to t.
func (p *Past) DecayTo(t time.Time, cfg *Config) {
	if cfg.HalfLife > 0 && t.After(p.At) {
		p.Decayed *= math.Exp2(-t.Sub(p.At).Seconds() / cfg.HalfLife.Seconds())
	}
	p.At = t
}

// Compute builds the report at now.
func Compute(t *Tree, usage []Usage, now time.Time, cfg Config) *Report {
	return ComputeWithPast(t, nil, usage, now, cfg)
}

// ComputeWithPast builds the report at now from past (ended usage already
// billed, decayed further to now here) and usage.
func ComputeWithPast(t *Tree, past []Past, usage []Usage, now time.Time, cfg Config) *Report {
	type key struct{ a, u string }
	raw := map[key]float64{}
	eff := map[key]float64{}
	for _, p := range past {
		p.DecayTo(now, &cfg)
		raw[key{p.Account, p.User}] += p.Raw
		eff[key{p.Account, p.User}] += p.Decayed
		raw[key{p.Account, ""}] += p.Raw
		eff[key{p.Account, ""}] += p.Decayed
	}
	for i := range usage {
		u := &usage[i]
		r, d := cfg.Billed(u, now)
		raw[key{u.Account, u.User}] += r
		eff[key{u.Account, u.User}] += d
		raw[key{u.Account, ""}] += r
		eff[key{u.Account, ""}] += d
	}
	type node struct {
		row  Row
		kids []*node // sub-accounts and users, siblings of one another
	}
	accts := make(map[string]*node, len(t.Accounts))
	order := make([]*node, 0, len(t.Accounts))
	for _, a := range t.Accounts {
		if _, dup := accts[a.Name]; dup {
			continue
		}
		an := &node{row: Row{Account: a.Name, Parent: a.Parent, RawShares: a.Shares,
			RawUsage: raw[key{a.Name, ""}], EffectiveUsage: eff[key{a.Name, ""}]}}
		for _, u := range a.Users {
			an.kids = append(an.kids, &node{row: Row{Account: a.Name, User: u.Name, RawShares: u.Shares,
				RawUsage: raw[key{a.Name, u.Name}], EffectiveUsage: eff[key{a.Name, u.Name}]}})
		}
		accts[a.Name] = an
		order = append(order, an)
	}
	// loops reports whether a's ancestry never reaches the root. Config
	// validation refuses such trees; Compute must still terminate.
	loops := func(a *node) bool {
		seen := map[*node]bool{}
		for n := a; n != nil; n = accts[n.row.Parent] {
			if seen[n] {
				return true
			}
			seen[n] = true
		}
		return false
	}
	root := &node{}
	for _, an := range order {
		p := accts[an.row.Parent]
		if p == nil || loops(an) {
			an.row.Parent = ""
			p = root
		}
		p.kids = append(p.kids, an)
	}
	level := func(ns []*node) {
		var shares, use float64
		for _, n := range ns {
			shares += n.row.RawShares
			use += n.row.EffectiveUsage
		}
		for _, n := range ns {
			if shares > 0 {
				n.row.NormShares = n.row.RawShares / shares
			}
			if use > 0 {
				n.row.NormUsage = n.row.EffectiveUsage / use
			}
			if n.row.NormUsage > 0 {
				n.row.LevelFS = n.row.NormShares / n.row.NormUsage
			} else {
				n.row.LevelFS = math.Inf(1)
			}
		}
		slices.SortStableFunc(ns, func(a, b *node) int {
			if c := cmp.Compare(b.row.LevelFS, a.row.LevelFS); c != 0 {
				return c
			}
			return cmp.Compare(a.row.User+"\x00"+a.row.Account, b.row.User+"\x00"+b.row.Account)
		})
	}
	// An account's usage is its own jobs' and its sub-accounts'; each
	// level is then normalised among siblings.
	var sum func(n *node, depth int)
	sum = func(n *node, depth int) {
		n.row.Depth = depth
		for _, k := range n.kids {
			if k.row.User == "" {
				sum(k, depth+1)
				n.row.RawUsage += k.row.RawUsage
				n.row.EffectiveUsage += k.row.EffectiveUsage
			} else {
				k.row.Depth = depth + 1
			}
		}
		level(n.kids)
	}
	sum(root, 0)
	// Fair Tree: depth first in LevelFS order; users rank in visit order,
	// users with equal LevelFS in the same account share a rank.
	rep := &Report{}
	var users []*node
	var visit func(n *node)
	visit = func(n *node) {
		for _, k := range n.kids {
			rep.Rows = append(rep.Rows, k.row)
			if k.row.User != "" {
				users = append(users, k)
				continue
			}
			visit(k)
		}
	}
	visit(root)
	rep.factors = make(map[string]float64, len(users))
	n := float64(len(users))
	rank := len(users)
	for i, u := range users {
		if i > 0 {
			prev := users[i-1]
			if !(prev.row.Account == u.row.Account && prev.row.LevelFS == u.row.LevelFS) {
				rank = len(users) - i
			}
		}
		u.row.Factor = float64(rank) / n
		rep.factors[u.row.Account+"\x00"+u.row.User] = u.row.Factor
	}
	// Rows were copied before the factors were known.
	k := 0
	for i := range rep.Rows {
		if rep.Rows[i].User != "" {
			rep.Rows[i].Factor = users[k].row.Factor
			k++
		}
	}
	return rep
}
