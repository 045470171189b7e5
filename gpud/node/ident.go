package node

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// The controller's identity (api.AssignmentsResponse.ControllerID): an
// ID made once with the controller's state. Allocation IDs name
// allocations only within one identity: a controller whose state was
// reset (a new state.db, a fresh HA group) numbers its jobs from 1 again,
// while this node keeps its outbox for a week. So the agent keeps the
// identity of the controller it last served (outbox.db's controller
// table), and when an answer brings another one (switchController):
//
//   - the undelivered events, all recorded for the old identity, are
//     dropped (with a log line): an old "exited" must not end the new
//     controller's job of the same allocation ID;
//   - the allocations' rows are tagged with the old identity (allocs.ctl;
//     ended ones are forgotten), so after a restart too they are never
//     taken for the new controller's allocations of the same ID;
//   - the old runners are stopped, and never handed a new assignment:
//     one under the same ID waits until the old runner is gone (the
//     runner's end asks the assignments again), then runs afresh;
//   - events that old runners record afterwards (their exits) are kept
//     as local records only (record), never delivered.
//
// allocs.ctl is "" for an allocation of the kept identity (written since
// the last change) and the old identity's ID for one of an earlier
// controller: a change to Y tags every "" row with the old ID and clears
// the tag of rows of Y (a restored state coming back).
//
// An answer without an identity (an older controller) changes nothing:
// the agent behaves as it did before identities. A first identity, with
// none kept (a new agent, or one upgraded), is adopted as the one served.
// Events are sent saying the kept identity (the controller refuses them
// when it has another) unless the controller's last answer had none (an
// older controller refuses a field it does not know).

// identSchema adds the kept identity's table and the allocations' tag.
const identSchema = `CREATE TABLE IF NOT EXISTS controller (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	id  TEXT NOT NULL -- the identity of the controller last served
)`

// openIdent reads the kept identity and the tagged allocations (at open,
// after loadKnown); it adds the table and column to an older outbox.db.
func (o *outbox) openIdent(ctx context.Context) error {
	if _, err := o.db.ExecContext(ctx, identSchema); err != nil {
		return fmt.Errorf("create the controller table: %w", err)
	}
	var has int
	if err := o.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('allocs') WHERE name = 'ctl'`).Scan(&has); err != nil {
		return fmt.Errorf("read the allocs table's columns: %w", err)
	}
	if has == 0 {
		if _, err := o.db.ExecContext(ctx, `ALTER TABLE allocs ADD COLUMN ctl TEXT NOT NULL DEFAULT ''`); err != nil {
			return fmt.Errorf("add the ctl column: %w", err)
		}
	}
	var kept string
	switch err := o.db.QueryRowContext(ctx, `SELECT id FROM controller`).Scan(&kept); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read the kept controller identity: %w", err)
	}
	foreign, err := o.readForeign(ctx, o.db)
	if err != nil {
		return err
	}
	o.kmu.Lock()
	o.kept = kept
	o.setForeign(foreign)
	o.kmu.Unlock()
	return nil
}

type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// readForeign reads the allocations tagged with an old identity.
func (o *outbox) readForeign(ctx context.Context, q queryer) (map[string]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT alloc_id, ctl FROM allocs WHERE ctl != ''`)
	if err != nil {
		return nil, fmt.Errorf("read allocations of earlier controllers: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, ctl string
		if err := rows.Scan(&id, &ctl); err != nil {
			return nil, fmt.Errorf("read allocations of earlier controllers: %w", err)
		}
		out[id] = ctl
	}
	return out, rows.Err()
}

// setForeign replaces the tagged allocations (kmu held).
func (o *outbox) setForeign(m map[string]string) {
	o.foreign = m
	o.anyForeign.Store(len(m) > 0)
}

// controllerID is the identity of the controller last served ("": none
// said yet).
func (o *outbox) controllerID() string {
	if o.mem != nil {
		return o.mem.controllerID()
	}
	o.kmu.Lock()
	defer o.kmu.Unlock()
	return o.kept
}

// foreignOf returns the identity of the earlier controller allocID
// belongs to, or "" for one of the kept identity (or unknown).
func (o *outbox) foreignOf(allocID string) string {
	if o.mem != nil {
		return o.mem.foreignOf(allocID)
	}
	if !o.anyForeign.Load() {
		return ""
	}
	o.kmu.Lock()
	defer o.kmu.Unlock()
	return o.foreign[allocID]
}

// liveAlloc is an allocation with a runner when the identity changes.
type liveAlloc struct {
	id  string
	job spec.JobID
}

// serve makes id the identity served. It reports whether that changed
// an identity kept before (old), and how many undelivered events of the
// old one it dropped; live are the allocations running here, tagged
// with the old identity with the rest.
func (o *outbox) serve(ctx context.Context, id string, live []liveAlloc, now time.Time) (old string, dropped int, err error) {
	if o.mem != nil {
		return o.mem.serve(id, live)
	}
	o.kmu.Lock()
	kept := o.kept
	o.kmu.Unlock()
	if id == "" || id == kept {
		return "", 0, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	tx, err := o.db.BeginTx(ctx, nil)
	if err != nil {
		return "", 0, fmt.Errorf("keep controller identity %s: %w", id, err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it is a no-op
	var foreign map[string]string
	if kept != "" {
		// Rows up to acked were delivered (their delete waits for a
		// commit: outbox.acked); only the rest are dropped.
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM events WHERE seq > ?`, int64(o.acked)).Scan(&dropped); err != nil {
			return "", 0, fmt.Errorf("count the old controller's events: %w", err)
		}
		for _, q := range []struct {
			q    string
			args []any
		}{
			{`DELETE FROM events`, nil},
			{upsertSeqFloor, []any{int64(o.lastSeq)}}, // seqs go on from there (upsertSeqFloor)
			// Ended allocations of any other identity: nothing of theirs
			// is asked any more.
			{`DELETE FROM allocs WHERE exited = 1 AND ctl != ?`, []any{id}},
			{`UPDATE allocs SET ctl = ? WHERE ctl = ''`, []any{kept}},
			{`UPDATE allocs SET ctl = '' WHERE ctl = ?`, []any{id}},
			{`DELETE FROM notices WHERE alloc_id NOT IN (SELECT alloc_id FROM allocs)`, nil},
			{`DELETE FROM step_ids WHERE alloc_id NOT IN (SELECT alloc_id FROM allocs)`, nil},
		} {
			if _, err := tx.ExecContext(ctx, q.q, q.args...); err != nil {
				return "", 0, fmt.Errorf("set the old controller's allocations apart: %w", err)
			}
		}
		// A runner whose allocation has no row yet (it had not started):
		// one, tagged, so that it stays the old identity's after a restart.
		for _, l := range live {
			if _, err := tx.ExecContext(ctx, `INSERT INTO allocs (alloc_id, job_id, ctl, updated_ns) VALUES (?, ?, ?, ?)
				ON CONFLICT(alloc_id) DO NOTHING`, l.id, int64(l.job), kept, now.UnixNano()); err != nil {
				return "", 0, fmt.Errorf("tag allocation %s with the old controller: %w", l.id, err)
			}
		}
		if foreign, err = o.readForeign(ctx, tx); err != nil {
			return "", 0, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO controller (one, id) VALUES (1, ?) ON CONFLICT(one) DO UPDATE SET id = excluded.id`, id); err != nil {
		return "", 0, fmt.Errorf("keep controller identity %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		o.mirrored, o.unacked = false, nil // committed or not is unknown
		return "", 0, fmt.Errorf("keep controller identity %s: %w", id, err)
	}
	if kept == "" {
		o.kmu.Lock()
		o.kept = id
		o.kmu.Unlock()
		return "", 0, nil
	}
	o.mirrored, o.unacked = false, nil
	o.deleted = max(o.deleted, o.acked) // every row is gone
	if err := o.loadKnown(ctx); err != nil {
		// The rows are right; only the shortcut is lost.
		o.kmu.Lock()
		o.known = nil
		o.kmu.Unlock()
	}
	o.kmu.Lock()
	o.kept = id
	o.setForeign(foreign)
	o.kmu.Unlock()
	return kept, dropped, nil
}

// recordForeign keeps ev, an event of an allocation of an earlier
// controller (old), as a local record only: its allocation's row says it
// started or exited (so a restarted agent does not report it again), and
// no event is queued for the controller, whose allocation of the same
// ID, if any, is another one. o.mu is held.
func (o *outbox) recordForeign(ctx context.Context, ev api.AllocEvent) error {
	col := ""
	switch ev.Kind {
	case api.EventStarted:
		col = "started"
	case api.EventExited:
		col = "exited"
	}
	if col == "" {
		return nil
	}
	if _, err := o.db.ExecContext(ctx, `UPDATE allocs SET `+col+` = 1, updated_ns = ? WHERE alloc_id = ?`, ev.Time.UnixNano(), ev.AllocID); err != nil {
		return fmt.Errorf("mark alloc %s %s: %w", ev.AllocID, ev.Kind, err)
	}
	if ev.Kind == api.EventExited {
		o.kmu.Lock()
		if _, ok := o.known[ev.AllocID]; ok {
			o.known[ev.AllocID] = true
		}
		o.kmu.Unlock()
	}
	return nil
}

// The memory outbox's identity (outbox_mem.go): the same answers, kept
// only while the agent runs.

func (m *memOutbox) controllerID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.kept
}

func (m *memOutbox) foreignOf(allocID string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allocs[allocID].Ctl
}

func (m *memOutbox) serve(id string, live []liveAlloc) (old string, dropped int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" || id == m.kept {
		return "", 0, nil
	}
	old, m.kept = m.kept, id
	if old == "" {
		return "", 0, nil
	}
	dropped = len(m.events)
	m.events = nil
	for _, l := range live {
		if _, ok := m.allocs[l.id]; !ok {
			m.allocs[l.id] = allocRecord{}
		}
	}
	for aid, r := range m.allocs {
		switch {
		case r.Exited && r.Ctl != id:
			delete(m.allocs, aid)
			continue
		case r.Ctl == "":
			r.Ctl = old
		case r.Ctl == id:
			r.Ctl = ""
		}
		m.allocs[aid] = r
	}
	for aid := range m.stepIDs {
		if _, ok := m.allocs[aid]; !ok {
			delete(m.stepIDs, aid) // as outbox.db's step_ids without an allocs row
		}
	}
	return old, dropped, nil
}

// learnController takes the identity an answer brought ("": the
// controller says none) before the answer is acted on; it reports false
// when the change could not be made durable, and the answer must not be
// acted on (the next one tries again). identMu is held for writing: no
// reconcile runs meanwhile, so every runner started for the old identity
// is here to be set apart.
func (a *Agent) learnController(ctx context.Context, id string) bool {
	a.ctlSilent.Store(id == "")
	if id == "" || id == a.ob.controllerID() {
		return true
	}
	a.identMu.Lock()
	defer a.identMu.Unlock()
	if id == a.ob.controllerID() {
		return true // another loop's answer made the change meanwhile
	}
	a.mu.Lock()
	live := make([]liveAlloc, 0, len(a.runners))
	runners := make([]*runner, 0, len(a.runners))
	for aid, r := range a.runners {
		live = append(live, liveAlloc{id: aid, job: r.jobID})
		runners = append(runners, r)
	}
	a.mu.Unlock()
	old, dropped, err := a.ob.serve(context.WithoutCancel(ctx), id, live, a.clock.Now())
	if err != nil {
		a.log.Error("keep the controller's identity; its answer waits for the next", "controller_id", id, "err", err)
		return false
	}
	if old == "" {
		a.log.Info("serving controller", "controller_id", id)
		return true
	}
	a.log.Warn("the controller's state is another one than this node served (it was reset or replaced): the old state's undelivered events are dropped and its allocations stopped, never taken for the new state's allocations of the same IDs",
		"controller_id", id, "old_controller_id", old, "events_dropped", dropped, "allocations_stopped", len(runners))
	for _, r := range runners {
		a.stopForeign(r, old)
	}
	return true
}

// stopForeign stops r, a runner of an allocation of the earlier
// controller old, and has the assignments asked again once it is gone
// (an assignment of the same ID waits for it).
func (a *Agent) stopForeign(r *runner, old string) {
	r.stop(spec.StateCancelled, fmt.Sprintf("allocation %s belongs to an earlier state of the controller (identity %s), which was reset or replaced", r.allocID, old))
	a.mu.Lock()
	waiting := a.foreignStops[r]
	a.foreignStops[r] = true
	a.mu.Unlock()
	if waiting {
		return
	}
	a.runnerWG.Add(1)
	go func() {
		defer a.runnerWG.Done()
		<-r.done
		a.mu.Lock()
		delete(a.foreignStops, r)
		a.mu.Unlock()
		a.repoll()
	}()
}

// eventsController is the identity the events sent now say: the kept one,
// unless the controller's last answer had none (an older controller,
// which refuses a field it does not know).
func (a *Agent) eventsController() string {
	if a.ctlSilent.Load() {
		return ""
	}
	return a.ob.controllerID()
}
