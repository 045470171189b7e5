package exitcode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/urfave/cli/v2"
)

// Exit statuses of gpusubmit and gpuq.
const (
	OK      = 0
	Runtime = 1
	Usage   = 2
	Refused = 3
)

// Code returns the exit status for err. An error that carries its own code
// (cli.ExitCoder, used by gpusubmit --wait to pass a job's exit code
// through) keeps it. Invalid beats Refused beats the rest, so a joined error
// (gpuq cancel 1 2 3) reports the most actionable problem.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	switch {
	case errors.Is(err, spec.ErrInvalid):
		return Usage
	case errors.Is(err, spec.ErrPermissionDenied), errors.Is(err, spec.ErrRefused):
		return Refused
	}
	return Runtime
}

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
func Print(w io.Writer, prog string, err error) {
	if err == nil {
		return
	}
	msg := strings.TrimSpace(err.Error())
	if msg == "" {
		return
	}
	for line := range strings.SplitSeq(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			fmt.Fprintf(w, "%s: %s\n", prog, line)
		}
	}
}

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
