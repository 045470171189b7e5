package controller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/gpud/gpud/gpud/spec"
)

// The controller's identity: a random 128-bit ID made once with its state
// and kept in it (an AdminRecord of kind spec.AdminController in
// state.db's admin table, through AdminStore). An HA group replicates it
// like any admin change (its first leader makes it, every member's
// state.db gets it), so a change of leader keeps it; a state.db restored
// from a backup keeps the backup's; a new state.db (an admin starting
// over, a fresh HA group) gets a new one. Node agents get it in the
// register and assignments answers: allocation IDs (numbered from job 1
// again by a new state) name allocations only within one identity, so an
// agent that sees it change keeps its old runners, outbox rows and
// undelivered events away from the new controller's allocations
// (gpud/node ident.go), and the events call refuses events recorded for
// another identity (gpud/server).

// identityName is the admin record's name.
const identityName = "identity"

// Identity is the controller state's identity (32 hex digits), or "" for
// a store that keeps none (one that is not an AdminStore) or, in an HA
// follower, before the group's first leader made it.
func (c *Controller) Identity() string {
	if p := c.ident.Load(); p != nil {
		return *p
	}
	return ""
}

// decodeIdentity reads the identity's admin record.
func decodeIdentity(r spec.AdminRecord) (string, error) {
	var id string
	if err := json.Unmarshal(r.Data, &id); err != nil {
		return "", fmt.Errorf("decode the controller's identity (admin record %s/%s): %w; restore state.db from a backup", r.Kind, r.Name, err)
	}
	if b, err := hex.DecodeString(id); err != nil || len(b) != 16 {
		return "", fmt.Errorf("the controller's identity in state.db is %q, not 32 hex digits; restore state.db from a backup", id)
	}
	return id, nil
}

// ensureIdentity makes and stores the identity when the state has none
// (a new state.db, or one an older gpud made): the leader's (or the only
// controller's) owner, after load. Durable before it is ever answered.
func (c *Controller) ensureIdentity(ctx context.Context) error {
	if c.Identity() != "" {
		return nil
	}
	as, ok := c.store.(AdminStore)
	if !ok {
		return nil
	}
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	data, _ := json.Marshal(id) // a string: cannot fail
	if err := as.ApplyAdmin(ctx, []spec.AdminRecord{{Kind: spec.AdminController, Name: identityName, Data: data}}); err != nil {
		return fmt.Errorf("store the controller's identity: %w", err)
	}
	c.ident.Store(&id)
	c.log.Info("made the identity of this controller's state (a new state: node agents keep their old allocations apart from its)", "controller_id", id)
	return nil
}
