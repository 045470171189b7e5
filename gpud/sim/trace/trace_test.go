package trace

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/sim"
)

func s(n int) time.Duration { return time.Duration(n) * time.Second }

func gz(t *testing.T, text string) string {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(text))
	w.Close()
	return b.String()
}

const swfSample = `; Version: 2.2
; MaxProcs: 100
   15   599850 192180   3477    4     -1    -1    4  53940    -1  1  12  12  -1 -1 -1 -1 -1
   16   600022  11940     -1   25     -1    -1   25   3600    -1  1  13  13  -1 -1 -1 -1 -1
    3     6742     -1  24089   -1 -1 -1  2 -1 -1 1 -1 -1 -1 0 -1 -1 -1
`

func TestReaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		file, text  string
		format      Format
		wantFormat  Format
		want        []sim.Job
		wantSkipped int
	}{
		{
			name: "swf", file: "x.swf", text: swfSample, wantFormat: FormatSWF, wantSkipped: 1,
			want: []sim.Job{
				{Name: "15", Submit: s(599850), Runtime: s(3477), Estimate: s(53940), Nodes: 4, GPUsPerNode: 1, User: "u12", Account: "g12", Status: "1", TraceWait: s(192180)},
				{Name: "3", Submit: s(6742), Runtime: s(24089), Nodes: 2, GPUsPerNode: 1, Status: "1", TraceWait: -1},
			},
		},
		{
			name: "swf gzip", file: "x.swf.gz", text: gz(t, swfSample), wantFormat: FormatSWF, wantSkipped: 1,
			want: []sim.Job{
				{Name: "15", Submit: s(599850), Runtime: s(3477), Estimate: s(53940), Nodes: 4, GPUsPerNode: 1, User: "u12", Account: "g12", Status: "1", TraceWait: s(192180)},
				{Name: "3", Submit: s(6742), Runtime: s(24089), Nodes: 2, GPUsPerNode: 1, Status: "1", TraceWait: -1},
			},
		},
		{
			name: "philly", file: "p.csv", wantFormat: FormatPhilly,
			// No newline after the last row, as in the published file.
			text: "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,1,3613033.0\n1,266563.0,CLOS,4+4,8,120.0\n2,7.0,CLOS,8,8,5.5",
			want: []sim.Job{
				{Name: "0", Submit: 0, Runtime: s(3613033), Nodes: 1, GPUsPerNode: 1, TraceWait: -1},
				{Name: "1", Submit: s(266563), Runtime: s(120), Nodes: 2, GPUsPerNode: 4, TraceWait: -1},
				{Name: "2", Submit: s(7), Runtime: 5500 * time.Millisecond, Nodes: 1, GPUsPerNode: 8, TraceWait: -1},
			},
		},
		{
			name: "openb", file: "pods.csv", wantFormat: FormatOpenB,
			text: "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
				"openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061\n" +
				"openb-pod-0002,8000,30720,2,1000,,BE,Succeeded,10,110,20\n" +
				"openb-pod-0003,1000,1024,0,0,,BE,Pending,30,,\n",
			want: []sim.Job{
				{Name: "openb-pod-0001", Submit: s(427061), Runtime: s(12902960 - 427061), Nodes: 1, GPUsPerNode: 1, GPUMilli: 460, CPUMilli: 6000, MemMiB: 12288, User: "LS", Status: "Running", TraceWait: 0},
				{Name: "openb-pod-0002", Submit: s(10), Runtime: s(90), Nodes: 1, GPUsPerNode: 2, CPUMilli: 8000, MemMiB: 30720, User: "BE", Status: "Succeeded", TraceWait: s(10)},
				{Name: "openb-pod-0003", Submit: s(30), Nodes: 1, CPUMilli: 1000, MemMiB: 1024, User: "BE", Status: "Pending", TraceWait: -1},
			},
		},
		{
			name: "itp", file: "cluster01.csv", wantFormat: FormatITP,
			text: "job_id,submission_time,duration,num_gpu\n965d744f,1932025,2429,64",
			want: []sim.Job{{Name: "965d744f", Submit: s(1932025), Runtime: s(2429), Nodes: 1, GPUsPerNode: 64, TraceWait: -1}},
		},
		{
			name: "tiresias", file: "60_job.csv", wantFormat: FormatTiresias,
			text: "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n1,8,30,133,vgg11,147,23\n",
			want: []sim.Job{{Name: "1", Submit: s(30), Runtime: s(147), Nodes: 1, GPUsPerNode: 8, TraceWait: -1}},
		},
		{
			name: "forced format", file: "noext", format: FormatSWF, wantFormat: FormatSWF,
			text: "1 0 -1 10 4 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n",
			want: []sim.Job{{Name: "1", Runtime: s(10), Nodes: 4, GPUsPerNode: 1, Status: "1", TraceWait: -1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := NewReader(strings.NewReader(tc.text), tc.file, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if f.Format != tc.wantFormat {
				t.Errorf("format = %q, want %q", f.Format, tc.wantFormat)
			}
			got, err := ReadAll(f, 0)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("jobs (-want +got):\n%s", diff)
			}
			if *f.Skipped != tc.wantSkipped {
				t.Errorf("skipped = %d, want %d", *f.Skipped, tc.wantSkipped)
			}
		})
	}
}

func TestReaderErrors(t *testing.T) {
	t.Parallel()
	for name, text := range map[string]string{
		"unknown format":  "a,b,c\n1,2,3\n",
		"philly bad size": "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,x,1,3.0\n",
		"swf not numeric": "; h\n1 0 -1 ten 4 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n",
	} {
		f, err := NewReader(strings.NewReader(text), "", FormatAuto)
		if err == nil {
			_, err = ReadAll(f, 0)
		}
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParseShape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][2]int{"1": {1, 1}, "8": {1, 8}, "2+2": {2, 2}, "8+8+8": {3, 8}, "4+2": {2, 4}} {
		n, p, err := ParseShape(in)
		if err != nil || n != want[0] || p != want[1] {
			t.Errorf("ParseShape(%q) = %d, %d, %v; want %d, %d", in, n, p, err, want[0], want[1])
		}
	}
}

// tracesDir is the shared trace collection; the smoke tests skip loudly
// without it.
func tracesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUD_TRACES")
	if dir == "" {
		dir = "/work/shared/traces"
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Skipf("SKIP: trace collection not found at %s (set GPUD_TRACES); real-trace smoke tests did not run", dir)
	}
	return dir
}

func TestSmokeRealTraces(t *testing.T) {
	t.Parallel()
	dir := tracesDir(t)
	tests := []struct {
		path       string
		wantFormat Format
	}{
		{"hpc/lublin_256.swf", FormatSWF},
		{"hpc/KTH-SP2-1996-2.1-cln.swf.gz", FormatSWF},
		{"hpc/LANL-CM5-1994-4.1-cln.swf.gz", FormatSWF},
		{"gpu/philly-rfold/philly_trace.csv", FormatPhilly},
		{"gpu/philly-vc103959/philly_103959.csv", FormatPhillyVC},
		{"gpu/microsoft-itp/cluster04.csv", FormatITP},
		{"gpu/tiresias/60_job.csv", FormatTiresias},
		{"gpu/alibaba-openb-2023/openb_pod_list_default.csv", FormatOpenB},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			f, err := Open(filepath.Join(dir, tc.path), FormatAuto)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Format != tc.wantFormat {
				t.Errorf("detected %q, want %q", f.Format, tc.wantFormat)
			}
			jobs, err := ReadAll(f, 500)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) < 50 {
				t.Fatalf("read %d jobs, want at least 50", len(jobs))
			}
			for i, j := range jobs {
				if j.Runtime < 0 || j.Submit < 0 || j.Nodes < 1 || j.GPUs() < 0 {
					t.Fatalf("job %d implausible: %+v", i, j)
				}
			}
		})
	}
	t.Run("philly whole file", func(t *testing.T) {
		t.Parallel()
		f, err := Open(filepath.Join(dir, "gpu/philly-rfold/philly_trace.csv"), FormatAuto)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		jobs, err := ReadAll(f, 0)
		if err != nil {
			t.Fatal(err)
		}
		gangs := 0
		for _, j := range jobs {
			if j.Nodes > 1 {
				gangs++
			}
		}
		if len(jobs) != 111549 || gangs != 3696 {
			t.Errorf("philly: %d jobs, %d multi-node; README says 111,549 and 3,696", len(jobs), gangs)
		}
	})
	t.Run("openb nodes", func(t *testing.T) {
		t.Parallel()
		nodes, err := ReadNodes(filepath.Join(dir, "gpu/alibaba-openb-2023/openb_node_list_gpu_node.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 1213 || sim.TotalGPUs(nodes) != 6212 {
			t.Errorf("openb node list: %d nodes, %d GPUs; README says 1,213 and 6,212", len(nodes), sim.TotalGPUs(nodes))
		}
		pai, err := ReadNodes(filepath.Join(dir, "gpu/alibaba-pai-2020/pai_machine_spec.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if len(pai) != 1897 || sim.TotalGPUs(pai) != 6742 {
			t.Errorf("PAI machine list: %d nodes, %d GPUs; README says 1,897 and 6,742", len(pai), sim.TotalGPUs(pai))
		}
	})
}
