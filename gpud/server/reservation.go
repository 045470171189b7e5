package server

import (
	"net/http"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// listReservations is GET /v1/reservations: anyone may see them, as in
// Slurm (scontrol show reservation, sinfo -T).
func (s *Server) listReservations(w http.ResponseWriter, r *http.Request) {
	vs, err := s.c.Reservations(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := api.ReservationsResponse{Reservations: make([]api.Reservation, 0, len(vs))}
	for _, v := range vs {
		out.Reservations = append(out.Reservations, api.Reservation{Reservation: v.Reservation, State: v.State,
			WindowStart: spec.NewTime(v.Start), WindowEnd: spec.NewTime(v.End)})
	}
	s.writeJSON(w, out)
}

// createReservation is POST /v1/reservations (scontrol create
// reservation).
func (s *Server) createReservation(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	if err := requireRole(id, auth.RoleOperator, "creating a reservation"); err != nil {
		s.refuse(w, r, err)
		return
	}
	var u spec.ReservationUpdate
	if err := decode(w, r, &u); err != nil {
		s.writeError(w, r, err)
		return
	}
	noteTarget(w, "reservation "+quoteShort(u.Name))
	name, err := s.c.CreateReservation(r.Context(), id.privileged(), u)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, api.ReservationCreated{Name: name})
}

// updateReservation is PATCH /v1/reservations/{name}.
func (s *Server) updateReservation(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	name := r.PathValue("name")
	if err := requireRole(id, auth.RoleOperator, "update of reservation "+quoteShort(name)); err != nil {
		s.refuse(w, r, err)
		return
	}
	var u spec.ReservationUpdate
	if err := decode(w, r, &u); err != nil {
		s.writeError(w, r, err)
		return
	}
	u.Name = name
	noteTarget(w, "reservation "+quoteShort(name))
	if err := s.c.UpdateReservation(r.Context(), id.privileged(), u); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, struct{}{})
}

// deleteReservation is DELETE /v1/reservations/{name}.
func (s *Server) deleteReservation(w http.ResponseWriter, r *http.Request) {
	id := who(r)
	name := r.PathValue("name")
	if err := requireRole(id, auth.RoleOperator, "deleting reservation "+quoteShort(name)); err != nil {
		s.refuse(w, r, err)
		return
	}
	noteTarget(w, "reservation "+quoteShort(name))
	if err := s.c.DeleteReservation(r.Context(), id.privileged(), name); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, struct{}{})
}
