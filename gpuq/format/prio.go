package format

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/gpud/gpud/gpud/api"
)

// WritePriorities prints pending jobs' priorities like sprio: the total
// and each factor times its weight, rounded; NICE is the job's nice value.
func WritePriorities(w io.Writer, jobs []api.JobPriority, noHeader bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	if !noHeader {
		fmt.Fprintln(tw, "JOBID\tUSER\tACCOUNT\tPRIORITY\tAGE\tFAIRSHARE\tJOBSIZE\tPARTITION\tQOS\tNICE\t")
	}
	for i := range jobs {
		j := &jobs[i]
		f := &j.Weighted
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", j.JobID, j.User, j.Account, j.Priority,
			round(f.Age), round(f.Fairshare), round(f.JobSize), round(f.Partition), round(f.QOS), j.Nice)
	}
	return tw.Flush()
}

// WriteFairshare prints the fairshare tree like sshare: each account,
// then its users indented under it. EffectvUsage is the account's or
// user's share of its siblings' decayed usage; FairShare is the Fair
// Tree factor (users only). RawUsage is billed GPU-seconds.
func WriteFairshare(w io.Writer, rows []api.FairshareRow, noHeader bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if !noHeader {
		fmt.Fprintln(tw, "Account\tUser\tRawShares\tNormShares\tRawUsage\tEffectvUsage\tFairShare")
	}
	for i := range rows {
		r := &rows[i]
		// Indented by depth like sshare; rows from an older controller
		// have no depth and indent users by one.
		acct, fs := strings.Repeat(" ", max(r.Depth-1, 0))+r.Account, ""
		if r.User != "" {
			acct, fs = strings.Repeat(" ", max(r.Depth-1, 1))+r.Account, fmt.Sprintf("\t%.6f", r.Factor)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.6f\t%d\t%.6f%s\n", acct, r.User, shares(r.RawShares), r.NormShares,
			round(r.RawUsage), r.NormUsage, fs)
	}
	return tw.Flush()
}

func round(x float64) int64 { return int64(math.Round(x)) }

func shares(x float64) string {
	if x == math.Trunc(x) {
		return fmt.Sprintf("%d", int64(x))
	}
	return fmt.Sprintf("%g", x)
}
