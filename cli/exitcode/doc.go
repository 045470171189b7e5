// Package exitcode is where both CLIs turn an error into the documented
// exit status (EXIT STATUS in gpuq(1) and gpusubmit(1), man/man.go): 0 ok,
// 1 runtime or connection error, 2 usage or invalid request, 3 refused by
// policy. The mapping and the "<prog>: <message>" stderr format are package
// exitstatus's (which sbatch's one-shot path uses without urfave/cli); this
// package adds urfave/cli's hooks, and both CLIs' main functions call Main,
// so the two cannot drift apart.
//
// It imports gpud/spec, exitstatus and urfave/cli only; it must not import
// gpud/api or anything that does I/O beyond writing the message.
package exitcode
