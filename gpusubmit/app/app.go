package app

import (
	"fmt"

	"github.com/gpud/gpud/cli/termsafe"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/submission"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/urfave/cli/v2"
)

// DefaultController is the address used when neither --controller nor
// GPUD_CONTROLLER is set.
const DefaultController = submission.DefaultController

// ControllerFlag is the --controller flag both CLIs share.
func ControllerFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "controller",
		Usage:   "controller address: unix:///path/gpud.sock or https://host:port; a comma-separated list for a controller group (https://c1:6817,https://c2:6817,https://c3:6817), whose leader gpusubmit follows",
		EnvVars: []string{api.EnvController},
		Value:   DefaultController,
	}
}

// New returns gpusubmit's cli.App.
func New() *cli.App {
	return &cli.App{
		Name:      "gpusubmit",
		Usage:     "submit a batch job to gpud",
		UsageText: "gpusubmit [options] SCRIPT [ARGS...]\ngpusubmit [options] --wrap 'CMD'",
		Description: "gpusubmit sends a batch script to the gpud controller, like sbatch. Options come from " +
			"#GPU and #SBATCH directives at the top of the script (after the #! line, up to the first command) " +
			"and from the command line, which wins. An option gpud cannot honour is an error, never ignored; " +
			"--mail-type, --mail-user and --get-user-env are accepted with a warning. " +
			"SCRIPT - reads the script from standard input. " +
			"Run as sbatch (a link made by make build and make install), it is Slurm's sbatch: options are read as getopt_long reads them " +
			"(unique prefixes such as --out, bundled short options, --opt value), the default output is slurm-%j.out, and every problem " +
			"is reported in one pass with line numbers. A missing output directory is created as the user, unlike Slurm, because gpud starts " +
			"jobs within milliseconds, before a client that makes it after submitting has done so. docs/slurm-compat.md lists each sbatch option " +
			"as honoured, accepted with a warning (and why) or refused (and why).",
		Flags:           flags(),
		HideHelpCommand: true,
		// Messages echo text from the controller: escaped when printed.
		Before: func(c *cli.Context) error {
			c.App.Writer = termsafe.New(c.App.Writer)
			c.App.ErrWriter = termsafe.New(c.App.ErrWriter)
			return nil
		},
		ExitErrHandler: exitcode.NoExit,
		OnUsageError:   exitcode.UsageError,
		Action:         func(c *cli.Context) error { return submit(fromCLI(c)) },
		// Problems carried by the hidden flag contain commas.
		DisableSliceFlagSeparator: true,
	}
}

// ForName returns the App for the name the program was run as: sbatch
// (Slurm's name, a link to gpusubmit) or gpusubmit.
func ForName(name string) *cli.App {
	a := New()
	if name == "sbatch" {
		a.Name = "sbatch"
		a.UsageText = "sbatch [options] SCRIPT [ARGS...]\nsbatch [options] --wrap 'CMD'"
	}
	return a
}

// Args prepares os.Args for the App: it reads them as sbatch's
// getopt_long does (unique prefixes, bundled short options, optional
// values) and hands urfave/cli canonical --name=value words.
func Args(args []string) []string { return directive.Normalize(args) }

func flags() []cli.Flag {
	fs := []cli.Flag{stringFlag{ControllerFlag(), []string{"controller"}},
		sliceFlag{&cli.StringSliceFlag{Name: directive.ProblemFlag, Hidden: true}, []string{directive.ProblemFlag}}}
	for _, d := range directive.Options {
		names := []string{d.Name}
		var aliases []string
		if d.Short != "" {
			aliases = []string{d.Short}
			names = append(names, d.Short)
		}
		if d.Bool {
			fs = append(fs, boolFlag{&cli.BoolFlag{Name: d.Name, Aliases: aliases, Usage: d.Usage}, names})
			continue
		}
		fs = append(fs, stringFlag{&cli.StringFlag{Name: d.Name, Aliases: aliases, Usage: d.Usage}, names})
	}
	return fs
}

// stringFlag, boolFlag and sliceFlag are urfave/cli's flags with their names worked
// out once. urfave/cli's own Names() cleans each name with a regexp on
// every call, and it calls Names() of every flag for each flag it looks
// up: with sbatch's hundred options, that was about 10,000 regexp
// replacements, 25,000 allocations and 3 ms of every submission
// (BenchmarkSbatchClient), more than the controller's durable commit.
type stringFlag struct {
	*cli.StringFlag
	names []string
}

func (f stringFlag) Names() []string { return f.names }

type boolFlag struct {
	*cli.BoolFlag
	names []string
}

func (f boolFlag) Names() []string { return f.names }

type sliceFlag struct {
	*cli.StringSliceFlag
	names []string
}

func (f sliceFlag) Names() []string { return f.names }

func submit(c *invocation) error {
	p, err := submission.Prepare(c.Invocation)
	if err != nil {
		return err
	}
	// One request (a few more with --wait) and the process exits: no
	// connection pool, no transport goroutines.
	client, err := api.NewClientWith(c.Controller, api.ClientOptions{OneShot: true})
	if err != nil {
		return err
	}
	// A random key names this submission, so the client may send it again
	// when the connection breaks or a controller group fails over before
	// the answer came: the controller makes one job per key.
	resp, err := client.Submit(c.ctx, p.SubmitRequest())
	if err != nil {
		return fmt.Errorf("submit %s: %w", p.ScriptName, err)
	}
	p.PrintSubmitted(c.Stdout, c.Stderr, resp)
	if !p.Wait || p.TestOnly {
		return nil
	}
	return wait(c, client, resp)
}

// wait blocks until every submitted job (all tasks of an array) ends and
// returns the largest exit status, like sbatch --wait.
func wait(c *invocation, client *api.Client, resp api.SubmitResponse) error {
	ids := resp.IDs
	if len(ids) == 0 {
		ids = []spec.JobID{resp.ID}
	}
	code := 0
	for _, id := range ids {
		j, err := client.WaitJob(c.ctx, id)
		if err != nil {
			if c.ctx.Err() != nil {
				return fmt.Errorf("stopped waiting for job %d, which keeps running; follow it with gpuq show %d", id, id)
			}
			return fmt.Errorf("wait for job %d: %w", id, err)
		}
		jc := JobExitCode(j)
		if j.State != spec.StateCompleted {
			note := fmt.Sprintf("%s: job %d ended %s with exit code %d", c.Name, id, j.State, j.ExitCode)
			if j.Reason != "" && j.Reason != spec.ReasonNone && j.Reason != "NonZeroExitCode" {
				note += " (" + j.Reason + ")"
			}
			fmt.Fprintln(c.Stderr, note)
		}
		code = max(code, jc)
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}

// JobExitCode is gpusubmit --wait's exit status for an ended job:
// 0 for COMPLETED, else its exit code, or 1 when that is 0 (a job
// cancelled or timed out did not succeed, whatever its last process said).
func JobExitCode(j spec.Job) int {
	if j.State == spec.StateCompleted {
		return 0
	}
	if c := j.ExitCode & 0xff; c != 0 {
		return c
	}
	return 1
}
