package node

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func TestTaskDevices(t *testing.T) {
	t.Parallel()
	gpus := map[string]spec.GPU{
		"GPU-a": {UUID: "GPU-a", CDIName: "nvidia.com/gpu=GPU-a"},
		"GPU-b": {UUID: "GPU-b", CDIName: "nvidia.com/gpu=GPU-b"},
		"GPU-m": {UUID: "GPU-m"}, // a mock GPU: device nodes, no CDI name
	}
	nics := map[string]spec.NIC{
		"mlx5_0": {Name: "mlx5_0", CDIName: "rdma/nic=mlx5_0"},
		"mlx5_1": {Name: "mlx5_1", CDIName: "rdma/nic=mlx5_1"},
		"eth9":   {Name: "eth9"}, // no CDI name: not usable by jobs
	}
	tests := []struct {
		name    string
		self    spec.NodeAlloc
		mig     []migDevice
		want    taskDevs
		wantErr string
	}{
		{name: "no devices", want: taskDevs{nvidiaVisible: "void"}},
		{name: "whole GPUs: indices in CUDA_VISIBLE_DEVICES, UUIDs elsewhere", self: spec.NodeAlloc{GPUs: []string{"GPU-b", "GPU-a"}},
			want: taskDevs{uuids: []string{"GPU-b", "GPU-a"}, cdi: []string{"nvidia.com/gpu=GPU-b", "nvidia.com/gpu=GPU-a"},
				cudaVisible: "0,1", nvidiaVisible: "GPU-b,GPU-a"}},
		{name: "a mock GPU has no CDI name", self: spec.NodeAlloc{GPUs: []string{"GPU-m"}},
			want: taskDevs{uuids: []string{"GPU-m"}, cudaVisible: "0", nvidiaVisible: "GPU-m"}},
		{name: "MIG slices keep their UUIDs, CDI first", mig: []migDevice{{UUID: "MIG-1", CDIName: "nvidia.com/mig=MIG-1"}, {UUID: "MIG-2"}},
			want: taskDevs{uuids: []string{"MIG-1", "MIG-2"}, cdi: []string{"nvidia.com/mig=MIG-1"}, cudaVisible: "MIG-1,MIG-2", nvidiaVisible: "MIG-1,MIG-2"}},
		{name: "RDMA NICs after the GPUs", self: spec.NodeAlloc{GPUs: []string{"GPU-a"}, NICs: []string{"mlx5_0", "mlx5_1"}},
			want: taskDevs{uuids: []string{"GPU-a"}, cdi: []string{"nvidia.com/gpu=GPU-a", "rdma/nic=mlx5_0", "rdma/nic=mlx5_1"},
				cudaVisible: "0", nvidiaVisible: "GPU-a"}},
		{name: "a GPU the node does not have", self: spec.NodeAlloc{GPUs: []string{"GPU-z"}}, wantErr: "GPU GPU-z of alloc a7 is not in this node's inventory"},
		{name: "a NIC the node does not have", self: spec.NodeAlloc{NICs: []string{"mlx5_9"}}, wantErr: "RDMA NIC mlx5_9 of alloc a7 is not usable"},
		{name: "a NIC without a CDI name", self: spec.NodeAlloc{NICs: []string{"eth9"}}, wantErr: "RDMA NIC eth9 of alloc a7 is not usable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := taskInput{Asg: &api.Assignment{Alloc: spec.Alloc{ID: "a7"}}, Self: tc.self, MIG: tc.mig, GPUs: gpus, NICs: nics}
			got, err := taskDevices(&in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(taskDevs{})); diff != "" {
				t.Errorf("taskDevices (-want +got):\n%s", diff)
			}
		})
	}
}
