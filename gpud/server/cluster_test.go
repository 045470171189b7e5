package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/server"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
)

// The cluster report measures capacity and down hours against the nodes
// the controller knows.
func TestAcctCluster(t *testing.T) {
	t0 := time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) spec.Time { return spec.NewTime(t0.Add(d)) }
	job := spec.Job{ID: 1, JobSpec: spec.JobSpec{Name: "j", Account: "ml", Partition: "h100", Resources: spec.Resources{GPUModel: "h100"}},
		User: "alice", UID: 1000, State: spec.StateCompleted, SubmitTime: at(0), StartTime: at(0), EndTime: at(time.Hour), Attempt: 1,
		Alloc: &spec.Alloc{ID: "a", JobID: 1, Attempt: 1, StartTime: at(0), Nodes: []spec.NodeAlloc{{Node: "n1", CPUs: 2, GPUs: []string{"GPU-n1-0", "GPU-n1-1"}}}}}
	db := openAcct(t, job)
	if err := db.RecordNodeEvents(ctxT(t), []spec.NodeEvent{
		{Time: at(time.Hour).Time, Node: "n1", Event: spec.NodeEventDrain, Actor: "root"},
		{Time: at(90 * time.Minute).Time, Node: "n1", Event: spec.NodeEventResume, Actor: "root"},
	}); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := servertest.Start(t, nil, servertest.Options{ServerOptions: []server.Option{server.WithAccounting(db)}})
	c := client(t, addr)
	if _, err := c.Register(ctxT(t), inventory("n1", 4)); err != nil {
		t.Fatal(err)
	}
	got, err := c.AcctCluster(ctxT(t), t0, t0.Add(2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := api.AcctClusterResponse{Start: t0, End: t0.Add(2 * time.Hour), Bucket: 3600,
		Rows: []api.AcctClusterRow{{Model: "h100", GPUs: 4, TotalGPUHours: 8, AllocatedGPUHours: 2, DownGPUHours: 2}},
		Series: []api.AcctUtilPoint{
			{Time: t0, CapacityGPUHours: 4, AllocatedGPUHours: 2},
			{Time: t0.Add(time.Hour), CapacityGPUHours: 4, DownGPUHours: 2},
		}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster report (-want +got):\n%s", diff)
	}

	bare, _ := servertest.TestServer(t, nil)
	for _, tc := range []struct {
		name, addr, query string
		wantStatus        int
		wantMsg           string
	}{
		{"empty window", addr, "start=2025-03-14T10:00:00Z&end=2025-03-14T09:00:00Z", 400, "before start"},
		{"bad bucket", addr, "bucket=hour", 400, `bucket="hour"`},
		{"too many buckets", addr, "bucket=1", 400, "pick a wider bucket"},
		{"no accounting", bare, "", 503, "keeps no cluster accounting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body api.ErrorBody
			status := getRaw(t, tc.addr, "/v1/accounting/cluster?"+tc.query, &body)
			if status != tc.wantStatus || !strings.Contains(body.Error.Message, tc.wantMsg) {
				t.Errorf("got %d %+v; want %d containing %q", status, body.Error, tc.wantStatus, tc.wantMsg)
			}
		})
	}
}
