package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func fraction(f float64) func(*spec.JobSpec) {
	return func(j *spec.JobSpec) { j.Resources.GPUFraction = f }
}

// The must-show: two jobs with fractions 0.5 share one GPU; a
// third 0.5 goes to another GPU.
func TestFractionsShareAGPU(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	var gpu []string
	for i := range 3 {
		id := h.submit(alice, fraction(0.5))
		j := h.job(id)
		if j.State != spec.StateRunning || j.Alloc == nil || len(j.Alloc.Nodes) != 1 {
			t.Fatalf("job %d (#%d) is %s (%s), want RUNNING on one node", id, i, j.State, j.Reason)
		}
		a := j.Alloc.Nodes[0]
		if len(a.GPUs) != 1 || a.GPUFraction != 0.5 {
			t.Fatalf("job %d alloc = %+v, want one GPU at 0.5", id, a)
		}
		gpu = append(gpu, a.GPUs[0])
	}
	if gpu[0] != gpu[1] {
		t.Errorf("the first two 0.5 jobs are on %s and %s, want one shared GPU", gpu[0], gpu[1])
	}
	if gpu[2] == gpu[0] {
		t.Errorf("the third 0.5 job shares the full GPU %s", gpu[2])
	}
	// Both GPUs count as in use; a whole-GPU job waits.
	nodes, err := h.c.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || len(nodes[0].AllocGPUs) != 2 {
		t.Errorf("nodes = %+v, want n1 with both GPUs allocated", nodes)
	}
	whole := h.submit(alice, func(j *spec.JobSpec) { j.Resources.GPUsPerNode = 1 })
	if j := h.job(whole); j.State != spec.StatePending {
		t.Errorf("whole-GPU job is %s on %+v, want PENDING behind the shares", j.State, j.Alloc)
	}
}

func TestFractionValidation(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	h.register("n1", 2)
	for _, tc := range []struct {
		name string
		mod  func(*spec.JobSpec)
		want string
	}{
		{"one", fraction(1), "between 0 and 1"},
		{"negative", fraction(-0.5), "between 0 and 1"},
		{"with count", func(j *spec.JobSpec) { j.Resources.GPUFraction, j.Resources.GPUsPerNode = 0.5, 1 }, "cannot be combined with a GPU count"},
		{"two nodes", func(j *spec.JobSpec) { j.Resources.GPUFraction, j.Resources.Nodes = 0.5, 2 }, "one node"},
		{"exclusive", func(j *spec.JobSpec) { j.Resources.GPUFraction, j.Resources.Exclusive = 0.5, true }, "--exclusive"},
	} {
		js := spec.JobSpec{Name: "j", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp"}
		tc.mod(&js)
		_, err := h.c.Submit(context.Background(), alice, js)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Submit error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}
