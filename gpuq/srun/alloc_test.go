package srun

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/cli/directive"
)

// TestAllocationOptions: outside a job srun keeps the options that shape
// an allocation (sbatch's), and makes one only when resources are asked.
func TestAllocationOptions(t *testing.T) {
	o, err := parse(strings.Fields("-N2 --gpus-per-node=1 -t 5 -p gpu -l hostname"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range o.alloc {
		got = append(got, a.Name+"="+a.Value)
	}
	if strings.Join(got, " ") != "nodes=2 gpus-per-node=1 time=5 partition=gpu" || o.req.Nodes != 2 || !o.label {
		t.Errorf("alloc options %v, step nodes %d, label %v", got, o.req.Nodes, o.label)
	}
	if !o.wantsAllocation() {
		t.Errorf("-N2 --gpus-per-node=1 asks for resources")
	}
	o, err = parse(strings.Fields("-l -o out.txt hostname"))
	if err != nil {
		t.Fatal(err)
	}
	if o.wantsAllocation() {
		t.Errorf("srun -l -o out.txt hostname asks for no resources; alloc options %v", o.alloc)
	}
}

// TestStepAndAllocationGPUOptions: -G, --gpus-per-node and -w are step
// options inside a job and, outside one, shape the allocation srun makes
// too: the same parse gives both, and the allocation they build is one
// the step fits.
func TestStepAndAllocationGPUOptions(t *testing.T) {
	o, err := parse(strings.Fields("-N2 -G h100:4 -w gpu[1-2] -t 5 nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	if o.req.GPUs != 4 || o.req.NodeList != "gpu[1-2]" || o.req.Nodes != 2 {
		t.Errorf("step: GPUs %d nodelist %q nodes %d; want 4, gpu[1-2], 2", o.req.GPUs, o.req.NodeList, o.req.Nodes)
	}
	var got []string
	for _, a := range o.alloc {
		got = append(got, a.Name+"="+a.Value)
	}
	if want := "nodes=2 gpus=h100:4 nodelist=gpu[1-2] time=5"; strings.Join(got, " ") != want {
		t.Errorf("allocation options %q; want %q", got, want)
	}
	req, err := directive.Build(o.alloc, directive.Env{Now: time.Unix(0, 0), Cwd: "/", Slurm: true})
	if err != nil {
		t.Fatal(err)
	}
	r := req.Spec.Resources
	if r.Nodes != 2 || r.GPUsPerNode != 2 || r.GPUModel != "h100" || !slices.Equal(r.NodeList, []string{"gpu1", "gpu2"}) {
		t.Errorf("allocation: %d nodes, %d %s GPUs per node, nodelist %v; want 2 nodes, 2 h100 GPUs per node, [gpu1 gpu2]",
			r.Nodes, r.GPUsPerNode, r.GPUModel, r.NodeList)
	}
	o, err = parse(strings.Fields("--gpus-per-node=1 true"))
	if err != nil {
		t.Fatal(err)
	}
	if o.req.GPUsPerNode != 1 || !o.wantsAllocation() {
		t.Errorf("--gpus-per-node=1: step GPUs per node %d, wants an allocation %v; want 1, true", o.req.GPUsPerNode, o.wantsAllocation())
	}
}
