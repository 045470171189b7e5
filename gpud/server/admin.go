package server

import (
	"net/http"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// updateNodes is PATCH /v1/nodes (scontrol update NodeName=...).
func (s *Server) updateNodes(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := requireRole(id, auth.RoleOperator, "update of nodes"); err != nil {
		s.refuse(w, r, err)
		return
	}
	var u spec.NodeUpdate
	if err := decode(w, r, &u); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkReason(u.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(u.Nodes) > 0 {
		noteTarget(w, "nodes "+quoteShort(u.Nodes[0])+andMore(len(u.Nodes)))
	}
	diffs, err := s.c.UpdateNodes(r.Context(), id.privileged(), u)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.AdminUpdateResponse{Differences: nonNil(diffs)})
}

// updatePartition is PATCH /v1/partitions/{name} (scontrol update
// PartitionName=...).
func (s *Server) updatePartition(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	name := r.PathValue("name")
	if err := requireRole(id, auth.RoleOperator, "update of partition "+quoteShort(name)); err != nil {
		s.refuse(w, r, err)
		return
	}
	var u spec.PartitionUpdate
	if err := decode(w, r, &u); err != nil {
		s.writeError(w, r, err)
		return
	}
	u.Name = name
	diffs, err := s.c.UpdatePartition(r.Context(), id.privileged(), u)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.AdminUpdateResponse{Differences: nonNil(diffs)})
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

func andMore(n int) string {
	if n <= 1 {
		return ""
	}
	return " and others"
}
