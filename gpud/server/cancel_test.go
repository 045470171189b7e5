package server_test

import (
	"io"
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestCancelJobsByFilter: POST /v1/jobs/cancel ends the matching jobs in
// one call (scancel -n NAME -t PD), and refuses an empty filter.
func TestCancelJobsByFilter(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	var want []spec.JobID
	for _, name := range []string{"a", "b", "a", "a"} {
		r, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec(name)})
		if err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			want = append(want, r.ID)
		}
	}
	resp, err := c.CancelJobs(ctx, api.CancelJobsRequest{Filter: api.JobFilter{States: []spec.JobState{spec.StatePending}}, Names: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(resp.Cancelled, want) {
		t.Errorf("cancelled %v, want %v", resp.Cancelled, want)
	}
	left, err := c.Jobs(ctx, api.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name != "b" {
		t.Errorf("left %v, want job b only", left)
	}
	if _, err := c.CancelJobs(ctx, api.CancelJobsRequest{}); err == nil {
		t.Error("empty filter accepted")
	}
}

// TestPartitions: GET /v1/partitions serves the configured partitions with
// their default, state, limits and registered members (sinfo's data).
func TestPartitions(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	ps, err := client(t, addr).Partitions(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) == 0 || ps[0].Name != "batch" || !ps[0].Default || ps[0].State != "UP" || ps[0].Nodes == nil {
		t.Errorf("partitions %+v, want the default batch partition, UP, with a (possibly empty) node list", ps)
	}
}

// TestUpdateJobRoute: PATCH /v1/jobs/{id} (scontrol update) reaches the
// controller's policy.
func TestUpdateJobRoute(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	r, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("a")})
	if err != nil {
		t.Fatal(err)
	}
	name, nice := "b", 4
	j, err := c.UpdateJob(ctx, spec.JobRef{ID: r.ID}, api.JobUpdateRequest{Name: &name, Nice: &nice})
	if err != nil || j.Name != "b" || j.Nice != 4 {
		t.Fatalf("update: %v, job name %q nice %d", err, j.Name, j.Nice)
	}
	bad := "x\x01"
	if _, err := c.UpdateJob(ctx, spec.JobRef{ID: r.ID}, api.JobUpdateRequest{Partition: &bad}); err == nil {
		t.Error("control character in Partition accepted")
	}
}

// TestAssociations: GET /v1/associations serves the configured accounts
// and QOS read-only (sacctmgr list).
func TestAssociations(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	as, err := client(t, addr).Associations(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if as.DefaultQOS != "normal" || len(as.QOS) == 0 || as.QOS[0].Name != "normal" || as.Accounts == nil {
		t.Errorf("associations %+v, want QOS normal as the default and an account list", as)
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCancelJobsByFilter5000: scancel -u USER and scancel -n NAME
// -t PD over 5,000 pending jobs through the API with the real store: one
// call, one transaction, and the queue is empty when it answers. Each op
// submits 5,000 held jobs (not timed) and cancels them. The controller
// logs as gpud does (JSON, one "job ended" line a job) to io.Discard: the
// test logger, which sends each line to t.Log, costs more than the cancel.
func BenchmarkCancelJobsByFilter5000(b *testing.B) {
	for _, tc := range []struct {
		name string
		req  api.CancelJobsRequest
	}{
		{"user", api.CancelJobsRequest{Filter: api.JobFilter{Users: []string{"root"}}}},
		{"name_pending", api.CancelJobsRequest{Names: []string{"bulk"}, Filter: api.JobFilter{States: []spec.JobState{spec.StatePending}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			log := slog.New(slog.NewJSONHandler(io.Discard, nil))
			addr, _, _ := servertest.Start(b, nil, servertest.Options{
				ControllerOptions: []controller.Option{controller.WithLogger(log)},
				ServerOptions:     []server.Option{server.WithLogger(log)}})
			c := client(b, addr)
			ctx := ctxT(b)
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				js := jobSpec("bulk")
				js.Hold = true
				js.Array = "0-4999"
				if _, err := c.Submit(ctx, api.SubmitRequest{Job: js}); err != nil {
					b.Fatal(err)
				}
				cpu0 := processCPU(b)
				b.StartTimer()
				resp, err := c.CancelJobs(ctx, tc.req)
				if err != nil || len(resp.Cancelled) != 5000 {
					b.Fatalf("cancelled %d: %v", len(resp.Cancelled), err)
				}
				b.StopTimer()
				cpu += processCPU(b) - cpu0
				b.StartTimer()
			}
			b.StopTimer()
			// CPU time (client, server, controller and SQLite share the
			// process) varies less than wall time on a loaded machine.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
			left, err := c.Jobs(ctx, api.JobFilter{States: []spec.JobState{spec.StatePending}})
			if err != nil || len(left) != 0 {
				b.Fatalf("%d jobs still pending after the cancels (%v)", len(left), err)
			}
		})
	}
}
