package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/runtime/gpu"
)

// JobsSource lists the jobs running on the node (implemented by
// *node.Agent).
type JobsSource interface {
	RunningJobs() []node.RunningJob
}

// Node holds a node agent's metrics.
type Node struct{ reg *prometheus.Registry }

// NewNode returns the node's metrics: per-GPU gauges from sampler (nil
// for a node without a sampling backend: then only job counts), labelled
// with the GPUs of inv and the jobs of jobs, on host hostname.
func NewNode(hostname string, gpus []spec.GPU, sampler gpu.Sampler, jobs JobsSource) *Node {
	reg := prometheus.NewRegistry()
	byUUID := make(map[string]spec.GPU, len(gpus))
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	reg.MustRegister(&nodeCollector{host: hostname, gpus: byUUID, sampler: sampler, jobs: jobs},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Node{reg: reg}
}

// Handler serves the metrics; a failing GPU sample fails only the GPU
// metrics, not the scrape.
func (n *Node) Handler() http.Handler {
	return promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// gpuLabels are DCGM exporter's, then the job's.
var gpuLabels = []string{"gpu", "UUID", "modelName", "Hostname", "job_id", "user", "account"}

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
)

type nodeCollector struct {
	host    string
	gpus    map[string]spec.GPU
	sampler gpu.Sampler
	jobs    JobsSource
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUtil, descFB, descTemp, descPower, descXID, descNodeJobs} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	running := c.jobs.RunningJobs()
	ch <- prometheus.MustNewConstMetric(descNodeJobs, prometheus.GaugeValue, float64(len(running)), c.host)
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
		labels := []string{strconv.Itoa(s.Index), s.UUID, c.gpus[s.UUID].Name, c.host, jobID, j.User, j.Account}
		for _, v := range []struct {
			d   *prometheus.Desc
			has bool
			v   float64
		}{
			{descUtil, s.HasUtil, s.UtilPct}, {descFB, s.HasMem, s.MemUsedMiB}, {descTemp, s.HasTemp, s.TempC},
			{descPower, s.HasPower, s.PowerW}, {descXID, s.HasXID, s.XID},
		} {
			if v.has {
				ch <- prometheus.MustNewConstMetric(v.d, prometheus.GaugeValue, v.v, labels...)
			}
		}
	}
}

// Serve serves h's /metrics on ln until ctx ends, then shuts down (up to
// 5s for scrapes in flight). Other paths are 404.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
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
