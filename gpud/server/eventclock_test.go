package server

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// A node whose clock is an hour behind the controller's stamps a job's
// start an hour in the controller's past: its events' times are moved by
// the difference of the clocks as it sent them (and not moved where the
// clocks agree within a minute, which a loaded controller's delay in
// reading the request may account for, or the node does not say).
func TestShiftEventTimes(t *testing.T) {
	ctl := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name    string
		nodeNow time.Time
		want    time.Duration
	}{
		{"an hour behind", ctl.Add(-time.Hour), time.Hour},
		{"an hour ahead", ctl.Add(time.Hour), -time.Hour},
		{"within a minute", ctl.Add(-50 * time.Second), 0},
		{"does not say", time.Time{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := ctl.Add(-5 * time.Second)
			if !tc.nodeNow.IsZero() {
				at = tc.nodeNow.Add(-5 * time.Second)
			}
			req := api.EventsRequest{Now: tc.nodeNow, Events: []api.AllocEvent{
				{Kind: api.EventStarted, Time: spec.NewTime(at)},
				{Kind: api.EventStepEnded, Time: spec.NewTime(at), Step: &spec.Step{StartTime: spec.NewTime(at), EndTime: spec.NewTime(at)}},
				{Kind: api.EventUsage, Time: spec.NewTime(at), Usage: &api.UsageSample{Start: spec.NewTime(at), End: spec.NewTime(at)}},
				{Kind: api.EventExited}, // no time: stays none
			}}
			shiftEventTimes(req, ctl, log, "n1")
			want := at.Add(tc.want)
			for i, e := range req.Events[:3] {
				if !e.Time.Equal(want) {
					t.Errorf("event %d: time %s; want %s", i, e.Time, want)
				}
			}
			if s := req.Events[1].Step; !s.StartTime.Equal(want) || !s.EndTime.Equal(want) {
				t.Errorf("step times %s-%s; want %s", s.StartTime, s.EndTime, want)
			}
			if u := req.Events[2].Usage; !u.Start.Equal(want) || !u.End.Equal(want) {
				t.Errorf("usage times %s-%s; want %s", u.Start, u.End, want)
			}
			if !req.Events[3].Time.IsZero() {
				t.Errorf("an event without a time got %s", req.Events[3].Time)
			}
		})
	}
}
