package format

import (
	"io"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// ClusterRow is one line of gpuq report cluster: GPU-hours of a GPU model
// (Profile "") or of one MIG profile on it, with the allocated and down
// shares of the model's capacity (0-100).
type ClusterRow struct {
	api.AcctClusterRow
	AllocPct float64 `json:"allocated_pct"`
	IdlePct  float64 `json:"idle_pct"`
	DownPct  float64 `json:"down_pct"`
}

// ClusterReport is gpuq report cluster's JSON document.
type ClusterReport struct {
	Start time.Time    `json:"start"`
	End   time.Time    `json:"end"`
	Rows  []ClusterRow `json:"rows"`
	// Total sums the model rows (Model "TOTAL").
	Total  ClusterRow          `json:"total"`
	Series []api.AcctUtilPoint `json:"series,omitempty"`
}

// NewClusterReport adds percentages of each model's capacity and a total.
func NewClusterReport(r api.AcctClusterResponse) ClusterReport {
	out := ClusterReport{Start: r.Start, End: r.End, Rows: make([]ClusterRow, 0, len(r.Rows)), Series: r.Series}
	out.Total.Model = "TOTAL"
	capacity := map[string]float64{}
	for _, row := range r.Rows {
		if row.Profile == "" {
			capacity[row.Model] = row.TotalGPUHours
			t := &out.Total.AcctClusterRow
			t.GPUs += row.GPUs
			t.TotalGPUHours += row.TotalGPUHours
			t.AllocatedGPUHours += row.AllocatedGPUHours
			t.IdleGPUHours += row.IdleGPUHours
			t.DownGPUHours += row.DownGPUHours
		}
	}
	pct := func(h, total float64) float64 {
		if total <= 0 {
			return 0
		}
		return 100 * h / total
	}
	withPct := func(row api.AcctClusterRow, total float64) ClusterRow {
		return ClusterRow{AcctClusterRow: row, AllocPct: pct(row.AllocatedGPUHours, total),
			IdlePct: pct(row.IdleGPUHours, total), DownPct: pct(row.DownGPUHours, total)}
	}
	for _, row := range r.Rows {
		out.Rows = append(out.Rows, withPct(row, capacity[row.Model]))
	}
	out.Total = withPct(out.Total.AcctClusterRow, out.Total.TotalGPUHours)
	return out
}

// WriteCluster writes r as a table, parsable lines or CSV, with a TOTAL
// line over the models.
func WriteCluster(w io.Writer, r ClusterReport, style AcctStyle, noHeader bool) error {
	rows := make([][]string, 0, len(r.Rows)+2)
	if !noHeader {
		rows = append(rows, []string{"Model", "Profile", "GPUs", "TotalGPUHours", "AllocGPUHours", "Alloc%", "IdleGPUHours", "Idle%", "DownGPUHours", "Down%"})
	}
	h := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	p := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	line := func(x ClusterRow) []string {
		model, profile, gpus, total := x.Model, x.Profile, strconv.Itoa(x.GPUs), h(x.TotalGPUHours)
		if model == "" {
			model = "(none)"
		}
		if profile == "" {
			profile = "-"
		} else {
			gpus, total = "", "" // a profile's capacity is its model's
		}
		return []string{model, profile, gpus, total, h(x.AllocatedGPUHours), p(x.AllocPct), h(x.IdleGPUHours), p(x.IdlePct), h(x.DownGPUHours), p(x.DownPct)}
	}
	for _, x := range r.Rows {
		rows = append(rows, line(x))
	}
	rows = append(rows, line(r.Total))
	return writeRows(w, rows, style, noHeader)
}
