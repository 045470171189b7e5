package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// ClusterConfig is GET /v1/config: the controller's settings that
// Slurm's `scontrol show config` shows and tools read (Toil, site
// scripts: ClusterName, MpiDefault, timeouts). Anyone the API admits may
// read it, as anyone may run scontrol show config.
type ClusterConfig struct {
	ClusterName string `json:"cluster_name"`
	// BootTime is when the answering controller started (BOOT_TIME).
	BootTime time.Time `json:"boot_time"`
	// MPIDefault is [controller] mpi_default ("" none; MpiDefault).
	MPIDefault string `json:"mpi_default,omitempty"`
	// NodeTimeout is [controller] node_timeout (SlurmdTimeout),
	// MinJobAge how long an ended job stays in the queue listing.
	NodeTimeout spec.Duration `json:"node_timeout"`
	MinJobAge   spec.Duration `json:"min_job_age"`
	// SchedInterval is the scheduler's period (SchedulerParameters'
	// sched_interval).
	SchedInterval spec.Duration `json:"sched_interval"`
	// MaxNodesPerJob caps a job's nodes (0: the cluster's).
	MaxNodesPerJob int    `json:"max_nodes_per_job,omitempty"`
	DefaultAccount string `json:"default_account,omitempty"`
	DefaultQOS     string `json:"default_qos,omitempty"`
	// MaxSubmitJobsPerUser caps a user's jobs in the queue (0: none;
	// Slurm's MaxSubmitJobs of the association).
	MaxSubmitJobsPerUser int `json:"max_submit_jobs_per_user,omitempty"`
}

// Config returns the controller's settings (GET /v1/config).
func (c *Client) Config(ctx context.Context) (ClusterConfig, error) {
	var out ClusterConfig
	err := c.do(ctx, http.MethodGet, "/config", nil, nil, &out)
	return out, err
}
