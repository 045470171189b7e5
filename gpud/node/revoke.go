package node

import (
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
)

// Revocation on the node (auth.Revocations). The controller sends its
// revocation lists' version with every answer the agent polls for
// (registration, heartbeat, assignments) and the lists themselves when
// the agent said it holds another version; the assignments long poll is
// answered as soon as they change, so a revocation reaches the node
// within a round trip. The copy is trusted for fenceAfter (90 % of the
// controller's node_timeout: 27 s by default) from the send time of the
// last request whose answer confirmed it: past that the step listener
// refuses every peer and step ticket, and the node dials no peer, rather
// than trust a list that may lack a revocation. The controller marks the
// node DOWN at node_timeout anyway.

// learnRevocations takes the revocation state from an answer to a
// request sent at sent (nil: a controller before revocation lists).
func (a *Agent) learnRevocations(sent time.Time, r *api.Revocations) {
	a.fenceMu.Lock()
	maxAge := a.fenceAfter()
	a.fenceMu.Unlock()
	if maxAge != a.rev.MaxAge() {
		a.rev.SetMaxAge(maxAge)
	}
	if r == nil {
		a.log.Debug("the controller's answer carries no revocation lists (an older controller): steps from peers and srun are refused")
		return
	}
	if a.rev.Confirm(r.Version, sent) {
		return
	}
	if r.Lists == nil {
		return // another version, without the lists: the next answer brings them
	}
	l, err := auth.NewRevocationList(r.Lists.Certs, r.Lists.Tokens)
	if err != nil {
		a.log.Warn("the controller's revocation lists cannot be read; keeping the old ones (they go stale)", "err", err)
		return
	}
	if l.Version != r.Version {
		// Another canonical form than ours: trusted all the same (it is
		// the controller's list), but the next answer sends it again.
		a.log.Warn("the controller's revocation lists do not match their version", "version", r.Version, "computed", l.Version)
	}
	closed := a.rev.Set(l, sent)
	a.log.Info("revocation lists updated", "version", l.Version, "certificates", len(l.Certs), "tokens", len(l.Tokens), "connections_closed", closed)
}

// learnTicketKey keeps the step ticket key an assignments answer gave.
func (a *Agent) learnTicketKey(key string) {
	if p := a.stepKey.Load(); p != nil && *p == key {
		return
	}
	a.stepKey.Store(&key)
}

// ticketKey is the step ticket key as the controller last sent it.
func (a *Agent) ticketKey() string {
	if p := a.stepKey.Load(); p != nil {
		return *p
	}
	return ""
}
