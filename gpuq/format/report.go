package format

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// ReportRow is one line of gpuq report: a group's usage and its share of
// the total GPU-hours (0-100; 0 when the total is 0).
type ReportRow struct {
	Group string `json:"group"`
	// Parent and Depth place an account in gpuq report tree (Depth 1
	// under the root); its hours include its sub-accounts'.
	Parent     string  `json:"parent,omitempty"`
	Depth      int     `json:"depth,omitempty"`
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
	Group string `json:"group"`
	// Top, when set, is how many rows --top kept of the largest by
	// GPU-hours; Total and the shares still cover every row.
	Top   int         `json:"top,omitempty"`
	Start time.Time   `json:"start,omitzero"`
	End   time.Time   `json:"end,omitzero"`
	Rows  []ReportRow `json:"rows"`
	Total ReportRow   `json:"total"`
}

// NewReport adds shares and a total line to a summary.
func NewReport(s api.AcctSummaryResponse) Report {
	r := Report{Group: s.Group, Start: s.Start, End: s.End, Rows: make([]ReportRow, 0, len(s.Rows)), Total: ReportRow{Group: "TOTAL"}}
	for _, row := range s.Rows {
		addUsage(&r.Total, ReportRow{Jobs: row.Jobs, GPUHours: row.GPUHours, CPUHours: row.CPUHours, SliceHours: row.SliceHours,
			EnergyKWh: row.EnergyKWh, CO2Kg: row.CO2Kg, Cost: row.Cost, IdleGPUHours: row.IdleGPUHours})
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
	GroupAccountTree:     "Account",
}

// GroupAccountTree is the Group of gpuq report tree.
const GroupAccountTree = "account_tree"

// KeepTop keeps the n rows with the most GPU-hours, largest first (ties
// by group); the total still covers every row.
func (r *Report) KeepTop(n int) {
	slices.SortStableFunc(r.Rows, func(a, b ReportRow) int {
		return cmp.Or(cmp.Compare(b.GPUHours, a.GPUHours), cmp.Compare(a.Group, b.Group))
	})
	r.Rows = r.Rows[:min(n, len(r.Rows))]
	r.Top = n
}

// AccountTree turns a report by account into the account tree of the
// fairshare rows (their accounts, in Fair Tree order): each account's
// hours include its sub-accounts'. Accounts with usage but not in the
// tree follow at depth 1; the total is unchanged.
func AccountTree(byAccount Report, tree []api.FairshareRow) Report {
	own := map[string]ReportRow{}
	for _, row := range byAccount.Rows {
		own[row.Group] = row
	}
	parent := map[string]string{}
	var order []api.FairshareRow
	for _, f := range tree {
		if f.User == "" {
			parent[f.Account] = f.Parent
			order = append(order, f)
		}
	}
	out := Report{Group: GroupAccountTree, Start: byAccount.Start, End: byAccount.End, Total: byAccount.Total,
		Rows: make([]ReportRow, 0, len(order))}
	rolled := map[string]*ReportRow{}
	for _, f := range order {
		rolled[f.Account] = &ReportRow{Group: f.Account, Parent: f.Parent, Depth: f.Depth}
	}
	for acct, row := range own {
		if _, ok := parent[acct]; !ok {
			continue
		}
		for a, seen := acct, 0; a != "" && seen <= len(order); a, seen = parent[a], seen+1 {
			if r := rolled[a]; r != nil {
				addUsage(r, row)
			}
		}
	}
	for _, f := range order {
		out.Rows = append(out.Rows, *rolled[f.Account])
	}
	for _, acct := range slices.Sorted(maps.Keys(own)) {
		if _, ok := parent[acct]; !ok {
			row := own[acct]
			row.Depth = 1
			out.Rows = append(out.Rows, row)
		}
	}
	for i := range out.Rows {
		out.Rows[i].GPUShare = 0
		if out.Total.GPUHours > 0 {
			out.Rows[i].GPUShare = 100 * out.Rows[i].GPUHours / out.Total.GPUHours
		}
	}
	return out
}

func addUsage(r *ReportRow, x ReportRow) {
	r.Jobs += x.Jobs
	r.GPUHours += x.GPUHours
	r.CPUHours += x.CPUHours
	r.SliceHours += x.SliceHours
	r.EnergyKWh += x.EnergyKWh
	r.CO2Kg += x.CO2Kg
	r.Cost += x.Cost
	r.IdleGPUHours += x.IdleGPUHours
}

// WriteReport writes r as a table (with a dashed rule and a TOTAL line),
// parsable lines or CSV; the header is omitted with noHeader. Hours have
// 2 decimals and shares 1 (percent).
func WriteReport(w io.Writer, r Report, style AcctStyle, noHeader bool) error {
	head := reportGroupHeader[r.Group]
	if head == "" {
		head = "Group"
	}
	parentCol := r.Group == GroupAccountTree && style != AcctTable
	rows := make([][]string, 0, len(r.Rows)+2)
	if !noHeader {
		h := []string{head, "Jobs", "GPUHours", "GPUShare%", "CPUHours", "IdleGPUHours", "SliceHours", "EnergyKWh", "CO2kg", "Cost"}
		if parentCol {
			h = slices.Insert(h, 1, "Parent")
		}
		rows = append(rows, h)
	}
	line := func(x ReportRow) []string {
		g := x.Group
		if g == "" {
			g = "(none)"
		}
		if x.Depth > 1 && style == AcctTable {
			g = strings.Repeat("  ", x.Depth-1) + g // the tree's shape; the other styles name the parent
		}
		out := []string{g, strconv.Itoa(x.Jobs), strconv.FormatFloat(x.GPUHours, 'f', 4, 64), // 4 decimals, as gpuq acct
			strconv.FormatFloat(x.GPUShare, 'f', 1, 64), strconv.FormatFloat(x.CPUHours, 'f', 4, 64),
			strconv.FormatFloat(x.IdleGPUHours, 'f', 4, 64),
			strconv.FormatFloat(x.SliceHours, 'f', 4, 64), strconv.FormatFloat(x.EnergyKWh, 'f', 4, 64),
			strconv.FormatFloat(x.CO2Kg, 'f', 4, 64), strconv.FormatFloat(x.Cost, 'f', 2, 64)}
		if parentCol {
			out = slices.Insert(out, 1, x.Parent)
		}
		return out
	}
	for _, x := range r.Rows {
		rows = append(rows, line(x))
	}
	rows = append(rows, line(r.Total))
	return writeRows(w, rows, style, noHeader)
}

// WriteReportJSON writes r as indented JSON.
func WriteReportJSON(w io.Writer, r Report) error { return WriteJSON(w, r) }

// writeRows writes rows (the first the header unless noHeader) as an
// aligned table, parsable lines or CSV.
func writeRows(w io.Writer, rows [][]string, style AcctStyle, noHeader bool) error {
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
