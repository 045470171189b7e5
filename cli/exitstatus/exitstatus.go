// Package exitstatus turns an error from gpusubmit or gpuq into the
// documented exit status (EXIT STATUS in gpuq(1) and gpusubmit(1)): 0 ok, 1
// runtime or connection error, 2 usage or invalid request, 3 refused by
// policy, and prints it as "<prog>: <message>". It imports gpud/spec only,
// so sbatch's one-shot path (gpusubmit/quick) uses the same mapping without
// linking urfave/cli; package exitcode adds urfave/cli's hooks and
// re-exports these names.
package exitstatus

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// Exit statuses of gpusubmit and gpuq.
const (
	OK      = 0
	Runtime = 1
	Usage   = 2
	Refused = 3
)

// exitCoder is an error that carries its own exit status (urfave/cli's
// cli.ExitCoder is one).
type exitCoder interface {
	error
	ExitCode() int
}

// Code returns the exit status for err. An error that carries its own code
// (cli.ExitCoder, used by gpusubmit --wait to pass a job's exit code
// through) keeps it. Invalid beats Refused beats the rest, so a joined error
// (gpuq cancel 1 2 3) reports the most actionable problem.
func Code(err error) int {
	if err == nil {
		return OK
	}
	var ec exitCoder
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

// Print writes err for users: each line prefixed with prog. An error
// whose message is empty (an exit code passed through) prints nothing.
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
