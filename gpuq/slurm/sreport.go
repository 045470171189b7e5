package slurm

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
)

var sreportSet = &getopt.Set{Opts: append([]getopt.Opt{
	{Long: "help", Short: 'h'},
	{Long: "noheader", Short: 'n'},
	{Long: "parsable2", Short: 'P'},
	{Long: "parsable", Short: 'p'},
	{Long: "time", Short: 't', Arg: getopt.Required},
	{Long: "tres", Short: 'T', Arg: getopt.Required},
	{Long: "all_clusters", Short: 'a'},
}, common...)}

// srCol is one sreport column: header, width, left justified or not.
type srCol struct {
	name  string
	width int
	left  bool
}

// sreport is Slurm's sreport over gpud's accounting: cluster utilization,
// cluster accountutilizationbyuser, user topusage and reservation
// utilization (each reservation window's allocated and idle reserved
// GPU-time, as Slurm's: the period picks windows, whole), in TRES minutes
// (hours, seconds or percent with -t) of gres/gpu, or cpu with -T cpu
// for the user and account reports.
func (c *Cmd) sreport(ctx context.Context) error {
	ps, rest, err := c.parse(sreportSet)
	if done, err := c.handled(err, "[-n] [-P|-p] [-t minutes|hours|seconds|percent] [-T gres/gpu|cpu] cluster utilization|cluster accountutilizationbyuser|user topusage|reservation utilization [start=TIME] [end=TIME] [topcount=N] [users=...] [accounts=...] [names=...] [nodes=...]"); done || err != nil {
		return err
	}
	if len(rest) < 2 {
		return invalid("give a report: cluster utilization, cluster accountutilizationbyuser, user topusage or reservation utilization")
	}
	report := strings.ToLower(rest[0]) + " " + strings.ToLower(rest[1])
	unit := "minutes"
	if v, ok := getopt.Last(ps, "time"); ok {
		unit = strings.ToLower(v)
		switch unit {
		case "minutes", "hours", "seconds", "percent":
		default:
			return invalid("-t %s: use minutes, hours, seconds or percent", v)
		}
	}
	tres := "gres/gpu"
	if v, ok := getopt.Last(ps, "tres"); ok {
		tres = strings.ToLower(v)
		if tres != "gres/gpu" && tres != "cpu" {
			return invalid("-T %s: gpud accounts gres/gpu and cpu", v)
		}
	}
	y, m, d := c.Now.Date()
	end := time.Date(y, m, d, 0, 0, 0, 0, c.Now.Location())
	start := end.AddDate(0, 0, -1) // sreport's default: yesterday
	top := 10
	var users, accounts, names, onNodes []string
	for _, w := range rest[2:] {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			return invalid("%q is not KEY=VALUE; use start=, end=, topcount=, users=, accounts=", w)
		}
		switch strings.ToLower(k) {
		case "start":
			if start, err = c.pastTime("start=", v); err != nil {
				return err
			}
		case "end":
			if end, err = c.pastTime("end=", v); err != nil {
				return err
			}
		case "topcount":
			if top, err = strconv.Atoi(v); err != nil || top < 1 {
				return invalid("topcount=%q: give a whole number of at least 1", v)
			}
		case "users", "user":
			users = splitList(v)
		case "accounts", "account":
			accounts = splitList(v)
		case "names", "name":
			names = splitList(v)
		case "nodes", "node":
			if onNodes, err = hostlist.Expand(v); err != nil {
				return invalid("nodes=%s: %v", v, err)
			}
		case "cluster", "clusters":
		default:
			return invalid("%s= is not supported; use start=, end=, topcount=, users=, accounts= (names=, nodes= for reservation utilization)", k)
		}
	}
	if !end.After(start) {
		return invalid("end %s is not after start %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	amount := func(hours, total float64) string {
		switch unit {
		case "hours":
			return strconv.FormatFloat(hours, 'f', 0, 64)
		case "seconds":
			return strconv.FormatFloat(hours*3600, 'f', 0, 64)
		case "percent":
			if total <= 0 {
				return "0.00%"
			}
			return strconv.FormatFloat(100*hours/total, 'f', 2, 64) + "%"
		}
		return strconv.FormatFloat(hours*60, 'f', 0, 64)
	}
	var title string
	var cols []srCol
	var rows [][]string
	switch report {
	case "cluster utilization":
		if tres != "gres/gpu" {
			return invalid("cluster utilization: gpud reports gres/gpu only")
		}
		cu, err := cl.AcctCluster(ctx, start, end, 0)
		if err != nil {
			return fmt.Errorf("read cluster usage: %w", err)
		}
		var total, alloc, down, plnd, idle float64
		for _, r := range cu.Rows {
			total += r.TotalGPUHours
			alloc += r.AllocatedGPUHours
			down += r.DownGPUHours
			plnd += r.PoweredDownGPUHours
		}
		// Slurm counts a reservation's idle time as Allocated, a MAINT
		// one's as Planned Down.
		alloc += cu.ReservedIdleGPUHours
		plnd += cu.MaintIdleGPUHours
		idle = max(total-alloc-down-plnd, 0)
		title = "Cluster Utilization"
		cols = []srCol{{"Cluster", 9, false}, {"TRES Name", 14, false}, {"Allocated", 13, false}, {"Down", 13, false},
			{"PLND Down", 13, false}, {"Idle", 13, false}, {"Planned", 10, false}, {"Reported", 14, false}}
		rows = append(rows, []string{clusterName, "gres/gpu", amount(alloc, total), amount(down, total), amount(plnd, total),
			amount(idle, total), amount(0, total), amount(total, total)})
	case "user topusage", "cluster accountutilizationbyuser":
		f := api.AcctFilter{Users: users, Accounts: accounts, Start: start, End: end}
		byUser, err := cl.AcctSummary(ctx, api.GroupByUser, f)
		if err != nil {
			return fmt.Errorf("read usage: %w", err)
		}
		val := func(r api.AcctSummaryRow) float64 {
			if tres == "cpu" {
				return r.CPUHours
			}
			return r.GPUHours
		}
		var total float64
		for _, r := range byUser.Rows {
			total += val(r)
		}
		if report == "user topusage" {
			title = "Top " + strconv.Itoa(top) + " Users"
			cols = []srCol{{"Cluster", 9, false}, {"Login", 9, false}, {"Proper Name", 15, false}, {"Used", 9, false}, {"Energy", 9, false}}
			rs := slices.Clone(byUser.Rows)
			slices.SortStableFunc(rs, func(a, b api.AcctSummaryRow) int { return -cmpFloat(val(a), val(b)) })
			for i, r := range rs {
				if i == top {
					break
				}
				rows = append(rows, []string{clusterName, r.Group, r.Group, amount(val(r), total), strconv.FormatFloat(r.EnergyKWh*3.6e6, 'f', 0, 64)})
			}
			break
		}
		// Accounts, each followed by its users: one query per account.
		byAcct, err := cl.AcctSummary(ctx, api.GroupByAccount, f)
		if err != nil {
			return fmt.Errorf("read usage: %w", err)
		}
		title = "Cluster/Account/User Utilization"
		cols = []srCol{{"Cluster", 9, false}, {"Account", 15, false}, {"Login", 9, false}, {"Proper Name", 15, false}, {"Used", 9, false}, {"Energy", 9, false}}
		for _, a := range byAcct.Rows {
			rows = append(rows, []string{clusterName, a.Group, "", "", amount(val(a), total), strconv.FormatFloat(a.EnergyKWh*3.6e6, 'f', 0, 64)})
			fa := f
			fa.Accounts = []string{a.Group}
			us, err := cl.AcctSummary(ctx, api.GroupByUser, fa)
			if err != nil {
				return fmt.Errorf("read usage: %w", err)
			}
			for _, u := range us.Rows {
				rows = append(rows, []string{clusterName, a.Group, u.Group, u.Group, amount(val(u), total), strconv.FormatFloat(u.EnergyKWh*3.6e6, 'f', 0, 64)})
			}
		}
	case "reservation utilization":
		if tres != "gres/gpu" {
			return invalid("reservation utilization: gpud reserves and reports gres/gpu only")
		}
		ru, err := cl.AcctReservations(ctx, start, end, names)
		if err != nil {
			return fmt.Errorf("read reservation usage: %w", err)
		}
		title = "Reservation Utilization"
		cols = []srCol{{"Cluster", 9, false}, {"Name", 9, false}, {"Start", 19, false}, {"End", 19, false}, {"TRES Name", 14, false},
			{"Allocated", 20, false}, {"Idle", 20, false}}
		layout := "2006-01-02T15:04:05"
		for _, r := range ru.Rows {
			if len(onNodes) > 0 && !slices.ContainsFunc(r.Nodes, func(n string) bool { return slices.Contains(onNodes, n) }) {
				continue
			}
			total := float64(r.GPUs) * float64(r.TotalSeconds) / 3600
			rows = append(rows, []string{clusterName, r.Name, r.Start.Local().Format(layout), r.End.Local().Format(layout), "gres/gpu",
				amount(r.AllocGPUSeconds/3600, total), amount(r.IdleGPUSeconds/3600, total)})
		}
	default:
		return invalid("%s %s is not supported; gpud's sreport has cluster utilization, cluster accountutilizationbyuser, user topusage and reservation utilization", rest[0], rest[1])
	}
	w := bufio.NewWriter(c.Stdout)
	parsable := getopt.Has(ps, "parsable2") || getopt.Has(ps, "parsable")
	trailing := getopt.Has(ps, "parsable") && !getopt.Has(ps, "parsable2")
	if !getopt.Has(ps, "noheader") {
		rule := strings.Repeat("-", 80)
		unitName := "TRES Minutes"
		switch unit {
		case "hours":
			unitName = "TRES Hours"
		case "seconds":
			unitName = "TRES Seconds"
		case "percent":
			unitName = "TRES Percent"
		}
		layout := "2006-01-02T15:04:05"
		fmt.Fprintf(w, "%s\n%s %s - %s\nUsage reported in %s\n%s\n", rule, title, start.Format(layout), end.Add(-time.Second).Format(layout), unitName, rule)
	}
	line := func(vals []string, header bool) {
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
			b.WriteString(padTo(v, cols[i].width, !cols[i].left))
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	if !getopt.Has(ps, "noheader") {
		var hs, dashes []string
		for _, col := range cols {
			hs = append(hs, col.name)
			dashes = append(dashes, strings.Repeat("-", col.width))
		}
		line(hs, true)
		if !parsable {
			w.WriteString(strings.Join(dashes, " ") + "\n")
		}
	}
	for _, r := range rows {
		line(r, false)
	}
	return w.Flush()
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
