// Command gpud is the gpud daemon: `gpud controller`, `gpud node`,
// `gpud standalone`, `gpud simulate`, `gpud token`, `gpud loadtest` and
// `gpud version`.
//
// This package only parses the command line and dispatches: each
// command's file turns its flags into the options of the package that
// does the work (gpud/daemon for the daemons' wiring, gpud/loadtest,
// gpud/simulate).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpud/wallclock"
)

// version is set at build time with -ldflags -X main.version=....
var version = "dev"

func main() {
	app := newApp()
	if filepath.Base(os.Args[0]) == "slurmrestd" {
		// Slurm's name for its REST daemon runs gpud rest.
		os.Args = append([]string{"gpud", "rest"}, os.Args[1:]...)
	}
	// signal.NotifyContext before any slow init, so SIGTERM during start-up
	// still shuts down cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpud: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// exitCode maps errors to the documented codes: 2 for usage and invalid
// configuration, 1 for everything else.
func exitCode(err error) int {
	if errors.Is(err, spec.ErrInvalid) || errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

func newApp() *cli.App {
	return &cli.App{
		Name:    "gpud",
		Usage:   "GPU cluster workload manager daemon",
		Version: version,
		Commands: []*cli.Command{
			controllerCommand(),
			nodeCommand(),
			standaloneCommand(),
			simulateCommand(),
			tokenCommand(),
			restCommand(),
			loadtestCommand(),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "gpud", version)
					return nil
				},
			},
		},
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usagef("%v", err)
		},
	}
}

// logFlags are shared by every daemon command.
func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error"},
		&cli.StringFlag{Name: "log-format", Value: "json", Usage: "log format: json or text"},
	}
}

// configPath is the --config file to load: an absent default path means
// built-in defaults (""), while an explicit path must exist (the loader
// says so).
func configPath(c *cli.Context) string {
	path := c.String("config")
	if !c.IsSet("config") {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return ""
		}
	}
	return path
}

// newLogger builds the daemon logger from the global flags.
func newLogger(c *cli.Context, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", c.String("log-level"))
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.String("log-format")) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: use json or text", c.String("log-format"))
}

// followTestClock steps the daemon's wall clock by the offset in the file
// GPUD_TEST_WALL_CLOCK_FILE names, and follows it: end-to-end tests step
// one daemon's clock (gpud/wallclock). Unset, the clock is the system's.
func followTestClock(ctx context.Context, log *slog.Logger) error {
	path := os.Getenv(wallclock.EnvFile)
	if path == "" {
		return nil
	}
	log.Warn("this daemon's wall clock follows a test offset", "file", path)
	return wallclock.Follow(ctx, path, log)
}
