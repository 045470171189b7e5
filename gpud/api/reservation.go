package api

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpud/gpud/gpud/spec"
)

// Reservation is an advance reservation as GET /v1/reservations shows
// it: as kept, with its state now and its current or next window.
type Reservation struct {
	spec.Reservation
	// State is ACTIVE while a window holds now, else INACTIVE.
	State string `json:"state"`
	// WindowStart and WindowEnd are the window active now, else the next
	// one (zero when none is left).
	WindowStart spec.Time `json:"window_start"`
	WindowEnd   spec.Time `json:"window_end"`
}

// ReservationsResponse is GET /v1/reservations.
type ReservationsResponse struct {
	Reservations []Reservation `json:"reservations"`
}

// ReservationCreated answers POST /v1/reservations.
type ReservationCreated struct {
	Name string `json:"name"`
}

// Reservations lists the advance reservations (scontrol show
// reservation, sinfo -T).
func (c *Client) Reservations(ctx context.Context) (ReservationsResponse, error) {
	var out ReservationsResponse
	err := c.do(ctx, http.MethodGet, "/reservations", nil, nil, &out)
	return out, err
}

// CreateReservation is scontrol create reservation; it returns the name.
func (c *Client) CreateReservation(ctx context.Context, u spec.ReservationUpdate) (string, error) {
	var out ReservationCreated
	err := c.do(ctx, http.MethodPost, "/reservations", nil, u, &out)
	return out.Name, err
}

// UpdateReservation is scontrol update ReservationName=NAME ...
func (c *Client) UpdateReservation(ctx context.Context, u spec.ReservationUpdate) error {
	return c.do(ctx, http.MethodPatch, "/reservations/"+url.PathEscape(u.Name), nil, u, &struct{}{})
}

// DeleteReservation is scontrol delete ReservationName=NAME.
func (c *Client) DeleteReservation(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/reservations/"+url.PathEscape(name), nil, nil, &struct{}{})
}
