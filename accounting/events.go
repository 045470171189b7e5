package accounting

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// NodeEvent is a change of a node's availability (spec.NodeEvent): the
// controller records them, and gpuq report cluster derives down
// GPU-hours from them.
type NodeEvent = spec.NodeEvent

// AuditEntry is one state-changing call: who did what to what, from where,
// and how it ended. Times are kept to the second.
type AuditEntry struct {
	Time      time.Time `json:"time"`
	ActorUID  uint32    `json:"actor_uid"`
	ActorName string    `json:"actor_name"`
	// Role is the role the actor acted with: user, operator, admin, node.
	Role string `json:"role"`
	// Origin is where the call came from: "unix", an IP address, "node gpu-04".
	Origin string `json:"origin"`
	// Action is the operation: the API server records the route pattern
	// with its verb filled in ("POST /v1/jobs/{id}/cancel").
	Action string `json:"action"`
	// Target is what was acted on: a job ID, a node name, the job IDs a
	// submission created.
	Target string `json:"target"`
	// Result is "ok" or the error the caller was shown (the API server
	// prefixes the HTTP status: "200 ok", "403 permission denied: ...").
	Result string `json:"result"`
	// Summarised is, for a summary row, how many refused calls it stands
	// for; 0 for a row of one call. The API server writes the first
	// refusal of a kind from a source in an interval on its own, and the
	// rest as one summary row.
	Summarised int `json:"summarised,omitempty"`
}

// AddNodeEvent appends a node event.
func (db *DB) AddNodeEvent(ctx context.Context, e NodeEvent) error {
	if e.Time.IsZero() || e.Node == "" || e.Event == "" {
		return spec.Errorf(spec.ErrInvalid, "add node event %+v: time, node and event are required", e)
	}
	if _, err := db.w.ExecContext(ctx, `INSERT INTO node_events (time, node, event, reason, actor) VALUES (?,?,?,?,?)`,
		e.Time.Unix(), e.Node, e.Event, e.Reason, e.Actor); err != nil {
		return fmt.Errorf("add node event %s for %s: %w", e.Event, e.Node, err)
	}
	return nil
}

// RecordNodeEvents appends node events in one transaction: all or none
// (the controller's recorder retries a failed batch whole).
func (db *DB) RecordNodeEvents(ctx context.Context, evs []spec.NodeEvent) error {
	if len(evs) == 0 {
		return nil
	}
	for _, e := range evs {
		if e.Time.IsZero() || e.Node == "" || e.Event == "" {
			return spec.Errorf(spec.ErrInvalid, "record node event %+v: time, node and event are required", e)
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("record %d node events: %w", len(evs), err)
	}
	defer tx.Rollback()
	for _, e := range evs {
		if e.GPU != nil { // a GPU's health history, not the node's availability
			if err := insertGPUEvent(ctx, tx, e.Time, e.Node, e.GPU); err != nil {
				return err
			}
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO node_events (time, node, event, reason, actor) VALUES (?,?,?,?,?)`,
			e.Time.Unix(), e.Node, e.Event, e.Reason, e.Actor); err != nil {
			return fmt.Errorf("record node event %s for %s: %w", e.Event, e.Node, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("record %d node events: %w", len(evs), err)
	}
	return nil
}

// AddAudit appends an audit entry.
func (db *DB) AddAudit(ctx context.Context, a AuditEntry) error {
	return db.AddAudits(ctx, []AuditEntry{a})
}

// AddAudits appends audit entries in one transaction: all or none. Every
// entry needs a time and an action.
func (db *DB) AddAudits(ctx context.Context, as []AuditEntry) error {
	if len(as) == 0 {
		return nil
	}
	for _, a := range as {
		if a.Time.IsZero() || a.Action == "" {
			return spec.Errorf(spec.ErrInvalid, "add audit entry %+v: time and action are required", a)
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add %d audit entries: %w", len(as), err)
	}
	ctx = execCtx(ctx) // the transaction still ends with ctx
	defer tx.Rollback()
	st := tx.StmtContext(ctx, db.auditIns)
	defer st.Close()
	var grew int64
	for _, a := range as {
		if _, err := st.ExecContext(ctx, a.Time.Unix(), a.ActorUID, a.ActorName, a.Role, a.Origin, a.Action, a.Target, a.Result, a.Summarised, nil); err != nil {
			return fmt.Errorf("add audit entry %s on %s by %s: %w", a.Action, a.Target, a.ActorName, err)
		}
		grew += rowBytes(a)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add %d audit entries: %w", len(as), err)
	}
	db.addAuditBytes(grew)
	return nil
}

// WriteAudits' statements, prepared once (DB.auditIns, DB.auditUpd).
const (
	insertAuditSQL = `INSERT INTO audit (time, actor_uid, actor_name, role, origin, action, target, result, summarised, carried)
		VALUES (?,?,?,?,?,?,?,?,?,?)`
	carriedAuditSQL = `SELECT id FROM audit WHERE carried = ?`
	updateAuditSQL  = `UPDATE audit SET action = ?, target = ?, result = ? WHERE id = ?`
	deleteAuditSQL  = `DELETE FROM audit WHERE id = ? RETURNING ` + auditRowBytes
)

// AuditWrite is one write in WriteAudits: a new entry (ID 0; WriteAudits
// sets ID to its row) or the outcome of an entry written before (ID set:
// its action, target and result replace the row's), or with Delete the
// removal of an entry written before: a refused call's, which the API
// server counts in a summary row instead.
//
// Carried, for a new entry, is the number of the pending row in the
// controller's state.db that held the entry first (the call's state
// change and its entry committed together); it is kept with the row.
// With Recovered, the entry may already be in the log (copied before a
// crash that left its pending row): it is added only if no row carries
// that number, and ID is set to the row found or added.
type AuditWrite struct {
	ID        int64
	Entry     AuditEntry
	Delete    bool
	Carried   int64
	Recovered bool
}

// WriteAudits applies ws in one transaction, all or none: the API server
// writes a call's entry before carrying the call out and its outcome
// after, so each is durable (synchronous=FULL) when this returns.
func (db *DB) WriteAudits(ctx context.Context, ws []AuditWrite) error {
	if len(ws) == 0 {
		return nil
	}
	for _, w := range ws {
		if w.ID == 0 && (w.Entry.Time.IsZero() || w.Entry.Action == "") {
			return spec.Errorf(spec.ErrInvalid, "add audit entry %+v: time and action are required", w.Entry)
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write %d audit entries: %w", len(ws), err)
	}
	ctx = execCtx(ctx) // the transaction still ends with ctx
	defer tx.Rollback()
	ins, upd := tx.StmtContext(ctx, db.auditIns), tx.StmtContext(ctx, db.auditUpd)
	defer ins.Close()
	defer upd.Close()
	ids := make([]int64, len(ws))
	var grew int64 // bytes of the rows written, less those deleted (auditretain.go)
	for i, w := range ws {
		a := w.Entry
		if w.ID != 0 && w.Delete {
			var b int64
			if err := tx.QueryRowContext(ctx, deleteAuditSQL, w.ID).Scan(&b); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("fold refused call's audit entry %d (%s by %s) into its summary: %w", w.ID, a.Action, a.ActorName, err)
			}
			grew -= b
			continue
		}
		if w.ID != 0 {
			// The outcome replaces the entry's "in progress": about the
			// result and target more.
			grew += int64(len(a.Result) + len(a.Target) - len("in progress"))
			res, err := upd.ExecContext(ctx, a.Action, a.Target, a.Result, w.ID)
			if err != nil {
				return fmt.Errorf("record the outcome of audit entry %d (%s by %s): %w", w.ID, a.Action, a.ActorName, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return fmt.Errorf("record the outcome of audit entry %d (%s by %s): no such entry", w.ID, a.Action, a.ActorName)
			}
			continue
		}
		var carried any // NULL: not carried
		if w.Carried != 0 {
			carried = w.Carried
			if w.Recovered {
				switch err := tx.QueryRowContext(ctx, carriedAuditSQL, w.Carried).Scan(&ids[i]); {
				case err == nil:
					continue // already copied
				case !errors.Is(err, sql.ErrNoRows):
					return fmt.Errorf("look for carried audit entry %d (%s by %s): %w", w.Carried, a.Action, a.ActorName, err)
				}
			}
		}
		res, err := ins.ExecContext(ctx, a.Time.Unix(), a.ActorUID, a.ActorName, a.Role, a.Origin, a.Action, a.Target, a.Result, a.Summarised, carried)
		if err != nil {
			return fmt.Errorf("add audit entry %s on %s by %s: %w", a.Action, a.Target, a.ActorName, err)
		}
		grew += rowBytes(a)
		if ids[i], err = res.LastInsertId(); err != nil {
			return fmt.Errorf("add audit entry %s by %s: %w", a.Action, a.ActorName, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write %d audit entries: %w", len(ws), err)
	}
	db.addAuditBytes(grew)
	for i := range ws {
		if ws[i].ID == 0 {
			ws[i].ID = ids[i]
		}
	}
	return nil
}

// bounds turns an optional [start, end] into unix seconds.
func bounds(start, end time.Time) (int64, int64) {
	s, e := int64(math.MinInt64), int64(math.MaxInt64)
	if !start.IsZero() {
		s = start.Unix()
	}
	if !end.IsZero() {
		e = end.Unix()
	}
	return s, e
}

// NodeEvents lists node events in [start, end] (zero times are open ends),
// of one node or, with node "", of all, oldest first.
func (db *DB) NodeEvents(ctx context.Context, node string, start, end time.Time) ([]NodeEvent, error) {
	s, e := bounds(start, end)
	rows, err := db.r.QueryContext(ctx, `SELECT time, node, event, reason, actor FROM node_events
		WHERE time BETWEEN ? AND ? AND (? = '' OR node = ?) ORDER BY time, id`, s, e, node, node)
	if err != nil {
		return nil, fmt.Errorf("list node events: %w", err)
	}
	defer rows.Close()
	var out []NodeEvent
	for rows.Next() {
		var ev NodeEvent
		var t int64
		if err := rows.Scan(&t, &ev.Node, &ev.Event, &ev.Reason, &ev.Actor); err != nil {
			return nil, fmt.Errorf("list node events: read row: %w", err)
		}
		ev.Time = time.Unix(t, 0).UTC()
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list node events: %w", err)
	}
	return out, nil
}

// AuditFilter selects audit entries; zero fields select everything.
type AuditFilter struct {
	// Start and End bound the entries' times (inclusive).
	Start, End time.Time
	// Actor is an actor's user name or numeric uid.
	Actor string
	// Action is a substring of the action ("cancel", "POST /v1/nodes").
	Action string
	// Limit keeps only the newest Limit entries (still listed oldest
	// first); 0 means no limit.
	Limit int
}

// Audit lists audit entries in [start, end] (zero times are open ends),
// oldest first.
func (db *DB) Audit(ctx context.Context, start, end time.Time) ([]AuditEntry, error) {
	return db.AuditLog(ctx, AuditFilter{Start: start, End: end})
}

// AuditLog lists the audit entries f selects, oldest first.
func (db *DB) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	s, e := bounds(f.Start, f.End)
	uid := int64(-1)
	if n, err := strconv.ParseUint(f.Actor, 10, 32); err == nil {
		uid = int64(n)
	}
	q := `SELECT time, actor_uid, actor_name, role, origin, action, target, result, summarised, id FROM audit
		WHERE time BETWEEN ? AND ? AND (? = '' OR actor_name = ? OR actor_uid = ?) AND (? = '' OR instr(action, ?) > 0)`
	args := []any{s, e, f.Actor, f.Actor, uid, f.Action, f.Action}
	if f.Limit > 0 {
		q = `SELECT * FROM (` + q + ` ORDER BY time DESC, id DESC LIMIT ?) ORDER BY time, id`
		args = append(args, f.Limit)
	} else {
		q += ` ORDER BY time, id`
	}
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var a AuditEntry
		var t, id int64
		if err := rows.Scan(&t, &a.ActorUID, &a.ActorName, &a.Role, &a.Origin, &a.Action, &a.Target, &a.Result, &a.Summarised, &id); err != nil {
			return nil, fmt.Errorf("list audit entries: read row: %w", err)
		}
		a.Time = time.Unix(t, 0).UTC()
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit entries: %w", err)
	}
	return out, nil
}
