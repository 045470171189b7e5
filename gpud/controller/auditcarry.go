package controller

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gpud/gpud/gpud/spec"
)

// AuditStore is a Store that can commit the audit entries of the calls a
// transaction carries out with the transaction itself (gpud/store; an
// HA group's store does not, and there the API server writes each entry
// to the audit log first, as before).
type AuditStore interface {
	Store
	// ApplyAudited is Apply that also keeps audits (opaque entries) in the
	// same transaction, and drops the kept entries forget names; it
	// returns the numbers of the entries kept, in order.
	ApplyAudited(ctx context.Context, jobs []*spec.Job, nodes []*spec.Node, nextJobID spec.JobID, audits [][]byte, forget []int64) ([]int64, error)
	// PendingAudits returns the kept entries not yet dropped, oldest first.
	PendingAudits(ctx context.Context) ([]int64, [][]byte, error)
}

// AuditCarry is the audit entry of one API call, handed to the
// controller with the call's context (WithAuditCarry) so that the state
// commit that carries the call out also makes its entry durable: one
// durable write per call instead of the audit log's and then the state's.
// The API server then copies the entry (with the call's outcome) to the
// audit log and has the kept one dropped (ForgetAudits); an entry kept
// when the controller stopped is handed back at the next start
// (CarriedAudits).
type AuditCarry struct {
	// Entry encodes the entry (the API server's encoding) once the call
	// has run, given the jobs it made (none for a call that made none):
	// the entry kept in state.db names them, so one a kill leaves "in
	// progress" still says which jobs its call made.
	Entry func(made []spec.JobID) []byte
	taken atomic.Bool
	seq   int64
	// made are the ids the call handed out: [first, end).
	first, end spec.JobID
}

// Seq is the number under which the entry was committed with the call's
// state change, once the call returned; 0 if the call committed nothing
// (refused, failed, or its commit failed): then the entry is durable
// nowhere and the API server writes it itself.
func (a *AuditCarry) Seq() int64 { return a.seq }

type auditCarryKey struct{}

// WithAuditCarry returns ctx carrying a: the first controller call made
// with it commits a's entry with its state change, if it succeeds.
func WithAuditCarry(ctx context.Context, a *AuditCarry) context.Context {
	return context.WithValue(ctx, auditCarryKey{}, a)
}

// carryOf takes the audit entry ctx carries, once.
func carryOf(ctx context.Context) *AuditCarry {
	a, _ := ctx.Value(auditCarryKey{}).(*AuditCarry)
	if a == nil || !a.taken.CompareAndSwap(false, true) {
		return nil
	}
	return a
}

// CarriesAudit says whether the store commits audit entries with state
// changes (WithAuditCarry has an effect).
func (c *Controller) CarriesAudit() bool {
	_, ok := c.store.(AuditStore)
	return ok
}

// CarriedAudit is an entry kept with its call's state change and not yet
// copied to the audit log when the controller last stopped.
type CarriedAudit struct {
	Seq   int64
	Entry []byte
}

// CarriedAudits returns the entries kept with their calls' state changes
// that were not copied to the audit log before the last stop (a kill
// between the commit and the copy): the API server copies them, each
// once, at its start.
func (c *Controller) CarriedAudits(ctx context.Context) ([]CarriedAudit, error) {
	as, ok := c.store.(AuditStore)
	if !ok {
		return nil, nil
	}
	seqs, entries, err := as.PendingAudits(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CarriedAudit, len(seqs))
	for i := range seqs {
		out[i] = CarriedAudit{Seq: seqs[i], Entry: entries[i]}
	}
	return out, nil
}

// forgets are kept entries the audit log holds now, to be dropped with
// the next commit.
type forgets struct {
	mu      sync.Mutex
	seqs    []int64
	kicking bool
}

// ForgetAudits drops the kept entries seqs, now copied to the audit log,
// with the next state commit (one is made soon if none comes). Safe from
// any goroutine; it does not wait.
func (c *Controller) ForgetAudits(seqs []int64) {
	if len(seqs) == 0 {
		return
	}
	f := &c.forget
	f.mu.Lock()
	f.seqs = append(f.seqs, seqs...)
	kick := !f.kicking
	f.kicking = true
	f.mu.Unlock()
	if kick {
		// An empty call makes a batch, whose commit takes them; under
		// load it joins the requests' batch and adds no commit.
		go c.call(context.Background(), func(*txn) error { return nil }) //nolint:errcheck // stopped: kept for the next start
	}
}

// takeForgets hands the entries to drop to a commit.
func (c *Controller) takeForgets() []int64 {
	f := &c.forget
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.seqs
	f.seqs, f.kicking = nil, false
	return s
}

// putForgetsBack returns a failed commit's entries to drop.
func (c *Controller) putForgetsBack(seqs []int64) {
	f := &c.forget
	f.mu.Lock()
	f.seqs = append(f.seqs, seqs...)
	f.mu.Unlock()
}

// applyAudited commits tx's changes with its carried entries and drops.
func (c *Controller) applyAudited(ctx context.Context, tx *txn, jobs []*spec.Job, nodes []*spec.Node, next spec.JobID) error {
	as := c.store.(AuditStore)
	audits := make([][]byte, len(tx.carries))
	for i, a := range tx.carries {
		var made []spec.JobID
		for id := a.first; id < a.end; id++ {
			made = append(made, id)
		}
		audits[i] = a.Entry(made)
	}
	seqs, err := as.ApplyAudited(ctx, jobs, nodes, next, audits, tx.forget)
	if err != nil {
		return err
	}
	for i, a := range tx.carries {
		a.seq = seqs[i]
	}
	return nil
}
