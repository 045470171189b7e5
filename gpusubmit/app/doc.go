// Package app is gpusubmit's command line: flags from the directive option
// table, reading the script, submitting through gpud/api.Client, and
// --wait/--parsable/--test-only output. New returns the cli.App so tests
// and the man page generator drive exactly what users run.
//
// It imports gpud/api, gpud/spec, cli/directive, cli/exitcode and
// urfave/cli; it must not import controller or node packages.
package app
