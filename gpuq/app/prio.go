package app

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

func prioCommand() *cli.Command {
	return &cli.Command{
		Name:  "prio",
		Usage: "show every factor of pending jobs' priorities (sprio)",
		Description: "Lists the pending jobs the scheduler considers, highest priority first, with columns JOBID USER " +
			"ACCOUNT PRIORITY AGE FAIRSHARE JOBSIZE PARTITION QOS NICE: the total and each multifactor factor times its " +
			"weight, and the job's nice value. --json gives each factor both normalised to [0,1] and weighted. Array " +
			"tasks held back by their array's %MAX limit are not listed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "jobs", Aliases: []string{"j"}, Usage: "only these job ids (comma list)"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only jobs of these users (comma list)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: every job with its factors normalised and weighted"},
			&cli.BoolFlag{Name: "noheader", Usage: "print no header line"},
		},
		Action: prio,
	}
}

func prio(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq prio takes no arguments, got %q; select jobs with -j", args[0])
	}
	var ids []spec.JobID
	for _, s := range splitList(c.String("jobs")) {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return invalid("gpuq prio -j: %q is not a job id (a positive whole number)", s)
		}
		ids = append(ids, spec.JobID(n))
	}
	users := splitList(c.String("user"))
	cl, err := client(c)
	if err != nil {
		return err
	}
	ps, err := cl.Priorities(c.Context)
	if err != nil {
		return fmt.Errorf("list job priorities: %w", err)
	}
	ps = slices.DeleteFunc(ps, func(p api.JobPriority) bool {
		return len(ids) > 0 && !slices.Contains(ids, p.JobID) || len(users) > 0 && !slices.Contains(users, p.User)
	})
	if c.Bool("json") {
		if ps == nil {
			ps = []api.JobPriority{}
		}
		return format.WriteJSON(c.App.Writer, ps)
	}
	return format.WritePriorities(c.App.Writer, ps, c.Bool("noheader"))
}

func shareCommand() *cli.Command {
	return &cli.Command{
		Name:  "share",
		Usage: "show fairshare shares, usage and factors per account and user (sshare)",
		Description: "Prints the account tree in Fair Tree order, each account followed by its users, with columns " +
			"Account User RawShares NormShares RawUsage EffectvUsage FairShare. RawUsage is billed GPU-seconds; " +
			"EffectvUsage is the decayed usage as a fraction of the siblings'; FairShare is a user's Fair Tree factor " +
			"in [0,1] (the fairshare factor of gpuq prio). --json adds the decayed usage and LevelFS.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON: every row with shares, raw, effective and normalised usage, LevelFS and factor"},
			&cli.BoolFlag{Name: "noheader", Usage: "print no header line"},
		},
		Action: share,
	}
}

func share(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq share takes no arguments, got %q", args[0])
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	rows, err := cl.Fairshare(c.Context)
	if err != nil {
		return fmt.Errorf("read fairshare: %w", err)
	}
	if c.Bool("json") {
		if rows == nil {
			rows = []api.FairshareRow{}
		}
		return format.WriteJSON(c.App.Writer, rows)
	}
	return format.WriteFairshare(c.App.Writer, rows, c.Bool("noheader"))
}
