package format

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

func testSummary() api.AcctSummaryResponse {
	return api.AcctSummaryResponse{
		Group: api.GroupByAccount,
		Start: time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC),
		End:   time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC),
		Rows: []api.AcctSummaryRow{
			{Group: "", Jobs: 1, CPUHours: 0.5},
			{Group: "edu", Jobs: 12, GPUHours: 25.125, CPUHours: 50},
			{Group: "ml", Jobs: 340, GPUHours: 1974.875, CPUHours: 12000.25},
		},
	}
}

func TestWriteReportGolden(t *testing.T) {
	tests := []struct {
		name     string
		style    AcctStyle
		noHeader bool
	}{
		{"report_table.golden", AcctTable, false},
		{"report_parsable.golden", AcctParsable, false},
		{"report_csv.golden", AcctCSV, false},
		{"report_noheader.golden", AcctTable, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteReport(&b, NewReport(testSummary()), tc.style, tc.noHeader); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
	var b bytes.Buffer
	if err := WriteReportJSON(&b, NewReport(testSummary())); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json.golden", b.Bytes())
}

// TestReportCSVAndJSONAgree checks that the CSV's rows and total carry the
// JSON's numbers (to the CSV's 2 decimals), and that the total is the
// sum of the rows.
func TestReportCSVAndJSONAgree(t *testing.T) {
	t.Parallel()
	r := NewReport(testSummary())
	var js bytes.Buffer
	if err := WriteReportJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var cs bytes.Buffer
	if err := WriteReport(&cs, r, AcctCSV, true); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&cs).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	all := append(append([]ReportRow{}, back.Rows...), back.Total)
	if len(recs) != len(all) {
		t.Fatalf("CSV has %d lines, JSON %d rows and a total", len(recs), len(back.Rows))
	}
	var sum float64
	for i, x := range all {
		gh, _ := strconv.ParseFloat(recs[i][2], 64)
		if diff := gh - x.GPUHours; diff > 0.0051 || diff < -0.0051 {
			t.Errorf("line %d: CSV GPU-hours %s, JSON %v", i, recs[i][2], x.GPUHours)
		}
		if i < len(back.Rows) {
			sum += x.GPUHours
		}
	}
	if back.Total.GPUHours != sum || back.Total.Jobs != 353 || back.Total.GPUShare != 100 {
		t.Errorf("total = %+v; want the rows' sum %v GPU-hours over 353 jobs, share 100", back.Total, sum)
	}
	if empty := NewReport(api.AcctSummaryResponse{Group: api.GroupByUser}); empty.Total.GPUShare != 0 || empty.Rows == nil {
		t.Errorf("empty report = %+v; want no rows (not null) and share 0", empty)
	}
}
