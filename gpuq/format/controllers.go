package format

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// WriteControllers writes the members of the controller group as gpuq
// controllers shows them: ID ADDRESS STATE VOTER TERM COMMIT APPLIED
// CONTACT, one member a line in the group's order. STATE is leader,
// follower, candidate or unreachable; CONTACT is how long ago the leader
// last heard from the member ("-" for the leader itself or when unknown).
func WriteControllers(w io.Writer, res api.ControllersResponse, now time.Time, noHeader bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if !noHeader {
		fmt.Fprintln(tw, "ID\tADDRESS\tSTATE\tVOTER\tTERM\tCOMMIT\tAPPLIED\tCONTACT")
	}
	for _, m := range res.Members {
		addr, voter := m.APIAddress, "yes"
		if addr == "" {
			addr = "-"
		}
		if !m.Voter {
			voter = "no"
		}
		// Raft terms start at 1: term 0 is a member that did not report
		// its own (or a single controller, which has none).
		term, commit, applied := "-", "-", "-"
		if m.Term > 0 {
			term, commit, applied = strconv.FormatUint(m.Term, 10), strconv.FormatUint(m.CommitIndex, 10), strconv.FormatUint(m.AppliedIndex, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, addr, m.State, voter, term, commit, applied, contact(m.LastContact, now))
	}
	return tw.Flush()
}

// contact renders an RFC 3339 time as its age ("350ms ago", "2m5s ago").
func contact(s string, now time.Time) string {
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		d = 0
	case d < time.Second:
		d = d.Round(time.Millisecond)
	default:
		d = d.Round(time.Second)
	}
	return d.String() + " ago"
}
