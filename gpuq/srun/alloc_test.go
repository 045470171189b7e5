package srun

import (
	"strings"
	"testing"
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
