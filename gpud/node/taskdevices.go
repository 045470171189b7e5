package node

import (
	"fmt"
	"strconv"
	"strings"
)

// The task's devices: its whole GPUs and MIG instances, injected through
// CDI (or device nodes for mock GPUs), and its RDMA NICs.

// taskDevs are the devices of a job's part on this node.
type taskDevs struct {
	// uuids are the job's GPU UUIDs, then its MIG instances' (GPUD_GPUS).
	uuids []string
	// cdi are the CDI names to inject: MIG instances, GPUs, NICs.
	cdi []string
	// cudaVisible is CUDA_VISIBLE_DEVICES as Slurm sets it in a job whose
	// devices are constrained: indices into the devices the container
	// sees (it sees only its own, 0..n-1); the UUIDs stay in GPUD_GPUS.
	// MIG slices keep their MIG UUIDs, which select the slice whatever
	// CUDA enumerates.
	cudaVisible string
	// nvidiaVisible is NVIDIA_VISIBLE_DEVICES: the UUIDs, "void" for none.
	nvidiaVisible string
}

// taskDevices finds the part's devices in the node's inventory; a GPU or
// NIC the node does not have means the controller and the node disagree.
func taskDevices(in *taskInput) (taskDevs, error) {
	self, allocID := in.Self, in.Asg.Alloc.ID
	var d taskDevs
	d.uuids = append(d.uuids, self.GPUs...)
	for _, m := range in.MIG {
		d.uuids = append(d.uuids, m.UUID)
		if m.CDIName != "" {
			d.cdi = append(d.cdi, m.CDIName)
		}
	}
	for _, u := range self.GPUs {
		g, ok := in.GPUs[u]
		if !ok {
			return taskDevs{}, fmt.Errorf("GPU %s of alloc %s is not in this node's inventory; the controller and node disagree, re-register the node", u, allocID)
		}
		if g.CDIName != "" {
			d.cdi = append(d.cdi, g.CDIName)
		}
	}
	for _, name := range self.NICs {
		n, ok := in.NICs[name]
		if !ok || n.CDIName == "" {
			return taskDevs{}, fmt.Errorf("RDMA NIC %s of alloc %s is not usable on this node; the controller and node disagree, re-register the node", name, allocID)
		}
		d.cdi = append(d.cdi, n.CDIName)
	}
	gpus := strings.Join(d.uuids, ",")
	d.nvidiaVisible = gpus
	if gpus == "" {
		d.nvidiaVisible = "void"
	}
	d.cudaVisible = gpus
	if len(in.MIG) == 0 && len(self.GPUs) > 0 {
		idx := make([]string, len(self.GPUs))
		for i := range idx {
			idx[i] = strconv.Itoa(i)
		}
		d.cudaVisible = strings.Join(idx, ",")
	}
	return d, nil
}
