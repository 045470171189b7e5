package metrics

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/spec"
)

// StatsSource is what the controller collector reads at each scrape
// (implemented by *controller.Controller).
type StatsSource interface {
	// Stats counts the live state; it fails when the controller is not
	// serving or ctx ends.
	Stats(ctx context.Context) (controller.Stats, error)
}

// statsTimeout bounds one scrape's wait for the owner loop.
const statsTimeout = 5 * time.Second

// Controller holds the controller's metrics. It implements
// controller.Observer; give it to controller.WithObserver, then AddStats
// once the controller exists.
type Controller struct {
	reg        *prometheus.Registry
	cycle      prometheus.Histogram
	started    *prometheus.CounterVec
	ended      *prometheus.CounterVec
	requeued   *prometheus.CounterVec
	gpuEvents  *prometheus.CounterVec
	preempted  *prometheus.CounterVec
	backfilled *prometheus.CounterVec
	idle       *prometheus.CounterVec
	requests   *prometheus.HistogramVec
	auditDrops prometheus.Counter
	refusals   *prometheus.CounterVec
}

var _ controller.Observer = (*Controller)(nil)

// NewController returns the controller's metrics with Go runtime and
// process collectors registered.
func NewController() *Controller {
	m := &Controller{
		reg: prometheus.NewRegistry(),
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gpud_scheduler_cycle_duration_seconds",
			Help: "Wall-clock duration of scheduling cycles (snapshot, schedule, apply, commit).",
			// 100µs to ~6.5s.
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
		}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_jobs_started_total",
			Help: "Job attempts started, by partition.",
		}, []string{"partition"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_jobs_ended_total",
			Help: "Jobs that reached a terminal state, by partition and final state.",
		}, []string{"partition", "state"}),
		gpuEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_gpu_health_events_total",
			Help: "GPU health events nodes reported (gpud/health): kind fault, probe-failed, readmit or diag, the triage code (xid79, ecc-dbe, ...) and class.",
		}, []string{"kind", "code", "class"}),
		requeued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_jobs_requeued_total",
			Help: "Job attempts ended with the job going back to PENDING (requeue, preemption, node failure), by partition.",
		}, []string{"partition"}),
		preempted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_jobs_preempted_total",
			Help: "Running jobs the scheduler preempted for higher-priority ones, by partition and preemption mode.",
		}, []string{"partition", "mode"}),
		backfilled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_backfill_starts_total",
			Help: "Job starts made while a higher-priority job held a reservation (backfill), by partition.",
		}, []string{"partition"}),
		idle: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_jobs_idle_gpu_total",
			Help: "Running jobs the idle-GPU policy flagged, by partition and action (flag, hook, cancel).",
		}, []string{"partition", "action"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpud_api_request_duration_seconds",
			Help:    "API request latency by route pattern and HTTP status code (long polls included).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "code"}),
		auditDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_audit_dropped_total",
			Help: "Audit log entries lost: not written at shutdown, or refusals held beyond the queue while the accounting database failed (calls are refused, not dropped).",
		}),
	}
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpud_api_refusals_total",
		Help: "API requests refused, by class: before authentication (no_tls, no_token, bad_token, expired_token, revoked_token, revoked_node_cert, expired_node_cert, bad_join_token) or after (denied, invalid, not_found, conflict, rate_limited, other). The audit log keeps the first of each kind per source and minute and a summary of the rest.",
	}, []string{"class"})
	m.reg.MustRegister(m.cycle, m.started, m.ended, m.requeued, m.gpuEvents, m.preempted, m.backfilled, m.idle, m.requests, m.auditDrops, m.refusals,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// AddStats registers the gauges read from src at each scrape. Call it
// once.
func (m *Controller) AddStats(src StatsSource) { m.reg.MustRegister(&statsCollector{src: src}) }

// Handler serves the metrics in Prometheus' text or protobuf formats. A
// failing collector (the controller not serving) fails only its own
// metrics, not the scrape.
func (m *Controller) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// privateLabels mark a series as saying who uses the cluster.
var privateLabels = []string{"user", "account"}

// PublicHandler is Handler without the series that name users or
// accounts (gpud_fairshare_factor): what any local user, or any TCP
// client without an operator's token, may scrape. Whole families are
// left out, never just their labels, so no two series collide.
func (m *Controller) PublicHandler() http.Handler {
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := m.reg.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if !namesPeople(mf) {
				out = append(out, mf)
			}
		}
		return out, err
	})
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func namesPeople(mf *dto.MetricFamily) bool {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if slices.Contains(privateLabels, l.GetName()) {
				return true
			}
		}
	}
	return false
}

// ObserveRequest records one API request: route is the mux pattern
// ("GET /v1/jobs/{id}"), so IDs never become label values.
func (m *Controller) ObserveRequest(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Observe(d.Seconds())
}

// AuditDropped counts n audit entries lost (server.WithAudit's onDrop).
func (m *Controller) AuditDropped(n int) { m.auditDrops.Add(float64(n)) }

// Refused counts one refused API request of class (server.WithRefusalCounter).
func (m *Controller) Refused(class string) { m.refusals.WithLabelValues(class).Inc() }

// CycleDone implements controller.Observer.
func (m *Controller) CycleDone(d time.Duration) { m.cycle.Observe(d.Seconds()) }

// JobStarted implements controller.Observer.
func (m *Controller) JobStarted(partition string) { m.started.WithLabelValues(partition).Inc() }

// JobEnded implements controller.Observer.
func (m *Controller) JobEnded(partition string, state spec.JobState) {
	m.ended.WithLabelValues(partition, string(state)).Inc()
}

// JobPreempted implements controller.Observer.
func (m *Controller) JobPreempted(partition, mode string) {
	m.preempted.WithLabelValues(partition, mode).Inc()
}

// JobBackfilled implements controller.Observer.
func (m *Controller) JobBackfilled(partition string) { m.backfilled.WithLabelValues(partition).Inc() }

// JobIdle implements controller.Observer.
func (m *Controller) JobIdle(partition, action string) {
	m.idle.WithLabelValues(partition, action).Inc()
}

// GPUEvent implements controller.GPUObserver.
func (m *Controller) GPUEvent(_, kind, code, class string) {
	m.gpuEvents.WithLabelValues(kind, code, class).Inc()
}

// JobRequeued implements controller.Observer. The reason is not a label:
// gpuq requeue takes free text.
func (m *Controller) JobRequeued(partition, _ string) { m.requeued.WithLabelValues(partition).Inc() }

var (
	descJobs = prometheus.NewDesc("gpud_jobs", "Active jobs (pending, running, completing) by state and partition; ended jobs are in gpud_jobs_ended_total.",
		[]string{"state", "partition"}, nil)
	descPending = prometheus.NewDesc("gpud_jobs_pending", "Pending jobs by the reason they wait (Priority, Resources, ...).",
		[]string{"reason"}, nil)
	descNodes = prometheus.NewDesc("gpud_nodes", "Nodes by state, as gpuq nodes shows it.", []string{"state"}, nil)
	descGPUs  = prometheus.NewDesc("gpud_gpus", "Whole GPUs registered, by model.", []string{"model"}, nil)
	descAlloc = prometheus.NewDesc("gpud_gpus_allocated", "Whole GPUs held by a live allocation, by model.", []string{"model"}, nil)
	descOut   = prometheus.NewDesc("gpud_gpus_out_of_service", "Whole GPUs out of service (drained by gpud's health model or a person), by model.", []string{"model"}, nil)
	descFS    = prometheus.NewDesc("gpud_fairshare_factor", "Fair Tree fairshare factor in [0,1] of each user in each account (as gpuq share shows it); at most 1000 series.",
		[]string{"account", "user"}, nil)
	descFSDropped = prometheus.NewDesc("gpud_fairshare_factor_dropped", "Users whose gpud_fairshare_factor series were left out to bound cardinality.", nil, nil)
)

// statsCollector turns one controller.Stats per scrape into gauges.
type statsCollector struct{ src StatsSource }

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descPending, descNodes, descGPUs, descAlloc, descOut, descFS, descFSDropped} {
		ch <- d
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	s, err := c.src.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descJobs, err)
		return
	}
	for _, j := range s.Jobs {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(j.N), string(j.State), j.Partition)
	}
	for _, p := range s.Pending {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(p.N), p.Reason)
	}
	for _, n := range s.Nodes {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n.N), string(n.State))
	}
	for _, g := range s.GPUs {
		ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(g.Total), g.Model)
		ch <- prometheus.MustNewConstMetric(descAlloc, prometheus.GaugeValue, float64(g.Allocated), g.Model)
		ch <- prometheus.MustNewConstMetric(descOut, prometheus.GaugeValue, float64(g.Out), g.Model)
	}
	for _, f := range s.Fairshare {
		ch <- prometheus.MustNewConstMetric(descFS, prometheus.GaugeValue, f.Factor, f.Account, f.User)
	}
	ch <- prometheus.MustNewConstMetric(descFSDropped, prometheus.GaugeValue, float64(s.FairshareDropped))
}
