package step

import (
	"slices"
	"strings"

	"github.com/gpud/gpud/gpud/api"
)

// MergeEnv returns base then over, where a key in over replaces the same
// key in base (so the variables the agent owns cannot be spoofed by
// --export) and each key appears once.
func MergeEnv(base, over []string) []string {
	key := func(kv string) string { k, _, _ := strings.Cut(kv, "="); return k }
	out := make([]string, 0, len(base)+len(over))
	if len(base) <= mergeScanMax {
		// A few variables of the job's own (a job submitted without
		// --export=ALL): looked up by scanning, without the two maps
		// (a node agent merges a job's environment at each start).
		for _, kv := range base {
			k := key(kv)
			if slices.ContainsFunc(over, func(o string) bool { return key(o) == k }) {
				continue
			}
			if i := slices.IndexFunc(out, func(o string) bool { return key(o) == k }); i >= 0 {
				out[i] = kv // last one wins, as in a shell
				continue
			}
			out = append(out, kv)
		}
		return append(out, over...)
	}
	owned := make(map[string]bool, len(over))
	for _, kv := range over {
		owned[key(kv)] = true
	}
	dup := make(map[string]int, len(base))
	for _, kv := range base {
		k := key(kv)
		if owned[k] {
			continue
		}
		if i, ok := dup[k]; ok {
			out[i] = kv // last one wins, as in a shell
			continue
		}
		dup[k] = len(out)
		out = append(out, kv)
	}
	return append(out, over...)
}

// mergeScanMax is the most variables of its own a job may have for
// MergeEnv to look them up by scanning rather than in maps.
const mergeScanMax = 8

// nodeEnvKeys are the job variables that differ between nodes: on each
// node its own value wins over the one srun's environment carries. The
// step socket is the node's own, so srun in a task reaches its node's
// agent (a nested step from any node).
var nodeEnvKeys = []string{"GPUD_NODEID", "GPUD_GPUS", "NODE_RANK", "SLURM_NODEID", "SLURM_CPUS_ON_NODE",
	"SLURM_MEM_PER_NODE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
	"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "NCCL_IB_HCA", "SLURMD_NODENAME", "HOSTNAME", api.EnvStepSocket}

// jobVars are the job's own variables of a container environment.
func jobVars(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GPUD_") || strings.HasPrefix(k, "SLURM_") || k == "MASTER_ADDR" || k == "MASTER_PORT" ||
			k == "WORLD_SIZE" || k == "NODE_RANK" {
			out = append(out, kv)
		}
	}
	return out
}
