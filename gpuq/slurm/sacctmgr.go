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

var sacctmgrSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "help", Short: 'h'}, // in this command -h is --help
	{Long: "noheader", Short: 'n'},
	{Long: "parsable2", Short: 'P'},
	{Long: "parsable", Short: 'p'},
	{Long: "associations", Short: 's'},
	{Long: "immediate", Short: 'i'},
	{Long: "readonly", Short: 'r'},
	{Long: "json"},
}, common...)}

// clusterName is what sacctmgr's Cluster column shows.
const clusterName = "gpud"

// assocRow is one row of a sacctmgr listing: an account, a user, an
// association (account with or without a user) or a QOS.
type assocRow struct {
	acct    *api.AssocAccount
	user    string
	defAcct string
	qos     *api.AssocQOS
	assoc   *api.AssociationsResponse
}

type mgrField struct {
	name  string
	width int
	value func(r *assocRow) string
}

func limit(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

var mgrFields = []mgrField{
	{"Cluster", 10, func(*assocRow) string { return clusterName }},
	{"Account", 10, func(r *assocRow) string {
		if r.acct == nil {
			return ""
		}
		return r.acct.Name
	}},
	{"Descr", 20, func(r *assocRow) string {
		if r.acct == nil {
			return ""
		}
		return r.acct.Name
	}},
	{"Org", 20, func(r *assocRow) string {
		if r.acct == nil {
			return ""
		}
		return orDefault(r.acct.Parent, r.acct.Name)
	}},
	{"ParentName", 10, func(r *assocRow) string {
		if r.acct == nil || r.user != "" {
			return ""
		}
		return orDefault(r.acct.Parent, "root")
	}},
	{"User", 10, func(r *assocRow) string { return r.user }},
	{"Def Acct", 10, func(r *assocRow) string { return r.defAcct }},
	{"DefaultAccount", 10, func(r *assocRow) string { return r.defAcct }},
	{"Admin", 9, func(r *assocRow) string { return "None" }},
	{"Partition", 10, func(*assocRow) string { return "" }},
	{"Share", 9, func(r *assocRow) string {
		if r.acct == nil {
			return ""
		}
		if r.user != "" {
			return "1"
		}
		return strconv.Itoa(max(r.acct.Shares, 1))
	}},
	{"Priority", 10, func(r *assocRow) string {
		if r.qos != nil {
			return strconv.Itoa(r.qos.Priority)
		}
		return ""
	}},
	{"GrpJobs", 7, func(r *assocRow) string {
		if r.acct == nil || r.user != "" {
			return ""
		}
		return limit(r.acct.MaxJobs)
	}},
	{"GrpTRES", 13, func(r *assocRow) string {
		if r.acct == nil || r.user != "" || r.acct.MaxGPUs == 0 {
			return ""
		}
		return "gres/gpu=" + strconv.Itoa(r.acct.MaxGPUs)
	}},
	{"GrpSubmit", 9, func(r *assocRow) string {
		if r.acct == nil || r.user != "" {
			return ""
		}
		return limit(r.acct.MaxSubmitJobs)
	}},
	{"GrpTRESMins", 13, func(r *assocRow) string {
		if r.acct == nil || r.user != "" || r.acct.MaxGPUHours == 0 {
			return ""
		}
		return "gres/gpu=" + strconv.FormatFloat(r.acct.MaxGPUHours*60, 'f', 0, 64)
	}},
	{"MaxJobs", 7, func(*assocRow) string { return "" }},
	{"MaxSubmit", 9, func(*assocRow) string { return "" }},
	{"MaxWall", 11, func(r *assocRow) string {
		switch {
		case r.qos != nil && r.qos.MaxWall != 0:
			return string(format.AppendElapsed(nil, r.qos.MaxWall.Std()))
		case r.qos == nil && r.acct != nil && r.acct.MaxWall != 0 && r.user == "":
			return string(format.AppendElapsed(nil, r.acct.MaxWall.Std()))
		}
		return ""
	}},
	{"QOS", 20, func(r *assocRow) string {
		if r.acct == nil || r.assoc == nil {
			return ""
		}
		var names []string
		for _, q := range r.assoc.QOS {
			names = append(names, q.Name)
		}
		return strings.Join(names, ",")
	}},
	{"Def QOS", 9, func(r *assocRow) string {
		if r.acct == nil || r.assoc == nil {
			return ""
		}
		return r.assoc.DefaultQOS
	}},
	{"Name", 10, func(r *assocRow) string {
		if r.qos != nil {
			return r.qos.Name
		}
		return ""
	}},
	{"Preempt", 10, func(r *assocRow) string {
		if r.qos == nil {
			return ""
		}
		return strings.Join(r.qos.Preempt, ",")
	}},
	{"PreemptMode", 11, func(r *assocRow) string {
		if r.qos == nil {
			return ""
		}
		if len(r.qos.Preempt) == 0 {
			return "cluster"
		}
		return strings.ToLower(orDefault(r.qos.PreemptMode, "requeue"))
	}},
	{"MaxTRESPU", 13, func(r *assocRow) string {
		if r.qos == nil || r.qos.MaxGPUsPerUser == 0 {
			return ""
		}
		return "gres/gpu=" + strconv.Itoa(r.qos.MaxGPUsPerUser)
	}},
	{"MaxJobsPU", 9, func(r *assocRow) string {
		if r.qos == nil {
			return ""
		}
		return limit(r.qos.MaxJobsPerUser)
	}},
	{"Coordinators", 10, func(r *assocRow) string {
		if r.acct == nil {
			return ""
		}
		return strings.Join(r.acct.Coordinators, ",")
	}},
}

// sacctmgr's default listings (sacctmgr(1)).
var mgrDefaults = map[string]string{
	"account":       "Account,Descr,Org",
	"account-assoc": "Account,Descr,Org,Cluster,ParentName,User,Share,GrpJobs,GrpTRES,GrpSubmit,MaxWall,QOS,Def QOS",
	"user":          "User,Def Acct,Admin",
	"user-assoc":    "User,Def Acct,Admin,Cluster,Account,Partition,Share,MaxJobs,MaxSubmit,MaxWall,QOS,Def QOS",
	"association":   "Cluster,Account,User,Partition,Share,GrpJobs,GrpTRES,GrpSubmit,MaxJobs,MaxSubmit,MaxWall,QOS,Def QOS",
	"qos":           "Name,Priority,Preempt,PreemptMode,MaxWall,MaxTRESPU,MaxJobsPU",
}

func (c *Cmd) sacctmgr(ctx context.Context) error {
	ps, rest, err := c.parse(sacctmgrSet)
	if done, err := c.handled(err, "[-n] [-P|-p] [-s] list|show user|account|association|qos [NAMES] [where KEY=VALUE...] [format=FIELDS]"); done || err != nil {
		return err
	}
	if len(rest) == 0 {
		return invalid("no command given; gpud's sacctmgr lists only: list (or show) user, account, association or qos; admins edit gpud.toml")
	}
	verb := strings.ToLower(rest[0])
	if verb != "list" && verb != "show" {
		return invalid("%q is not supported: gpud's sacctmgr is read-only (list, show); accounts, users and QOS are edited in gpud.toml and loaded with gpuq reconfigure", rest[0])
	}
	if len(rest) < 2 {
		return invalid("list what? user, account, association or qos")
	}
	entity := strings.ToLower(strings.TrimSuffix(strings.ToLower(rest[1]), "s"))
	switch entity {
	case "user", "account", "qo", "association", "assoc":
	default:
		return invalid("list %s is not supported; gpud lists user, account, association and qos", rest[1])
	}
	if entity == "qo" {
		entity = "qos"
	}
	if entity == "assoc" {
		entity = "association"
	}
	var names, users, accounts []string
	fmtStr := ""
	withAssoc := getopt.Has(ps, "associations")
	for _, w := range rest[2:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			switch strings.ToLower(w) {
			case "where", "set":
			case "withassoc":
				withAssoc = true
			default:
				names = append(names, splitList(w)...)
			}
			continue
		}
		switch strings.ToLower(k) {
		case "format":
			fmtStr = v
		case "user", "users":
			users = append(users, splitList(v)...)
		case "account", "accounts":
			accounts = append(accounts, splitList(v)...)
		case "name", "names":
			names = append(names, splitList(v)...)
		case "cluster", "clusters", "partition", "partitions":
			// one cluster; partitions have no associations of their own
		default:
			return invalid("where %s= is not supported; use user=, account=, name= or format=", k)
		}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	as, err := cl.Associations(ctx)
	if err != nil {
		return fmt.Errorf("read associations: %w", err)
	}
	if getopt.Has(ps, "json") {
		return format.WriteJSON(c.Stdout, as)
	}
	rows, key := mgrRows(&as, entity, withAssoc, names, users, accounts)
	if fmtStr == "" {
		fmtStr = mgrDefaults[key]
	}
	cols, err := parseMgrFormat(fmtStr)
	if err != nil {
		return err
	}
	return c.writeMgr(ps, cols, rows)
}

// charges says whether user may charge account a: a lists the user, or
// lists nobody (open to everyone, as gpud's default account).
func charges(a *api.AssocAccount, user string) bool {
	return len(a.Users) == 0 || slices.Contains(a.Users, user)
}

// defaultAccount is the user's default account: gpud's default account
// when the user may charge it, else the first account listing the user,
// else (a user listed nowhere) gpud's default account.
func defaultAccount(as *api.AssociationsResponse, user string) string {
	first := ""
	for i := range as.Accounts {
		a := &as.Accounts[i]
		if charges(a, user) {
			if a.Name == as.DefaultAccount {
				return a.Name
			}
			if first == "" && slices.Contains(a.Users, user) {
				first = a.Name
			}
		}
	}
	if first == "" {
		return as.DefaultAccount
	}
	return first
}

func mgrRows(as *api.AssociationsResponse, entity string, withAssoc bool, names, users, accounts []string) ([]*assocRow, string) {
	want := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	var rows []*assocRow
	switch entity {
	case "qos":
		for i := range as.QOS {
			if want(names, as.QOS[i].Name) {
				rows = append(rows, &assocRow{qos: &as.QOS[i], assoc: as})
			}
		}
		return rows, "qos"
	case "account":
		for i := range as.Accounts {
			a := &as.Accounts[i]
			if !want(names, a.Name) || !want(accounts, a.Name) {
				continue
			}
			rows = append(rows, &assocRow{acct: a, assoc: as})
			if withAssoc {
				for _, u := range a.Users {
					if want(users, u) {
						rows = append(rows, &assocRow{acct: a, user: u, assoc: as})
					}
				}
			}
		}
		if withAssoc {
			return rows, "account-assoc"
		}
		return rows, "account"
	case "user":
		users = append(users, names...)
		var all []string
		for _, a := range as.Accounts {
			for _, u := range a.Users {
				if !slices.Contains(all, u) {
					all = append(all, u)
				}
			}
		}
		// A user named in the query and listed in no account's users
		// charges the accounts open to everyone: those are their
		// associations (Snakemake checks -A this way).
		if slices.ContainsFunc(as.Accounts, func(a api.AssocAccount) bool { return len(a.Users) == 0 }) {
			for _, u := range users {
				if !slices.Contains(all, u) {
					all = append(all, u)
				}
			}
		}
		slices.Sort(all)
		for _, u := range all {
			if !want(users, u) {
				continue
			}
			if !withAssoc {
				rows = append(rows, &assocRow{user: u, defAcct: defaultAccount(as, u), assoc: as})
				continue
			}
			for i := range as.Accounts {
				a := &as.Accounts[i]
				if charges(a, u) && want(accounts, a.Name) {
					rows = append(rows, &assocRow{acct: a, user: u, defAcct: defaultAccount(as, u), assoc: as})
				}
			}
		}
		if withAssoc {
			return rows, "user-assoc"
		}
		return rows, "user"
	}
	for i := range as.Accounts {
		a := &as.Accounts[i]
		if !want(accounts, a.Name) {
			continue
		}
		if len(users) == 0 {
			rows = append(rows, &assocRow{acct: a, assoc: as})
		}
		for _, u := range a.Users {
			if want(users, u) {
				rows = append(rows, &assocRow{acct: a, user: u, defAcct: defaultAccount(as, u), assoc: as})
			}
		}
	}
	return rows, "association"
}

type mgrCol struct {
	f     *mgrField
	width int
}

func parseMgrFormat(s string) ([]mgrCol, error) {
	var cols []mgrCol
	var names []string
	for i := range mgrFields {
		names = append(names, mgrFields[i].name)
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, w, hasW := strings.Cut(item, "%")
		norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), " ", "") }
		i := slices.IndexFunc(mgrFields, func(f mgrField) bool { return norm(f.name) == norm(name) })
		if i < 0 && norm(name) == "defacct" {
			i = slices.IndexFunc(mgrFields, func(f mgrField) bool { return f.name == "Def Acct" })
		}
		if i < 0 {
			hint := ""
			if m := getopt.SuggestFrom(name, names); m != "" {
				hint = "did you mean " + m + "? "
			}
			return nil, invalid("format: unknown field %q; %sgpud has: %s", name, hint, strings.Join(names, ","))
		}
		col := mgrCol{f: &mgrFields[i], width: mgrFields[i].width}
		if hasW {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 {
				return nil, invalid("format: bad width in %q; write Field%%N", item)
			}
			col.width = n
		}
		cols = append(cols, col)
	}
	return cols, nil
}

func (c *Cmd) writeMgr(ps []getopt.Parsed, cols []mgrCol, rows []*assocRow) error {
	w := bufio.NewWriter(c.Stdout)
	names, widths := make([]string, len(cols)), make([]int, len(cols))
	for i, col := range cols {
		names[i], widths[i] = col.f.name, col.width
	}
	t := newSacctTable(w, ps, "|", names, widths)
	vals := make([]string, len(cols))
	for _, r := range rows {
		for i, col := range cols {
			vals[i] = col.f.value(r)
		}
		t.row(vals)
	}
	return w.Flush()
}
