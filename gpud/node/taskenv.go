package node

import (
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/node/step"
	"github.com/gpud/gpud/gpud/spec"
)

// The task's environment (DESIGN §7): the job's own variables (--export)
// with the node's over them, so a job cannot spoof what the agent sets.

// taskEnv is the container's environment.
func taskEnv(in *taskInput, d taskDevs) []string {
	ours := make([]string, 0, taskEnvCap)
	var e envBuf
	e.jobEnv(in, d)
	e.slurmEnv(in)
	ours = e.appendTo(ours)
	ours = append(ours, pathEnv(in)...)
	ours = append(ours, shareEnv(in)...)
	ours = append(ours, layoutEnv(in)...)
	ours = append(ours, nicEnv(in)...)
	ours = append(ours, arrayEnv(in)...)
	ours = append(ours, hetEnv(in)...)
	return step.MergeEnv(in.Asg.Job.Env, ours)
}

// taskEnvCap is room for the variables the node sets for a usual job
// (about fifty), so taskEnv's appends do not grow its slice.
const taskEnvCap = 64

// hetEnv is a heterogeneous job's: its size, and each component's
// variables with _HET_GROUP_N appended to the usual name (Slurm's
// heterogeneous_jobs.html), in every component's containers.
func hetEnv(in *taskInput) []string {
	het := in.Asg.Het
	if len(het) == 0 {
		return nil
	}
	env := []string{"SLURM_HET_SIZE=" + strconv.Itoa(len(het))}
	for _, hc := range het {
		sfx := "_HET_GROUP_" + strconv.Itoa(hc.Offset)
		names := make([]string, len(hc.Nodes))
		cpus := make([]int, len(hc.Nodes))
		for i, n := range hc.Nodes {
			names[i], cpus[i] = n.Node, n.CPUs
		}
		nn := strconv.Itoa(len(names))
		env = append(env,
			"SLURM_JOB_ID"+sfx+"="+strconv.FormatUint(uint64(hc.JobID), 10),
			"SLURM_JOB_NODELIST"+sfx+"="+hostlist.Compress(names),
			"SLURM_NODELIST"+sfx+"="+hostlist.Compress(names),
			"SLURM_JOB_NUM_NODES"+sfx+"="+nn,
			"SLURM_NNODES"+sfx+"="+nn,
			"SLURM_JOB_PARTITION"+sfx+"="+hc.Partition,
			"SLURM_JOB_ACCOUNT"+sfx+"="+hc.Account,
			"SLURM_JOB_QOS"+sfx+"="+hc.QOS,
			"SLURM_JOB_CPUS_PER_NODE"+sfx+"="+step.Counts(cpus),
		)
		if t := hc.Tasks; t.NTasks > 0 || t.NTasksPerNode > 0 {
			nt := t.NTasks
			if nt == 0 {
				nt = t.NTasksPerNode * len(names)
			}
			env = append(env, "SLURM_NTASKS"+sfx+"="+strconv.Itoa(nt))
		}
		if len(hc.GPUIndex) > 0 {
			s := make([]string, len(hc.GPUIndex))
			for i, n := range hc.GPUIndex {
				s[i] = strconv.Itoa(n)
			}
			env = append(env, "SLURM_JOB_GPUS"+sfx+"="+strings.Join(s, ","))
		}
	}
	return env
}

// rankedNodes are the allocation's nodes in rank order.
func rankedNodes(in *taskInput) []spec.NodeAlloc {
	nodes := slices.Clone(in.Asg.Alloc.Nodes)
	sort.SliceStable(nodes, func(i, j int) bool { return nodes[i].Rank < nodes[j].Rank })
	return nodes
}

// masterAddr is MASTER_ADDR: the first node's address (its name when it
// registered none), this node's own when it is the first.
func masterAddr(in *taskInput, nodes []spec.NodeAlloc) string {
	if len(nodes) == 0 || nodes[0].Node == in.NodeName {
		return in.SelfAddr
	}
	if nodes[0].Addr != "" {
		return nodes[0].Addr
	}
	return nodes[0].Node
}

// masterPort derives a port for MASTER_PORT from the job id: the same on
// every rank without talking, in 20000–29999 (below Linux's ephemeral
// range, so outgoing connections do not take it first).
func masterPort(id spec.JobID) int { return 20000 + int(uint64(id)%10000) }

// jobEnv are the variables every job gets: who and where it is, its
// nodes and rendezvous, its devices, its checkpoint directories and its
// step socket.
func jobEnv(in *taskInput, d taskDevs) []string {
	var e envBuf
	e.jobEnv(in, d)
	return e.appendTo(nil)
}

// jobEnv adds jobEnv's variables to e.
func (e *envBuf) jobEnv(in *taskInput, d taskDevs) {
	job, alloc, self := &in.Asg.Job, &in.Asg.Alloc, in.Self
	nodes := rankedNodes(in)
	names := make([]string, len(nodes))
	cpus := make([]int, len(nodes))
	for i, n := range nodes {
		names[i], cpus[i] = n.Node, n.CPUs
	}
	id, rank, nn := uint64(job.ID), int64(self.Rank), int64(len(names))
	compressed := hostlist.Compress(names)
	e.uint("GPUD_JOB_ID=", id)
	e.join("GPUD_NODELIST=", names)
	e.int("GPUD_NODEID=", rank)
	e.int("GPUD_NNODES=", nn)
	e.join("GPUD_GPUS=", d.uuids)
	if in.CkptIsStaging {
		e.add("GPUD_CHECKPOINT_DIR=", in.CkptDir)
	} else {
		e.add("GPUD_CHECKPOINT_DIR=", filepath.Join(in.CkptDir, "staging"))
	}
	e.add("GPUD_RESTART_DIR=", in.RestartDir)
	// The image the job runs in ("host": the node's root): srun
	// checks a step's --container-image against it.
	e.add("GPUD_IMAGE=", in.image())
	e.add("MASTER_ADDR=", masterAddr(in, nodes))
	e.int("MASTER_PORT=", int64(masterPort(job.ID)))
	e.int("WORLD_SIZE=", nn)
	e.int("NODE_RANK=", rank)
	e.uint("SLURM_JOB_ID=", id)
	// The older name, which Open MPI still reads to find it runs in
	// a Slurm job (its ras/slurm and schizo/slurm).
	e.uint("SLURM_JOBID=", id)
	e.add("SLURM_JOB_NODELIST=", compressed)
	e.add("SLURM_NODELIST=", compressed)
	e.int("SLURM_NODEID=", rank)
	e.int("SLURM_NNODES=", nn)
	e.int("SLURM_JOB_NUM_NODES=", nn)
	e.add("SLURM_SUBMIT_DIR=", job.SubmitDir)
	e.add("SLURM_JOB_NAME=", job.Name)
	e.add("SLURM_JOB_USER=", job.User)
	e.add("SLURM_JOB_PARTITION=", job.Partition)
	e.int("SLURM_CPUS_ON_NODE=", int64(self.CPUs))
	e.add("SLURM_JOB_CPUS_PER_NODE=", step.Counts(cpus))
	e.int("SLURM_MEM_PER_NODE=", self.MemMiB)
	// Requeues and preemptions so far: a script can tell a rerun.
	e.int("SLURM_RESTART_COUNT=", int64(max(alloc.Attempt-1, 0)))
	e.add("CUDA_VISIBLE_DEVICES=", d.cudaVisible)
	e.add("NVIDIA_VISIBLE_DEVICES=", d.nvidiaVisible)
	e.add("SLURMD_NODENAME=", in.NodeName)
	e.int("SLURM_GPUS_ON_NODE=", int64(len(d.uuids)))
	e.add(api.EnvStepSocket+"=", filepath.Join(in.JobDir, step.SocketName))
}

// slurmEnv is the rest of sbatch(1)'s OUTPUT ENVIRONMENT that has a
// meaning in gpud: who is charged, the cluster and the submit host (when
// known), the user's ids, the node's place (a flat topology), and the
// job's GPUs as the node numbers them (SLURM_JOB_GPUS; nvidia-smi's
// indices, not CUDA_VISIBLE_DEVICES's, which count the job's own).
func slurmEnv(in *taskInput) []string {
	var e envBuf
	e.slurmEnv(in)
	return e.appendTo(nil)
}

// slurmEnv adds slurmEnv's variables to e.
func (e *envBuf) slurmEnv(in *taskInput) {
	job := &in.Asg.Job
	e.add("SLURM_JOB_ACCOUNT=", job.Account)
	e.add("SLURM_JOB_QOS=", job.QOS)
	e.uint("SLURM_JOB_UID=", uint64(job.UID))
	e.uint("SLURM_JOB_GID=", uint64(job.GID))
	e.add("SLURM_TOPOLOGY_ADDR=", in.NodeName)
	e.add("SLURM_TOPOLOGY_ADDR_PATTERN=", "node")
	if in.Asg.ClusterName != "" {
		e.add("SLURM_CLUSTER_NAME=", in.Asg.ClusterName)
	}
	if job.SubmitHost != "" {
		e.add("SLURM_SUBMIT_HOST=", job.SubmitHost)
	}
	var idx []int
	for _, u := range in.Self.GPUs {
		if g, ok := in.GPUs[u]; ok {
			idx = append(idx, g.Index)
		}
	}
	if len(idx) > 0 {
		slices.Sort(idx)
		e.start("SLURM_JOB_GPUS=")
		var b [20]byte
		for i, n := range idx {
			if i > 0 {
				e.b.WriteByte(',')
			}
			e.b.Write(strconv.AppendInt(b[:0], int64(n), 10))
		}
		e.end()
	}
}

// envBuf makes "NAME=value" variables in one buffer: each is a slice of
// one string (a job's forty-odd variables were as many allocations).
// Each ends with a NUL, which no variable holds.
type envBuf struct {
	b strings.Builder // String does not copy
}

// envBufBytes is room for jobEnv's and slurmEnv's variables of a usual
// job (~830 bytes for the loadtest's), so the buffer does not grow.
const envBufBytes = 1024

func (e *envBuf) start(prefix string) {
	if e.b.Cap() == 0 {
		e.b.Grow(envBufBytes)
	}
	e.b.WriteString(prefix)
}

func (e *envBuf) end() { e.b.WriteByte(0) }

// add adds prefix ("NAME=") followed by v.
func (e *envBuf) add(prefix, v string) {
	e.start(prefix)
	e.b.WriteString(v)
	e.end()
}

func (e *envBuf) int(prefix string, v int64) {
	e.start(prefix)
	var n [20]byte
	e.b.Write(strconv.AppendInt(n[:0], v, 10))
	e.end()
}

func (e *envBuf) uint(prefix string, v uint64) {
	e.start(prefix)
	var n [20]byte
	e.b.Write(strconv.AppendUint(n[:0], v, 10))
	e.end()
}

// join adds prefix followed by elems joined by commas.
func (e *envBuf) join(prefix string, elems []string) {
	e.start(prefix)
	for i, s := range elems {
		if i > 0 {
			e.b.WriteByte(',')
		}
		e.b.WriteString(s)
	}
	e.end()
}

// appendTo appends the variables to dst, as slices of one string.
func (e *envBuf) appendTo(dst []string) []string {
	s := e.b.String()
	for s != "" {
		i := strings.IndexByte(s, 0)
		dst = append(dst, s[:i])
		s = s[i+1:]
	}
	return dst
}

// defaultPath is PATH for a job whose environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// pathEnv puts the gpud tools (srun ...) first on the job's PATH, and
// names them in GPUD_TOOLS_DIR, whence /etc/profile.d/gpud.sh puts them
// first again after a login shell reset PATH (#!/bin/bash -l).
func pathEnv(in *taskInput) []string {
	if in.ToolsDir == "" {
		return nil
	}
	path := defaultPath
	for _, kv := range in.Asg.Job.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return []string{"PATH=" + in.ToolsDir + ":" + path, "GPUD_TOOLS_DIR=" + in.ToolsDir}
}

// shareEnv is a share of one GPU's best-effort isolation through CUDA
// MPS. The MPS client honours a compute share and a pinned device memory
// cap, but only when an MPS control daemon serves the GPU and the
// program does not override these variables; nothing here stops a job
// that bypasses MPS from using the whole device.
func shareEnv(in *taskInput) []string {
	self := in.Self
	f := self.GPUFraction
	if f <= 0 || f >= 1 || len(self.GPUs) != 1 {
		return nil
	}
	env := []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(int(math.Round(f*100)))}
	if g := in.GPUs[self.GPUs[0]]; g.MemMiB > 0 {
		env = append(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="+self.GPUs[0]+"="+
			strconv.FormatInt(int64(math.Floor(f*float64(g.MemMiB))), 10)+"M")
	}
	return env
}

// layoutEnv is the job's task layout, as sbatch sets it; srun takes its
// defaults from these.
func layoutEnv(in *taskInput) []string {
	job := &in.Asg.Job
	t := job.Tasks
	var env []string
	if t.NTasks > 0 || t.NTasksPerNode > 0 {
		nt := t.NTasks
		if nt == 0 {
			nt = t.NTasksPerNode * len(in.Asg.Alloc.Nodes)
		}
		env = append(env, "SLURM_NTASKS="+strconv.Itoa(nt), "SLURM_NPROCS="+strconv.Itoa(nt))
		if t.NTasksPerNode > 0 {
			env = append(env, "SLURM_NTASKS_PER_NODE="+strconv.Itoa(t.NTasksPerNode))
		}
		if tpn, ok := step.TasksPerNode(in.Asg.Alloc.Nodes, nt, t.NTasksPerNode); ok {
			env = append(env, "SLURM_TASKS_PER_NODE="+tpn)
		}
	} else {
		// No task count: as sbatch, a task per CPU (-c CPUs each) on each
		// node, the slots mpirun inside the job fills (Open MPI's
		// ras/slurm, MPICH's hydra read this).
		nodes := rankedNodes(in)
		counts := make([]int, len(nodes))
		for i, n := range nodes {
			counts[i] = max(n.CPUs/max(t.CPUsPerTask, 1), 1)
		}
		env = append(env, "SLURM_TASKS_PER_NODE="+step.Counts(counts))
	}
	for _, v := range []struct {
		key string
		n   int
	}{{"SLURM_CPUS_PER_TASK", t.CPUsPerTask}, {"SLURM_GPUS_PER_TASK", t.GPUsPerTask}, {"SLURM_GPUS_PER_NODE", job.Resources.GPUsPerNode}} {
		if v.n > 0 {
			env = append(env, v.key+"="+strconv.Itoa(v.n))
		}
	}
	return env
}

// nicEnv has NCCL use exactly the part's HCAs (and the locked-memory limit
// is unlimited for every job: runtime/ocispec).
func nicEnv(in *taskInput) []string {
	if len(in.Self.NICs) == 0 {
		return nil
	}
	return []string{"NCCL_IB_HCA=" + strings.Join(in.Self.NICs, ",")}
}

// arrayEnv are an array task's variables: its index and array, and, as
// sbatch(1) sets them, the array's task count, lowest and highest index
// and step (scripts that split work by index read them: a task handles
// indices ID to ID+STEP-1). The step is the spacing of the indices, 1
// when they are not evenly spaced.
func arrayEnv(in *taskInput) []string {
	job := &in.Asg.Job
	if job.ArrayJobID == 0 {
		return nil
	}
	tid := strconv.Itoa(job.ArrayTaskID)
	env := []string{
		"GPUD_ARRAY_TASK_ID=" + tid,
		"SLURM_ARRAY_TASK_ID=" + tid,
		"SLURM_ARRAY_JOB_ID=" + strconv.FormatUint(uint64(job.ArrayJobID), 10),
	}
	idx, _, err := spec.ParseArray(job.Array)
	if err != nil || len(idx) == 0 {
		return env // validated at submit; a task without its spec has only its index
	}
	step := 1
	if len(idx) > 1 {
		step = idx[1] - idx[0]
		for i := 2; i < len(idx); i++ {
			if idx[i]-idx[i-1] != step {
				step = 1
				break
			}
		}
	}
	return append(env,
		"SLURM_ARRAY_TASK_COUNT="+strconv.Itoa(len(idx)),
		"SLURM_ARRAY_TASK_MIN="+strconv.Itoa(idx[0]),
		"SLURM_ARRAY_TASK_MAX="+strconv.Itoa(idx[len(idx)-1]),
		"SLURM_ARRAY_TASK_STEP="+strconv.Itoa(step))
}
