package server

import (
	"net/http"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// clusterConfig is GET /v1/config (scontrol show config): the settings a
// user's tools read; nothing secret (no accounts' members, no keys).
func (s *Server) clusterConfig(w http.ResponseWriter, r *http.Request) {
	cfg, err := s.c.SettingsView(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.ClusterConfig{ClusterName: cfg.ClusterName, BootTime: s.started, MPIDefault: cfg.MPIDefault,
		NodeTimeout: spec.Duration(cfg.NodeTimeout), MinJobAge: spec.Duration(cfg.MinJobAge),
		SchedInterval: spec.Duration(cfg.SchedInterval), MaxNodesPerJob: cfg.MaxNodesPerJob,
		DefaultAccount: cfg.DefaultAccount, DefaultQOS: cfg.DefaultQOS, MaxSubmitJobsPerUser: cfg.MaxSubmitJobsPerUser})
}
