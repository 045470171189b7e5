package format

import (
	"bufio"
	"io"
	"strconv"

	"github.com/gpud/gpud/gpud/api"
)

// WriteAudit writes audit entries as gpuq audit's table: TIME ACTOR ROLE
// ORIGIN ACTION TARGET RESULT, times in local time, the actor by name (or
// uid when the name is unknown); the header is omitted with noHeader.
func WriteAudit(w io.Writer, entries []api.AuditEntry, noHeader bool) error {
	rows := make([][]string, 0, len(entries)+1)
	if !noHeader {
		rows = append(rows, []string{"TIME", "ACTOR", "ROLE", "ORIGIN", "ACTION", "TARGET", "RESULT"})
	}
	dash := func(v string) string {
		if v == "" {
			return "-"
		}
		return v
	}
	for _, e := range entries {
		actor := e.ActorName
		if actor == "" {
			actor = strconv.FormatUint(uint64(e.ActorUID), 10)
		}
		rows = append(rows, []string{e.Time.Local().Format(TimeLayout), actor, dash(e.Role), dash(e.Origin),
			e.Action, dash(e.Target), dash(e.Result)})
	}
	bw := bufio.NewWriter(w)
	writeAligned(bw, rows, noHeader)
	return bw.Flush()
}

// WriteAuditJSON writes audit entries as an indented JSON array (never
// null).
func WriteAuditJSON(w io.Writer, entries []api.AuditEntry) error {
	if entries == nil {
		entries = []api.AuditEntry{}
	}
	return WriteJSON(w, entries)
}
