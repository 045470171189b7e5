package app

import (
	"context"
	"fmt"
	"io"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/submission"
	"github.com/gpud/gpud/cli/termsafe"
	"github.com/gpud/gpud/gpud/api"
	"github.com/urfave/cli/v2"
)

// invocation is a submission.Invocation with the context a --wait
// follows.
type invocation struct {
	*submission.Invocation
	ctx context.Context
}

func fromCLI(c *cli.Context) *invocation {
	in := &submission.Invocation{Name: c.App.Name, Stdin: c.App.Reader, Stdout: c.App.Writer, Stderr: c.App.ErrWriter,
		Values: map[string]string{}, Problems: c.StringSlice(directive.ProblemFlag), Args: c.Args().Slice(), Controller: c.String("controller")}
	for _, d := range directive.Options {
		if !c.IsSet(d.Name) {
			continue
		}
		if d.Bool {
			in.Values[d.Name] = boolWord(c.Bool(d.Name))
		} else {
			in.Values[d.Name] = c.String(d.Name)
		}
	}
	return &invocation{Invocation: in, ctx: c.Context}
}

func boolWord(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// Main runs gpusubmit under name (sbatch or gpusubmit) on the command
// line args (args[0] the program) and returns the exit status.
//
// A submission is read straight from Normalize's canonical words, without
// building urfave/cli's App: its hundred flags, their flag.FlagSet and the
// lookups cost about a fifth of the CPU time of an `sbatch --hold --wrap
// true` process (perf record over a shell loop). Anything else (--help,
// --version, words Normalize does not make) goes through the App, so help,
// usage errors and their wording stay urfave/cli's.
// TestMainFastPathMatchesApp holds the two to the same results.
func Main(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// Messages echo text from the controller: escaped when printed.
	stdout, stderr = termsafe.New(stdout), termsafe.New(stderr)
	if name == "sbatch" && len(args) == 2 && (args[1] == "--version" || args[1] == "-V") {
		fmt.Fprintln(stdout, api.SlurmVersion)
		return 0
	}
	words := Args(args)
	if in, ok := submission.Fast(name, words); ok {
		in.Stdin, in.Stdout, in.Stderr = stdin, stdout, stderr
		err := submit(&invocation{Invocation: in, ctx: ctx})
		exitcode.Print(stderr, in.Name, err)
		return exitcode.Code(err)
	}
	a := ForName(name)
	a.Reader, a.Writer, a.ErrWriter = stdin, stdout, stderr
	return exitcode.Main(ctx, a, words, stderr)
}
