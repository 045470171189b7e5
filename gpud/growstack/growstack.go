// Package growstack grows a new goroutine's stack in one step, while it is
// still shallow, to what a deep call path needs.
//
// Go starts a goroutine's stack at the average size of the process's
// goroutines (runtime's adaptive initial size), which is small in gpud's
// daemons: thousands of idle long polls, connection readers and waiting
// runners. A request handler or a job's start then grows it by doubling,
// 3-4 times, each time deep in the call path, where the runtime copies a
// dozen frames and adjusts every pointer into them. One large frame at the
// goroutine's top makes the runtime move the few frames above it once, to
// a 16 KiB stack (the largest size its per-P stack caches hold). The
// controller's request goroutines (gpud/server; runtime.newstack was
// 4.6 % of its CPU in a live burst, docs/fleet.md "Session 15 — ctlcpu")
// and the node agent's runner goroutines (gpud/node; 5.9 % of
// BenchmarkRunnerJob's CPU, 0.9 % with it, "Session 19 — jobdir") call it
// first. CockroachDB's growstack package does the same for its request
// goroutines.
package growstack

// frame is the stack frame Grow takes: with what is above it, the stack
// then needs more than 8 KiB and the runtime makes it 16 KiB.
const frame = 12 << 10

// Grow grows the calling goroutine's stack to 16 KiB in one step. Call it
// first in a goroutine whose path goes deep.
//
//go:noinline
func Grow() byte {
	var pad [frame]byte
	return touch(&pad)
}

// touch keeps Grow's frame: a pad whose address goes nowhere would be
// optimised away.
//
//go:noinline
func touch(p *[frame]byte) byte { return p[frame-1] }
