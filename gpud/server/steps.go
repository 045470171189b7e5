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

// stepTickets issues the allocations' step tickets (api.StepHello) to
// the job's owner (or root) with POST /v1/jobs/{id}/step-ticket: signed,
// naming the allocation and the credential the caller authenticated
// with, valid for auth.StepTicketTTL. The nodes get the public key with
// their assignments, never a ticket.
type stepTickets struct {
	signer *auth.StepTicketSigner // nil: no tickets
	ca     []byte                 // the cluster CA (PEM) the nodes' step listeners chain to
}

// WithStepTickets has the server sign step tickets with a key derived
// from key (auth.NewStepTicketSigner) and hand out caPEM (the CA of the
// nodes' certificates; nil: srun uses its own).
func WithStepTickets(key, caPEM []byte) Option {
	return func(s *Server) {
		signer, err := auth.NewStepTicketSigner(key, s.now)
		if err != nil {
			s.log.Error("no step tickets", "err", err)
			return
		}
		s.steps = stepTickets{signer: signer, ca: caPEM}
	}
}

// publicKey is what nodes verify tickets with ("" without tickets).
func (t stepTickets) publicKey() string {
	if t.signer == nil {
		return ""
	}
	return t.signer.PublicKey()
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
	if s.steps.signer == nil {
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
	ticket, err := s.steps.signer.Issue(j.Alloc.ID, uint64(j.ID), ident.cred)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.StepTicketResponse{JobID: j.ID, Alloc: j.Alloc.ID, Ticket: ticket, CA: string(s.steps.ca)}
	for _, n := range al {
		sn := api.StepNode{Name: n.Node}
		if p := cmp.Or(port[n.Node], n.StepPort); p > 0 {
			sn.StepAddr = net.JoinHostPort(cmp.Or(n.Addr, n.Node), strconv.Itoa(p))
		}
		out.Nodes = append(out.Nodes, sn)
	}
	s.writeJSON(w, out)
}
