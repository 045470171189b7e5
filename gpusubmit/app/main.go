package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/exitcode"
	"github.com/gpud/gpud/gpuq/termsafe"
	"github.com/gpud/gpud/gpusubmit/directive"
	"github.com/urfave/cli/v2"
)

// invocation is what a submission reads from its command line: the
// options given (a switch as "true" or "false"), the problems Normalize
// found, the script and its arguments, the controller address and where
// to write. It comes from urfave/cli's context (fromCLI) or from Main's
// own reading of Normalize's canonical words (fastInvocation).
type invocation struct {
	ctx            context.Context
	name           string // gpusubmit or sbatch
	stdin          io.Reader
	stdout, stderr io.Writer
	values         map[string]string
	problems       []string
	args           []string
	controller     string
}

func fromCLI(c *cli.Context) *invocation {
	in := &invocation{ctx: c.Context, name: c.App.Name, stdin: c.App.Reader, stdout: c.App.Writer, stderr: c.App.ErrWriter,
		values: map[string]string{}, problems: c.StringSlice(directive.ProblemFlag), args: c.Args().Slice(), controller: c.String("controller")}
	for _, d := range directive.Options {
		if !c.IsSet(d.Name) {
			continue
		}
		if d.Bool {
			in.values[d.Name] = boolWord(c.Bool(d.Name))
		} else {
			in.values[d.Name] = c.String(d.Name)
		}
	}
	return in
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
	if in, ok := fastInvocation(name, words); ok {
		in.ctx, in.stdin, in.stdout, in.stderr = ctx, stdin, stdout, stderr
		err := submit(in)
		exitcode.Print(stderr, in.name, err)
		return exitcode.Code(err)
	}
	a := ForName(name)
	a.Reader, a.Writer, a.ErrWriter = stdin, stdout, stderr
	return exitcode.Main(ctx, a, words, stderr)
}

// fastInvocation reads Normalize's words: --name or --name=value for
// each option, --x-gpud-problem=MESSAGE, --controller=ADDR, then "--"
// and the script with its arguments. It answers false for anything else,
// --help and --version among them.
func fastInvocation(name string, words []string) (*invocation, bool) {
	if name != "sbatch" {
		name = "gpusubmit"
	}
	in := &invocation{name: name, values: map[string]string{}}
	ctlSet := false
	for i := 1; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			in.args = words[i+1:]
			if !ctlSet {
				// As the --controller flag's EnvVars and Value.
				var ok bool
				if in.controller, ok = os.LookupEnv(api.EnvController); !ok {
					in.controller = DefaultController
				}
			}
			return in, true
		}
		opt, ok := strings.CutPrefix(w, "--")
		if !ok {
			return nil, false
		}
		key, val, hasVal := strings.Cut(opt, "=")
		switch key {
		case directive.ProblemFlag:
			in.problems = append(in.problems, val)
		case "controller":
			in.controller, ctlSet = val, true
		default:
			d, known := optionDefs()[key]
			switch {
			case !known:
				return nil, false
			case d.Bool && !hasVal:
				val = "true"
			case d.Bool && val != "true" && val != "false":
				return nil, false
			case !d.Bool && !hasVal:
				return nil, false
			}
			in.values[key] = val
		}
	}
	return nil, false
}

// optionDefs indexes directive.Options by long name.
var optionDefs = sync.OnceValue(func() map[string]*directive.Def {
	defs := make(map[string]*directive.Def, len(directive.Options))
	for i := range directive.Options {
		defs[directive.Options[i].Name] = &directive.Options[i]
	}
	return defs
})
