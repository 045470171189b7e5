// Package app is gpuq's command line: the job listing and the show,
// cancel, hold, release, requeue, nodes, drain, resume and reconfigure
// subcommands, talking to the controller through gpud/api.Client and
// rendering with gpuq/format. New returns the cli.App so tests and the man
// page generator drive exactly what users run.
//
// It imports gpud/api, gpud/spec, gpuq/format, cli/exitcode and
// urfave/cli; it must not import controller or node packages.
package app
