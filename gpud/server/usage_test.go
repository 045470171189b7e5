package server_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestUsageEventsStoredOnce: usage samples in a node's events are stored
// in accounting before the events are acknowledged; a re-sent sample is
// stored once; a usage event without its sample is refused.
func TestUsageEventsStoredOnce(t *testing.T) {
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	job := spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "j", Account: "ml", Partition: "h100"}, User: "alice", UID: 1000,
		State: spec.StateCompleted, SubmitTime: spec.NewTime(t0), StartTime: spec.NewTime(t0), EndTime: spec.NewTime(t0.Add(time.Hour)), Attempt: 1,
		Alloc: &spec.Alloc{ID: "1.1", JobID: 1, Attempt: 1, StartTime: spec.NewTime(t0), Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 4, GPUs: []string{"GPU-1"}}}}}
	db := openAcct(t, job)
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db), server.WithUsageRecorder(db)}})
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 1)); err != nil {
		t.Fatal(err)
	}
	// The controller's job 1 runs on n1 (alloc 1.1): a node may report
	// usage only for its own allocations.
	if sub, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")}); err != nil || sub.ID != 1 {
		t.Fatalf("submit = %+v, %v; want job 1", sub, err)
	}
	waitAssignment(t, c, "n1", func(a api.Assignment) bool { return a.Alloc.ID == "1.1" })
	sample := func(seq uint64, id string, start, end time.Duration, util float64) api.AllocEvent {
		return api.AllocEvent{Seq: seq, Node: "n1", AllocID: "1.1", JobID: 1, Kind: api.EventUsage, Time: spec.NewTime(t0.Add(end)),
			Usage: &api.UsageSample{ID: id, Attempt: 1, Start: spec.NewTime(t0.Add(start)), End: spec.NewTime(t0.Add(end)), GPUs: 1,
				GPUUtilAvg: util, GPUUtilMax: util, PowerW: 500, EnergyJ: 500 * (end - start).Seconds()}}
	}
	evs := []api.AllocEvent{sample(1, "n1/1.1/1", 0, 30*time.Minute, 20), sample(2, "n1/1.1/2", 30*time.Minute, time.Hour, 80)}
	for range 2 { // the retry of a lost acknowledgement
		if ack, err := c.Events(ctx, "n1", evs); err != nil || ack.AckedSeq != 2 {
			t.Fatalf("Events = %+v, %v; want ack 2", ack, err)
		}
	}
	got, err := c.AcctJobs(ctx, api.AcctFilter{})
	if err != nil || len(got) != 1 {
		t.Fatalf("AcctJobs = %+v, %v", got, err)
	}
	if j := got[0]; math.Abs(j.GPUUtil-50) > 1e-9 || math.Abs(j.EnergyKWh-0.5) > 1e-9 {
		t.Errorf("job 1: gpu_util %v energy %v kWh; want 50 and 0.5 (each sample once)", j.GPUUtil, j.EnergyKWh)
	}
	bad := sample(3, "n1/1.1/3", 0, time.Minute, 0)
	bad.Usage = nil
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{bad}); !errors.Is(err, spec.ErrInvalid) {
		t.Errorf("usage event without a sample: %v, want invalid", err)
	}
}
