package node

import (
	"sync/atomic"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// The send loop's hold: a batch of started events waits, briefly, for
// the events recorded after it, so that the starts of the jobs placed on
// this node within a few ms of each other (one assignments line, or the
// next lines of a burst) and an exit that follows them go to the
// controller in one events post rather than one post each.
//
// Why: an events post costs the controller a whole request (TLS record,
// HTTP/2 frames, authentication, a decode, a trip through its owner
// loop) and the agent a client request, ~0.3 CPU-ms for the two in the
// live burst at 1,000 nodes, more than the events it carries; there a
// node's started events came 2.6 to a post on average, the first of a
// burst's starts often alone (docs/fleet.md, session 19 — evpost).
//
// Bounded and narrow: only a batch of started events (and usage samples
// recorded beside them) waits, and never longer than startedHold after
// the hold began. An exited event (it frees GPUs; the controller's
// end→node-free waits on it), a checkpoint or a step event in the batch
// sends it at once, the held started events with it, in seq order.
// Nothing waits before its commit: an event is durable in the outbox when
// it is recorded, held or not; the hold delays only its delivery. The
// job's start itself (the runtime's start) never waits for it, and the
// controller takes the start's time from the event, not its arrival.

// defaultStartedHold bounds how long started events wait for company
// (withStartedHold in tests replaces it).
const defaultStartedHold = 20 * time.Millisecond

// sendHold is the send loop's hold state (sendLoop's goroutine only,
// but holds, which tests read).
type sendHold struct {
	// since is when the current hold began (zero: none), so that a batch
	// held across several wakeups waits at most the bound in all.
	since time.Time
	// holds counts the holds begun: what a test waits for to know a
	// batch is being held rather than not yet read.
	holds atomic.Int64
}

// holdFor says how long the send loop should hold evs before posting
// them: 0 (or less) to post now.
func (a *Agent) holdFor(evs []api.AllocEvent) time.Duration {
	h := &a.hold
	if a.opts.startedHold <= 0 {
		return 0
	}
	hasStart := false
	for i := range evs {
		switch evs[i].Kind {
		case api.EventStarted:
			hasStart = true
		case api.EventUsage:
		default:
			return 0 // an exit (or another kind) is never held
		}
	}
	if !hasStart {
		return 0
	}
	now := time.Now()
	if h.since.IsZero() {
		h.since = now
		h.holds.Add(1)
	}
	return a.opts.startedHold - now.Sub(h.since)
}

// held ends the current hold: its batch is posted, or there is none.
func (a *Agent) held() { a.hold.since = time.Time{} }
