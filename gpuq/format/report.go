package format

import (
	"bufio"
	"encoding/csv"
	"io"
	"strconv"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// ReportRow is one line of gpuq report: a group's usage and its share of
// the total GPU-hours (0-100; 0 when the total is 0).
type ReportRow struct {
	Group      string  `json:"group"`
	Jobs       int     `json:"jobs"`
	GPUHours   float64 `json:"gpu_hours"`
	CPUHours   float64 `json:"cpu_hours"`
	GPUShare   float64 `json:"gpu_share_pct"`
	SliceHours float64 `json:"slice_hours"`
	EnergyKWh  float64 `json:"energy_kwh"`
	CO2Kg      float64 `json:"co2_kg"`
	Cost       float64 `json:"cost"`
	// IdleGPUHours: allocated GPU-hours sampled under 5% utilisation.
	IdleGPUHours float64 `json:"idle_gpu_hours"`
}

// Report is gpuq report's JSON document: the rows, in the server's order,
// and their total (Group "TOTAL", share 100, or 0 with no usage).
type Report struct {
	Group string      `json:"group"`
	Start time.Time   `json:"start,omitzero"`
	End   time.Time   `json:"end,omitzero"`
	Rows  []ReportRow `json:"rows"`
	Total ReportRow   `json:"total"`
}

// NewReport adds shares and a total line to a summary.
func NewReport(s api.AcctSummaryResponse) Report {
	r := Report{Group: s.Group, Start: s.Start, End: s.End, Rows: make([]ReportRow, 0, len(s.Rows)), Total: ReportRow{Group: "TOTAL"}}
	for _, row := range s.Rows {
		r.Total.Jobs += row.Jobs
		r.Total.GPUHours += row.GPUHours
		r.Total.CPUHours += row.CPUHours
		r.Total.SliceHours += row.SliceHours
		r.Total.EnergyKWh += row.EnergyKWh
		r.Total.CO2Kg += row.CO2Kg
		r.Total.Cost += row.Cost
		r.Total.IdleGPUHours += row.IdleGPUHours
	}
	share := func(h float64) float64 {
		if r.Total.GPUHours <= 0 {
			return 0
		}
		return 100 * h / r.Total.GPUHours
	}
	for _, row := range s.Rows {
		r.Rows = append(r.Rows, ReportRow{Group: row.Group, Jobs: row.Jobs, GPUHours: row.GPUHours, CPUHours: row.CPUHours,
			GPUShare: share(row.GPUHours), SliceHours: row.SliceHours, EnergyKWh: row.EnergyKWh, CO2Kg: row.CO2Kg, Cost: row.Cost,
			IdleGPUHours: row.IdleGPUHours})
	}
	r.Total.GPUShare = share(r.Total.GPUHours)
	return r
}

// reportGroupHeader names the first column after the grouping.
var reportGroupHeader = map[string]string{
	api.GroupByUser:      "User",
	api.GroupByAccount:   "Account",
	api.GroupByPartition: "Partition",
	api.GroupByGPUModel:  "GPUModel",
}

// WriteReport writes r as a table (with a dashed rule and a TOTAL line),
// parsable lines or CSV; the header is omitted with noHeader. Hours have
// 2 decimals and shares 1 (percent).
func WriteReport(w io.Writer, r Report, style AcctStyle, noHeader bool) error {
	head := reportGroupHeader[r.Group]
	if head == "" {
		head = "Group"
	}
	rows := make([][]string, 0, len(r.Rows)+2)
	if !noHeader {
		rows = append(rows, []string{head, "Jobs", "GPUHours", "GPUShare%", "CPUHours", "IdleGPUHours", "SliceHours", "EnergyKWh", "CO2kg", "Cost"})
	}
	line := func(x ReportRow) []string {
		g := x.Group
		if g == "" {
			g = "(none)"
		}
		return []string{g, strconv.Itoa(x.Jobs), strconv.FormatFloat(x.GPUHours, 'f', 4, 64), // 4 decimals, as gpuq acct
			strconv.FormatFloat(x.GPUShare, 'f', 1, 64), strconv.FormatFloat(x.CPUHours, 'f', 4, 64),
			strconv.FormatFloat(x.IdleGPUHours, 'f', 4, 64),
			strconv.FormatFloat(x.SliceHours, 'f', 4, 64), strconv.FormatFloat(x.EnergyKWh, 'f', 4, 64),
			strconv.FormatFloat(x.CO2Kg, 'f', 4, 64), strconv.FormatFloat(x.Cost, 'f', 2, 64)}
	}
	for _, x := range r.Rows {
		rows = append(rows, line(x))
	}
	rows = append(rows, line(r.Total))
	bw := bufio.NewWriter(w)
	switch style {
	case AcctCSV:
		if err := csv.NewWriter(bw).WriteAll(rows); err != nil {
			return err
		}
	case AcctParsable:
		for _, row := range rows {
			for _, v := range row {
				bw.WriteString(v)
				bw.WriteByte('|')
			}
			bw.WriteByte('\n')
		}
	default:
		writeAligned(bw, rows, noHeader)
	}
	return bw.Flush()
}

// WriteReportJSON writes r as indented JSON.
func WriteReportJSON(w io.Writer, r Report) error { return WriteJSON(w, r) }
