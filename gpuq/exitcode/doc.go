// Package exitcode is the one place that turns an error from gpusubmit or
// gpuq into the documented exit status (DESIGN §7): 0 ok, 1 runtime or
// connection error, 2 usage or invalid request, 3 refused by policy. Both
// CLIs' main functions call Main, so the mapping and the
// "<prog>: <message>" stderr format cannot drift apart.
//
// It imports gpud/spec and urfave/cli only; it must not import gpud/api or
// anything that does I/O beyond writing the message.
package exitcode
