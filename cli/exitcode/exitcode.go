package exitcode

import (
	"context"
	"io"

	"github.com/gpud/gpud/cli/exitstatus"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/urfave/cli/v2"
)

// Exit statuses of gpusubmit and gpuq.
const (
	OK      = exitstatus.OK
	Runtime = exitstatus.Runtime
	Usage   = exitstatus.Usage
	Refused = exitstatus.Refused
)

// Code returns the exit status for err (exitstatus.Code): a cli.ExitCoder
// keeps its own code; Invalid beats Refused beats the rest.
func Code(err error) int { return exitstatus.Code(err) }

// Main runs app with args until ctx ends, prints any error to stderr as
// "<prog>: <line>" (one line per joined error) and returns the exit status
// for os.Exit. An ExitCoder with an empty message prints nothing: its code
// is the message.
func Main(ctx context.Context, app *cli.App, args []string, stderr io.Writer) int {
	err := app.RunContext(ctx, args)
	Print(stderr, app.Name, err)
	return Code(err)
}

// Print writes err for users: each line prefixed with prog.
func Print(w io.Writer, prog string, err error) { exitstatus.Print(w, prog, err) }

// UsageError is an urfave/cli OnUsageError hook that turns flag-parsing
// errors ("flag provided but not defined: -foo") into spec.ErrInvalid so
// they exit 2 with a hint instead of a help dump.
func UsageError(c *cli.Context, err error, isSubcommand bool) error {
	help := c.App.Name + " --help"
	if isSubcommand && c.Command != nil && c.Command.Name != "" {
		help = c.App.Name + " " + c.Command.Name + " --help"
	}
	return spec.Errorf(spec.ErrInvalid, "command line: %v; see %s", err, help)
}

// NoExit is an ExitErrHandler that does nothing, so errors reach main
// instead of urfave/cli calling os.Exit itself.
func NoExit(*cli.Context, error) {}
