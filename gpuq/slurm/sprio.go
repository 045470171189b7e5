package slurm

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
)

var sprioSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "noheader", Short: 'h'},
	{Long: "jobs", Short: 'j', Arg: getopt.Required},
	{Long: "user", Short: 'u', Arg: getopt.Required},
	{Long: "me"},
	{Long: "partition", Short: 'p', Arg: getopt.Required},
	{Long: "long", Short: 'l'},
	{Long: "norm", Short: 'n'},
	{Long: "weights", Short: 'w'},
	{Long: "sort", Short: 'S', Arg: getopt.Required},
	{Long: "json"},
}, common...)}

func (c *Cmd) sprio(ctx context.Context) error {
	ps, rest, err := c.parse(sprioSet)
	if done, err := c.handled(err, "[-h] [-l] [-n] [-j JOBS] [-u USERS|--me] [-p PARTS] [--json]"); done || err != nil {
		return err
	}
	if len(rest) > 0 {
		return invalid("unrecognized argument %q", rest[0])
	}
	if getopt.Has(ps, "weights") {
		return invalid("--weights is not supported; gpuq prio shows each job's weighted factors")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	jobs, err := cl.Priorities(ctx)
	if err != nil {
		return fmt.Errorf("read priorities: %w", err)
	}
	sels, err := parseSels(getopt.All(ps, "jobs"))
	if err != nil {
		return err
	}
	users := c.users(ps)
	parts := splitList(getopt.All(ps, "partition")...)
	jobs = slices.DeleteFunc(jobs, func(j api.JobPriority) bool {
		return len(sels) > 0 && !slices.ContainsFunc(sels, func(s jobSel) bool { return s.ref.ID == j.JobID }) ||
			len(users) > 0 && !slices.Contains(users, j.User) || len(parts) > 0 && !slices.Contains(parts, j.Partition)
	})
	slices.SortStableFunc(jobs, func(a, b api.JobPriority) int { return int(a.JobID) - int(b.JobID) })
	if getopt.Has(ps, "json") {
		return format.WriteJSON(c.Stdout, map[string]any{"jobs": jobs})
	}
	long := getopt.Has(ps, "long")
	norm := getopt.Has(ps, "norm")
	type col struct {
		name  string
		width int
		right bool
	}
	cols := []col{{"JOBID", 15, true}, {"PARTITION", 9, false}}
	if long {
		cols = append(cols, col{"USER", 8, false}, col{"ACCOUNT", 8, false})
	}
	for _, n := range []string{"PRIORITY", "SITE", "AGE", "FAIRSHARE", "JOBSIZE", "PARTITION", "QOS"} {
		cols = append(cols, col{n, 10, true})
	}
	if long {
		cols = append(cols, col{"NICE", 6, true})
	}
	w := bufio.NewWriter(c.Stdout)
	line := func(vals []string) {
		var b strings.Builder
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(padTo(v, cols[i].width, cols[i].right))
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	if !getopt.Has(ps, "noheader") {
		var hs []string
		for _, cl := range cols {
			hs = append(hs, cl.name)
		}
		line(hs)
	}
	num := func(weighted, factor float64) string {
		if norm {
			return strconv.FormatFloat(factor, 'f', 7, 64)
		}
		return strconv.FormatFloat(weighted, 'f', 0, 64)
	}
	for _, j := range jobs {
		vals := []string{strconv.FormatUint(uint64(j.JobID), 10), j.Partition}
		if long {
			vals = append(vals, j.User, j.Account)
		}
		prio := strconv.FormatInt(j.Priority, 10)
		if norm {
			prio = "0.0000000"
		}
		vals = append(vals, prio, "0", num(j.Weighted.Age, j.Factors.Age), num(j.Weighted.Fairshare, j.Factors.Fairshare),
			num(j.Weighted.JobSize, j.Factors.JobSize), num(j.Weighted.Partition, j.Factors.Partition), num(j.Weighted.QOS, j.Factors.QOS))
		if long {
			vals = append(vals, strconv.Itoa(j.Nice))
		}
		line(vals)
	}
	return w.Flush()
}

var sshareSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "noheader", Short: 'n'},
	{Long: "parsable2", Short: 'P'},
	{Long: "parsable", Short: 'p'},
	{Long: "all", Short: 'a'},
	{Long: "accounts", Short: 'A', Arg: getopt.Required},
	{Long: "users", Short: 'u', Arg: getopt.Required},
	{Long: "long", Short: 'l'},
	{Long: "json"},
}, common...)}

func (c *Cmd) sshare(ctx context.Context) error {
	ps, rest, err := c.parse(sshareSet)
	if done, err := c.handled(err, "[-n] [-P|-p] [-a] [-A ACCOUNTS] [-u USERS] [-l] [--json]"); done || err != nil {
		return err
	}
	if len(rest) > 0 {
		return invalid("unrecognized argument %q", rest[0])
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	rows, err := cl.Fairshare(ctx)
	if err != nil {
		return fmt.Errorf("read fairshare: %w", err)
	}
	accts := splitList(getopt.All(ps, "accounts")...)
	users := splitList(getopt.All(ps, "users")...)
	all := getopt.Has(ps, "all")
	if len(users) == 0 && !all && c.User != "" && c.User != "root" {
		users = []string{c.User} // sshare shows the caller's associations
	}
	rows = slices.DeleteFunc(rows, func(r api.FairshareRow) bool {
		if len(accts) > 0 && !slices.Contains(accts, r.Account) {
			return true
		}
		return r.User != "" && len(users) > 0 && !slices.Contains(users, r.User)
	})
	if getopt.Has(ps, "json") {
		return format.WriteJSON(c.Stdout, map[string]any{"rows": rows})
	}
	type col struct {
		name  string
		width int
		left  bool
		val   func(r *api.FairshareRow) string
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 6, 64) }
	cols := []col{
		{"Account", 20, true, func(r *api.FairshareRow) string {
			if r.User != "" {
				return strings.Repeat(" ", r.Depth) + r.Account
			}
			return strings.Repeat(" ", max(r.Depth-1, 0)) + r.Account
		}},
		{"User", 10, false, func(r *api.FairshareRow) string { return r.User }},
		{"RawShares", 10, false, func(r *api.FairshareRow) string { return strconv.FormatFloat(r.RawShares, 'f', 0, 64) }},
		{"NormShares", 11, false, func(r *api.FairshareRow) string { return f(r.NormShares) }},
		{"RawUsage", 11, false, func(r *api.FairshareRow) string { return strconv.FormatFloat(r.RawUsage, 'f', 0, 64) }},
		{"EffectvUsage", 13, false, func(r *api.FairshareRow) string { return f(r.EffectiveUsage) }},
		{"FairShare", 10, false, func(r *api.FairshareRow) string {
			if r.User == "" {
				return ""
			}
			return f(r.Factor)
		}},
	}
	if getopt.Has(ps, "long") {
		cols = append(cols, col{"LevelFS", 10, false, func(r *api.FairshareRow) string {
			if r.LevelFS == nil {
				return "inf"
			}
			return f(*r.LevelFS)
		}})
	}
	parsable := getopt.Has(ps, "parsable2") || getopt.Has(ps, "parsable")
	trailing := getopt.Has(ps, "parsable") && !getopt.Has(ps, "parsable2")
	w := bufio.NewWriter(c.Stdout)
	line := func(vals []string, dash bool) {
		if parsable {
			w.WriteString(strings.Join(vals, "|"))
			if trailing {
				w.WriteString("|")
			}
			w.WriteByte('\n')
			return
		}
		var b strings.Builder
		for i, v := range vals {
			if i > 0 {
				b.WriteByte(' ')
			}
			if dash {
				v = strings.Repeat("-", cols[i].width)
			}
			b.WriteString(padTo(v, cols[i].width, !cols[i].left))
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	if !getopt.Has(ps, "noheader") {
		var hs []string
		for _, cl := range cols {
			hs = append(hs, cl.name)
		}
		line(hs, false)
		if !parsable {
			line(hs, true)
		}
	}
	for i := range rows {
		vals := make([]string, len(cols))
		for k, cl := range cols {
			vals[k] = cl.val(&rows[i])
		}
		line(vals, false)
	}
	return w.Flush()
}
