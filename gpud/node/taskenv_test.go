package node

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

func TestTaskEnv(t *testing.T) {
	t.Parallel()
	const uuid = "GPU-aaaa"
	n1 := spec.NodeAlloc{Node: "n1", Rank: 0, Addr: "10.0.0.1", CPUs: 4, MemMiB: 100}
	n2 := spec.NodeAlloc{Node: "n2", Rank: 1, CPUs: 4, MemMiB: 100}
	base := func() taskInput {
		return taskInput{
			Asg: &api.Assignment{
				Job:   spec.Job{ID: 7, JobSpec: spec.JobSpec{Name: "train", SubmitDir: "/s", Env: []string{"PATH=/opt/x:/usr/bin", "HOME=/h"}}, User: "alice"},
				Alloc: spec.Alloc{ID: "a7", Attempt: 1, Nodes: []spec.NodeAlloc{n2, n1}},
			},
			Self: n1, NodeName: "n1", SelfAddr: "10.0.0.1", JobDir: "/state/jobs/c", CkptDir: "/ck/7",
			GPUs: map[string]spec.GPU{uuid: {UUID: uuid, MemMiB: 81559}},
		}
	}
	tests := []struct {
		name   string
		change func(*taskInput)
		devs   taskDevs
		want   []string
		absent []string // keys
	}{
		{name: "the job's own variables and its nodes in rank order", change: func(*taskInput) {},
			want: []string{"GPUD_JOB_ID=7", "SLURM_JOB_ID=7", "GPUD_NODELIST=n1,n2", "SLURM_JOB_NODELIST=n[1-2]", "GPUD_NNODES=2", "WORLD_SIZE=2",
				"NODE_RANK=0", "SLURM_NODEID=0", "SLURM_JOB_NAME=train", "SLURM_JOB_USER=alice", "SLURM_SUBMIT_DIR=/s", "SLURM_CPUS_ON_NODE=4",
				"SLURM_MEM_PER_NODE=100", "SLURM_RESTART_COUNT=0", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=20007", "SLURMD_NODENAME=n1",
				"GPUD_CHECKPOINT_DIR=/ck/7/staging", api.EnvStepSocket + "=/state/jobs/c/step.sock", "HOME=/h", "PATH=/opt/x:/usr/bin"},
			absent: []string{"SLURM_NTASKS", "NCCL_IB_HCA", "SLURM_ARRAY_TASK_ID", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"}},
		{name: "another node: MASTER_ADDR is the first node's address", change: func(in *taskInput) { in.Self, in.NodeName, in.SelfAddr = n2, "n2", "10.0.0.2" },
			want: []string{"MASTER_ADDR=10.0.0.1", "NODE_RANK=1", "SLURMD_NODENAME=n2"}},
		{name: "a first node without an address is reached by name", change: func(in *taskInput) {
			a := n1
			a.Addr = ""
			in.Asg.Alloc.Nodes = []spec.NodeAlloc{a, n2}
			in.Self, in.NodeName = n2, "n2"
		}, want: []string{"MASTER_ADDR=n1"}},
		{name: "a rerun counts its restarts", change: func(in *taskInput) { in.Asg.Alloc.Attempt = 3 }, want: []string{"SLURM_RESTART_COUNT=2"}},
		{name: "devices", change: func(*taskInput) {}, devs: taskDevs{uuids: []string{"G1", "G2"}, cudaVisible: "0,1", nvidiaVisible: "G1,G2"},
			want: []string{"GPUD_GPUS=G1,G2", "CUDA_VISIBLE_DEVICES=0,1", "NVIDIA_VISIBLE_DEVICES=G1,G2", "SLURM_GPUS_ON_NODE=2"}},
		{name: "the job cannot spoof the node's variables", change: func(in *taskInput) {
			in.Asg.Job.Env = append(in.Asg.Job.Env, "GPUD_JOB_ID=99", "CUDA_VISIBLE_DEVICES=0,1,2,3")
		}, devs: taskDevs{cudaVisible: "0"}, want: []string{"GPUD_JOB_ID=7", "CUDA_VISIBLE_DEVICES=0"}},
		{name: "the gpud tools first on the job's PATH", change: func(in *taskInput) { in.ToolsDir = "/opt/gpud/bin" },
			want: []string{"PATH=/opt/gpud/bin:/opt/x:/usr/bin"}},
		{name: "the tools before the default PATH", change: func(in *taskInput) { in.ToolsDir, in.Asg.Job.Env = "/opt/gpud/bin", nil },
			want: []string{"PATH=/opt/gpud/bin:" + defaultPath}},
		{name: "a share of a GPU: MPS limits", change: func(in *taskInput) {
			in.Self.GPUs, in.Self.GPUFraction = []string{uuid}, 0.25
		}, want: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + uuid + "=20389M"}},
		{name: "a whole GPU: no MPS limits", change: func(in *taskInput) { in.Self.GPUs = []string{uuid} },
			absent: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"}},
		{name: "the job's task layout, as sbatch sets it", change: func(in *taskInput) {
			in.Asg.Job.Tasks = spec.Tasks{NTasksPerNode: 2, CPUsPerTask: 2, GPUsPerTask: 1}
			in.Asg.Job.Resources.GPUsPerNode = 2
		}, want: []string{"SLURM_NTASKS=4", "SLURM_NPROCS=4", "SLURM_NTASKS_PER_NODE=2", "SLURM_TASKS_PER_NODE=2(x2)",
			"SLURM_CPUS_PER_TASK=2", "SLURM_GPUS_PER_TASK=1", "SLURM_GPUS_PER_NODE=2"}},
		{name: "-n 3 over two nodes", change: func(in *taskInput) { in.Asg.Job.Tasks = spec.Tasks{NTasks: 3} },
			want: []string{"SLURM_NTASKS=3", "SLURM_TASKS_PER_NODE=2,1"}, absent: []string{"SLURM_NTASKS_PER_NODE"}},
		{name: "RDMA NICs for NCCL", change: func(in *taskInput) { in.Self.NICs = []string{"mlx5_0", "mlx5_1"} },
			want: []string{"NCCL_IB_HCA=mlx5_0,mlx5_1"}},
		{name: "an array task", change: func(in *taskInput) { in.Asg.Job.ArrayJobID, in.Asg.Job.ArrayTaskID = 5, 3 },
			want: []string{"GPUD_ARRAY_TASK_ID=3", "SLURM_ARRAY_TASK_ID=3", "SLURM_ARRAY_JOB_ID=5"}},
		{name: "an array task: the array's count, bounds and step", change: func(in *taskInput) {
			in.Asg.Job.ArrayJobID, in.Asg.Job.ArrayTaskID, in.Asg.Job.Array = 5, 4, "0-8:2%3"
		}, want: []string{"SLURM_ARRAY_TASK_ID=4", "SLURM_ARRAY_TASK_COUNT=5", "SLURM_ARRAY_TASK_MIN=0", "SLURM_ARRAY_TASK_MAX=8", "SLURM_ARRAY_TASK_STEP=2"}},
		{name: "an array of unevenly spaced indices: step 1", change: func(in *taskInput) {
			in.Asg.Job.ArrayJobID, in.Asg.Job.ArrayTaskID, in.Asg.Job.Array = 5, 7, "1,2,7"
		}, want: []string{"SLURM_ARRAY_TASK_COUNT=3", "SLURM_ARRAY_TASK_MIN=1", "SLURM_ARRAY_TASK_MAX=7", "SLURM_ARRAY_TASK_STEP=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := base()
			tc.change(&in)
			env := taskEnv(&in, tc.devs)
			for _, w := range tc.want {
				if !slices.Contains(env, w) {
					t.Errorf("env lacks %q:\n%q", w, env)
				}
			}
			for _, k := range tc.absent {
				if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") }) {
					t.Errorf("env has %s:\n%q", k, env)
				}
			}
			keys := map[string]bool{}
			for _, kv := range env {
				k, _, _ := strings.Cut(kv, "=")
				if keys[k] {
					t.Errorf("env has %s twice:\n%q", k, env)
				}
				keys[k] = true
			}
		})
	}
}
