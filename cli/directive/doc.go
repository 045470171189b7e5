// Package directive turns a batch script's #GPU/#SBATCH header and
// gpusubmit's command-line options into a spec.JobSpec. It is pure: no
// files, no environment, no clock. The caller passes the script text, the
// working directory, the environment and "now" in, so every parser here is
// table- and fuzz-tested.
//
// It owns the option table (Options), how a command line or a directive
// line becomes Options (ParseCommandLine, Normalize, with cli/getopt), the
// Slurm value grammars of the options (time limits, memory sizes, GPU
// requests, arrays, dependencies, signals; --begin through cli/slurmtime,
// host lists through gpud/hostlist) and the precedence rules (command line
// over directives, later over earlier, one member of a mutually exclusive
// family such as --mem/--mem-per-cpu/--mem-per-gpu per source).
//
// It imports gpud/spec, gpud/hostlist, gpud/signame, cli/getopt,
// cli/slurmtime and the standard library only; it must not import gpud/api,
// urfave/cli, os or anything that performs I/O.
package directive
