package app

import (
	"bytes"
	"encoding/json"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpuq/format"
)

func clusterFixture(t *testing.T) *fakectl.Server {
	t.Helper()
	ctl := acctFixture(t)
	t0 := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	ctl.Set(func(s *fakectl.Server) {
		s.Cluster = api.AcctClusterResponse{Bucket: 3600,
			Rows: []api.AcctClusterRow{
				{Model: "a100", GPUs: 8, TotalGPUHours: 80, AllocatedGPUHours: 20, IdleGPUHours: 4, DownGPUHours: 10},
				{Model: "h100", GPUs: 16, TotalGPUHours: 160, AllocatedGPUHours: 120, IdleGPUHours: 8},
				{Model: "h100", Profile: "1g.10gb", AllocatedGPUHours: 16, IdleGPUHours: 2},
			},
			Series: []api.AcctUtilPoint{
				{Time: t0, CapacityGPUHours: 24, AllocatedGPUHours: 12, DownGPUHours: 0},
				{Time: t0.Add(time.Hour), CapacityGPUHours: 24, AllocatedGPUHours: 18, DownGPUHours: 6},
			}}
		s.Fairshare = []api.FairshareRow{
			{Account: "science", Depth: 1},
			{Account: "ml", Parent: "science", Depth: 2},
			{Account: "ml", User: "alice", Depth: 3},
			{Account: "physics", Parent: "science", Depth: 2},
			{Account: "edu", Depth: 1},
		}
	})
	return ctl
}

func TestReportCluster(t *testing.T) {
	ctl := clusterFixture(t)
	runAndCheckQuery(t, ctl, []string{"report", "cluster", "-S", "2025-03-14", "-E", "2025-03-14T10:00:00"},
		"Model Profile GPUs TotalGPUHours AllocGPUHours Alloc% IdleGPUHours Idle% DownGPUHours Down%\n"+
			"----- ------- ---- ------------- ------------- ------ ------------ ----- ------------ -----\n"+
			"a100  -       8    80.0000       20.0000       25.0   4.0000       5.0   10.0000      12.5\n"+
			"h100  -       16   160.0000      120.0000      75.0   8.0000       5.0   0.0000       0.0\n"+
			"h100  1g.10gb                    16.0000       10.0   2.0000       1.2   0.0000       0.0\n"+
			"TOTAL -       24   240.0000      140.0000      58.3   12.0000      5.0   10.0000      4.2\n",
		"/v1/accounting/cluster", url.Values{"start": {"2025-03-14T00:00:00Z"}, "end": {"2025-03-14T10:00:00Z"}})

	got := run(t, ctl, "report", "cluster", "--json", "--bucket", "1d")
	var r format.ClusterReport
	if err := json.Unmarshal([]byte(got.stdout), &r); err != nil || r.Total.GPUs != 24 || len(r.Series) != 2 || r.Rows[0].DownPct != 12.5 {
		t.Fatalf("--json = %+v, %v; stdout %s", r, err, got.stdout)
	}
	if q := ctl.Requests()[len(ctl.Requests())-1].Query; !strings.Contains(q, "bucket=86400") {
		t.Errorf("query %q lacks bucket=86400", q)
	}
	got = run(t, ctl, "report", "cluster", "--csv", "-n")
	if !strings.HasPrefix(got.stdout, "a100,-,8,80.0000,20.0000,25.0,4.0000,5.0,10.0000,12.5\n") {
		t.Errorf("--csv -n = %q", got.stdout)
	}
}

func TestReportTop(t *testing.T) {
	ctl := clusterFixture(t)
	runAndCheckQuery(t, ctl, []string{"report", "users", "--top", "1"},
		"User  Jobs GPUHours GPUShare% CPUHours IdleGPUHours SliceHours EnergyKWh CO2kg  Cost\n"+
			"----- ---- -------- --------- -------- ------------ ---------- --------- ------ ----\n"+
			"alice 2    16.5000  99.9      0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n"+
			"TOTAL 3    16.5200  100.0     0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n",
		"/v1/accounting/summary", url.Values{"group": {"user"}, "start": {"2025-03-14T00:00:00Z"}, "end": {"2025-03-14T15:30:00Z"}})
	// ml has more GPU-hours than edu: the order is by hours, not name.
	got := run(t, ctl, "report", "accounts", "--top", "5", "-p", "-n")
	if want := "ml|2|16.5000|99.9|0.0000|0.0000|0.0000|0.0000|0.0000|0.00|\nedu|1|0.0200|0.1|0.0000|0.0000|0.0000|0.0000|0.0000|0.00|\n" +
		"TOTAL|3|16.5200|100.0|0.0000|0.0000|0.0000|0.0000|0.0000|0.00|\n"; got.stdout != want {
		t.Errorf("accounts --top 5 = %q, want %q", got.stdout, want)
	}
}

func TestReportTree(t *testing.T) {
	ctl := clusterFixture(t)
	got := run(t, ctl, "report", "tree")
	want := "Account   Jobs GPUHours GPUShare% CPUHours IdleGPUHours SliceHours EnergyKWh CO2kg  Cost\n" +
		"--------- ---- -------- --------- -------- ------------ ---------- --------- ------ ----\n" +
		"science   2    16.5000  99.9      0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
		"  ml      2    16.5000  99.9      0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
		"  physics 0    0.0000   0.0       0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
		"edu       1    0.0200   0.1       0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n" +
		"TOTAL     3    16.5200  100.0     0.0000   0.0000       0.0000     0.0000    0.0000 0.00\n"
	if got.code != 0 || got.stdout != want {
		t.Errorf("exit %d stdout:\n%s\nwant:\n%s\nstderr %s", got.code, got.stdout, want, got.stderr)
	}
	got = run(t, ctl, "report", "tree", "--csv")
	if !strings.Contains(got.stdout, "Account,Parent,Jobs,") || !strings.Contains(got.stdout, "\nml,science,2,16.5000,") {
		t.Errorf("tree --csv = %q; want a Parent column", got.stdout)
	}
}

func TestReportPlot(t *testing.T) {
	ctl := clusterFixture(t)
	dir := t.TempDir()
	svg := filepath.Join(dir, "use.svg")
	got := run(t, ctl, "report", "--plot", svg, "-S", "2025-03-14", "--bucket", "1h")
	if got.code != 0 || got.stdout != "plotted utilisation over 2 steps and 2 accounts to "+svg+"\n" {
		t.Fatalf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg ", ">allocated</text>", ">down or drained</text>", ">GPU-hours per account</text>", ">ml</text>", ">edu</text>", "</svg>"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s lacks %q", svg, want)
		}
	}
	pngName := filepath.Join(dir, "use.png")
	if got := run(t, ctl, "report", "--plot", pngName); got.code != 0 {
		t.Fatalf("exit %d stderr %q", got.code, got.stderr)
	}
	fh, err := os.Open(pngName)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := png.Decode(fh); err != nil {
		t.Errorf("%s is not a PNG: %v", pngName, err)
	}
}

func TestReportViewErrors(t *testing.T) {
	ctl := clusterFixture(t)
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"report", "--top", "0"}, "gpuq: --top 0: give a positive number of groups to keep\n"},
		{[]string{"report", "cluster", "--top", "3"}, "gpuq: --top applies to users, accounts, partitions and models, not to cluster\n"},
		{[]string{"report", "--plot", "x.pdf"}, "gpuq: --plot \"x.pdf\": name a .svg or .png file\n"},
		{[]string{"report", "--plot", "x.svg", "--json"}, "gpuq: --plot writes a chart, not --json, --csv or --parsable; drop one of them\n"},
		{[]string{"report", "cluster", "--bucket", "soon"}, "gpuq: --bucket \"soon\" is not a duration of a second or more, such as 15m, 1h or 1d\n"},
	} {
		if got := run(t, ctl, tc.args...); got.code != 2 || got.stderr != tc.wantErr {
			t.Errorf("%v: exit %d stderr %q; want 2 %q", tc.args, got.code, got.stderr, tc.wantErr)
		}
	}
}
