package slurmrest_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/slurmrest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestSubmitReservation: job/submit's reservation is sbatch's
// --reservation (it was ignored while gpud had no reservations): a job in
// a reservation's access list is queued in it, one outside is refused in
// Slurm's words.
func TestSubmitReservation(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	ctx := context.Background()
	st, d := spec.NewTime(time.Now().Add(time.Hour)), spec.Duration(time.Hour)
	nodes, users := []string{"gpu01"}, []string{"alice"}
	if _, err := c.root.CreateReservation(ctx, spec.ReservationUpdate{Name: "lab", StartTime: &st, Duration: &d, Nodes: &nodes, Users: &users}); err != nil {
		t.Fatal(err)
	}
	a := c.call(t, c.token(t, alice), "POST", "/slurm/v0.0.45/job/submit", submitBody("in", map[string]any{"reservation": "lab"}))
	if a.status != 200 {
		t.Fatalf("alice's submit in lab: %d %s", a.status, a.raw)
	}
	id, err := strconv.ParseUint(fmt.Sprint(a.body["job_id"]), 10, 64)
	if err != nil {
		t.Fatalf("job_id %v: %v", a.body["job_id"], err)
	}
	j, err := c.root.Job(ctx, spec.JobID(id))
	if err != nil || j.Reservation != "lab" {
		t.Fatalf("alice's job: reservation %q (%v); want lab", j.Reservation, err)
	}
	b := c.call(t, c.token(t, bob), "POST", "/slurm/v0.0.45/job/submit", submitBody("out", map[string]any{"reservation": "lab"}))
	if b.status == 200 || !strings.Contains(strings.Join(b.errs(), " "), "Access denied to requested reservation") {
		t.Errorf("bob's submit in lab: %d %v; want refused with Slurm's words", b.status, b.errs())
	}
}

// TestSubmitTimeMinimum: job/submit's time_minimum is --time-min (it was
// ignored with a warning), job info shows it back in minutes, and an
// infinite one is refused with what to give.
func TestSubmitTimeMinimum(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	ctx := context.Background()
	tok := c.token(t, alice)
	a := c.call(t, tok, "POST", "/slurm/v0.0.45/job/submit", submitBody("flex", map[string]any{
		"time_limit":   map[string]any{"set": true, "number": 60},
		"time_minimum": map[string]any{"set": true, "number": 10}}))
	if a.status != 200 {
		t.Fatalf("submit with time_minimum: %d %s", a.status, a.raw)
	}
	id, err := strconv.ParseUint(fmt.Sprint(a.body["job_id"]), 10, 64)
	if err != nil {
		t.Fatalf("job_id %v: %v", a.body["job_id"], err)
	}
	if j, err := c.root.Job(ctx, spec.JobID(id)); err != nil || j.TimeMin.Std() != 10*time.Minute {
		t.Fatalf("the job's time-min %v (%v); want 10m", j.TimeMin, err)
	}
	g := c.call(t, tok, "GET", fmt.Sprintf("/slurm/v0.0.45/job/%d", id), nil)
	jobs, _ := g.body["jobs"].([]any)
	if g.status != 200 || len(jobs) != 1 {
		t.Fatalf("GET job %d: %d %s", id, g.status, g.raw)
	}
	if tm, _ := jobs[0].(map[string]any)["time_minimum"].(map[string]any); fmt.Sprint(tm["number"]) != "10" || tm["set"] != true {
		t.Errorf("job info time_minimum %v; want set, 10 minutes", tm)
	}
	b := c.call(t, tok, "POST", "/slurm/v0.0.45/job/submit", submitBody("inf", map[string]any{
		"time_minimum": map[string]any{"set": true, "infinite": true}}))
	if b.status == 200 || !strings.Contains(strings.Join(b.errs(), " "), "time_minimum") {
		t.Errorf("submit with an infinite time_minimum: %d %v; want refused naming time_minimum", b.status, b.errs())
	}
}

// TestGetReservations: GET reservations/ and reservation/{name} list
// gpud's advance reservations as Slurm shows them, in every version
// (each answer is checked against Slurm's OpenAPI document by call): a
// node reservation with its nodes, users, flags and window, a GPU-count
// one with TRES=gres/gpu=N and no cores; an unknown name is Slurm's
// error. They were always an empty list.
func TestGetReservations(t *testing.T) {
	requireDocs(t)
	c := startCluster(t)
	ctx := context.Background()
	st, d := spec.NewTime(time.Now().Add(time.Hour).Truncate(time.Second)), spec.Duration(2*time.Hour)
	nodes, users, flags := []string{"gpu01"}, []string{"alice"}, []string{"MAINT", "WEEKLY"}
	if _, err := c.root.CreateReservation(ctx, spec.ReservationUpdate{Name: "maint", StartTime: &st, Duration: &d, Nodes: &nodes, Users: &users, Flags: &flags}); err != nil {
		t.Fatal(err)
	}
	gpus := 2
	if _, err := c.root.CreateReservation(ctx, spec.ReservationUpdate{Name: "gpus", StartTime: &st, Duration: &d, GPUs: &gpus, Users: &users}); err != nil {
		t.Fatal(err)
	}
	tok := c.token(t, alice)
	for _, v := range slurmrest.Versions {
		a := c.call(t, tok, "GET", fmt.Sprintf("/slurm/v0.0.%d/reservations/", v), nil)
		rs, _ := a.body["reservations"].([]any)
		if a.status != 200 || len(rs) != 2 || strings.Contains(strings.Join(a.warnings(), " "), "reservation") {
			t.Fatalf("v%d GET reservations/: %d %s", v, a.status, a.raw)
		}
		by := map[string]map[string]any{}
		for _, r := range rs {
			m := r.(map[string]any)
			by[fmt.Sprint(m["name"])] = m
		}
		m := by["maint"]
		if m["node_list"] != "gpu01" || m["users"] != "alice" || fmt.Sprint(m["flags"]) != "[MAINT SPEC_NODES WEEKLY]" || fmt.Sprint(m["node_count"]) != "1" {
			t.Errorf("v%d maint = %v", v, m)
		}
		if s, _ := m["start_time"].(map[string]any); s["number"] != float64(st.Unix()) {
			t.Errorf("v%d maint start_time %v; want %d", v, s, st.Unix())
		}
		if e, _ := m["end_time"].(map[string]any); e["number"] != float64(st.Add(2*time.Hour).Unix()) {
			t.Errorf("v%d maint end_time %v; want %d", v, e, st.Add(2*time.Hour).Unix())
		}
		g := by["gpus"]
		if g == nil || g["tres"] != "gres/gpu=2" || fmt.Sprint(g["core_count"]) != "0" {
			t.Errorf("v%d gpus = %v; want TRES gres/gpu=2, no cores", v, g)
		}
		one := c.call(t, tok, "GET", fmt.Sprintf("/slurm/v0.0.%d/reservation/gpus", v), nil)
		if rs, _ := one.body["reservations"].([]any); one.status != 200 || len(rs) != 1 {
			t.Errorf("v%d GET reservation/gpus: %d %s", v, one.status, one.raw)
		}
		none := c.call(t, tok, "GET", fmt.Sprintf("/slurm/v0.0.%d/reservation/nosuch", v), nil)
		if none.status != 404 || !strings.Contains(strings.Join(none.errs(), " "), "2053 ") {
			t.Errorf("v%d GET reservation/nosuch: %d %v; want 404, Slurm's ESLURM_RESERVATION_INVALID", v, none.status, none.errs())
		}
	}
}
