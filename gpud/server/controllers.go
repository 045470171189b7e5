package server

import (
	"context"
	"net"
	"net/http"
	"os"

	"github.com/gpud/gpud/gpud/api"
)

// ControllerGroup reports the members of an HA controller group (issue
// 16) for GET /v1/controllers, as the answering member sees them.
type ControllerGroup interface {
	Controllers(ctx context.Context) (api.ControllersResponse, error)
}

// WithControllerGroup answers GET /v1/controllers from g. Without it the
// controller is alone and lists itself as the leader.
func WithControllerGroup(g ControllerGroup) Option { return func(s *Server) { s.group = g } }

// controllers serves GET /v1/controllers (gpuq controllers, scontrol
// ping): every caller may read it.
func (s *Server) controllers(w http.ResponseWriter, r *http.Request) {
	if s.group != nil {
		res, err := s.group.Controllers(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, res)
		return
	}
	id := "controller"
	if h, err := os.Hostname(); err == nil && h != "" {
		id = h
	}
	s.writeJSON(w, api.ControllersResponse{Leader: id, Self: id, Members: []api.ControllerMember{{
		ID: id, APIAddress: apiAddress(r), State: "leader", Voter: true,
	}}})
}

// apiAddress is the address the caller reached this controller at:
// https://host:port as it asked for it, or unix://path of the socket.
func apiAddress(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "unix" {
		return "unix://" + a.String()
	}
	return ""
}
