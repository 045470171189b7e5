package node

import (
	"slices"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func TestBuildTaskFractionMPSEnv(t *testing.T) {
	const uuid = "GPU-aaaa"
	self := spec.NodeAlloc{Node: "n1", GPUs: []string{uuid}, GPUFraction: 0.25, CPUs: 1, MemMiB: 100}
	in := taskInput{
		Asg:      api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "a7", JobID: 7, Nodes: []spec.NodeAlloc{self}}},
		Self:     self,
		NodeName: "n1",
		GPUs:     map[string]spec.GPU{uuid: {UUID: uuid, Model: "h100", MemMiB: 81559}},
		JobDir:   "/tmp/job",
	}
	tc, err := buildTask(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CUDA_VISIBLE_DEVICES=" + uuid,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid + "=20389M",
	} {
		if !slices.Contains(tc.Env, want) {
			t.Errorf("env lacks %q:\n%q", want, tc.Env)
		}
	}

	// A whole GPU gets no MPS limits.
	self.GPUFraction = 0
	in.Self, in.Asg.Alloc.Nodes = self, []spec.NodeAlloc{self}
	tc, err = buildTask(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tc.Env {
		if len(e) > 9 && e[:9] == "CUDA_MPS_" {
			t.Errorf("whole-GPU task has %q", e)
		}
	}
}
