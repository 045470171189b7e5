package node

import (
	"context"
	"slices"
	"sync"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// memOutbox is the outbox of WithMemoryOutbox: the same facts and answers
// as outbox.db (events in seq order until acknowledged, seqs never
// reused, allocation records, step numbers), kept in Go maps and slices.
// It survives nothing, not even the agent, so only gpud loadtest uses it:
// its hundreds of agents per process would otherwise spend a fifth of
// their CPU in an in-memory SQLite database (cgo calls, statement
// preparation, JSON bodies) that makes nothing more durable.
type memOutbox struct {
	mu      sync.Mutex
	lastSeq uint64
	events  []api.AllocEvent // unacknowledged, seq order, Seq set
	allocs  map[string]allocRecord
	stepIDs map[string]int // an allocation's next step number
	kept    string         // the controller identity served (ident.go)
}

func newMemOutbox() *memOutbox {
	return &memOutbox{allocs: map[string]allocRecord{}, stepIDs: map[string]int{}}
}

func (m *memOutbox) record(ctx context.Context, ev api.AllocEvent) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.allocs[ev.AllocID].Ctl == "" { // else an earlier controller's: a local record only (ident.go)
		m.lastSeq++
		ev.Seq = m.lastSeq
		m.events = append(m.events, ev)
	}
	switch ev.Kind {
	case api.EventStarted:
		r := m.allocs[ev.AllocID]
		r.Started = true
		m.allocs[ev.AllocID] = r
	case api.EventExited:
		r := m.allocs[ev.AllocID]
		r.Exited = true
		m.allocs[ev.AllocID] = r
	}
	return ev.Seq, nil
}

func (m *memOutbox) markStopping(ctx context.Context, allocID string, state spec.JobState, why string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.allocs[allocID]
	if r.StopState == "" { // the first reason wins
		r.StopState, r.StopWhy = state, why
	}
	m.allocs[allocID] = r
	return nil
}

func (m *memOutbox) markSignal(ctx context.Context, allocID string, seq int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.allocs[allocID]
	r.SignalSeq = seq
	m.allocs[allocID] = r
	return nil
}

func (m *memOutbox) markNotice(ctx context.Context, allocID string, seq int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.allocs[allocID]
	r.NoticeSeq = seq
	m.allocs[allocID] = r
	return nil
}

func (m *memOutbox) alloc(ctx context.Context, allocID string) (allocRecord, error) {
	if err := ctx.Err(); err != nil {
		return allocRecord{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.allocs[allocID]
	r.Ctl = "" // foreignOf's (outbox.db's record has none)
	return r, nil
}

func (m *memOutbox) pending(ctx context.Context, limit int) ([]api.AllocEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.events) == 0 {
		return nil, nil
	}
	return slices.Clone(m.events[:min(limit, len(m.events))]), nil
}

func (m *memOutbox) ack(ctx context.Context, seq uint64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n, _ := slices.BinarySearchFunc(m.events, seq+1, func(ev api.AllocEvent, s uint64) int {
		switch {
		case ev.Seq < s:
			return -1
		case ev.Seq > s:
			return 1
		}
		return 0
	})
	m.events = slices.Delete(m.events, 0, n)
	return nil
}

func (m *memOutbox) reserveStepIDs(ctx context.Context, allocID string, n int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	first := m.stepIDs[allocID]
	m.stepIDs[allocID] = first + n
	return first, nil
}

func (m *memOutbox) fingerprint(allocID string, sub int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.allocs[allocID]
	r.SubmitNS = sub
	m.allocs[allocID] = r
}

func (m *memOutbox) forgetAlloc(ctx context.Context, allocID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.allocs, allocID)
	delete(m.stepIDs, allocID)
	return nil
}
