package app

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/termsafe"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
	"github.com/urfave/cli/v2"
)

// DefaultController is the address used when neither --controller nor
// GPUD_CONTROLLER is set.
const DefaultController = "unix:///run/gpud/gpud.sock"

func controllerFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "controller",
		Usage:   "controller address: unix:///path/gpud.sock or https://host:port; a comma-separated list for a controller group (https://c1:6817,https://c2:6817,https://c3:6817), whose leader gpuq follows",
		EnvVars: []string{api.EnvController},
		Value:   DefaultController,
	}
}

func fieldHelp() string {
	var b strings.Builder
	for i, f := range format.JobFields {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%%%c %s", f.Letter, f.Help)
	}
	return b.String()
}

// escapeOutput makes everything the app prints go through termsafe.
func escapeOutput(c *cli.Context) error {
	c.App.Writer = termsafe.New(c.App.Writer)
	c.App.ErrWriter = termsafe.New(c.App.ErrWriter)
	return nil
}

// New returns gpuq's cli.App.
func New() *cli.App {
	// A fresh flag per command: urfave/cli flags keep per-parse state.
	jsonFlag := func() cli.Flag { return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"} }
	return &cli.App{
		Name:      "gpuq",
		Usage:     "list and manage gpud jobs and nodes",
		UsageText: "gpuq [options]\ngpuq COMMAND [options] [ARGS...]",
		Description: "Without a command, gpuq lists pending and running jobs like squeue: " +
			"JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON). ST is Slurm's short state " +
			"(PD R CG CD F CA TO PR NF OOM RQ S); a pending job shows why it waits in parentheses. " +
			"A task of a job array shows as ARRAYID_TASK; the commands that take JOB accept that form, " +
			"and a bare array id in cancel, hold, release or requeue acts on every task of the array (like scancel). " +
			"--format fields: " + fieldHelp() + "; %[.][size] sets a width (. right-justifies, longer values are cut), %% is a percent sign. " +
			"Run as squeue, scancel, sacct, scontrol or sinfo (links made by make build and make install), gpuq takes that Slurm command's " +
			"flags and prints its formats; docs/slurm-compat.md lists each flag, field and state as honoured, accepted with a warning or refused, and why.",
		// Text from other users (names, comments, reasons) and old
		// records may hold control characters: escaped when printed.
		Before: escapeOutput,
		Flags: []cli.Flag{
			controllerFlag(),
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "only jobs of these users (comma list)"},
			&cli.StringFlag{Name: "account", Aliases: []string{"A"}, Usage: "only jobs of these accounts (comma list)"},
			&cli.StringFlag{Name: "partition", Aliases: []string{"p"}, Usage: "only jobs in these partitions (comma list)"},
			&cli.StringFlag{Name: "states", Aliases: []string{"t"}, Usage: "only jobs in these states: short or long names (comma list), or all (default: pending and running)"},
			&cli.StringFlag{Name: "jobs", Aliases: []string{"j"}, Usage: "only these job ids (comma list)"},
			&cli.StringFlag{Name: "format", Aliases: []string{"o"}, Usage: "output format, squeue style (default \"" + format.DefaultJobFormat + "\")"},
			&cli.BoolFlag{Name: "noheader", Usage: "print no header line"},
			jsonFlag(),
		},
		Commands: []*cli.Command{
			{
				Name: "show", Usage: "show one job in detail (scontrol show job), and its running steps", ArgsUsage: "JOB",
				Flags: []cli.Flag{jsonFlag()}, Action: show,
			},
			{
				Name: "cancel", Usage: "cancel jobs or one step of a job (JOB.STEP), or signal them with --signal (scancel)", ArgsUsage: "JOB[.STEP]...",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "signal", Aliases: []string{"s"}, Usage: "send this signal (USR1, TERM, 10) instead of cancelling: to every process of the job, or to the step's tasks"}},
				Action: jobAction("cancel"),
			},
			{Name: "hold", Usage: "keep pending jobs from starting", ArgsUsage: "JOB...", Action: jobAction("hold")},
			{Name: "release", Usage: "let held jobs start", ArgsUsage: "JOB...", Action: jobAction("release")},
			{Name: "requeue", Usage: "stop running jobs and put them back in the queue", ArgsUsage: "JOB...", Action: jobAction("requeue")},
			{
				Name: "nodes", Usage: "list nodes (sinfo): NODE STATE CPUS(A/T) MEM(A/T) GPUS(A/T) REASON", Action: nodes,
				Flags: []cli.Flag{jsonFlag(), &cli.BoolFlag{Name: "noheader", Usage: "print no header line"}},
			},
			{
				Name: "drain", Usage: "stop scheduling new jobs on a node; running jobs that take checkpoints checkpoint and are requeued elsewhere, the others finish", ArgsUsage: "NODE",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why the node is drained (required; shown by gpuq nodes)"}},
				Action: nodeAction("drain"),
			},
			{
				Name: "resume", Usage: "return a drained or down node, and GPUs taken out of service for health, to service", ArgsUsage: "NODE",
				Flags:  []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why the node is resumed (kept in the audit log)"}},
				Action: nodeAction("resume"),
			},
			{Name: "reconfigure", Usage: "ask the controller to reload its configuration file", Action: reconfigure},
			acctCommand(),
			reportCommand(),
			topCommand(),
			auditCommand(),
			healthCommand(),
			prioCommand(),
			shareCommand(),
			controllersCommand(),
		},
		HideHelpCommand: true,
		ExitErrHandler:  exitcode.NoExit,
		OnUsageError:    exitcode.UsageError,
		Action:          list,
	}
}

func invalid(format string, args ...any) error { return spec.Errorf(spec.ErrInvalid, format, args...) }

func client(c *cli.Context) (*api.Client, error) {
	// Subcommands see the root's --controller through the lineage.
	return api.NewClient(c.String("controller"))
}

// splitList splits a comma list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for it := range strings.SplitSeq(s, ",") {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

// ParseJobID parses a job id given on the command line.
func ParseJobID(s string) (spec.JobID, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || n == 0 {
		return 0, invalid("%q is not a job id; job ids are positive whole numbers (see gpuq)", s)
	}
	return spec.JobID(n), nil
}

func list(c *cli.Context) error {
	if c.Args().Present() {
		return invalid("unknown command %q; see gpuq --help", c.Args().First())
	}
	var f api.JobFilter
	f.Users = splitList(c.String("user"))
	f.Accounts = splitList(c.String("account"))
	f.Partitions = splitList(c.String("partition"))
	for _, s := range splitList(c.String("jobs")) {
		id, err := ParseJobID(s)
		if err != nil {
			return fmt.Errorf("--jobs: %w", err)
		}
		f.IDs = append(f.IDs, id)
	}
	for _, s := range splitList(c.String("states")) {
		if strings.EqualFold(s, "all") {
			f.All, f.States = true, nil
			break
		}
		st, err := format.ParseState(s)
		if err != nil {
			return invalid("--states: %v", err)
		}
		f.States = append(f.States, st)
	}
	jf := format.DefaultJobFormat
	if c.IsSet("format") {
		jf = c.String("format")
	}
	parsed, err := format.ParseJobFormat(jf)
	if err != nil {
		return invalid("--format: %v", err)
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	if !c.Bool("json") {
		// The table needs only the brief view: a quarter of the bytes.
		f.View = api.ViewBrief
	}
	jobs, err := cl.Jobs(c.Context, f)
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	// The controller lists by id already; sorting 100,000 800-byte jobs
	// that are in order would still cost a pass of compares.
	byID := func(a, b spec.Job) int { return cmpID(a.ID, b.ID) }
	if !slices.IsSortedFunc(jobs, byID) {
		slices.SortFunc(jobs, byID)
	}
	if c.Bool("json") {
		return format.WriteJobsJSON(c.App.Writer, jobs)
	}
	return format.WriteJobs(c.App.Writer, jobs, parsed, time.Now(), c.Bool("noheader"))
}

func cmpID(a, b spec.JobID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func show(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return invalid("gpuq show takes one job id, got %d arguments; e.g. gpuq show 42", len(args))
	}
	ref, err := spec.ParseJobRef(args[0])
	if err != nil {
		return err
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	j, err := cl.JobByRef(c.Context, ref)
	if err != nil {
		return fmt.Errorf("show job %s: %w", ref, err)
	}
	if c.Bool("json") {
		return format.WriteJSON(c.App.Writer, j)
	}
	now := time.Now()
	if err := format.WriteJobShow(c.App.Writer, &j, now); err != nil {
		return err
	}
	return format.WriteStepsShow(c.App.Writer, &j, now)
}

// jobAction runs action on every job given; it tries them all and exits 0
// only if all succeeded, like scancel.
func jobAction(action string) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, err := positionals(c)
		if err != nil {
			return err
		}
		if len(args) == 0 {
			return invalid("gpuq %s needs at least one job id; e.g. gpuq %s 42 43", action, action)
		}
		var refs []spec.JobRef
		var steps []string // N.S names step S of job N (cancel only)
		for _, a := range args {
			head, step := spec.ParseStepRef(a)
			if step != "" && action != "cancel" {
				return invalid("gpuq %s acts on jobs, not steps: %q names step %s of job %s", action, a, step, head)
			}
			ref, err := spec.ParseJobRef(head)
			if err != nil {
				return err
			}
			refs = append(refs, ref)
			steps = append(steps, step)
		}
		req := api.JobActionRequest{}
		if action == "cancel" && c.IsSet("signal") {
			sig := strings.TrimSpace(c.String("signal"))
			if sig == "" {
				return invalid("--signal needs a signal name or number, e.g. --signal=USR1")
			}
			req.Signal = sig
		}
		cl, err := client(c)
		if err != nil {
			return err
		}
		var errs []error
		for i, ref := range refs {
			req.Step = steps[i]
			what := "job " + ref.String()
			if req.Step != "" {
				what = "step " + ref.String() + "." + req.Step
			}
			if _, err := cl.RefAction(c.Context, ref, action, req); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", action, what, err))
			}
		}
		return errors.Join(errs...)
	}
}

func nodes(c *cli.Context) error {
	args, err := positionals(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return invalid("gpuq nodes takes no arguments, got %q", args[0])
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	ns, err := cl.Nodes(c.Context)
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	slices.SortFunc(ns, func(a, b spec.Node) int { return strings.Compare(a.Name, b.Name) })
	if c.Bool("json") {
		if ns == nil {
			ns = []spec.Node{}
		}
		return format.WriteJSON(c.App.Writer, ns)
	}
	return format.WriteNodes(c.App.Writer, ns, c.Bool("noheader"))
}

func nodeAction(action string) cli.ActionFunc {
	return func(c *cli.Context) error {
		args, err := positionals(c)
		if err != nil {
			return err
		}
		if len(args) != 1 {
			return invalid("gpuq %s takes one node name, got %d arguments; e.g. gpuq %s gpu01 --reason 'bad fan'", action, len(args), action)
		}
		reason := strings.TrimSpace(c.String("reason"))
		if action == "drain" && reason == "" {
			return invalid("gpuq drain needs --reason (shown to users by gpuq nodes); e.g. --reason 'XID 79 on GPU 3'")
		}
		cl, err := client(c)
		if err != nil {
			return err
		}
		name := args[0]
		if _, err := cl.NodeAction(c.Context, name, action, api.NodeActionRequest{Reason: reason}); err != nil {
			return fmt.Errorf("%s node %s: %w", action, name, err)
		}
		return nil
	}
}

func reconfigure(c *cli.Context) error {
	if c.Args().Present() {
		return invalid("gpuq reconfigure takes no arguments")
	}
	cl, err := client(c)
	if err != nil {
		return err
	}
	resp, err := cl.Reconfigure(c.Context)
	if err != nil {
		return fmt.Errorf("reconfigure: %w", err)
	}
	if resp.Message != "" {
		fmt.Fprintln(c.App.Writer, resp.Message)
	}
	return nil
}
