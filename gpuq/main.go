// Command gpuq lists and manages gpud jobs and nodes, like squeue, scancel,
// scontrol and sinfo together. The work is in package app; this file only
// wires signals and the exit status.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"

	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/termsafe"
	"github.com/gpud/gpud/gpud/launch"
	"github.com/gpud/gpud/gpuq/app"
	"github.com/gpud/gpud/gpuq/salloc"
	"github.com/gpud/gpud/gpuq/slurm"
	"github.com/gpud/gpud/gpuq/srun"
)

func main() {
	// gpuq lives for one listing: most of its heap is the job list, live
	// until exit, so collecting every time the heap doubles only re-marks
	// it (a quarter of `gpuq` with 100,000 jobs). GOGC still wins if set.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if len(os.Args) > 1 && os.Args[1] == launch.Arg {
		// A step task's launcher in the job's container (binding, PMI):
		// it execs the task's program, or returns why it could not.
		os.Exit(launch.Main(os.Args[2:], os.Stderr))
	}
	if filepath.Base(os.Args[0]) == "srun" {
		// srun handles its signals itself: they go to the step's tasks.
		os.Exit(srun.Main(os.Args, os.Stdout, os.Stderr))
	}
	if filepath.Base(os.Args[0]) == "salloc" {
		// salloc leaves ^C to the command it runs.
		os.Exit(salloc.Main(os.Args, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var code int
	if name := filepath.Base(os.Args[0]); slurm.Is(name) {
		// Run as one of slurm.Names (squeue, sacct, ...; links made
		// by make build and make install): Slurm's flags and formats.
		// Text from other users and old records may hold control
		// characters: escaped when printed, as by gpuq.
		code = slurm.Main(ctx, name, os.Args, termsafe.New(os.Stdout), termsafe.New(os.Stderr))
	} else {
		code = exitcode.Main(ctx, app.New(), os.Args, termsafe.New(os.Stderr))
	}
	stop()
	os.Exit(code)
}
