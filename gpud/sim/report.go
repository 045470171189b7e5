package sim

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes one row per policy.
func WriteTable(w io.Writer, ms []Metrics) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tjobs\twait mean\twait p50\twait p95\twait p99\tJCT mean\tJCT p50\tJCT p95\tJCT p99\tbsld\tutil\tmakespan\tjain\tpreempt\tcalls\twall\tsim s/wall s\t")
	for _, m := range ms {
		jain := "-"
		if m.Jain != nil {
			jain = fmt.Sprintf("%.3f", *m.Jain)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.3f\t%s\t%s\t%d\t%d\t%.2fs\t%.3g\t\n",
			m.Policy, m.Jobs, dur(m.WaitMean), dur(m.WaitMedian), dur(m.WaitP95), dur(m.WaitP99),
			dur(m.JCTMean), dur(m.JCTMedian), dur(m.JCTP95), dur(m.JCTP99), m.BSLD, m.Utilisation, dur(m.Makespan),
			jain, m.Preemptions, m.Cycles, m.Wall, m.Speed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range ms {
		if m.Unfittable > 0 || m.NeverStarted > 0 || m.Killed > 0 {
			fmt.Fprintf(w, "%s: %d job(s) cannot run on this cluster even when empty (left out), %d never started, %d killed at their time limit\n",
				m.Policy, m.Unfittable, m.NeverStarted, m.Killed)
		}
		if m.TraceWaitMean != nil {
			fmt.Fprintf(w, "%s: the trace's own recorded waits for these jobs: mean wait %s, mean bounded slowdown %.2f\n",
				m.Policy, dur(*m.TraceWaitMean), *m.TraceBSLD)
		}
	}
	return nil
}

// dur formats seconds compactly: 42s, 3.5m, 2.1h, 4.0d.
func dur(s float64) string {
	switch {
	case s < 120:
		return fmt.Sprintf("%.0fs", s)
	case s < 7200:
		return fmt.Sprintf("%.1fm", s/60)
	case s < 172800:
		return fmt.Sprintf("%.1fh", s/3600)
	}
	return fmt.Sprintf("%.1fd", s/86400)
}
