package app

import (
	"errors"
	"fmt"
	"github.com/gpud/gpud/gpuq/termsafe"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/exitcode"
	"github.com/gpud/gpud/gpusubmit/directive"
	"github.com/urfave/cli/v2"
)

// DefaultController is the address used when neither --controller nor
// GPUD_CONTROLLER is set.
const DefaultController = "unix:///run/gpud/gpud.sock"

// ControllerFlag is the --controller flag both CLIs share.
func ControllerFlag() *cli.StringFlag {
	return &cli.StringFlag{
		Name:    "controller",
		Usage:   "controller address: unix:///path/gpud.sock or https://host:port; a comma-separated list for a controller group (https://c1:6817,https://c2:6817,https://c3:6817), whose leader gpusubmit follows",
		EnvVars: []string{api.EnvController},
		Value:   DefaultController,
	}
}

// maxScriptBytes bounds what is read and sent: a batch script is a few
// kilobytes; megabytes mean a wrong file (a binary, a dataset).
const maxScriptBytes = 4 << 20

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

func invalid(format string, args ...any) error { return spec.Errorf(spec.ErrInvalid, format, args...) }

func submit(c *invocation) error {
	// Every problem is reported in one pass: the command line's, the
	// script's directives' and the options' values together.
	var errs []error
	for _, p := range c.problems {
		errs = append(errs, invalid("command line: %s", p))
	}
	name, text, args, err := readScript(c)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	sc, err := directive.ParseScript(name, text)
	if err != nil {
		errs = append(errs, err)
	}
	opts := sc.Options
	for _, d := range directive.Options {
		v, set := c.values[d.Name]
		if d.Name == "wrap" || !set {
			continue
		}
		opts = append(opts, directive.Option{Name: d.Name, Value: v, Source: directive.CommandLine})
	}
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("find the submit directory: %w; run gpusubmit from a directory that exists", err)
	}
	req, err := directive.Build(opts, directive.Env{Now: time.Now(), Cwd: cwd, Environ: os.Environ(), ScriptName: name, Slurm: c.name == "sbatch"})
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, w := range append(sc.Warnings, req.Warnings...) {
		fmt.Fprintf(c.stderr, "%s: warning: %s\n", c.name, w)
	}
	req.Spec.Script = string(text)
	req.Spec.Args = args
	// The checks the server and the controller run (spec.JobSpec.Validate),
	// here first, each at the line or flag that gave the value.
	if err := directive.Check(&req.Spec, opts); err != nil {
		return err
	}

	// One request (a few more with --wait) and the process exits: no
	// connection pool, no transport goroutines.
	client, err := api.NewClientWith(c.controller, api.ClientOptions{OneShot: true})
	if err != nil {
		return err
	}
	// A random key names this submission, so the client may send it again
	// when the connection breaks or a controller group fails over before
	// the answer came: the controller makes one job per key.
	resp, err := client.Submit(c.ctx, api.SubmitRequest{Job: req.Spec, TestOnly: req.TestOnly, IdempotencyKey: api.NewIdempotencyKey()})
	if err != nil {
		return fmt.Errorf("submit %s: %w", name, err)
	}
	out := c.stdout
	switch {
	case req.TestOnly:
		printTestOnly(c.stderr, resp, req.Spec.Partition)
		return nil
	case req.Parsable:
		fmt.Fprintln(out, resp.ID)
	default:
		fmt.Fprintf(out, "Submitted batch job %d\n", resp.ID)
	}
	if !req.Wait {
		return nil
	}
	return wait(c, client, resp)
}

// readScript returns the script's name for messages, its text and the
// arguments that follow it.
func readScript(c *invocation) (string, []byte, []string, error) {
	args := c.args
	if cmd, ok := c.values["wrap"]; ok {
		if strings.TrimSpace(cmd) == "" {
			return "", nil, nil, invalid("command line: --wrap needs a command, e.g. --wrap 'python train.py'")
		}
		if len(args) > 0 {
			return "", nil, nil, invalid("command line: --wrap and a script (%s) are both given; use one", args[0])
		}
		return "wrap", []byte("#!/bin/sh\n" + cmd + "\n"), nil, nil
	}
	if len(args) == 0 && c.name == "sbatch" {
		args = []string{"-"} // sbatch reads the script from standard input when none is named
	}
	if len(args) == 0 {
		return "", nil, nil, invalid("no batch script given; pass SCRIPT [ARGS...], - to read standard input, or --wrap 'CMD' (see gpusubmit --help)")
	}
	path := args[0]
	var (
		text []byte
		err  error
		name = filepath.Base(path)
	)
	if path == "-" {
		name = "standard input"
		text, err = io.ReadAll(io.LimitReader(c.stdin, maxScriptBytes+1))
	} else {
		text, err = readFileLimited(path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, nil, invalid("batch script %s does not exist; check the path", path)
	case err != nil:
		return "", nil, nil, fmt.Errorf("read batch script %s: %w", path, err)
	case len(text) > maxScriptBytes:
		return "", nil, nil, invalid("batch script %s is larger than %d MiB; is it really a script? keep data in files the script reads", path, maxScriptBytes>>20)
	}
	return name, text, args[1:], nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, invalid("batch script %s is a directory; pass a script file", path)
	}
	return io.ReadAll(io.LimitReader(f, maxScriptBytes+1))
}

func printTestOnly(w io.Writer, resp api.SubmitResponse, partition string) {
	var b strings.Builder
	if resp.ExpectedStart.IsZero() {
		b.WriteString("gpusubmit: Job would be accepted; the controller gave no start estimate")
	} else {
		fmt.Fprintf(&b, "gpusubmit: Job would start at %s", resp.ExpectedStart.Local().Format("2006-01-02T15:04:05"))
		if len(resp.Nodes) > 0 {
			fmt.Fprintf(&b, " on %s", strings.Join(resp.Nodes, ","))
		}
		if partition != "" {
			fmt.Fprintf(&b, " in partition %s", partition)
		}
	}
	if resp.Message != "" {
		fmt.Fprintf(&b, " (%s)", resp.Message)
	}
	fmt.Fprintln(w, b.String())
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
			note := fmt.Sprintf("gpusubmit: job %d ended %s with exit code %d", id, j.State, j.ExitCode)
			if j.Reason != "" && j.Reason != spec.ReasonNone && j.Reason != "NonZeroExitCode" {
				note += " (" + j.Reason + ")"
			}
			fmt.Fprintln(c.stderr, note)
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
