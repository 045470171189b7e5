package format

import (
	"fmt"
	"io"
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", m.ID, addr, m.State, voter, m.Term, m.CommitIndex, m.AppliedIndex, contact(m.LastContact, now))
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
