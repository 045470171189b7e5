package server_test

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server/servertest"
)

// TestClusterConfig: GET /v1/config serves the settings scontrol show
// config prints, as configured, and the controller's start.
func TestClusterConfig(t *testing.T) {
	before := time.Now()
	addr, _ := servertest.TestServer(t, func(c *controller.Config) {
		c.ClusterName, c.MPIDefault, c.NodeTimeout = "gpu-cluster", "pmi2", 7*time.Minute
	})
	cfg, err := client(t, addr).Config(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClusterName != "gpu-cluster" || cfg.MPIDefault != "pmi2" || cfg.NodeTimeout.Std() != 7*time.Minute ||
		cfg.BootTime.Before(before.Add(-time.Second)) || cfg.BootTime.After(time.Now()) {
		t.Errorf("config %+v, want cluster gpu-cluster, mpi_default pmi2, node_timeout 7m, booted during the test", cfg)
	}
}
