package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
	"github.com/gpud/gpud/runtime/gpu/nvml"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeStats struct {
	s     controller.Stats
	err   error
	calls int
}

func (f *fakeStats) Stats(context.Context) (controller.Stats, error) {
	f.calls++
	return f.s, f.err
}

func TestControllerScrape(t *testing.T) {
	src := &fakeStats{s: controller.Stats{
		Jobs: []controller.JobCount{
			{State: spec.StatePending, Partition: "h100", N: 3},
			{State: spec.StateRunning, Partition: "h100", N: 2},
		},
		Pending: []controller.ReasonCount{{Reason: spec.ReasonPriority, N: 2}, {Reason: spec.ReasonResources, N: 1}},
		Nodes:   []controller.NodeCount{{State: spec.NodeMixed, N: 1}, {State: spec.NodeDown, N: 1}},
		GPUs:    []controller.GPUCount{{Model: "h100", Total: 16, Allocated: 10}},
	}}
	m := NewController()
	m.AddStats(src)
	m.JobStarted("h100")
	m.JobStarted("h100")
	m.JobEnded("h100", spec.StateCompleted)
	m.JobRequeued("h100", "free text the user typed")
	m.JobPreempted("h100", "requeue")
	m.CycleDone(3 * time.Millisecond)
	m.ObserveRequest("GET /v1/jobs", 200, 20*time.Millisecond)

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	want := `
# HELP gpud_gpus Whole GPUs registered, by model.
# TYPE gpud_gpus gauge
gpud_gpus{model="h100"} 16
# HELP gpud_gpus_allocated Whole GPUs held by a live allocation, by model.
# TYPE gpud_gpus_allocated gauge
gpud_gpus_allocated{model="h100"} 10
# HELP gpud_jobs Active jobs (pending, running, completing) by state and partition; ended jobs are in gpud_jobs_ended_total.
# TYPE gpud_jobs gauge
gpud_jobs{partition="h100",state="PENDING"} 3
gpud_jobs{partition="h100",state="RUNNING"} 2
# HELP gpud_jobs_ended_total Jobs that reached a terminal state, by partition and final state.
# TYPE gpud_jobs_ended_total counter
gpud_jobs_ended_total{partition="h100",state="COMPLETED"} 1
# HELP gpud_jobs_pending Pending jobs by the reason they wait (Priority, Resources, ...).
# TYPE gpud_jobs_pending gauge
gpud_jobs_pending{reason="Priority"} 2
gpud_jobs_pending{reason="Resources"} 1
# HELP gpud_jobs_requeued_total Job attempts ended with the job going back to PENDING (requeue, preemption, node failure), by partition.
# TYPE gpud_jobs_requeued_total counter
gpud_jobs_requeued_total{partition="h100"} 1
# HELP gpud_jobs_started_total Job attempts started, by partition.
# TYPE gpud_jobs_started_total counter
gpud_jobs_started_total{partition="h100"} 2
# HELP gpud_nodes Nodes by state, as gpuq nodes shows it.
# TYPE gpud_nodes gauge
gpud_nodes{state="DOWN"} 1
gpud_nodes{state="MIXED"} 1
`
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want), "gpud_gpus", "gpud_gpus_allocated", "gpud_jobs",
		"gpud_jobs_ended_total", "gpud_jobs_pending", "gpud_jobs_requeued_total", "gpud_jobs_started_total", "gpud_nodes"); err != nil {
		t.Error(err)
	}
	if src.calls != 1 {
		t.Errorf("one scrape asked the controller for stats %d times, want once", src.calls)
	}
	body := scrape(t, srv.URL)
	for _, s := range []string{
		"gpud_scheduler_cycle_duration_seconds_count 1",
		`gpud_jobs_preempted_total{mode="requeue",partition="h100"} 1`,
		`gpud_api_request_duration_seconds_count{code="200",route="GET /v1/jobs"} 1`,
		"go_goroutines",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("scrape lacks %q", s)
		}
	}

	// A controller that does not answer fails its gauges, not the scrape.
	src.err = errors.New("controller is not serving")
	body = scrape(t, srv.URL)
	if strings.Contains(body, "gpud_nodes{") || !strings.Contains(body, "gpud_jobs_started_total") {
		t.Errorf("scrape with failing stats:\n%s", body)
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type fakeSampler struct {
	s   []gpu.Sample
	err error
}

func (f *fakeSampler) Sample(context.Context) ([]gpu.Sample, error) { return f.s, f.err }

type fakeMIG []gpu.MIGGPU

func (f fakeMIG) MIGState(context.Context) ([]gpu.MIGGPU, error) { return f, nil }

type fakeJobs []node.RunningJob

func (f fakeJobs) RunningJobs() []node.RunningJob { return f }

func TestNodeScrape(t *testing.T) {
	gpus := []spec.GPU{{Index: 0, UUID: "GPU-0", Name: "NVIDIA H100 80GB HBM3"}, {Index: 1, UUID: "GPU-1", Name: "NVIDIA H100 80GB HBM3"}}
	sampler := &fakeSampler{s: []gpu.Sample{
		{Index: 0, UUID: "GPU-0", UtilPct: 87, MemUsedMiB: 40960, TempC: 61, PowerW: 512.5, HasUtil: true, HasMem: true, HasTemp: true, HasPower: true, HasXID: true},
		// A GPU whose driver reads no power and no XID.
		{Index: 1, UUID: "GPU-1", UtilPct: 0, MemUsedMiB: 0, TempC: 33, HasUtil: true, HasMem: true, HasTemp: true},
	}}
	jobs := fakeJobs{{JobID: 42, AllocID: "42.1", User: "alice", Account: "ml", GPUs: []string{"GPU-0"}, CPUSeconds: 12.5, MemBytes: 1 << 30, HasUsage: true},
		{JobID: 43, AllocID: "43.1", User: "bob", GPUs: []string{"MIG-x"}}}
	// GPU-1 is in MIG mode; job 43 holds one 1g.10gb instance (GI 7).
	mig := fakeMIG{{Index: 1, UUID: "GPU-1", Capable: true, Instances: []gpu.MIGDevice{
		{UUID: "MIG-x", ParentUUID: "GPU-1", Profile: "1g.10gb", GI: 7}, {UUID: "MIG-idle", ParentUUID: "GPU-1", Profile: "1g.10gb", GI: 8}}}}
	m := NewNode("gpu01", gpus, sampler, jobs, WithMIG(mig))
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	want := `
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-0",account="ml",gpu="0",job_id="42",modelName="NVIDIA H100 80GB HBM3",user="alice"} 40960
DCGM_FI_DEV_FB_USED{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-1",account="",gpu="1",job_id="",modelName="NVIDIA H100 80GB HBM3",user=""} 0
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-0",account="ml",gpu="0",job_id="42",modelName="NVIDIA H100 80GB HBM3",user="alice"} 61
DCGM_FI_DEV_GPU_TEMP{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-1",account="",gpu="1",job_id="",modelName="NVIDIA H100 80GB HBM3",user=""} 33
DCGM_FI_DEV_GPU_TEMP{GPU_I_ID="7",GPU_I_PROFILE="1g.10gb",Hostname="gpu01",UUID="GPU-1",account="",gpu="1",job_id="43",modelName="NVIDIA H100 80GB HBM3",user="bob"} 33
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-0",account="ml",gpu="0",job_id="42",modelName="NVIDIA H100 80GB HBM3",user="alice"} 87
DCGM_FI_DEV_GPU_UTIL{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-1",account="",gpu="1",job_id="",modelName="NVIDIA H100 80GB HBM3",user=""} 0
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-0",account="ml",gpu="0",job_id="42",modelName="NVIDIA H100 80GB HBM3",user="alice"} 512.5
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="GPU-0",account="ml",gpu="0",job_id="42",modelName="NVIDIA H100 80GB HBM3",user="alice"} 0
# HELP gpud_node_jobs_running Jobs (allocations) running on this node.
# TYPE gpud_node_jobs_running gauge
gpud_node_jobs_running{Hostname="gpu01"} 2
# HELP gpud_job_cpu_seconds_total CPU time a running job's cgroup used since its start, as the usage sampler last read it.
# TYPE gpud_job_cpu_seconds_total counter
gpud_job_cpu_seconds_total{Hostname="gpu01",account="ml",job_id="42",user="alice"} 12.5
# HELP gpud_job_memory_bytes Memory in use by a running job's cgroup, as the usage sampler last read it.
# TYPE gpud_job_memory_bytes gauge
gpud_job_memory_bytes{Hostname="gpu01",account="ml",job_id="42",user="alice"} 1.073741824e+09
`
	names := []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
		"gpud_node_jobs_running", "gpud_job_cpu_seconds_total", "gpud_job_memory_bytes"}
	if err := testutil.ScrapeAndCompare(srv.URL, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	sampler.err = errors.New("nvml: GPU is lost")
	if body := scrape(t, srv.URL); strings.Contains(body, "DCGM_FI_DEV_GPU_UTIL{") || !strings.Contains(body, "gpud_node_jobs_running") {
		t.Errorf("scrape with a failing sampler:\n%s", body)
	}
	// No sampler (--gpus=none): job counts only.
	bare := httptest.NewServer(NewNode("cpu01", nil, nil, fakeJobs{}).Handler())
	defer bare.Close()
	if body := scrape(t, bare.URL); strings.Contains(body, "DCGM_") || !strings.Contains(body, `gpud_node_jobs_running{Hostname="cpu01"} 0`) {
		t.Errorf("scrape without GPUs:\n%s", body)
	}
}

func TestServe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, ln, NewNode("n", nil, nil, fakeJobs{}).Handler()) }()
	if body := scrape(t, "http://"+ln.Addr().String()+"/metrics"); !strings.Contains(body, "gpud_node_jobs_running") {
		t.Errorf("/metrics = %s", body)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET / = %d, want 404", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Serve = %v after cancel, want nil", err)
	}
}

// TestNodeScrapeMockDGX scrapes a mock DGX H100 through the real NVML
// backend's Sampler: eight GPUs, synthetic values, the job's labels on the
// GPU it holds.
func TestNodeScrapeMockDGX(t *testing.T) {
	devs, err := nvml.Open(context.Background(), nvml.BackendDGXH100, nvml.WithMockSeed("gpu01"))
	if err != nil {
		t.Fatal(err)
	}
	defer devs.Close()
	inv, err := devs.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var gpus []spec.GPU
	for _, d := range inv {
		gpus = append(gpus, spec.GPU{Index: d.Index, UUID: d.UUID, Name: d.Name})
	}
	jobs := fakeJobs{{JobID: 7, AllocID: "7.1", User: "alice", Account: "ml", GPUs: []string{inv[3].UUID}}}
	srv := httptest.NewServer(NewNode("gpu01", gpus, devs.(gpu.Sampler), jobs).Handler())
	defer srv.Close()
	body := scrape(t, srv.URL)
	if n := strings.Count(body, "DCGM_FI_DEV_GPU_UTIL{"); n != 8 {
		t.Errorf("%d GPU utilisation series, want 8:\n%s", n, body)
	}
	held := `DCGM_FI_DEV_GPU_UTIL{GPU_I_ID="",GPU_I_PROFILE="",Hostname="gpu01",UUID="` + inv[3].UUID + `",account="ml",gpu="3",job_id="7",modelName="` + inv[3].Name + `",user="alice"}`
	if !strings.Contains(body, held) {
		t.Errorf("scrape lacks %s:\n%s", held, body)
	}
}

// TestGrafanaDashboardUsesExportedNames: every gpud_ and DCGM_ series the
// shipped dashboard (etc/grafana-dashboard.json) queries is one the
// controller or a node exports.
func TestGrafanaDashboardUsesExportedNames(t *testing.T) {
	data, err := os.ReadFile("../../etc/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("etc/grafana-dashboard.json: %v", err)
	}
	m := NewController()
	m.AddStats(&fakeStats{s: controller.Stats{Jobs: []controller.JobCount{{State: spec.StateRunning, Partition: "p", N: 1}},
		Pending: []controller.ReasonCount{{Reason: "Priority", N: 1}}, Nodes: []controller.NodeCount{{State: spec.NodeIdle, N: 1}},
		GPUs:      []controller.GPUCount{{Model: "h100", Total: 1}},
		Fairshare: []controller.FairshareFactor{{Account: "lab", User: "alice", Factor: 0.5}}}})
	m.JobStarted("p")
	m.JobEnded("p", spec.StateCompleted)
	m.JobRequeued("p", "")
	m.JobPreempted("p", "requeue")
	m.JobBackfilled("p")
	m.JobIdle("p", "flag")
	m.CycleDone(time.Millisecond)
	m.ObserveRequest("GET /v1/jobs", 200, time.Millisecond)
	ctl := httptest.NewServer(m.Handler())
	defer ctl.Close()
	sampler := &fakeSampler{s: []gpu.Sample{{UUID: "GPU-1", HasUtil: true, HasMem: true, HasTemp: true, HasPower: true, HasXID: true}}}
	nd := httptest.NewServer(NewNode("n", []spec.GPU{{UUID: "GPU-1"}}, sampler, fakeJobs{{JobID: 1, HasUsage: true}}).Handler())
	defer nd.Close()
	exported := scrape(t, ctl.URL) + scrape(t, nd.URL)
	name := regexp.MustCompile(`\b(?:gpud|DCGM)_[A-Za-z0-9_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, s := range name.FindAllString(tg.Expr, -1) {
				n++
				if !strings.Contains(exported, "\n"+s+"{") && !strings.Contains(exported, "\n"+s+" ") {
					t.Errorf("panel %q queries %s, which neither daemon exports", p.Title, s)
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("the dashboard queries only %d series; want its panels built on gpud's names", n)
	}
}
