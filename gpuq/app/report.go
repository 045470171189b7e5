package app

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/plot"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

// reportGroups maps gpuq report's argument to the API's group key.
var reportGroups = []struct{ arg, group string }{
	{"users", api.GroupByUser},
	{"accounts", api.GroupByAccount},
	{"partitions", api.GroupByPartition},
	{"models", api.GroupByGPUModel},
}

// The views of gpuq report that are not a grouping.
const (
	viewCluster = "cluster"
	viewTree    = "tree"
)

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "GPU- and CPU-hours per user, account, partition or GPU model; cluster utilisation; account tree (sreport)",
		ArgsUsage: "[users|accounts|partitions|models|cluster|tree]",
		Description: "Totals accounted usage between --starttime (default: midnight today) and --endtime (default: now), " +
			"grouped by user (the default), account, partition or GPU model, with columns Group Jobs GPUHours GPUShare% " +
			"CPUHours IdleGPUHours (allocated but sampled under 5% utilisation) SliceHours EnergyKWh CO2kg Cost and a TOTAL " +
			"line; --top N keeps the N largest by GPU-hours. Like sreport, hours are clipped to the window, so a job that ran " +
			"across its edge counts only its hours inside; gpuq acct shows whole jobs. Jobs counts the jobs eligible or " +
			"running in the window. Users other than root and operators see only their own usage. " +
			"'gpuq report tree' shows the [[account]] tree, each account with its sub-accounts' usage. " +
			"'gpuq report cluster' shows the cluster's utilisation by GPU model and MIG profile: the GPUs the controller " +
			"knows, their GPU-hours in the window, and the allocated, idle (allocated but sampled under 5%) and down " +
			"(node DOWN or drained) GPU-hours with their share of the model's capacity. " +
			"--plot FILE.svg or FILE.png draws the cluster's allocated and down GPUs over time (in --bucket steps) and " +
			"the GPU-hours per account.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only jobs of these users (comma list); others than your own need root"},
			&cli.StringFlag{Name: "account", Aliases: []string{"A"}, Usage: "only jobs of these accounts (comma list)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"r"}, Usage: "only jobs in these partitions (comma list)"},
			&cli.StringFlag{Name: "starttime", Aliases: []string{"S"}, Usage: "window start, in the forms of gpuq acct --starttime (default: midnight today)"},
			&cli.StringFlag{Name: "endtime", Aliases: []string{"E"}, Usage: "window end, in the forms of gpuq acct --starttime (default: now)"},
			&cli.IntFlag{Name: "top", Usage: "keep only the `N` groups with the most GPU-hours (users, accounts, partitions, models)"},
			&cli.StringFlag{Name: "plot", Usage: "draw utilisation over time and usage per account to `FILE` (.svg or .png) instead of printing"},
			&cli.StringFlag{Name: "bucket", Usage: "step of --plot's time axis and of cluster --json's series: a `DURATION` such as 1h or 1d (default: a hundredth of the window, at least 1m)"},
			&cli.BoolFlag{Name: "parsable", Aliases: []string{"p"}, Usage: "separate fields with | and end each line with one, unpadded"},
			&cli.BoolFlag{Name: "csv", Usage: "print CSV"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: group, window, rows with gpu_share_pct, and the total"},
			&cli.BoolFlag{Name: "noheader", Aliases: []string{"n"}, Usage: "print no header line"},
		},
		Action: report,
	}
}

func report(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	view := api.GroupByUser
	switch {
	case len(args) > 1:
		return invalid("gpuq report takes one of users, accounts, partitions, models, cluster or tree, got %q", args)
	case len(args) == 1:
		view = ""
		for _, g := range reportGroups {
			if args[0] == g.arg || args[0] == g.group {
				view = g.group
			}
		}
		if args[0] == viewCluster || args[0] == viewTree {
			view = args[0]
		}
		if view == "" {
			return invalid("gpuq report has no view %q; use users, accounts, partitions, models, cluster or tree", args[0])
		}
	}
	if err := oneOutputStyle(c); err != nil {
		return err
	}
	top := c.Int("top")
	if top < 0 || c.IsSet("top") && top == 0 {
		return invalid("--top %d: give a positive number of groups to keep", top)
	}
	if top > 0 && (view == viewCluster || view == viewTree) {
		return invalid("--top applies to users, accounts, partitions and models, not to %s", view)
	}
	bucket, err := parseBucket(c.String("bucket"))
	if err != nil {
		return err
	}
	f := api.AcctFilter{
		Users:      splitList(c.String("user")),
		Accounts:   splitList(c.String("account")),
		Partitions: splitList(c.String("partition")),
	}
	t := now()
	if f.Start, f.End, err = window(c, t, midnight(t), t); err != nil {
		return err
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	if name := c.String("plot"); name != "" {
		return reportPlot(c, cl, name, f, bucket)
	}
	style := format.AcctTable
	switch {
	case c.Bool("csv"):
		style = format.AcctCSV
	case c.Bool("parsable"):
		style = format.AcctParsable
	}
	if view == viewCluster {
		cr, err := cl.AcctCluster(c.Context, f.Start, f.End, bucket)
		if err != nil {
			return fmt.Errorf("report cluster utilisation: %w", err)
		}
		r := format.NewClusterReport(cr)
		if c.Bool("json") {
			return format.WriteJSON(c.App.Writer, r)
		}
		r.Series = nil
		return format.WriteCluster(c.App.Writer, r, style, c.Bool("noheader"))
	}
	group := view
	if view == viewTree {
		group = api.GroupByAccount
	}
	sum, err := cl.AcctSummary(c.Context, group, f)
	if err != nil {
		return fmt.Errorf("summarise accounting: %w", err)
	}
	r := format.NewReport(sum)
	switch {
	case view == viewTree:
		tree, err := cl.Fairshare(c.Context)
		if err != nil {
			return fmt.Errorf("read the account tree: %w", err)
		}
		r = format.AccountTree(r, tree)
	case top > 0:
		r.KeepTop(top)
	}
	if c.Bool("json") {
		return format.WriteReportJSON(c.App.Writer, r)
	}
	return format.WriteReport(c.App.Writer, r, style, c.Bool("noheader"))
}

// parseBucket reads --bucket: a Go duration or a number of days ("1d").
func parseBucket(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if n, nerr := strconv.Atoi(strings.TrimSuffix(v, "d")); err != nil && strings.HasSuffix(v, "d") && nerr == nil {
		d, err = time.Duration(n)*24*time.Hour, nil
	}
	if err != nil || d < time.Second {
		return 0, invalid("--bucket %q is not a duration of a second or more, such as 15m, 1h or 1d", v)
	}
	return d, nil
}

// reportPlot draws the cluster's allocated and down GPUs over the window
// and the GPU-hours per account to name.
func reportPlot(c *cli.Context, cl *api.Client, name string, f api.AcctFilter, bucket time.Duration) error {
	if c.Bool("json") || c.Bool("csv") || c.Bool("parsable") {
		return invalid("--plot writes a chart, not --json, --csv or --parsable; drop one of them")
	}
	if ext := strings.ToLower(filepath.Ext(name)); ext != ".svg" && ext != ".png" {
		return invalid("--plot %q: name a .svg or .png file", name)
	}
	cr, err := cl.AcctCluster(c.Context, f.Start, f.End, bucket)
	if err != nil {
		return fmt.Errorf("report cluster utilisation: %w", err)
	}
	sum, err := cl.AcctSummary(c.Context, api.GroupByAccount, f)
	if err != nil {
		return fmt.Errorf("summarise accounting: %w", err)
	}
	alloc, down := plot.Series{Name: "allocated"}, plot.Series{Name: "down or drained"}
	for _, p := range cr.Series {
		x := p.Time.Sub(cr.Start).Hours()
		pct := func(h float64) float64 {
			if p.CapacityGPUHours <= 0 {
				return 0
			}
			return 100 * h / p.CapacityGPUHours
		}
		alloc.X, alloc.Y = append(alloc.X, x), append(alloc.Y, pct(p.AllocatedGPUHours))
		down.X, down.Y = append(down.X, x), append(down.Y, pct(p.DownGPUHours))
	}
	start := cr.Start
	lines := plot.Lines{
		Title:  fmt.Sprintf("GPU utilisation %s to %s", cr.Start.Format("2006-01-02 15:04"), cr.End.Format("2006-01-02 15:04")),
		XLabel: "time (UTC)", YLabel: "% of GPUs", Series: []plot.Series{alloc, down},
		XTick: func(h float64) string { return start.Add(time.Duration(h * float64(time.Hour))).Format("01-02 15:04") },
	}
	r := format.NewReport(sum)
	r.KeepTop(20) // a readable number of bars
	bars := plot.Bars{Title: "GPU-hours per account", XLabel: "GPU-hours"}
	for _, row := range r.Rows {
		bars.Labels = append(bars.Labels, cmp.Or(row.Group, "(none)"))
		bars.Values = append(bars.Values, row.GPUHours)
	}
	fh, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := plot.Write(fh, name, lines, bars); err != nil {
		fh.Close()
		return fmt.Errorf("--plot: write %s: %w", name, err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("--plot: write %s: %w", name, err)
	}
	fmt.Fprintf(c.App.Writer, "plotted utilisation over %d steps and %d accounts to %s\n", len(cr.Series), len(bars.Labels), name)
	return nil
}
