package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

// rdmaNode is a DGX-like node: GPUs 0-3 on NUMA node 0 paired with
// mlx5_0/mlx5_1, GPUs 4-7 on node 1 paired with mlx5_2/mlx5_3 (one NIC per
// PCIe switch of two GPUs).
func rdmaNode(name string) Node {
	n := Node{Name: name, State: spec.NodeIdle, CPUs: 64, FreeCPUs: 64, MemMiB: 1 << 20, FreeMemMiB: 1 << 20,
		NICs: []NIC{{"mlx5_0", 0}, {"mlx5_1", 0}, {"mlx5_2", 1}, {"mlx5_3", 1}}}
	for k := range 8 {
		n.GPUs = append(n.GPUs, GPU{UUID: fmt.Sprintf("g%d", k), Model: "h100", Free: true, FreeFraction: 1,
			NICs: []string{fmt.Sprintf("mlx5_%d", k/2)}})
	}
	return n
}

func TestRDMAPicksPairedNICs(t *testing.T) {
	busy := rdmaNode("n1")
	for k := range 4 {
		busy.GPUs[k].Free = false // GPUs of NUMA node 0 are taken
	}
	for _, tc := range []struct {
		name string
		node Node
		req  spec.Resources
		want []string // nil: pending
	}{
		{"paired with the job's two GPUs", rdmaNode("n1"), spec.Resources{GPUsPerNode: 2, RDMA: spec.RDMAPaired}, []string{"mlx5_0"}},
		{"four GPUs span two switches", rdmaNode("n1"), spec.Resources{GPUsPerNode: 4, RDMA: spec.RDMAPaired}, []string{"mlx5_0", "mlx5_1"}},
		{"GPUs on NUMA node 1 get its NICs", busy, spec.Resources{GPUsPerNode: 2, RDMA: spec.RDMAPaired}, []string{"mlx5_2"}},
		{"N NICs: paired, then its NUMA node's", busy, spec.Resources{GPUsPerNode: 2, RDMA: 2}, []string{"mlx5_2", "mlx5_3"}},
		{"N NICs: then the other NUMA node's", busy, spec.Resources{GPUsPerNode: 2, RDMA: 3}, []string{"mlx5_2", "mlx5_3", "mlx5_0"}},
		{"more NICs than the node has", rdmaNode("n1"), spec.Resources{GPUsPerNode: 1, RDMA: 5}, nil},
		{"no NICs on the node", Node{Name: "n1", State: spec.NodeIdle, CPUs: 8, FreeCPUs: 8, MemMiB: 100, FreeMemMiB: 100},
			spec.Resources{RDMA: spec.RDMAPaired}, nil},
		{"MIG slice by its parent", func() Node {
			n := rdmaNode("n1")
			n.GPUs[5].MIGEnabled = true
			n.GPUs[5].MIG = &MIGGPU{Dynamic: true, Profiles: h100Profiles()}
			for k := range n.GPUs {
				if k != 5 {
					n.GPUs[k].Free = false
				}
			}
			return n
		}(), spec.Resources{GPUsPerNode: 1, GPUProfile: "1g.10gb", RDMA: spec.RDMAPaired}, []string{"mlx5_2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Nodes, tc.req.CPUsPerNode = 1, 1
			snap := &Snapshot{Nodes: []Node{tc.node}, Jobs: []Job{{ID: 1, SubmitTime: time.Unix(1, 0), Req: tc.req}}}
			plan := scheduleOK(t, snap)
			var got []string
			if len(plan.Starts) == 1 {
				got = plan.Starts[0].Nodes[0].NICs
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("NICs %v, want %v (plan %+v)", got, tc.want, plan)
			}
		})
	}
}
