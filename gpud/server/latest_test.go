package server_test

import (
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// GET /v1/usage/latest keeps each job's newest sample per node, ignores a
// late older one, and drops samples older than five minutes.
func TestUsageLatest(t *testing.T) {
	addr, _ := servertest.TestServer(t, nil)
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	// Jobs 7 and 8 run on n1: a node reports usage only for its own
	// allocations.
	for range 8 {
		if _, err := c.Submit(ctx, api.SubmitRequest{Job: jobSpec("j")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []spec.JobID{7, 8} {
		waitAssignment(t, c, "n1", func(a api.Assignment) bool { return a.Job.ID == id })
	}
	now := time.Now().Truncate(time.Second)
	sample := func(seq uint64, job spec.JobID, ago time.Duration, util float64) api.AllocEvent {
		end := now.Add(-ago)
		return api.AllocEvent{Seq: seq, Node: "n1", AllocID: "x", JobID: job, Kind: api.EventUsage, Time: spec.NewTime(end),
			Usage: &api.UsageSample{ID: "n1/x/" + end.String(), Attempt: 1, Start: spec.NewTime(end.Add(-30 * time.Second)),
				End: spec.NewTime(end), GPUs: 2, GPUUtilAvg: util, GPUUtilMax: util + 10, PowerW: 300}}
	}
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{sample(1, 7, time.Minute, 40), sample(2, 7, 30*time.Second, 60),
		sample(3, 8, 10*time.Minute, 90)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Events(ctx, "n1", []api.AllocEvent{sample(4, 7, 2*time.Minute, 10)}); err != nil { // late, older
		t.Fatal(err)
	}
	got, err := c.LatestUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].JobID != 7 || got[0].GPUUtilAvg != 60 || got[0].GPUUtilMax != 70 || got[0].GPUs != 2 || got[0].Node != "n1" {
		t.Errorf("latest usage = %+v; want job 7's sample of 30s ago (60%%) only", got)
	}
}
