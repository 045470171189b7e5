package metrics

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpud/gpud/gpud/guard"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// JobsSource lists the jobs running on the node (implemented by
// *node.Agent).
type JobsSource interface {
	RunningJobs() []node.RunningJob
}

// MIGSource lists the node's MIG instances (implemented by the gpu.MIG
// backends).
type MIGSource interface {
	MIGState(ctx context.Context) ([]gpu.MIGGPU, error)
}

// NodeOption configures NewNode.
type NodeOption func(*nodeCollector)

// WithMIG labels MIG instances: each instance a job holds gets the parent
// GPU's temperature and XID series with GPU_I_PROFILE and GPU_I_ID (the GPU
// instance id) and the job's labels, as DCGM exporter labels MIG entities.
// Utilisation, memory and power stay per parent GPU: NVML has no
// per-instance utilisation, and splitting power would be a guess.
func WithMIG(src MIGSource) NodeOption { return func(c *nodeCollector) { c.mig = src } }

// Node holds a node agent's metrics.
type Node struct{ reg *prometheus.Registry }

// NewNode returns the node's metrics: per-GPU gauges from sampler (nil
// for a node without a sampling backend: then only job counts), labelled
// with the GPUs of inv and the jobs of jobs, on host hostname, and each
// running job's cgroup CPU time and memory.
func NewNode(hostname string, gpus []spec.GPU, sampler gpu.Sampler, jobs JobsSource, opts ...NodeOption) *Node {
	reg := prometheus.NewRegistry()
	byUUID := make(map[string]spec.GPU, len(gpus))
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	nc := &nodeCollector{host: hostname, gpus: byUUID, sampler: sampler, jobs: jobs}
	for _, o := range opts {
		o(nc)
	}
	reg.MustRegister(nc,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Node{reg: reg}
}

// Handler serves the metrics; a failing GPU sample fails only the GPU
// metrics, not the scrape.
func (n *Node) Handler() http.Handler {
	return promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// gpuLabels are DCGM exporter's (GPU_I_PROFILE and GPU_I_ID empty but on
// a MIG instance's series), then the job's.
var gpuLabels = []string{"gpu", "UUID", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "job_id", "user", "account"}

func gpuDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, gpuLabels, nil)
}

var (
	descUtil     = gpuDesc("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
	descFB       = gpuDesc("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
	descTemp     = gpuDesc("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
	descPower    = gpuDesc("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
	descXID      = gpuDesc("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
	descNodeJobs = prometheus.NewDesc("gpud_node_jobs_running", "Jobs (allocations) running on this node.", []string{"Hostname"}, nil)
	descJobCPU   = prometheus.NewDesc("gpud_job_cpu_seconds_total", "CPU time a running job's cgroup used since its start, as the usage sampler last read it.",
		[]string{"Hostname", "job_id", "user", "account"}, nil)
	descJobMem = prometheus.NewDesc("gpud_job_memory_bytes", "Memory in use by a running job's cgroup, as the usage sampler last read it.",
		[]string{"Hostname", "job_id", "user", "account"}, nil)
)

type nodeCollector struct {
	host    string
	gpus    map[string]spec.GPU
	sampler gpu.Sampler
	jobs    JobsSource
	mig     MIGSource
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUtil, descFB, descTemp, descPower, descXID, descNodeJobs, descJobCPU, descJobMem} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	running := c.jobs.RunningJobs()
	ch <- prometheus.MustNewConstMetric(descNodeJobs, prometheus.GaugeValue, float64(len(running)), c.host)
	for _, j := range running {
		if !j.HasUsage {
			continue
		}
		id := strconv.FormatUint(uint64(j.JobID), 10)
		ch <- prometheus.MustNewConstMetric(descJobCPU, prometheus.CounterValue, j.CPUSeconds, c.host, id, j.User, j.Account)
		ch <- prometheus.MustNewConstMetric(descJobMem, prometheus.GaugeValue, float64(j.MemBytes), c.host, id, j.User, j.Account)
	}
	if c.sampler == nil {
		return
	}
	owner := map[string]node.RunningJob{}
	for _, j := range running {
		for _, g := range j.GPUs {
			owner[g] = j
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	samples, err := c.sampler.Sample(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descUtil, err)
		return
	}
	for _, s := range samples {
		j, held := owner[s.UUID]
		jobID := ""
		if held {
			jobID = strconv.FormatUint(uint64(j.JobID), 10)
		}
		labels := []string{strconv.Itoa(s.Index), s.UUID, c.gpus[s.UUID].Name, c.host, "", "", jobID, j.User, j.Account}
		for _, v := range []struct {
			d   *prometheus.Desc
			has bool
			v   float64
		}{
			{descUtil, s.HasUtil, s.UtilPct}, {descFB, s.HasMem, s.MemUsedMiB}, {descTemp, s.HasTemp, s.TempC},
			{descPower, s.HasPower, s.PowerW}, {descXID, s.HasXID, lastXID(s)},
		} {
			if v.has {
				ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v, labels...)
			}
		}
	}
	if c.mig != nil {
		c.collectMIG(ctx, ch, samples, owner)
	}
}

// collectMIG emits, for each MIG instance a job holds, its parent GPU's
// temperature and XID labelled with the instance and the job.
func (c *nodeCollector) collectMIG(ctx context.Context, ch chan<- prometheus.Metric, samples []gpu.Sample, owner map[string]node.RunningJob) {
	state, err := c.mig.MIGState(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descTemp, fmt.Errorf("read MIG instances: %w", err))
		return
	}
	byUUID := make(map[string]gpu.Sample, len(samples))
	for _, s := range samples {
		byUUID[s.UUID] = s
	}
	for _, g := range state {
		s, ok := byUUID[g.UUID]
		if !ok {
			continue
		}
		for _, in := range g.Instances {
			j, held := owner[in.UUID]
			if !held {
				continue
			}
			labels := []string{strconv.Itoa(g.Index), g.UUID, c.gpus[g.UUID].Name, c.host, in.Profile, strconv.Itoa(in.GI),
				strconv.FormatUint(uint64(j.JobID), 10), j.User, j.Account}
			if s.HasTemp {
				ch <- prometheus.MustNewConstMetric(descTemp, prometheus.GaugeValue, s.TempC, labels...)
			}
			if s.HasXID {
				ch <- prometheus.MustNewConstMetric(descXID, prometheus.GaugeValue, lastXID(s), labels...)
			}
		}
	}
}

// lastXID is the GPU's last XID error (0: none), as DCGM's XID gauge.
func lastXID(s gpu.Sample) float64 {
	if len(s.XIDs) == 0 {
		return 0
	}
	return float64(s.XIDs[len(s.XIDs)-1].XID)
}

// ScrapeLimits are the metrics listener's caps (gpud/guard): it is plain
// HTTP with no authentication, meant for a monitoring network; a scraper
// holds a connection or two, so one address keeps at most 8 before their
// first request (5 s) and 32 open, all addresses 256.
var ScrapeLimits = guard.Limits{Handshake: 5 * time.Second, MaxPending: 64, MaxPendingPerAddr: 8, MaxOpenPerAddr: 32, MaxOpen: 256}

// Serve serves h's /metrics on ln until ctx ends, then shuts down (up to
// 5s for scrapes in flight). Other paths are 404. Connections are capped
// (ScrapeLimits) and what a peer can make it log is rate-limited.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	rl := guard.NewRateLog(slog.Default())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: log.New(rl.Writer(slog.LevelWarn, "metrics connection error"), "", 0),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateActive {
				guard.Established(c)
			}
		}}
	gl := guard.NewListener(ln, "node metrics", ScrapeLimits, rl)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(gl) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("stop metrics server on %s: %w", ln.Addr(), err)
	}
	return nil
}
