package simulate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/config"
	"github.com/gpud/gpud/gpud/spec"
)

var twinEpoch = time.Date(2026, 5, 4, 0, 0, 0, 0, time.UTC)

// twinRecords is an accounting export of a busy day on 4 nodes of 8
// GPUs: n jobs of two accounts, each recorded as it ran (when it ran is
// not what the replay reads: it schedules them anew).
func twinRecords(n int) ([]api.AcctJob, []spec.Node) {
	rng := rand.New(rand.NewPCG(3, 4))
	var nodes []spec.Node
	for i := range 4 {
		name := fmt.Sprintf("g%d", i+1)
		node := spec.Node{Inventory: spec.Inventory{Name: name, CPUs: 64, MemMiB: 1 << 19}}
		for g := range 8 {
			node.GPUs = append(node.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100"})
		}
		nodes = append(nodes, node)
	}
	var recs []api.AcctJob
	for i := range n {
		submit := twinEpoch.Add(time.Duration(i*100) * time.Second)
		run := time.Duration(10+rng.IntN(30)) * time.Minute
		gpus := []int{1, 1, 2, 4, 8}[rng.IntN(5)]
		acct := []string{"physics", "ml"}[rng.IntN(2)]
		start := submit.Add(time.Duration(rng.IntN(600)) * time.Second)
		r := api.AcctRecord{ID: spec.JobID(i + 1), Name: "j", User: acct + "-user", Account: acct, Partition: "gpu", QOS: "normal",
			State: spec.StateCompleted, SubmitTime: spec.NewTime(submit), EligibleTime: spec.NewTime(submit),
			StartTime: spec.NewTime(start), EndTime: spec.NewTime(start.Add(run)), TimeLimit: spec.Duration(2 * run),
			Nodes: []string{"g1"}, GPUs: gpuList("g1", gpus), GPUCount: gpus, GPUModel: "h100", CPUs: gpus, Attempts: 1,
			Request: &spec.Resources{Nodes: 1, CPUsPerNode: gpus, GPUsPerNode: gpus}}
		recs = append(recs, api.AcctJob{AcctRecord: r})
	}
	return recs, nodes
}

func gpuList(node string, n int) []string {
	var out []string
	for g := range n {
		out = append(out, fmt.Sprintf("GPU-%s-%d", node, g))
	}
	return out
}

func twinConfig(t testing.TB, extra string) config.Controller {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gpud.toml")
	toml := `version = 1
default_account = "physics"
[scheduler.priority]
weight_fairshare = 10000
weight_age = 100
[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true
[[account]]
name = "physics"
shares = 3
[[account]]
name = "ml"
shares = 1
` + extra
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadController(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A what-if run with 50% more nodes: every job still runs, waits fall,
// the report has both runs per account and partition and lists the jobs
// that moved, as text and as JSON, and the plot is written.
func TestTwinWhatIfMoreNodes(t *testing.T) {
	recs, inv := twinRecords(150)
	cur := twinConfig(t, "")
	var out bytes.Buffer
	plotPath := filepath.Join(t.TempDir(), "twin.svg")
	rep, err := RunTwin(TwinOptions{Records: recs, Source: "test", Current: cur, Inventory: inv, AddNodes: "2x8:h100",
		Top: 5, Plot: plotPath, JSON: true, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	var back TwinReport
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back.Changed == nil || back.Current.Overall.Jobs != 150 {
		t.Fatalf("JSON report: %v\n%.500s", err, out.String())
	}
	c, ch := rep.Current.Overall, rep.Changed.Overall
	if c.Jobs != 150 || ch.Jobs != 150 || c.Started != 150 || ch.Started != 150 {
		t.Fatalf("jobs %d/%d started %d/%d, want all 150 in both runs", c.Jobs, ch.Jobs, c.Started, ch.Started)
	}
	if rep.Changed.GPUs != 48 || rep.Current.GPUs != 32 {
		t.Errorf("GPUs %d → %d, want 32 → 48", rep.Current.GPUs, rep.Changed.GPUs)
	}
	if !(ch.WaitP95 < c.WaitP95) || c.WaitP95 == 0 {
		t.Errorf("p95 wait %gs → %gs with 50%% more nodes, want a busy cluster's waits to fall", c.WaitP95, ch.WaitP95)
	}
	if len(rep.Current.Accounts) != 2 || len(rep.Current.Partitions) != 1 || len(rep.Moved) != 5 {
		t.Errorf("%d accounts, %d partitions, %d moved; want 2, 1, 5", len(rep.Current.Accounts), len(rep.Current.Partitions), len(rep.Moved))
	}
	for _, a := range rep.Current.Accounts {
		want := map[string]float64{"physics": 0.75, "ml": 0.25}[a.Name]
		if a.Share != want {
			t.Errorf("account %s share %g, want %g", a.Name, a.Share, want)
		}
	}
	out.Reset()
	if err := writeTwin(&out, rep); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"fidelity:", "per account:", "per partition:", "jobs whose start moved most", "physics", "changed"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if b, err := os.ReadFile(plotPath); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot: %v", err)
	}
}

// A changed configuration alone (fairshare's weight off) replays on the
// same nodes; changes that cannot apply are refused, all named at once.
func TestTwinChangedConfigAndBadNodes(t *testing.T) {
	recs, inv := twinRecords(100)
	cur := twinConfig(t, "")
	changed := twinConfig(t, "[scheduler]\nbackfill_depth = 1\n")
	rep, err := RunTwin(TwinOptions{Records: recs, Current: cur, Changed: changed, ChangedName: "depth1", Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed == nil || rep.Changed.Name != "depth1" || rep.Changed.GPUs != rep.Current.GPUs {
		t.Fatalf("changed run %+v", rep.Changed)
	}
	_, err = RunTwin(TwinOptions{Records: recs, Current: cur, Inventory: inv, AddNodes: "two", RemoveNodes: []string{"g9", "g[1-2]"}})
	if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "g9 is not in the inventory") || !strings.Contains(err.Error(), "--add-nodes") {
		t.Fatalf("bad node changes: %v, want both named", err)
	}
	// A plot name that cannot be drawn is refused before the replays,
	// and no file is left behind.
	bad := filepath.Join(t.TempDir(), "whatif")
	if _, err = RunTwin(TwinOptions{Records: recs, Current: cur, Inventory: inv, Plot: bad}); !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "--plot") {
		t.Fatalf("--plot %s: %v, want it refused", bad, err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("--plot %s left a file: %v", bad, err)
	}
	// Without an inventory the nodes are inferred from the records.
	rep, err = RunTwin(TwinOptions{Records: recs, Current: cur})
	if err != nil || !rep.Inferred || rep.Current.Nodes != 1 || rep.Current.GPUs != 8 || rep.Current.Overall.Started != 100 {
		t.Fatalf("inferred inventory: %v, %+v", err, rep)
	}
}

// TestTwinSpeed replays GPUD_TWIN_SPEED_RECORDS synthetic accounting
// records (a month) on 1,000 nodes of 8 GPUs and logs the wall time and
// peak memory (make bench-twin: 1,000,000 records).
func TestTwinSpeed(t *testing.T) {
	s := os.Getenv("GPUD_TWIN_SPEED_RECORDS")
	if s == "" {
		t.Skip("GPUD_TWIN_SPEED_RECORDS unset (make bench-twin sets it)")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("GPUD_TWIN_SPEED_RECORDS=%q: give a number of records", s)
	}
	recs, inv := speedRecords(n, 1000, 30*24*time.Hour)
	var before goruntime.MemStats
	goruntime.ReadMemStats(&before)
	wall := time.Now()
	rep, err := RunTwin(TwinOptions{Records: recs, Current: twinConfig(t, ""), Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(wall)
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	hwm := ""
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, "VmHWM:") {
				hwm = strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
			}
		}
	}
	g := rep.Current.Overall
	t.Logf("%d records on %d nodes (%d GPUs): replay %s (%d cycles, %d skipped), peak RSS %s, heap %d MiB; %d started, wait p50 %s p95 %s, utilisation %.1f%%",
		n, rep.Current.Nodes, rep.Current.GPUs, el.Round(time.Millisecond), rep.Current.Cycles, rep.Current.Skipped, hwm, after.HeapSys>>20, g.Started,
		fmtSec(g.WaitP50), fmtSec(g.WaitP95), 100*g.Utilisation)
}

// speedRecords is n completed jobs over span on nodes nodes of 8 GPUs,
// sized for about 80% load: 1–8 GPUs, run times of minutes to hours.
func speedRecords(n, nodes int, span time.Duration) ([]api.AcctJob, []spec.Node) {
	rng := rand.New(rand.NewPCG(5, 6))
	var inv []spec.Node
	for i := range nodes {
		name := fmt.Sprintf("c%04d", i+1)
		node := spec.Node{Inventory: spec.Inventory{Name: name, CPUs: 128, MemMiB: 1 << 20}}
		for g := range 8 {
			node.GPUs = append(node.GPUs, spec.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "h100"})
		}
		inv = append(inv, node)
	}
	// GPU-seconds offered: 80% of the cluster's over the span.
	mean := 0.8 * float64(nodes*8) * span.Seconds() / float64(n)
	accts := []string{"physics", "ml"}
	recs := make([]api.AcctJob, n)
	for i := range recs {
		submit := twinEpoch.Add(time.Duration(float64(span) * float64(i) / float64(n)))
		gpus := []int{1, 1, 2, 4, 8}[rng.IntN(5)]
		run := time.Duration(rng.ExpFloat64()*mean/float64(gpus)*float64(time.Second)).Round(time.Second) + time.Minute
		acct := accts[rng.IntN(2)]
		recs[i] = api.AcctJob{AcctRecord: api.AcctRecord{ID: spec.JobID(i + 1), Name: "j", User: acct + strconv.Itoa(rng.IntN(20)),
			Account: acct, Partition: "gpu", QOS: "normal", State: spec.StateCompleted, SubmitTime: spec.NewTime(submit),
			StartTime: spec.NewTime(submit), EndTime: spec.NewTime(submit.Add(run)), TimeLimit: spec.Duration(2 * run),
			Nodes: []string{inv[0].Name}, GPUCount: gpus, CPUs: gpus, Attempts: 1,
			Request: &spec.Resources{Nodes: 1, CPUsPerNode: gpus, GPUsPerNode: gpus}}}
	}
	return recs, inv
}

// BenchmarkTwinReplay replays 300 synthetic records (a month) on 1,000
// nodes of 8 GPUs: the cost of the twin's cycles, which at a month of a
// 1,000-node cluster's accounting (TestTwinSpeed) is nearly all of it.
func BenchmarkTwinReplay(b *testing.B) {
	recs, inv := speedRecords(300, 1000, 30*24*time.Hour)
	cur := twinConfig(b, "")
	b.ReportAllocs()
	cycles, skipped := 0, 0
	for b.Loop() {
		rep, err := RunTwin(TwinOptions{Records: recs, Current: cur, Inventory: inv})
		if err != nil {
			b.Fatal(err)
		}
		cycles, skipped = rep.Current.Cycles, rep.Current.Skipped
	}
	b.ReportMetric(float64(cycles), "cycles/op")
	b.ReportMetric(float64(skipped), "skipped/op")
}
