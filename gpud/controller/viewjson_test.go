package controller

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestJobViewAppendJSON: a view's AppendJSON writes spec.Job.AppendJSON's
// bytes at the first call and from what it kept at the next ones (the
// job's own fields, not another view's), and keeps nothing for a job
// whose encoding is over maxKeptJobJSON.
func TestJobViewAppendJSON(t *testing.T) {
	a := &spec.Job{ID: 7, User: "alice", State: spec.StateRunning, JobSpec: spec.JobSpec{Name: "<a&b>", Script: "#!/bin/sh\ntrue\n", Env: []string{"X=1"}}}
	b := &spec.Job{ID: 8, User: "bob", State: spec.StateRunning, JobSpec: spec.JobSpec{Name: "b", Script: strings.Repeat("x", maxKeptJobJSON)}}
	for _, j := range []*spec.Job{a, b} {
		v := newView(j)
		want := j.AppendJSON([]byte("pre"))
		for call := range 3 {
			if got := v.AppendJSON([]byte("pre")); !bytes.Equal(got, want) {
				t.Fatalf("job %d, call %d: AppendJSON = %s; want %s", j.ID, call, got, want)
			}
		}
		if kept := v.full.Load() != nil; kept != (j == a) {
			t.Errorf("job %d (%d bytes of JSON): kept %v; want kept only under %d bytes", j.ID, len(want)-3, kept, maxKeptJobJSON)
		}
	}
}
