package controller

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestParseArray(t *testing.T) {
	tests := []struct {
		in    string
		want  []int
		limit int
	}{
		{"0-3", []int{0, 1, 2, 3}, 0},
		{"1,3,5", []int{1, 3, 5}, 0},
		{"0-15:4", []int{0, 4, 8, 12}, 0},
		{"0-9%2", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 2},
		{"5,1-2,2", []int{1, 2, 5}, 0},
	}
	for _, tc := range tests {
		got, lim, err := parseArray(tc.in)
		if err != nil || lim != tc.limit || !equalInts(got, tc.want) {
			t.Errorf("parseArray(%q) = %v, %d, %v; want %v, %d", tc.in, got, lim, err, tc.want, tc.limit)
		}
	}
	for _, bad := range []string{"", "3-1", "1:2", "0-3%0", "x", "0-10000"} {
		if _, _, err := parseArray(bad); !errors.Is(err, spec.ErrInvalid) {
			t.Errorf("parseArray(%q) error = %v, want invalid", bad, err)
		}
	}
	// Indices and steps near MaxInt once wrapped i += step around (a
	// "too many tasks" error naming negative indices); now they are
	// refused as out of range.
	for _, bad := range []string{"9223372036854775807", "9223372036854775806-9223372036854775807:9223372036854775807", "0-4:9223372036854775807", "4000001"} {
		if _, _, err := parseArray(bad); !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), "largest task index") {
			t.Errorf("parseArray(%q) error = %v, want invalid naming the largest task index", bad, err)
		}
	}
	if got, _, err := parseArray("4000000"); err != nil || !equalInts(got, []int{4000000}) {
		t.Errorf("parseArray(4000000) = %v, %v; want [4000000]", got, err)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestArrayMaxConcurrent(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 8)
	ids, err := h.c.SubmitAll(context.Background(), alice, spec.JobSpec{Name: "arr", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Array: "0-19%4"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 20 {
		t.Fatalf("got %d ids, want 20", len(ids))
	}
	for i, id := range ids {
		j := h.job(id)
		if id != ids[0]+spec.JobID(i) || j.ArrayJobID != ids[0] || j.ArrayTaskID != i || j.Name != "arr" {
			t.Fatalf("task %d: id %d array %d_%d name %q; want consecutive ids from %d", i, id, j.ArrayJobID, j.ArrayTaskID, j.Name, ids[0])
		}
		if want := "/tmp/gpud-" + itoa(ids[0]) + "_" + itoa(spec.JobID(i)) + ".out"; j.StdoutPath != want {
			t.Fatalf("task %d stdout %q, want %q", i, j.StdoutPath, want)
		}
	}
	done := 0
	for cycle := 0; done < 20; cycle++ {
		if cycle > 50 {
			t.Fatalf("array not done after 50 cycles (%d completed)", done)
		}
		var running []spec.Job
		for _, id := range ids {
			j := h.job(id)
			switch {
			case j.State == spec.StateRunning:
				running = append(running, j)
			case j.State == spec.StatePending && len(running) > 0 && j.Reason != spec.ReasonJobArrayTaskLimit:
				t.Fatalf("cycle %d: pending task %d reason %q, want %s", cycle, j.ArrayTaskID, j.Reason, spec.ReasonJobArrayTaskLimit)
			}
		}
		if cycle == 0 && len(running) != 4 {
			t.Fatalf("first cycle: %d tasks running on a node with room for 8, want %%4 = 4", len(running))
		}
		if len(running) > 4 || len(running) == 0 {
			t.Fatalf("cycle %d: %d tasks running, want 1..4", cycle, len(running))
		}
		// End one or two per round so the limit is refilled unevenly.
		for k, j := range running {
			if k > cycle%2 {
				break
			}
			h.exit("n1", j, spec.StateCompleted, 0)
			done++
		}
	}
}

func itoa(id spec.JobID) string { return strconv.FormatUint(uint64(id), 10) }

func dep(d string) func(*spec.JobSpec) {
	return func(j *spec.JobSpec) { j.Depend = d; j.Resources.GPUsPerNode = 1 }
}

func TestDependencyAfterOKChain(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 8)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	b := h.submit(alice, dep("afterok:"+itoa(a)))
	c := h.submit(alice, dep("afterok:"+itoa(b)))
	want := func(id spec.JobID, state spec.JobState, reason string) spec.Job {
		t.Helper()
		j := h.job(id)
		if j.State != state || reason != "" && j.Reason != reason {
			t.Fatalf("job %d = %s/%s, want %s/%s", id, j.State, j.Reason, state, reason)
		}
		return j
	}
	ja := want(a, spec.StateRunning, "")
	want(b, spec.StatePending, spec.ReasonDependency)
	want(c, spec.StatePending, spec.ReasonDependency)
	h.exit("n1", ja, spec.StateCompleted, 0)
	jb := want(b, spec.StateRunning, "")
	want(c, spec.StatePending, spec.ReasonDependency)
	h.exit("n1", jb, spec.StateCompleted, 0)
	want(c, spec.StateRunning, "")
}

func TestDependencyNeverSatisfiedDoesNotBlock(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 1)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	ok := h.submit(alice, dep("afterok:"+itoa(a)))
	notok := h.submit(alice, dep("afternotok:"+itoa(a)))
	anyJ := h.submit(alice, dep("afterany:"+itoa(a)))
	h.exit("n1", h.job(a), spec.StateFailed, 1)
	if j := h.job(ok); j.State != spec.StatePending || j.Reason != spec.ReasonDependencyNeverSatisfied {
		t.Fatalf("afterok on a failed job = %s/%s, want PENDING/%s", j.State, j.Reason, spec.ReasonDependencyNeverSatisfied)
	}
	// One GPU: afternotok (lower id) runs first, then afterany, while the
	// never-satisfied job blocks neither.
	jn := h.job(notok)
	if jn.State != spec.StateRunning {
		t.Fatalf("afternotok on a failed job = %s/%s, want RUNNING", jn.State, jn.Reason)
	}
	h.exit("n1", jn, spec.StateCompleted, 0)
	if j := h.job(anyJ); j.State != spec.StateRunning {
		t.Fatalf("afterany on a failed job = %s/%s, want RUNNING", j.State, j.Reason)
	}
	// An unrelated job still runs after it.
	h.exit("n1", h.job(anyJ), spec.StateCompleted, 0)
	other := h.submit(bob, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if j := h.job(other); j.State != spec.StateRunning {
		t.Fatalf("unrelated job = %s/%s, want RUNNING", j.State, j.Reason)
	}
	if j := h.job(ok); j.Reason != spec.ReasonDependencyNeverSatisfied {
		t.Fatalf("afterok job reason %q, want %s", j.Reason, spec.ReasonDependencyNeverSatisfied)
	}
	// afternotok on a completed job can never hold.
	n2 := h.submit(alice, dep("afternotok:"+itoa(notok)))
	if j := h.job(n2); j.Reason != spec.ReasonDependencyNeverSatisfied {
		t.Fatalf("afternotok on a completed job: reason %q, want %s", j.Reason, spec.ReasonDependencyNeverSatisfied)
	}
}

func TestDependencyOrAndArrayAndSingleton(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 8)
	a := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	b := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	or := h.submit(alice, dep("afterok:"+itoa(a)+"?afterok:"+itoa(b)))
	and := h.submit(alice, dep("afterany:"+itoa(a)+",afterany:"+itoa(b)))
	started := h.submit(alice, dep("after:"+itoa(a)))
	h.settle() // starts a; the cycle after it sees after: satisfied
	if j := h.job(started); j.State != spec.StateRunning {
		t.Fatalf("after: on a running job = %s/%s, want RUNNING", j.State, j.Reason)
	}
	h.exit("n1", h.job(a), spec.StateFailed, 1)
	if j := h.job(or); j.State != spec.StatePending || j.Reason != spec.ReasonDependency {
		t.Fatalf("OR with one side failed, the other running = %s/%s, want PENDING/Dependency", j.State, j.Reason)
	}
	if j := h.job(and); j.State != spec.StatePending || j.Reason != spec.ReasonDependency {
		t.Fatalf("AND with one side running = %s/%s, want PENDING/Dependency", j.State, j.Reason)
	}
	h.exit("n1", h.job(b), spec.StateCompleted, 0)
	for _, id := range []spec.JobID{or, and} {
		if j := h.job(id); j.State != spec.StateRunning {
			t.Fatalf("job %d (%s) = %s/%s, want RUNNING", id, j.Depend, j.State, j.Reason)
		}
	}

	// A dependency on an array job id waits for every task.
	ids, err := h.c.SubmitAll(context.Background(), alice, spec.JobSpec{Name: "arr", Script: "x", WorkDir: "/tmp", Array: "0-1"})
	if err != nil {
		t.Fatal(err)
	}
	after := h.submit(alice, dep("afterok:"+itoa(ids[0])))
	h.exit("n1", h.job(ids[0]), spec.StateCompleted, 0)
	if j := h.job(after); j.State != spec.StatePending || j.Reason != spec.ReasonDependency {
		t.Fatalf("afterok on a half-done array = %s/%s, want PENDING/Dependency", j.State, j.Reason)
	}
	h.exit("n1", h.job(ids[1]), spec.StateCompleted, 0)
	if j := h.job(after); j.State != spec.StateRunning {
		t.Fatalf("afterok on a done array = %s/%s, want RUNNING", j.State, j.Reason)
	}

	// singleton: one job of a user and name at a time.
	s1 := h.submit(bob, func(j *spec.JobSpec) { j.Name = "one"; j.Depend = "singleton" })
	s2 := h.submit(bob, func(j *spec.JobSpec) { j.Name = "one"; j.Depend = "singleton" })
	if j1, j2 := h.job(s1), h.job(s2); j1.State != spec.StateRunning || j2.State != spec.StatePending || j2.Reason != spec.ReasonDependency {
		t.Fatalf("singletons = %s, %s/%s; want RUNNING, PENDING/Dependency", j1.State, j2.State, j2.Reason)
	}
	h.exit("n1", h.job(s1), spec.StateCompleted, 0)
	if j := h.job(s2); j.State != spec.StateRunning {
		t.Fatalf("second singleton after the first ended = %s/%s, want RUNNING", j.State, j.Reason)
	}

	// Bad specs are refused at submit, naming the problem.
	for d, want := range map[string]string{
		"afterok:9999":              "job 9999 does not exist",
		"afterok:1,after?2":         "mixes , (all) and ? (any)",
		"aftercorr:1":               "aftercorr is not supported",
		"afterok:1+5":               "delays (+MINUTES) are not supported",
		"afterok:" + itoa(a) + "_3": "job " + itoa(a) + "_3 does not exist",
	} {
		_, err := h.c.Submit(context.Background(), alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Depend: d})
		if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("--dependency=%s: %v, want invalid containing %q", d, err, want)
		}
	}
}

// TestArrayActions: a bare array id acts on every task (scancel 42), and
// ARRAY_TASK acts on that task alone, even task 0 whose job id is the
// array's.
func TestArrayActions(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 1)
	ctx := context.Background()
	ids, err := h.c.SubmitAll(ctx, alice, spec.JobSpec{Name: "arr", Script: "x", WorkDir: "/tmp", Array: "1,3,5,7", Resources: spec.Resources{GPUsPerNode: 1}})
	if err != nil {
		t.Fatal(err)
	}
	a := ids[0]
	if j := h.job(a); j.State != spec.StateRunning {
		t.Fatalf("task 1 = %s, want RUNNING on the only GPU", j.State)
	}
	// Holding the array holds the pending tasks and skips the running one.
	if _, err := h.c.JobAction(ctx, alice, a, ActionHold, ""); err != nil {
		t.Fatalf("hold array: %v", err)
	}
	for _, id := range ids[1:] {
		if j := h.job(id); !j.Hold {
			t.Fatalf("task %d not held after holding array %d", j.ArrayTaskID, a)
		}
	}
	// Release task 5 alone.
	if _, err := h.c.RefAction(ctx, alice, spec.JobRef{ID: a, Task: 5, IsTask: true}, ActionRelease, ""); err != nil {
		t.Fatalf("release %d_5: %v", a, err)
	}
	if j3, j5 := h.job(ids[1]), h.job(ids[2]); !j3.Hold || j5.Hold {
		t.Fatalf("after releasing %d_5: task 3 held=%v task 5 held=%v; want true, false", a, j3.Hold, j5.Hold)
	}
	// Task 1 alone (its job id is the array's) is cancelled, the rest not.
	if _, err := h.c.RefAction(ctx, alice, spec.JobRef{ID: a, Task: 1, IsTask: true}, ActionCancel, ""); err != nil {
		t.Fatalf("cancel %d_1: %v", a, err)
	}
	if j := h.job(ids[3]); j.State != spec.StatePending {
		t.Fatalf("task 7 = %s after cancelling task 1 alone, want PENDING", j.State)
	}
	// Another user may not act on the array, and nothing changes.
	if _, err := h.c.JobAction(ctx, bob, a, ActionCancel, ""); !errors.Is(err, spec.ErrPermissionDenied) {
		t.Fatalf("bob cancels alice's array: %v, want permission denied", err)
	}
	if _, err := h.c.RefAction(ctx, alice, spec.JobRef{ID: a, Task: 2, IsTask: true}, ActionCancel, ""); !errors.Is(err, spec.ErrNotFound) || !strings.Contains(err.Error(), "1,3,5,7") {
		t.Fatalf("cancel missing task 2: %v, want not found naming the tasks", err)
	}
	if _, err := h.c.RefAction(ctx, alice, spec.JobRef{ID: a + 1, Task: 0, IsTask: true}, ActionCancel, ""); !errors.Is(err, spec.ErrNotFound) {
		t.Fatalf("task of a task id: %v, want not found", err)
	}
	// The whole array: every task that has not ended is cancelled.
	if _, err := h.c.JobAction(ctx, alice, a, ActionCancel, ""); err != nil {
		t.Fatalf("cancel array: %v", err)
	}
	h.settle()
	for _, id := range ids {
		if j := h.job(id); !j.State.Terminal() && j.State != spec.StateCompleting {
			t.Fatalf("task %d = %s after cancelling the array", j.ArrayTaskID, j.State)
		}
	}
	h.exit("n1", h.job(a), spec.StateCancelled, 0) // the node stops task 1
	if j := h.job(a); j.State != spec.StateCancelled {
		t.Fatalf("task 1 = %s after its container stopped, want CANCELLED", j.State)
	}
	if _, err := h.c.JobAction(ctx, alice, a, ActionCancel, ""); !errors.Is(err, spec.ErrConflict) {
		t.Fatalf("cancel an ended array again: %v, want conflict", err)
	}
	if j, err := h.c.JobByRef(ctx, spec.JobRef{ID: a, Task: 7, IsTask: true}); err != nil || j.ID != ids[3] {
		t.Fatalf("JobByRef(%d_7) = %d, %v; want job %d", a, j.ID, err, ids[3])
	}
}
