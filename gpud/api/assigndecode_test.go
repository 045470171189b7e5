package api

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/spec"
)

// stdAssignments is what encoding/json makes of a body, without the fast
// path.
func stdAssignments(b []byte) (AssignmentsResponse, error) {
	type plain AssignmentsResponse
	var p plain
	err := json.Unmarshal(b, &p)
	return AssignmentsResponse(p), err
}

// checkAssignmentsDecode decodes body with UnmarshalJSON and with
// encoding/json alone, and fails unless both give the same result and
// error; fast says whether the hand-written path must take the body.
func checkAssignmentsDecode(t *testing.T, body []byte, fast bool) {
	t.Helper()
	want, wantErr := stdAssignments(body)
	var got AssignmentsResponse
	err := got.UnmarshalJSON(body)
	if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("error %v, encoding/json gives %v, for %s", err, wantErr, body)
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("differs from encoding/json (-want +got):\n%s\nbody %s", cmp.Diff(want, got), body)
	}
	var r AssignmentsResponse
	if ok := decodeAssignments(body, &r); ok != fast {
		t.Fatalf("fast path took the body: %v, want %v, for %s", ok, fast, body)
	}
}

// TestAssignmentsResponseUnmarshalMatchesEncodingJSON: what the
// controller writes (AppendJSON) decodes by hand exactly as encoding/json
// decodes it, for random responses and for assignments whose job and
// allocation have every field set (a field added to spec.Job, Alloc,
// NodeAlloc or Step that the hand-written decoder does not read sends
// the body to encoding/json, and this test fails).
func TestAssignmentsResponseUnmarshalMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	seen := map[string]bool{}
	for range 2000 {
		var resp AssignmentsResponse
		setSome(t, r, reflect.ValueOf(&resp).Elem(), seen)
		checkAssignmentsDecode(t, resp.AppendJSON(nil), true)
	}
	full := fullJob()
	full.Container = nil // pyxis's options: through encoding/json, tested with the job list
	alloc := *full.Alloc
	alloc.Nodes[0].MIG = nil
	resp := AssignmentsResponse{Generation: 9, StepTicketKey: "k", Now: time.Unix(1.7e9, 5).UTC(),
		Assignments: []Assignment{{Job: full, Alloc: alloc, Stop: true, StopState: spec.StateCancelled, StopReason: "r",
			Signal: "USR1", SignalSeq: 2, Checkpoint: true, MPIDefault: "pmix", ClusterName: "c", Gate: "quick"}, {Job: full, Alloc: alloc}}}
	checkAssignmentsDecode(t, resp.AppendJSON(nil), true)
	// A job's allocation and steps fall back alone: check that the hand
	// path reads every field of theirs.
	full = fullJob()
	allocJSON, _ := json.Marshal(full.Alloc)
	stepsJSON, _ := json.Marshal(full.Steps)
	var a spec.Alloc
	var steps []spec.Step
	if d := (jobsDecoder{data: allocJSON}); !d.allocFields(&a) {
		t.Fatalf("allocFields does not take %s: does it know every key of spec.Alloc and spec.NodeAlloc?", allocJSON)
	}
	if d := (jobsDecoder{data: stepsJSON}); !d.stepList(&steps) {
		t.Fatalf("stepList does not take %s: does it know every key of spec.Step?", stepsJSON)
	}
	// And the rare parts, through encoding/json inside the hand-written
	// pass.
	resp.Assignments[1] = Assignment{Job: full, Alloc: *full.Alloc, Het: []spec.HetComponent{{Offset: 1, JobID: 8}}}
	checkAssignmentsDecode(t, resp.AppendJSON(nil), true)
}

// TestAssignmentsResponseUnmarshalOtherForms: bodies the controller does
// not write are decoded, or refused, exactly as encoding/json does.
func TestAssignmentsResponseUnmarshalOtherForms(t *testing.T) {
	t.Parallel()
	one := `{"job":{"id":7,"nodes":["n1"],"steps":[{"id":"batch","name":"batch","state":"RUNNING","exit_code":0,"start_time":"2026-01-01T00:00:00Z","end_time":"0001-01-01T00:00:00Z","nodes":["n1"],"ntasks":1}],` +
		`"alloc":{"id":"a7","job_id":7,"attempt":1,"nodes":[{"node":"n1","rank":0,"cpus":2,"mem_mib":10,"gpus":["GPU-1"]}],"start_time":"2026-01-01T00:00:00Z"}},` +
		`"alloc":{"id":"a7","job_id":7,"attempt":1,"nodes":[{"node":"n1","rank":0,"cpus":2,"mem_mib":10,"gpus":["GPU-1"],"gpu_fraction":0.5}],"start_time":"2026-01-01T00:00:00Z"}}`
	tests := []struct {
		name string
		body string
		fast bool
	}{
		{name: "one assignment", body: `{"generation":3,"assignments":[` + one + `]}`, fast: true},
		{name: "white space", body: " {\n\"generation\" : 3 , \"assignments\" : [ " + one + " , " + one + " ] } \n", fast: true},
		{name: "none", body: `{"generation":3,"assignments":[]}`, fast: true},
		{name: "null assignments", body: `{"generation":3,"assignments":null}`, fast: true},
		{name: "revocations", body: `{"generation":3,"assignments":[],"revocations":{"version":"v1"},"now":"2026-01-01T01:00:00+01:00"}`, fast: true},
		{name: "escapes", body: `{"generation":3,"assignments":[{"job":{"id":1,"name":"a\"b\u00e9"},"alloc":{"id":"a\u0031"},"stop_reason":"x\ny"}]}`, fast: true},
		{name: "every short escape", body: `{"generation":3,"assignments":[{"job":{"id":1,"script":"#!/bin/sh\necho \"a\\b\/c\"\b\f\r\t é"},"alloc":{"id":"a"},"stop_reason":"x\\"}]}`, fast: true},
		{name: "escape and invalid UTF-8", body: "{\"generation\":3,\"assignments\":[{\"job\":{\"id\":1,\"name\":\"a\\n\xff\"},\"alloc\":{\"id\":\"a\"}}]}", fast: true},
		{name: "bad escape", body: `{"generation":3,"assignments":[{"job":{"id":1,"name":"a\qb"},"alloc":{"id":"a"}}]}`},
		{name: "job's alloc null, nodes null", body: `{"generation":3,"assignments":[{"job":{"id":1,"alloc":null},"alloc":{"id":"a","nodes":null}}]}`, fast: true},
		{name: "unknown top-level key", body: `{"generation":3,"more":[1],"assignments":[]}`},
		{name: "unknown assignment key", body: `{"generation":3,"assignments":[{"job":{"id":1},"new":true}]}`},
		{name: "unknown node key", body: `{"generation":3,"assignments":[{"alloc":{"nodes":[{"node":"n1","new":1}]}}]}`},
		// A job's steps and allocation fall back alone (as in a job list).
		{name: "unknown step key", body: `{"generation":3,"assignments":[{"job":{"id":1,"steps":[{"id":"batch","new":1}]}}]}`, fast: true},
		{name: "unknown key in the job's alloc", body: `{"generation":3,"assignments":[{"job":{"id":1,"alloc":{"id":"a","new":1}}}]}`, fast: true},
		{name: "case-folded key", body: `{"Generation":3,"assignments":[]}`},
		{name: "null generation", body: `{"generation":null,"assignments":[]}`},
		{name: "null now", body: `{"generation":1,"assignments":[],"now":null}`},
		{name: "negative generation", body: `{"generation":-1,"assignments":[]}`},
		{name: "rank not a number", body: `{"generation":1,"assignments":[{"alloc":{"nodes":[{"rank":"0"}]}}]}`},
		{name: "trailing garbage", body: `{"generation":1,"assignments":[]} x`},
		{name: "truncated", body: `{"generation":1,"assignments":[{"job":{"id":1`},
		{name: "empty", body: ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkAssignmentsDecode(t, []byte(tc.body), tc.fast)
		})
	}
}

func FuzzAssignmentsResponseUnmarshal(f *testing.F) {
	full := fullJob()
	full.Container = nil
	resp := AssignmentsResponse{Generation: 9, Assignments: []Assignment{{Job: full, Alloc: *full.Alloc}}}
	f.Add(resp.AppendJSON(nil))
	f.Add([]byte(`{"generation":3,"assignments":[{"job":{"id":1,"steps":null},"alloc":{"nodes":[{"node":"n\u0031","gpu_fraction":1e-1}]}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		want, wantErr := stdAssignments(body)
		var got AssignmentsResponse
		err := got.UnmarshalJSON(body)
		if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
			t.Fatalf("error %v, encoding/json gives %v", err, wantErr)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("differs from encoding/json (-want +got):\n%s", cmp.Diff(want, got))
		}
	})
}

// BenchmarkAssignmentsResponseUnmarshal is a node's answer with 8 running
// one-GPU jobs (a loaded 8-GPU node), as the loadtest's jobs look.
func BenchmarkAssignmentsResponseUnmarshal(b *testing.B) {
	resp := AssignmentsResponse{Generation: 42, Now: time.Now().UTC()}
	for i := range 8 {
		resp.Assignments = append(resp.Assignments, loadedAssignment(i))
	}
	body := resp.AppendJSON(nil)
	if !strings.Contains(string(body), `"steps":[{`) {
		b.Fatal("no steps in the body")
	}
	for _, how := range []string{"UnmarshalJSON", "encoding-json"} {
		b.Run(how, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var r AssignmentsResponse
				var err error
				if how == "UnmarshalJSON" {
					err = r.UnmarshalJSON(body)
				} else {
					r, err = stdAssignments(body)
				}
				if err != nil || len(r.Assignments) != 8 {
					b.Fatal(err)
				}
			}
		})
	}
}
