package accounting

import (
	"context"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// TestStepsRecorded: steps reach accounting as they end (RecordSteps) and
// with their job's record; a stale report of a step running does not
// reopen it; Steps lists the last attempt's, batch first, then by number
// (10 after 9), with elapsed seconds.
func TestStepsRecorded(t *testing.T) {
	t.Parallel()
	db := openTest(t)
	ctx := context.Background()
	start := at(0)
	step := func(id string, state spec.JobState, code, endSec int) spec.Step {
		s := spec.Step{ID: id, Name: "cmd" + id, State: state, ExitCode: code, StartTime: start, Nodes: []string{"n1"}, NTasks: 1}
		if endSec > 0 {
			s.EndTime = at(int64(endSec))
		}
		return s
	}
	j := MakeJob(1).Ran(1, 0, node("n1", 8, "GPU-a")).End(3600, spec.StateCompleted).Obj()
	j.Steps = []spec.Step{step("batch", spec.StateCompleted, 0, 3600), step("9", spec.StateFailed, 3, 60)}
	record(t, db, j)
	if err := db.RecordSteps(ctx, []spec.JobSteps{{JobID: 1, Attempt: 1, Steps: []spec.Step{step("10", spec.StateCompleted, 0, 120)}}}); err != nil {
		t.Fatal(err)
	}
	// A late report of step 9 running changes nothing.
	if err := db.RecordSteps(ctx, []spec.JobSteps{{JobID: 1, Attempt: 1, Steps: []spec.Step{step("9", spec.StateRunning, 0, 0)}}}); err != nil {
		t.Fatal(err)
	}
	// An earlier attempt's steps are not the job's.
	if err := db.RecordSteps(ctx, []spec.JobSteps{{JobID: 1, Attempt: 0, Steps: []spec.Step{step("0", spec.StateCancelled, 0, 5)}}}); err != nil {
		t.Fatal(err)
	}
	m, err := db.Steps(ctx, []spec.JobID{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	got := m[1]
	want := []struct {
		id      string
		state   spec.JobState
		code    int
		elapsed int64
	}{{"batch", spec.StateCompleted, 0, 3600}, {"9", spec.StateFailed, 3, 60}, {"10", spec.StateCompleted, 0, 120}}
	if len(got) != len(want) || len(m[2]) != 0 {
		t.Fatalf("steps = %+v, want %d steps of job 1 and none of job 2", m, len(want))
	}
	for i, w := range want {
		if g := got[i]; g.ID != w.id || g.State != w.state || g.ExitCode != w.code || g.Elapsed != w.elapsed || g.Name != "cmd"+w.id {
			t.Errorf("step %d = %+v, want %+v", i, g, w)
		}
	}
}
