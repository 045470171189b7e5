package server

import (
	"cmp"
	"net"
	"net/http"
	"slices"
	"strconv"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// stepTickets issues the allocations' step tickets (api.StepHello): the
// nodes get them with their assignments, the job's owner (or root) with
// POST /v1/jobs/{id}/step-ticket.
type stepTickets struct {
	key []byte // nil: no tickets
	ca  []byte // the cluster CA (PEM) the nodes' step listeners chain to
}

// WithStepTickets has the server derive step tickets from key and hand
// out caPEM (the CA of the nodes' certificates; nil: srun uses its own).
func WithStepTickets(key, caPEM []byte) Option {
	return func(s *Server) { s.steps = stepTickets{key: key, ca: caPEM} }
}

func (t stepTickets) ticket(allocID string) string {
	if t.key == nil || allocID == "" {
		return ""
	}
	return auth.StepTicket(t.key, allocID)
}

// stepTicket is POST /v1/jobs/{id}/step-ticket: the running job's step
// ticket and its nodes' step listeners, for its owner or root only (a
// ticket starts processes as the job's user in its containers).
func (s *Server) stepTicket(w http.ResponseWriter, r *http.Request) {
	ref, err := jobRef(r)
	if err != nil {
		s.refuse(w, r, err)
		return
	}
	ident := who(r)
	if err := notNode(ident, "starting steps"); err != nil {
		s.refuse(w, r, err)
		return
	}
	if s.steps.key == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrUnavailable, "this controller issues no step tickets; start steps from inside the job"))
		return
	}
	j, err := s.c.JobByRef(r.Context(), ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c := ident.caller
	if !c.Known || (c.UID != 0 && c.UID != j.UID) {
		s.refuse(w, r, denied("job %d belongs to %s; only its owner or root may start steps in it", j.ID, j.User))
		return
	}
	if j.State != spec.StateRunning || j.Alloc == nil {
		s.writeError(w, r, spec.Errorf(spec.ErrConflict, "job %d is %s, not running: steps run only in a running job's allocation", j.ID, j.State))
		return
	}
	nodes, err := s.c.Nodes(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	port := map[string]int{}
	for _, n := range nodes {
		port[n.Name] = n.StepPort
	}
	al := slices.Clone(j.Alloc.Nodes)
	slices.SortStableFunc(al, func(a, b spec.NodeAlloc) int { return cmp.Compare(a.Rank, b.Rank) })
	out := api.StepTicketResponse{JobID: j.ID, Alloc: j.Alloc.ID, Ticket: s.steps.ticket(j.Alloc.ID), CA: string(s.steps.ca)}
	for _, n := range al {
		sn := api.StepNode{Name: n.Node}
		if p := cmp.Or(port[n.Node], n.StepPort); p > 0 {
			sn.StepAddr = net.JoinHostPort(cmp.Or(n.Addr, n.Node), strconv.Itoa(p))
		}
		out.Nodes = append(out.Nodes, sn)
	}
	s.writeJSON(w, out)
}
