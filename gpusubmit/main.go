// Command gpusubmit submits a batch script to the gpud controller, like
// sbatch; run under the name sbatch (a link made by make build and make
// install) it is sbatch, with sbatch's default output file. The work is in package app; this file only wires signals and the
// exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gpud/gpud/gpusubmit/app"
)

func main() {
	// Ctrl-C while --wait blocks stops waiting; the job keeps running.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Main(ctx, filepath.Base(os.Args[0]), os.Args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
