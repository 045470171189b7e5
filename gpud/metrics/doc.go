// Package metrics exposes the daemons' Prometheus metrics (client_golang,
// the Prometheus project's own Go library). It is the only importer of
// github.com/prometheus: the controller, server and node agent offer plain
// Go counts and hooks (controller.Observer, controller.Stats,
// node.Agent.RunningJobs, gpu.Sampler), and gpud main wires them here.
//
// Controller: counters and histograms are updated by the owner loop
// through controller.Observer (an atomic add each); gauges come from a
// custom Collector that asks the controller for Stats once per scrape,
// one owner query that walks pending jobs, nodes and live allocations,
// never the job history.
//
// Node: per-GPU gauges named like NVIDIA's DCGM exporter where the two
// overlap (DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED, DCGM_FI_DEV_GPU_TEMP,
// DCGM_FI_DEV_POWER_USAGE, DCGM_FI_DEV_XID_ERRORS with labels gpu, UUID,
// modelName, Hostname), plus job_id, user and account on GPUs a job holds,
// read from gpu.Sampler at each scrape. Mock GPUs report synthetic values.
package metrics
