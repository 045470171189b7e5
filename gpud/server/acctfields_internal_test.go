package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// TestAcctFieldsRoundTrip: fields= names every field of api.AcctJob (a
// field added to AcctJob and not to acctFields fails here), and a job
// written with all of them, its steps and attempts decodes strictly into
// the same AcctJob: the hand-written encoders agree with encoding/json,
// strings with quotes, control characters and non-ASCII included.
func TestAcctFieldsRoundTrip(t *testing.T) {
	t.Parallel()
	var names []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[api.AcctJob]()) {
		if f.Anonymous {
			continue // AcctRecord: its fields are visited on their own
		}
		k, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if slices.Contains([]string{"id", "attempt_history", "steps", "step_id"}, k) {
			continue
		}
		if _, ok := acctFields[k]; !ok {
			t.Errorf("api.AcctJob's %q is not in acctFields; add its encoder", k)
		}
		names = append(names, k)
	}
	if len(names) != len(acctFields) {
		t.Errorf("acctFields has %d fields, api.AcctJob %d", len(acctFields), len(names))
	}
	at := spec.NewTime(time.Date(2025, 3, 14, 8, 0, 0, 123456789, time.UTC))
	job := api.AcctJob{AcctRecord: api.AcctRecord{ID: 7, Name: "a \"quoted\"\n\tname \x01 <é>", User: "alice", UID: 1000, Account: "ml", Partition: "gpu",
		QOS: "high", State: spec.StateFailed, Reason: "NonZeroExitCode", ExitCode: 3, Signal: 9, SubmitTime: at, StartTime: at,
		TimeLimit: spec.Duration(90 * time.Minute), Nodes: []string{"gpu01", "gpu\"02"}, GPUs: []string{}, GPUCount: 2,
		GPUModel: "h100", GPUFraction: 0.25, CPUs: 8, MemMiB: 4096, Attempts: 2, WorkDir: "/home/alice", ArrayJobID: 5,
		ArrayTaskID: 2, WCKey: "k", NTasks: 4, Request: &spec.Resources{Nodes: 2, GPUsPerNode: 4, NodeList: []string{"gpu01"}},
		Dependency: "afterok:3", Nice: 5, ArrayMax: 2, Elapsed: 3600, GPUHours: 1.0 / 3, CPUHours: 8, SliceHours: 1e-9, GPUUtil: 55.5,
		EnergyKWh: 1.25, CO2Kg: 0.5, Cost: 12.75}, AttemptHistory: []api.AcctAttempt{{Attempt: 1, StartTime: at, Elapsed: 60}}, Steps: []api.AcctStep{{Step: spec.Step{ID: "batch", Name: "batch", State: spec.StateFailed, StartTime: at}, Elapsed: 60}},
	}
	encs, some, err := parseAcctFields([]string{strings.Join(names[:3], ","), strings.Join(names[3:], ",") + ",id"})
	if err != nil || !some {
		t.Fatalf("parseAcctFields(every field) = %v, %v", some, err)
	}
	s := &Server{log: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	s.writeAcctFields(rec, []api.AcctJob{job, {AcctRecord: api.AcctRecord{ID: 8}}}, encs, true, true)
	dec := json.NewDecoder(bytes.NewReader(rec.Body.Bytes()))
	dec.DisallowUnknownFields()
	var got api.AcctJobsResponse
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", rec.Body.Bytes(), err)
	}
	if diff := cmp.Diff([]api.AcctJob{job, {AcctRecord: api.AcctRecord{ID: 8}}}, got.Jobs); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if _, _, err := parseAcctFields([]string{"state,gpu_hourz"}); err == nil || !strings.Contains(err.Error(), `"gpu_hourz"`) {
		t.Errorf("parseAcctFields(gpu_hourz) = %v, want an error naming it", err)
	}
}
