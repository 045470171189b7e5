// Command gpuq lists and manages gpud jobs and nodes, like squeue, scancel,
// scontrol and sinfo together. The work is in package app; this file only
// wires signals and the exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpud/gpud/gpuq/app"
	"github.com/gpud/gpud/gpuq/exitcode"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitcode.Main(ctx, app.New(), os.Args, os.Stderr)
	stop()
	os.Exit(code)
}
