package accounting

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// TestGPUEventsHistoryAndRMA: GPU events recorded with node events are
// kept apart (not node availability), listed with filters, and summed
// into the RMA report by serial, even across a move to another node.
func TestGPUEventsHistoryAndRMA(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	at := func(m int) time.Time { return time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC) }
	gev := func(m int, node string, gpu int, serial, kind, code, class string) spec.NodeEvent {
		return spec.NodeEvent{Time: at(m), Node: node, Event: spec.NodeEventGPU, Actor: "gpud", GPU: &spec.GPUEvent{
			Time: spec.NewTime(at(m)), Node: node, GPU: gpu, UUID: "GPU-" + serial, Serial: serial, Kind: kind, Code: code, Class: class}}
	}
	evs := []spec.NodeEvent{
		{Time: at(0), Node: "n1", Event: spec.NodeEventDrain, Reason: "x", Actor: "root"},
		gev(1, "n1", 3, "S3", spec.GPUEventFault, "xid79", "fatal"),
		gev(2, "n1", 3, "S3", spec.GPUEventReadmit, "xid79", ""),
		gev(3, "n1", 5, "S5", spec.GPUEventFault, "ecc-sbe-rate", "degraded"),
		gev(4, "n2", 0, "S3", spec.GPUEventFault, "temp", "fatal"), // S3 moved to n2
		gev(5, "n1", 6, "S6", spec.GPUEventFault, "temp", "fatal"),
	}
	if err := db.RecordNodeEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if ne, err := db.NodeEvents(ctx, "", time.Time{}, time.Time{}); err != nil || len(ne) != 1 {
		t.Fatalf("node events %v %v, want only the drain (GPU events kept apart)", ne, err)
	}
	got, err := db.GPUEvents(ctx, GPUEventFilter{Serials: []string{"S3"}})
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	for _, e := range got {
		summary = append(summary, e.Node+"/"+e.Kind+"/"+e.Code)
	}
	if diff := cmp.Diff([]string{"n1/fault/xid79", "n1/readmit/xid79", "n2/fault/temp"}, summary); diff != "" {
		t.Errorf("history of S3 (-want +got):\n%s", diff)
	}
	if got, _ := db.GPUEvents(ctx, GPUEventFilter{Classes: []string{"degraded"}, Nodes: []string{"n1"}}); len(got) != 1 || got[0].Serial != "S5" {
		t.Errorf("degraded on n1: %v, want S5's", got)
	}
	if got, _ := db.GPUEvents(ctx, GPUEventFilter{Limit: 2}); len(got) != 2 || got[1].Serial != "S6" {
		t.Errorf("newest 2: %v, want oldest first ending with S6", got)
	}
	rma, err := db.RMAReport(ctx, GPUEventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, r := range rma {
		rows = append(rows, r.Serial+"@"+r.Node+"/"+string(rune('0'+r.Fatal))+"/"+map[bool]string{true: "RMA", false: "-"}[r.Candidate])
	}
	if diff := cmp.Diff([]string{"S3@n2/2/RMA", "S6@n1/1/-", "S5@n1/0/-"}, rows); diff != "" {
		t.Errorf("RMA report (-want +got):\n%s", diff)
	}
}
