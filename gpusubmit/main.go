// Command gpusubmit submits a batch script to the gpud controller, like
// sbatch. The work is in package app; this file only wires signals and the
// exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpud/gpud/gpuq/exitcode"
	"github.com/gpud/gpud/gpuq/termsafe"
	"github.com/gpud/gpud/gpusubmit/app"
)

func main() {
	// Ctrl-C while --wait blocks stops waiting; the job keeps running.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitcode.Main(ctx, app.New(), app.Args(os.Args), termsafe.New(os.Stderr))
	stop()
	os.Exit(code)
}
