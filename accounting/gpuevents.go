package accounting

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// GPUEvent is one entry of a GPU's health history (spec.GPUEvent).
type GPUEvent = spec.GPUEvent

func insertGPUEvent(ctx context.Context, tx *sql.Tx, at time.Time, node string, g *spec.GPUEvent) error {
	t := g.Time.Time
	if t.IsZero() {
		t = at
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO gpu_events (time, node, gpu, uuid, serial, kind, code, class, action, detail) VALUES (?,?,?,?,?,?,?,?,?,?)`,
		t.Unix(), cmp.Or(g.Node, node), g.GPU, g.UUID, g.Serial, g.Kind, g.Code, g.Class, g.Action, g.Detail); err != nil {
		return fmt.Errorf("record GPU event %s of %s on %s: %w", g.Kind, g.UUID, node, err)
	}
	return nil
}

// GPUEventFilter selects GPU health events; zero fields select all.
type GPUEventFilter struct {
	Start, End time.Time
	Nodes      []string
	// Serials and UUIDs select GPUs.
	Serials, UUIDs []string
	Kinds          []string
	// Classes: fatal, degraded, info.
	Classes []string
	// Limit keeps only the newest Limit events (listed oldest first).
	Limit int
}

// GPUEvents lists GPU health events, oldest first.
func (db *DB) GPUEvents(ctx context.Context, f GPUEventFilter) ([]GPUEvent, error) {
	s, e := bounds(f.Start, f.End)
	conds, args := []string{"time BETWEEN ? AND ?"}, []any{s, e}
	in := func(col string, vals []string) {
		if len(vals) == 0 {
			return
		}
		conds = append(conds, col+" IN ("+strings.TrimSuffix(strings.Repeat("?,", len(vals)), ",")+")")
		for _, v := range vals {
			args = append(args, v)
		}
	}
	in("node", f.Nodes)
	in("serial", f.Serials)
	in("uuid", f.UUIDs)
	in("kind", f.Kinds)
	in("class", f.Classes)
	q := `SELECT time, node, gpu, uuid, serial, kind, code, class, action, detail FROM gpu_events WHERE ` + strings.Join(conds, " AND ") + ` ORDER BY time DESC, id DESC`
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list GPU events: %w", err)
	}
	defer rows.Close()
	var out []GPUEvent
	for rows.Next() {
		var ev GPUEvent
		var t int64
		if err := rows.Scan(&t, &ev.Node, &ev.GPU, &ev.UUID, &ev.Serial, &ev.Kind, &ev.Code, &ev.Class, &ev.Action, &ev.Detail); err != nil {
			return nil, fmt.Errorf("list GPU events: read row: %w", err)
		}
		ev.Time = spec.NewTime(time.Unix(t, 0).UTC())
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list GPU events: %w", err)
	}
	slices.Reverse(out)
	return out, nil
}

// RMARow is one GPU of the RMA report (the API's type).
type RMARow = api.RMARow

// rmaCodes are findings that mean the hardware itself is bad, not its
// state: one is enough for an RMA.
var rmaCodes = []string{"row-remap-failed", "xid64", "xid95", "xid79"}

// RMAReport summarises the GPU events of f by GPU, worst first. A GPU is
// an RMA candidate with a fault that marks bad hardware (failed row
// remapping, XID 64, 79 or 95), two fatal faults in the period, or a
// failed readmission probe.
func (db *DB) RMAReport(ctx context.Context, f GPUEventFilter) ([]RMARow, error) {
	f.Limit = 0
	evs, err := db.GPUEvents(ctx, f)
	if err != nil {
		return nil, err
	}
	rows := map[string]*RMARow{}
	codes := map[string]map[string]int{}
	for _, e := range evs {
		key := cmp.Or(e.Serial, e.UUID)
		r := rows[key]
		if r == nil {
			r = &RMARow{Serial: e.Serial, FirstSeen: e.Time}
			rows[key] = r
			codes[key] = map[string]int{}
		}
		r.UUID, r.Node, r.GPU, r.LastSeen = e.UUID, e.Node, e.GPU, e.Time
		switch e.Kind {
		case spec.GPUEventFault:
			switch e.Class {
			case "fatal":
				r.Fatal++
			case "degraded":
				r.Degraded++
			}
			codes[key][e.Code]++
		case spec.GPUEventProbeFailed:
			r.ProbesFailed++
		case spec.GPUEventReadmit:
			r.Readmits++
		}
	}
	out := make([]RMARow, 0, len(rows))
	for key, r := range rows {
		for c := range codes[key] {
			r.Codes = append(r.Codes, c)
		}
		slices.SortFunc(r.Codes, func(a, b string) int { return cmp.Or(codes[key][b]-codes[key][a], strings.Compare(a, b)) })
		switch {
		case slices.ContainsFunc(r.Codes, func(c string) bool { return slices.Contains(rmaCodes, c) }):
			r.Candidate, r.Why = true, "fault that marks bad hardware"
		case r.Fatal >= 2:
			r.Candidate, r.Why = true, fmt.Sprintf("%d fatal faults", r.Fatal)
		case r.ProbesFailed > 0:
			r.Candidate, r.Why = true, "failed a readmission probe"
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RMARow) int {
		if a.Candidate != b.Candidate {
			if a.Candidate {
				return -1
			}
			return 1
		}
		return cmp.Or(b.Fatal-a.Fatal, b.Degraded-a.Degraded, strings.Compare(a.Serial, b.Serial), strings.Compare(a.UUID, b.UUID))
	})
	return out, nil
}
