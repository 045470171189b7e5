package sim

import (
	"fmt"
	"strconv"
	"strings"
)

// NodeSpec is one simulated node.
type NodeSpec struct {
	Name   string
	CPUs   int
	MemMiB int64
	GPUs   int
	Model  string
}

// Default capacity of nodes from a cluster spec: CPUs and memory are
// plentiful so that GPUs (or SWF processors) are the binding resource.
const (
	defaultCPUsPerGPU = 16
	defaultMinCPUs    = 16
	defaultMemMiB     = 1 << 21 // 2 TiB
)

// ParseCluster reads a cluster spec: "100x8:h100" is 100 nodes with 8 h100
// GPUs each; "256x1" 256 nodes with one (model-less) GPU, the shape for SWF
// traces whose processors become GPUs; parts join with "+"
// ("64x8:a100+32x4:t4"). Nodes are named n00001… in spec order.
func ParseCluster(s string) ([]NodeSpec, error) {
	var nodes []NodeSpec
	for part := range strings.SplitSeq(s, "+") {
		part = strings.TrimSpace(part)
		shape, model, _ := strings.Cut(part, ":")
		ns, gs, ok := strings.Cut(shape, "x")
		n, err1 := strconv.Atoi(ns)
		g, err2 := strconv.Atoi(gs)
		if !ok || err1 != nil || err2 != nil || n < 1 || g < 0 {
			return nil, fmt.Errorf("cluster spec %q: part %q is not NODESxGPUS[:MODEL] (for example 100x8:h100 or 256x1)", s, part)
		}
		for range n {
			nodes = append(nodes, NodeSpec{
				Name: fmt.Sprintf("n%05d", len(nodes)+1), GPUs: g, Model: model,
				CPUs: max(defaultMinCPUs, g*defaultCPUsPerGPU), MemMiB: defaultMemMiB,
			})
		}
	}
	return nodes, nil
}

// TotalGPUs is the cluster's GPU count.
func TotalGPUs(nodes []NodeSpec) int {
	t := 0
	for _, n := range nodes {
		t += n.GPUs
	}
	return t
}
