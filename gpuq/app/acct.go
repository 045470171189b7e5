package app

import (
	"fmt"
	"time"

	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

// now is the clock gpuq acct reads its default window and "now-1day" from.
var now = time.Now

func acctCommand() *cli.Command {
	return &cli.Command{
		Name:  "acct",
		Usage: "list finished and running jobs from accounting (sacct)",
		Description: "Lists jobs that were eligible or running at some time between --starttime (default: midnight " +
			"today, or the beginning of time with --jobs) and --endtime (default: now), with columns " +
			"JobID JobName User Account Partition State ExitCode Elapsed GPUs GPUHours. ExitCode is code:signal, 0:N for a job killed by signal N as in Slurm (0:15: cancelled), and 0:125 for an OUT_OF_MEMORY job, as Slurm shows it. " +
			"With --jobs, each job is followed by its steps (N.batch for the batch script, N.0, N.1, ... for each srun), unless -X. " +
			"With -D, a requeued job shows one row per attempt, like sacct --duplicates; the attempt, checkpoint " +
			"and lost_work fields show each attempt's number, newest sealed checkpoint and the work its requeue threw away. " +
			"Users other than root see only their own jobs.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "jobs", Aliases: []string{"j"}, Usage: "only these job ids (comma list)"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only jobs of these users (comma list); others than your own need root"},
			&cli.BoolFlag{Name: "allusers", Aliases: []string{"a"}, Usage: "jobs of all users (root's default; other users still see only their own)"},
			&cli.StringFlag{Name: "account", Aliases: []string{"A"}, Usage: "only jobs of these accounts (comma list)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"r"}, Usage: "only jobs in these partitions (comma list)"},
			&cli.StringFlag{Name: "state", Aliases: []string{"s"}, Usage: "only jobs in these states: short or long names (comma list)"},
			&cli.StringFlag{Name: "starttime", Aliases: []string{"S"}, Usage: "window start: " + slurmtime.Summary + "; a bare time of day is today's (default: midnight today)"},
			&cli.StringFlag{Name: "endtime", Aliases: []string{"E"}, Usage: "window end, in the forms of --starttime (default: now)"},
			&cli.StringFlag{Name: "format", Aliases: []string{"o"}, Usage: "columns (default \"" + format.DefaultAcctFormat + "\"), a comma list of " + format.AcctFieldNames()},
			&cli.BoolFlag{Name: "parsable", Aliases: []string{"p"}, Usage: "separate fields with | and end each line with one, unpadded"},
			&cli.BoolFlag{Name: "csv", Usage: "print CSV"},
			&cli.BoolFlag{Name: "duplicates", Aliases: []string{"D"}, Usage: "one row per attempt of a requeued job, with that attempt's start, end, elapsed, nodes, state and reason (with --json: each job's attempt_history)"},
			&cli.BoolFlag{Name: "allocations", Aliases: []string{"X"}, Usage: "with --jobs, the jobs only: no rows for their steps (N.batch, N.0, ...)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: an array of jobs with every accounting field"},
			&cli.BoolFlag{Name: "noheader", Aliases: []string{"n"}, Usage: "print no header line"},
		},
		Action: acct,
	}
}

func acct(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq acct takes no arguments, got %q; select jobs with -j", args[0])
	}
	if err := oneOutputStyle(c); err != nil {
		return err
	}
	var f api.AcctFilter
	if !c.Bool("allusers") {
		f.Users = splitList(c.String("user"))
	} else if c.IsSet("user") {
		return invalid("--allusers and --user contradict each other; give one")
	}
	f.Accounts = splitList(c.String("account"))
	f.Partitions = splitList(c.String("partition"))
	for _, s := range splitList(c.String("jobs")) {
		id, err := ParseJobID(s)
		if err != nil {
			return fmt.Errorf("--jobs: %w", err)
		}
		f.IDs = append(f.IDs, id)
	}
	for _, s := range splitList(c.String("state")) {
		st, err := format.ParseState(s)
		if err != nil {
			return invalid("--state: %v", err)
		}
		f.States = append(f.States, st)
	}
	// Like sacct: -j alone looks at those jobs whenever they ran.
	t := now()
	defStart := midnight(t)
	if len(f.IDs) > 0 {
		defStart = time.Time{}
	}
	if f.Start, f.End, err = window(c, t, defStart, time.Time{}); err != nil {
		return err
	}
	af := format.DefaultAcctFormat
	if c.IsSet("format") {
		af = c.String("format")
	}
	parsed, err := format.ParseAcctFormat(af)
	if err != nil {
		return invalid("--format: %v", err)
	}
	dup := c.Bool("duplicates")
	f.AttemptHistory = dup || !c.Bool("json") && parsed.NeedsAttempts()
	// Jobs named with -j show their steps too, as sacct -j does.
	f.Steps = len(f.IDs) > 0 && !c.Bool("allocations") && !dup
	cl, err := client(c)
	if err != nil {
		return err
	}
	jobs, err := cl.AcctJobs(c.Context, f)
	if err != nil {
		return fmt.Errorf("list accounted jobs: %w", err)
	}
	if c.Bool("json") {
		return format.WriteAcctJSON(c.App.Writer, jobs)
	}
	if dup {
		jobs = format.ExpandAttempts(jobs)
	}
	if f.Steps {
		jobs = format.ExpandSteps(jobs, nil)
	}
	switch {
	case c.Bool("csv"):
		return format.WriteAcct(c.App.Writer, jobs, parsed, format.AcctCSV, c.Bool("noheader"))
	case c.Bool("parsable"):
		return format.WriteAcct(c.App.Writer, jobs, parsed, format.AcctParsable, c.Bool("noheader"))
	}
	return format.WriteAcct(c.App.Writer, jobs, parsed, format.AcctTable, c.Bool("noheader"))
}

func midnight(t time.Time) time.Time {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, t.Location())
}

// oneOutputStyle refuses more than one of --parsable, --csv and --json.
func oneOutputStyle(c *cli.Context) error {
	outputs := 0
	for _, o := range []string{"parsable", "csv", "json"} {
		if c.Bool(o) {
			outputs++
		}
	}
	if outputs > 1 {
		return invalid("choose one of --parsable, --csv and --json")
	}
	return nil
}

// window reads --starttime and --endtime (slurmtime's grammar, pointing
// back from t as sacct's does), falling back to defStart and defEnd; a zero
// end means open-ended.
func window(c *cli.Context, t, defStart, defEnd time.Time) (start, end time.Time, err error) {
	start, end = defStart, defEnd
	if v := c.String("starttime"); v != "" {
		if start, err = slurmtime.Parse(v, t, slurmtime.Past); err != nil {
			return start, end, invalid("--starttime: %v", err)
		}
	}
	if v := c.String("endtime"); v != "" {
		if end, err = slurmtime.Parse(v, t, slurmtime.Past); err != nil {
			return start, end, invalid("--endtime: %v", err)
		}
	}
	if !end.IsZero() && end.Before(start) {
		return start, end, invalid("--endtime %s is before the start of the window (%s); give a later --endtime or an earlier --starttime",
			end.Format(format.TimeLayout), start.Format(format.TimeLayout))
	}
	return start, end, nil
}
