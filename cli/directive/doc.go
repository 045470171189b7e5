// Package directive turns a batch script's #GPU/#SBATCH header and
// gpusubmit's command-line options into a spec.JobSpec. It is pure: no
// files, no environment, no clock. The caller passes the script text, the
// working directory, the environment and "now" in, so every parser here is
// table- and fuzz-tested.
//
// It owns the option table (Options), the Slurm value grammars (time
// limits, memory sizes, GPU requests, --begin times, arrays, dependencies,
// signals, host lists) and the precedence rules (command line over
// directives, later over earlier, one member of a mutually exclusive family
// such as --mem/--mem-per-cpu/--mem-per-gpu per source).
//
// It imports gpud/spec and the standard library only; it must not import
// gpud/api, urfave/cli, os or anything that performs I/O.
package directive
