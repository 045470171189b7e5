package app

import (
	"fmt"

	"github.com/gpud/gpud/gpud/api"
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

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "total GPU- and CPU-hours per user, account, partition or GPU model (sreport)",
		ArgsUsage: "[users|accounts|partitions|models]",
		Description: "Totals accounted usage between --starttime (default: midnight today) and --endtime (default: now), " +
			"grouped by user (the default), account, partition or GPU model, with columns Group Jobs GPUHours GPUShare% " +
			"CPUHours and a TOTAL line. Like sreport, hours are clipped to the window, so a job that ran across its edge " +
			"counts only its hours inside; gpuq acct shows whole jobs. Jobs counts the jobs eligible or running in the " +
			"window. Users other than root and operators see only their own usage.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only jobs of these users (comma list); others than your own need root"},
			&cli.StringFlag{Name: "account", Aliases: []string{"A"}, Usage: "only jobs of these accounts (comma list)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"r"}, Usage: "only jobs in these partitions (comma list)"},
			&cli.StringFlag{Name: "starttime", Aliases: []string{"S"}, Usage: "window start, in the forms of gpuq acct --starttime (default: midnight today)"},
			&cli.StringFlag{Name: "endtime", Aliases: []string{"E"}, Usage: "window end, in the forms of gpuq acct --starttime (default: now)"},
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
	group := api.GroupByUser
	switch {
	case len(args) > 1:
		return invalid("gpuq report takes one of users, accounts, partitions or models, got %q", args)
	case len(args) == 1:
		group = ""
		for _, g := range reportGroups {
			if args[0] == g.arg || args[0] == g.group {
				group = g.group
			}
		}
		if group == "" {
			return invalid("gpuq report cannot group by %q; use users, accounts, partitions or models", args[0])
		}
	}
	if err := oneOutputStyle(c); err != nil {
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
	sum, err := cl.AcctSummary(c.Context, group, f)
	if err != nil {
		return fmt.Errorf("summarise accounting: %w", err)
	}
	r := format.NewReport(sum)
	switch {
	case c.Bool("json"):
		return format.WriteReportJSON(c.App.Writer, r)
	case c.Bool("csv"):
		return format.WriteReport(c.App.Writer, r, format.AcctCSV, c.Bool("noheader"))
	case c.Bool("parsable"):
		return format.WriteReport(c.App.Writer, r, format.AcctParsable, c.Bool("noheader"))
	}
	return format.WriteReport(c.App.Writer, r, format.AcctTable, c.Bool("noheader"))
}
