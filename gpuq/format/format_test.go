package format

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/gpud/spec"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

func TestMain(m *testing.M) {
	// Golden files hold local times; pin the zone so they match anywhere.
	time.Local = time.UTC
	os.Exit(m.Run())
}

var now = time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) spec.Time { return spec.NewTime(now.Add(d)) }

func testJobs() []spec.Job {
	return []spec.Job{
		{
			ID: 101, JobSpec: spec.JobSpec{Name: "train-llm-70b", Partition: "h100", Account: "ml", QOS: "normal",
				Resources: spec.Resources{Nodes: 2, CPUsPerNode: 64, MemMiB: 512 * 1024, GPUsPerNode: 8, GPUModel: "h100"},
				TimeLimit: spec.Duration(48 * time.Hour), Requeue: true, WorkDir: "/home/alice/llm", SubmitDir: "/home/alice/llm", Output: "gpud-%j.out"},
			User: "alice", UID: 1000, GID: 1000, State: spec.StateRunning, Reason: spec.ReasonNone, Priority: 4242,
			SubmitTime: at(-26 * time.Hour), StartTime: at(-25*time.Hour - 3*time.Minute - 4*time.Second), Attempt: 1,
			Checkpoints: 5, LastCheckpoint: spec.CheckpointRef{Attempt: 1, Seq: 5, Time: at(-7*time.Minute - 30*time.Second), Bytes: 3 << 29},
			LostWork: spec.Duration(4*time.Minute + 12*time.Second),
			Nodes:    []string{"gpu01", "gpu02"}, GPUs: []string{"GPU-aaaa", "GPU-bbbb"}, StdoutPath: "/home/alice/llm/gpud-101.out",
		},
		{
			ID: 102, JobSpec: spec.JobSpec{Name: "mig-notebook", Partition: "a100", Account: "edu",
				Resources: spec.Resources{Nodes: 1, GPUsPerNode: 1, GPUProfile: "1g.10gb"}, TimeLimit: spec.Duration(90 * time.Minute)},
			User: "bob", State: spec.StatePending, Reason: spec.ReasonResources, Priority: 17,
			SubmitTime: at(-5 * time.Minute), ExpectedStart: at(2 * time.Hour), NodeReasons: "4 nodes: 3 not in partition a100, 1 insufficient free MIG slices",
		},
		{
			ID: 103, JobSpec: spec.JobSpec{Name: "sweep", Partition: "h100", Array: "0-9%2",
				Resources: spec.Resources{Nodes: 1, GPUFraction: 0.5, GPUModel: "h100"}},
			User: "carol", State: spec.StateRunning, Priority: 1, SubmitTime: at(-10 * time.Minute), StartTime: at(-65 * time.Second),
			Nodes: []string{"gpu07"},
		},
		{
			ID: 104, JobSpec: spec.JobSpec{Name: "eval", Partition: "h100", Resources: spec.Resources{Nodes: 1}},
			User: "dave", State: spec.StateTimeout, Reason: "TimeLimit", ExitCode: 0, Signal: 9,
			SubmitTime: at(-3 * time.Hour), StartTime: at(-2 * time.Hour), EndTime: at(-time.Hour), Nodes: []string{"cpu1"},
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./gpuq/format -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestWriteJobsGolden(t *testing.T) {
	tests := []struct {
		name     string
		format   string
		noHeader bool
	}{
		{"jobs_default.golden", DefaultJobFormat, false},
		{"jobs_all_fields.golden", "%i|%P|%j|%u|%a|%q|%t|%T|%M|%l|%D|%R|%N|%b|%Q|%S|%V|%r|%%", false},
		{"jobs_widths_noheader.golden", "%6i %.4j %10T", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := ParseJobFormat(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := WriteJobs(&b, testJobs(), f, now, tc.noHeader); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, b.Bytes())
		})
	}
}

func TestWriteJobShowGolden(t *testing.T) {
	var b bytes.Buffer
	jobs := testJobs()
	for i := range jobs {
		if err := WriteJobShow(&b, &jobs[i], now); err != nil {
			t.Fatal(err)
		}
		b.WriteString("\n")
	}
	golden(t, "show.golden", b.Bytes())
}

func TestWriteNodesGolden(t *testing.T) {
	gpus := func(model string, n int) []spec.GPU {
		var gs []spec.GPU
		for i := range n {
			gs = append(gs, spec.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", model, i), Model: model})
		}
		return gs
	}
	nodes := []spec.Node{
		{Inventory: spec.Inventory{Name: "gpu01", CPUs: 224, MemMiB: 2 << 20, GPUs: gpus("h100", 8)}, State: spec.NodeMixed,
			AllocCPUs: 64, AllocMemMiB: 512 * 1024, AllocGPUs: []string{"GPU-h100-0", "GPU-h100-1"}},
		{Inventory: spec.Inventory{Name: "gpu02", CPUs: 128, MemMiB: 1 << 20, GPUs: append(gpus("a100", 2), gpus("l4", 1)...)}, State: spec.NodeDrain,
			Reason: "XID 79 on GPU 1", AllocGPUs: []string{"MIG-1111", "MIG-2222", "GPU-l4-0"}, AllocMemMiB: 1536},
		{Inventory: spec.Inventory{Name: "login1", CPUs: 8, MemMiB: 16384}, State: spec.NodeIdle},
	}
	var b bytes.Buffer
	if err := WriteNodes(&b, nodes, false); err != nil {
		t.Fatal(err)
	}
	golden(t, "nodes.golden", b.Bytes())
}

func TestWriteJobsJSON(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJobsJSON(&b, testJobs()); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("output is not a JSON array: %v\n%s", err, b.String())
	}
	if len(back) != 4 {
		t.Fatalf("got %d jobs, want 4", len(back))
	}
	// The fields every element carries: scripts read them (README, "gpuq
	// show 1 --json"), so they are a contract.
	for _, k := range []string{"id", "name", "user", "account", "partition", "qos", "state", "reason", "exit_code",
		"submit_time", "start_time", "end_time", "time_limit", "priority", "nodes", "gpus"} {
		if _, ok := back[0][k]; !ok {
			t.Errorf("JSON job lacks contract field %q", k)
		}
	}
	var empty bytes.Buffer
	if err := WriteJobsJSON(&empty, nil); err != nil || empty.String() != "[\n]\n" {
		t.Errorf("empty list = %q, %v; want an empty array", empty.String(), err)
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    spec.JobState
		wantErr bool
	}{
		{"PD", spec.StatePending, false}, {"running", spec.StateRunning, false}, {"oom", spec.StateOutOfMemory, false},
		{"NODE_FAIL", spec.StateNodeFail, false}, {"cg", spec.StateCompleting, false}, {"bogus", "", true},
	}
	for _, tc := range tests {
		got, err := ParseState(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseState(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseJobFormatErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"%", "%.", "%10", "%z", "%i %Z"} {
		if _, err := ParseJobFormat(s); err == nil {
			t.Errorf("ParseJobFormat(%q) succeeded, want an error", s)
		}
	}
}

func TestAppendElapsedAndHosts(t *testing.T) {
	t.Parallel()
	tests := []struct{ got, want string }{
		{string(AppendElapsed(nil, 0)), "0:00"},
		{string(AppendElapsed(nil, 65*time.Second)), "1:05"},
		{string(AppendElapsed(nil, time.Hour+2*time.Minute+3*time.Second)), "1:02:03"},
		{string(AppendElapsed(nil, 26*time.Hour+4*time.Second)), "1-02:00:04"},
		{GPURequest(spec.Resources{TotalGPUs: 4}), "gpu:4(total)"},
		{MiB(1536), "1.5G"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func BenchmarkWriteJobs100k(b *testing.B) {
	base := testJobs()
	jobs := make([]spec.Job, 100000)
	for i := range jobs {
		jobs[i] = base[i%len(base)]
		jobs[i].ID = spec.JobID(i + 1)
	}
	f, _ := ParseJobFormat(DefaultJobFormat)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteJobs(io.Discard, jobs, f, now, false); err != nil {
			b.Fatal(err)
		}
	}
}
