package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpud/gpud/accounting"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestAcctShowsJobThatJustEnded: sacct (GET /v1/accounting/jobs) right
// after a job's end lists it, though the recorder waits to batch its
// writes (here an hour: only the handler's flush can have written it).
func TestAcctShowsJobThatJustEnded(t *testing.T) {
	c, ctx := lingeringServer(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	js := jobSpec("quick")
	js.Resources.GPUsPerNode = 1
	sub, err := c.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		t.Fatal(err)
	}
	as, err := c.Assignments(ctx, "n1", 0, 0)
	if err != nil || len(as.Assignments) != 1 {
		t.Fatalf("Assignments = %+v, %v; want the job", as, err)
	}
	alloc := as.Assignments[0].Alloc.ID
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{
		{Seq: 1, Node: "n1", AllocID: alloc, JobID: sub.ID, Kind: api.EventStarted, Time: spec.NewTime(time.Now())},
		{Seq: 2, Node: "n1", AllocID: alloc, JobID: sub.ID, Kind: api.EventExited, State: spec.StateCompleted, Time: spec.NewTime(time.Now())},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := c.AcctJobs(ctx, api.AcctFilter{IDs: []spec.JobID{sub.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].State != spec.StateCompleted {
		t.Fatalf("accounting right after the end = %s; want job %d COMPLETED", fmt.Sprint(got), sub.ID)
	}
}

// TestGPUHistoryShowsEventJustReported: GET /v1/health/events (gpuq
// health) lists a GPU event a node reported before the call, though the
// recorder batches its writes (a full run under load read the history
// before the readmission reached accounting: TestXID94OnMIGInstance).
func TestGPUHistoryShowsEventJustReported(t *testing.T) {
	c, ctx := lingeringServer(t)
	inv := inventory("n1", 1)
	if _, err := c.Register(ctx, inv); err != nil {
		t.Fatal(err)
	}
	ev := spec.GPUEvent{Time: spec.NewTime(time.Now()), Node: "n1", GPU: 0, UUID: inv.GPUs[0].UUID, Kind: spec.GPUEventDiag, Detail: "dcgmi diag -r 1 passed"}
	if err := c.SendHeartbeat(ctx, "n1", api.HeartbeatRequest{Running: []string{}, GPUEvents: []spec.GPUEvent{ev}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GPUEvents(ctx, api.GPUEventQuery{Nodes: []string{"n1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != spec.GPUEventDiag {
		t.Fatalf("GPU history right after the heartbeat = %+v; want the diag event", got)
	}
}

// lingeringServer serves accounting from a real database whose recorder
// waits an hour before writing what it is handed: only a flush gets a
// record in before a read.
func lingeringServer(t *testing.T) (*api.Client, context.Context) {
	db, err := accounting.Open(filepath.Join(t.TempDir(), "accounting.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	addr, _, _ := servertest.Start(t, nil, servertest.Options{
		ControllerOptions: []controller.Option{controller.WithRecorder(db), controller.WithRecordLinger(time.Hour)},
		ServerOptions:     []server.Option{server.WithAccounting(db)}})
	c := client(t, addr)
	ctx := ctxT(t)
	return c, ctx
}
