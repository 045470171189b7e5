package format

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpud/gpud/gpud/spec"
)

// WriteNodes writes an sinfo-like table: NODE STATE CPUS(A/T) MEM(A/T)
// GPUS(A/T) REASON, GPUs counted per model ("h100:2/8"). Allocated IDs
// that are not whole GPUs of the node are MIG slices and are counted as
// "slices:N".
func WriteNodes(w io.Writer, nodes []spec.Node, noHeader bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if !noHeader {
		fmt.Fprintln(tw, "NODE\tSTATE\tCPUS(A/T)\tMEM(A/T)\tGPUS(A/T)\tREASON")
	}
	for i := range nodes {
		n := &nodes[i]
		reason := n.Reason
		if reason == "" {
			reason = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s/%s\t%s\t%s\n", n.Name, string(n.State)+n.Power.Suffix(), n.AllocCPUs, n.CPUs,
			MiB(n.AllocMemMiB), MiB(n.MemMiB), NodeGPUs(n), reason)
	}
	return tw.Flush()
}

// NodeGPUs summarises a node's GPUs as MODEL:ALLOC/TOTAL per model.
func NodeGPUs(n *spec.Node) string {
	alloc := make(map[string]bool, len(n.AllocGPUs))
	for _, id := range n.AllocGPUs {
		alloc[id] = true
	}
	type count struct{ a, t int }
	var models []string
	counts := map[string]*count{}
	known := 0
	for _, g := range n.GPUs {
		m := g.Model
		if m == "" {
			m = "gpu"
		}
		c, ok := counts[m]
		if !ok {
			c = &count{}
			counts[m] = c
			models = append(models, m)
		}
		c.t++
		if alloc[g.UUID] {
			c.a++
			known++
		}
	}
	if len(models) == 0 && len(n.AllocGPUs) == 0 {
		return "0/0"
	}
	parts := make([]string, 0, len(models)+1)
	for _, m := range models {
		parts = append(parts, fmt.Sprintf("%s:%d/%d", m, counts[m].a, counts[m].t))
	}
	if slices := len(n.AllocGPUs) - known; slices > 0 {
		parts = append(parts, fmt.Sprintf("slices:%d", slices))
	}
	return strings.Join(parts, ",")
}
