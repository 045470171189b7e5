// Package loadtest is `gpud loadtest`, the fleet harness: a real
// controller child process over TLS, thousands of real node agents
// (gpud/node) with fake runtimes, and submitters over the API. It
// measures submissions/s, starts/s, submit→start and end→free latencies,
// heartbeats and the controller's CPU, memory and writes, and checks that
// every acknowledged job ended exactly once in accounting.
//
// It reaches the controller only from outside, as a fleet would: through
// the API, its files and signals, never its packages.
package loadtest
