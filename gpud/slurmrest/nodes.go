package slurmrest

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/spec"
)

// nodeRec is a node being written.
type nodeRec struct {
	*spec.Node
	cluster string
}

// nodeStates is Slurm's node state list: the base state, then flags.
func nodeStates(n *spec.Node) []string {
	switch n.State {
	case spec.NodeDrain:
		return []string{"IDLE", "DRAIN"}
	case spec.NodeDraining:
		if n.AllocCPUs >= n.CPUs {
			return []string{"ALLOCATED", "DRAIN"}
		}
		return []string{"MIXED", "DRAIN"}
	case spec.NodeDown:
		return []string{"DOWN", "NOT_RESPONDING"}
	case spec.NodeFail:
		return []string{"IDLE", "FAIL"}
	case spec.NodeFailing:
		return []string{"MIXED", "FAIL"}
	case "":
		return []string{"UNKNOWN"}
	}
	return []string{string(n.State)}
}

// nodeGres is a node's GPUs as Slurm's gres ("gpu:h100:8"): whole GPUs
// by model and MIG slices by profile; used, those allocated.
func nodeGres(n *spec.Node, used bool) string {
	counts := map[string]int{}
	alloc := map[string]bool{}
	for _, u := range n.AllocGPUs {
		alloc[u] = true
	}
	for _, g := range n.GPUs {
		if len(g.MIGSlices) > 0 {
			for _, s := range g.MIGSlices {
				counts[s.Profile] += b2i(!used || s.Job != 0)
			}
			continue
		}
		model := cmp.Or(g.Model, "gpu")
		counts[model] += b2i(!used || alloc[g.UUID])
	}
	kinds := slices.Sorted(maps.Keys(counts))
	parts := make([]string, 0, len(kinds))
	for _, k := range kinds {
		parts = append(parts, "gpu:"+k+":"+strconv.Itoa(counts[k]))
	}
	return strings.Join(parts, ",")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func gpuCount(n *spec.Node, used bool) int {
	if used {
		return len(n.AllocGPUs)
	}
	c := 0
	for _, g := range n.GPUs {
		if len(g.MIGSlices) > 0 {
			c += len(g.MIGSlices)
			continue
		}
		c++
	}
	return c
}

func nodeTres(n *spec.Node, used bool) string {
	cpus, mem := n.CPUs, n.MemMiB
	if used {
		cpus, mem = n.AllocCPUs, n.AllocMemMiB
	}
	s := "cpu=" + strconv.Itoa(cpus) + ",mem=" + memString(mem)
	if !used {
		s += ",billing=" + strconv.Itoa(cpus)
	}
	if g := gpuCount(n, used); g > 0 {
		s += ",gres/gpu=" + strconv.Itoa(g)
	}
	return s
}

func nodeAddr(n *spec.Node) string {
	if n.Addr != "" {
		return n.Addr
	}
	return n.Name
}

var emptyObj = func(w *jw, _ *nodeRec) { w.obj(func() {}) }

// nodeFields is node (GET nodes, node/{name}).
var nodeFields = newTable([]field[nodeRec]{
	f("architecture", constStr[nodeRec]("x86_64")),
	f("burstbuffer_network_address", constStr[nodeRec]("")),
	f("boards", constInt[nodeRec](1)),
	f("boot_time", unsetNum[nodeRec]()),
	since(43, "tls_cert_last_renewal", unsetNum[nodeRec]()),
	since(43, "cert_flags", emptyList[nodeRec]()),
	f("cluster_name", str(func(n *nodeRec) string { return n.cluster })),
	f("cores", func(w *jw, n *nodeRec) { w.int(int64(n.CPUs)) }),
	f("specialized_cores", constInt[nodeRec](0)),
	f("cpu_binding", constInt[nodeRec](0)),
	f("cpu_load", constInt[nodeRec](0)),
	f("free_mem", func(w *jw, n *nodeRec) { w.num(max(n.MemMiB-n.AllocMemMiB, 0)) }),
	f("cpus", func(w *jw, n *nodeRec) { w.int(int64(n.CPUs)) }),
	f("effective_cpus", func(w *jw, n *nodeRec) { w.int(int64(n.CPUs)) }),
	f("specialized_cpus", constStr[nodeRec]("")),
	f("energy", func(w *jw, n *nodeRec) {
		w.obj(func() {
			w.key("average_watts")
			w.int(0)
			w.key("base_consumed_energy")
			w.int(0)
			w.key("consumed_energy")
			w.int(0)
			w.key("current_watts")
			w.unset()
			w.key("previous_consumed_energy")
			w.int(0)
			w.key("last_collected")
			w.int(0)
		})
	}),
	until(44, "external_sensors", emptyObj),
	f("extra", constStr[nodeRec]("")),
	until(44, "power", emptyObj),
	f("features", func(w *jw, n *nodeRec) { w.strs(n.Features) }),
	f("active_features", func(w *jw, n *nodeRec) { w.strs(n.Features) }),
	f("gpu_spec", constStr[nodeRec]("")),
	f("gres", func(w *jw, n *nodeRec) { w.str(nodeGres(n.Node, false)) }),
	f("gres_drained", constStr[nodeRec]("N/A")),
	f("gres_used", func(w *jw, n *nodeRec) { w.str(nodeGres(n.Node, true)) }),
	f("instance_id", constStr[nodeRec]("")),
	f("instance_type", constStr[nodeRec]("")),
	f("last_busy", unsetNum[nodeRec]()),
	f("mcs_label", constStr[nodeRec]("")),
	f("specialized_memory", constInt[nodeRec](0)),
	f("name", str(func(n *nodeRec) string { return n.Name })),
	f("next_state_after_reboot", emptyList[nodeRec]()),
	f("address", func(w *jw, n *nodeRec) { w.str(nodeAddr(n.Node)) }),
	f("hostname", str(func(n *nodeRec) string { return n.Name })),
	f("state", func(w *jw, n *nodeRec) { w.strs(nodeStates(n.Node)) }),
	f("operating_system", constStr[nodeRec]("Linux")),
	f("owner", constStr[nodeRec]("")),
	f("partitions", func(w *jw, n *nodeRec) { w.strs(n.Partitions) }),
	f("port", func(w *jw, n *nodeRec) { w.int(int64(n.StepPort)) }),
	f("real_memory", func(w *jw, n *nodeRec) { w.int(n.MemMiB) }),
	f("res_cores_per_gpu", constInt[nodeRec](0)),
	f("comment", constStr[nodeRec]("")),
	f("reason", str(func(n *nodeRec) string { return n.Reason })),
	f("reason_changed_at", unsetNum[nodeRec]()),
	f("reason_set_by_user", func(w *jw, n *nodeRec) {
		// gpud writes who drained a node into its reason ("... by alice").
		if _, by, ok := strings.Cut(n.Reason, " by "); ok && !strings.Contains(by, " ") {
			w.str(by)
			return
		}
		w.str("")
	}),
	f("resume_after", unsetNum[nodeRec]()),
	f("reservation", constStr[nodeRec]("")),
	since(45, "suspend_time", unsetNum[nodeRec]()),
	f("alloc_memory", func(w *jw, n *nodeRec) { w.int(n.AllocMemMiB) }),
	f("alloc_cpus", func(w *jw, n *nodeRec) { w.int(int64(n.AllocCPUs)) }),
	f("alloc_idle_cpus", func(w *jw, n *nodeRec) { w.int(int64(max(n.CPUs-n.AllocCPUs, 0))) }),
	f("tres_used", func(w *jw, n *nodeRec) { w.str(nodeTres(n.Node, true)) }),
	until(44, "tres_weighted", func(w *jw, n *nodeRec) { w.float(float64(n.AllocCPUs)) }),
	f("slurmd_start_time", unsetNum[nodeRec]()),
	f("sockets", constInt[nodeRec](1)),
	f("threads", constInt[nodeRec](1)),
	f("temporary_disk", constInt[nodeRec](0)),
	f("weight", constInt[nodeRec](1)),
	since(43, "topology", constStr[nodeRec]("")),
	f("tres", func(w *jw, n *nodeRec) { w.str(nodeTres(n.Node, false)) }),
	f("version", func(w *jw, n *nodeRec) { w.str(n.Version) }),
})

// nodeSignature is what a node answer shows that can change, without the
// heartbeat time: update_time compares against when it last changed.
func nodeSignature(nodes []spec.Node) string {
	var b strings.Builder
	for i := range nodes {
		n := &nodes[i]
		b.WriteString(n.Name)
		b.WriteByte(0)
		b.WriteString(string(n.State))
		b.WriteByte(0)
		b.WriteString(n.Reason)
		b.WriteByte(0)
		b.WriteString(strconv.Itoa(n.AllocCPUs))
		b.WriteByte(0)
		b.WriteString(strconv.FormatInt(n.AllocMemMiB, 10))
		b.WriteByte(0)
		b.WriteString(strings.Join(n.AllocGPUs, ","))
		b.WriteByte(0)
		b.WriteString(strings.Join(n.Partitions, ","))
		b.WriteByte(1)
	}
	return b.String()
}
