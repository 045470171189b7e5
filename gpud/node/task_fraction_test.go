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
		"CUDA_VISIBLE_DEVICES=0", "GPUD_GPUS=" + uuid,
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

func TestBuildTaskRDMA(t *testing.T) {
	self := spec.NodeAlloc{Node: "n1", GPUs: []string{"GPU-a"}, NICs: []string{"mlx5_0", "mlx5_1"}, CPUs: 1}
	in := taskInput{
		Asg:      api.Assignment{Job: spec.Job{ID: 7}, Alloc: spec.Alloc{ID: "a7", JobID: 7, Nodes: []spec.NodeAlloc{self}}},
		Self:     self,
		NodeName: "n1",
		GPUs:     map[string]spec.GPU{"GPU-a": {UUID: "GPU-a", CDIName: "nvidia.com/gpu=GPU-a"}},
		NICs: map[string]spec.NIC{"mlx5_0": {Name: "mlx5_0", CDIName: "rdma/nic=mlx5_0"},
			"mlx5_1": {Name: "mlx5_1", CDIName: "rdma/nic=mlx5_1"}},
		JobDir: "/tmp/job",
	}
	tc, err := buildTask(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tc.Env, "NCCL_IB_HCA=mlx5_0,mlx5_1") {
		t.Errorf("env lacks NCCL_IB_HCA=mlx5_0,mlx5_1:\n%q", tc.Env)
	}
	if want := []string{"nvidia.com/gpu=GPU-a", "rdma/nic=mlx5_0", "rdma/nic=mlx5_1"}; !slices.Equal(tc.CDIDevices, want) {
		t.Errorf("CDI devices %v, want %v", tc.CDIDevices, want)
	}
	in.Self.NICs = []string{"mlx5_9"}
	if _, err := buildTask(in); err == nil {
		t.Error("unknown NIC: no error")
	}
}
