package format

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// TopFrame is what one frame of gpuq top shows.
type TopFrame struct {
	Now   time.Time
	Nodes []spec.Node
	// Jobs is the queue: running and pending jobs, in the order shown.
	Jobs []spec.Job
	// Usage is the newest sample of each job on each node.
	Usage []api.LatestUsage
	// MaxJobs caps the queue's lines (0: all); the rest is counted.
	MaxJobs int
}

// barWidth is the number of cells of a utilisation bar.
const barWidth = 20

// Bar draws pct (0-100) as [####----] of width cells.
func Bar(pct float64, width int) string {
	n := int(pct/100*float64(width) + 0.5)
	n = min(max(n, 0), width)
	return "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "]"
}

// WriteTop writes one frame: a summary line, the nodes with a GPU
// utilisation bar each (the mean over all the node's GPUs, idle ones
// counting 0), and the queue with each running job's utilisation.
func WriteTop(w io.Writer, f TopFrame) error {
	type agg struct{ sum, gpus float64 }
	byNode := map[string]*agg{}
	byJob := map[spec.JobID]*agg{}
	for _, u := range f.Usage {
		for _, m := range []*agg{get(byNode, u.Node), get(byJob, u.JobID)} {
			m.sum += u.GPUUtilAvg * float64(u.GPUs)
			m.gpus += float64(u.GPUs)
		}
	}
	totalGPUs, allocGPUs, out := 0, 0, 0
	var utilSum float64
	for i := range f.Nodes {
		n := &f.Nodes[i]
		totalGPUs += len(n.GPUs)
		allocGPUs += len(n.AllocGPUs)
		if n.State == spec.NodeDown || n.State == spec.NodeDrain || n.State == spec.NodeDraining {
			out++
		}
		if a := byNode[n.Name]; a != nil {
			utilSum += a.sum
		}
	}
	running, pending := 0, 0
	for i := range f.Jobs {
		switch f.Jobs[i].State {
		case spec.StateRunning:
			running++
		case spec.StatePending:
			pending++
		}
	}
	fmt.Fprintf(w, "gpuq top - %s  nodes %d (%d down or drained)  GPUs %d/%d allocated, %.0f%% utilised  jobs %d running, %d pending\n\n",
		f.Now.Format("2006-01-02 15:04:05"), len(f.Nodes), out, allocGPUs, totalGPUs, mean(utilSum, float64(totalGPUs)), running, pending)

	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tGPUS(A/T)\tGPU UTIL")
	for i := range f.Nodes {
		n := &f.Nodes[i]
		util := "-"
		if len(n.GPUs) > 0 {
			var sum float64
			if a := byNode[n.Name]; a != nil {
				sum = a.sum
			}
			p := mean(sum, float64(len(n.GPUs)))
			util = fmt.Sprintf("%s %3.0f%%", Bar(p, barWidth), p)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Name, n.State, NodeGPUs(n), util)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOBID\tUSER\tACCOUNT\tST\tTIME\tGPUS\tGPU UTIL\tNODELIST(REASON)")
	jobs := f.Jobs
	if f.MaxJobs > 0 && len(jobs) > f.MaxJobs {
		jobs = jobs[:f.MaxJobs]
	}
	for i := range jobs {
		j := &jobs[i]
		util := "-"
		if a := byJob[j.ID]; a != nil && j.State == spec.StateRunning {
			p := mean(a.sum, a.gpus)
			util = fmt.Sprintf("%s %3.0f%%", Bar(p, barWidth/2), p)
		}
		where := hostlist.Compress(j.Nodes)
		if j.State == spec.StatePending {
			where = "(" + j.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", appendJobField(nil, j, 'i', f.Now), j.User, j.Account, StateCode(j.State),
			AppendElapsed(nil, Used(j, f.Now)), GPURequest(j.Resources), util, where)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := len(f.Jobs) - len(jobs); more > 0 {
		fmt.Fprintf(w, "... and %d more jobs\n", more)
	}
	return nil
}

func get[K comparable, V any](m map[K]*V, k K) *V {
	if m[k] == nil {
		m[k] = new(V)
	}
	return m[k]
}

// mean is sum over n (0 for none): sums of percent × GPUs over GPUs.
func mean(sum, n float64) float64 {
	if n <= 0 {
		return 0
	}
	return sum / n
}
