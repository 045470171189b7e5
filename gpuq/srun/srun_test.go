package srun

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/api"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want api.StepRequest
		lab  bool
		err  string
	}{
		{args: []string{"-l", "hostname"}, want: api.StepRequest{Args: []string{"hostname"}}, lab: true},
		{args: []string{"--ntasks-per-node=2", "--gpus-per-task=1", "bash", "-c", "echo -n"},
			want: api.StepRequest{NTasksPerNode: 2, GPUsPerTask: 1, Args: []string{"bash", "-c", "echo -n"}}},
		{args: []string{"-n4", "-N", "2", "-lK", "-c2", "--overlap", "--", "-x"},
			want: api.StepRequest{NTasks: 4, Nodes: 2, CPUsPerTask: 2, KillOnBadExit: true, Overlap: true, Args: []string{"-x"}}, lab: true},
		{args: []string{"--mpi=pmix", "true"}, want: api.StepRequest{MPI: "pmix", Args: []string{"true"}}},
		{args: []string{"--mpi=pmi2", "--mpi=none", "true"}, want: api.StepRequest{MPI: "none", Args: []string{"true"}}},
		{args: []string{"--mpi=pmi1", "true"}, err: "Invalid MPI type 'pmi1', --mpi=list"},
		{args: []string{"-n1", "--cpu-bind=q", "true"}, want: api.StepRequest{NTasks: 1, CPUBind: "q", Args: []string{"true"}}},
		{args: []string{"--cpu_bind=verbose,cores", "-m", "block:block", "true"}, want: api.StepRequest{CPUBind: "verbose,cores", Distribution: "block:block", Args: []string{"true"}}},
		{args: []string{"--cpu-bind=core", "true"}, err: "unknown type"},
		{args: []string{"--hint=nomultithread", "--cpu-bind=v", "true"}, want: api.StepRequest{Hint: "nomultithread", CPUBind: "v", Args: []string{"true"}}},
		{args: []string{"--hint=nomultithread", "--cpu-bind=cores", "true"}, err: "mutually exclusive"},
		{args: []string{"--hint=fast", "true"}, err: "compute_bound"},
		{args: []string{"--distribution=arbitrary", "true"}, err: "SLURM_HOSTFILE"},
		{args: []string{"--input", "none", "-n1", "true"}, want: api.StepRequest{NTasks: 1, Args: []string{"true"}}},
		{args: []string{"-i", "3", "true"}, err: "--input=3"},
		{args: []string{"--frob", "1", "true"}, err: "unknown option --frob"},
		{args: []string{"-n", "x", "true"}, err: "wants a number"},
		{args: []string{"-l"}, err: "no command given"},
		// Slurm's GPU and node options, long-option prefixes and
		// "--opt value" (getopt_long, as the other Slurm commands).
		{args: []string{"-G", "h100:2", "--gpus-per-n", "1", "-w", "node[1-2]", "--gpu-bind=single:1", "--exact", "nvidia-smi"},
			want: api.StepRequest{GPUs: 2, GPUsPerNode: 1, NodeList: "node[1-2]", GPUBind: "single:1", Exact: true, Args: []string{"nvidia-smi"}}},
		{args: []string{"--exclusive", "--kill-on-bad-exit=0", "-n2", "a", "-n3"},
			want: api.StepRequest{Exclusive: true, NTasks: 2, Args: []string{"a", "-n3"}}},
		{args: []string{"--ntasks", "2", "true"}, want: api.StepRequest{NTasks: 2, Args: []string{"true"}}},
		{args: []string{"--gpus=x", "true"}, err: "wants a GPU count"},
		{args: []string{"--n", "2", "true"}, err: "ambiguous"},
		{args: []string{"--wait=60", "--jobid", "15", "true"}, want: api.StepRequest{Args: []string{"true"}}},
		{args: []string{"--jobid=x", "true"}, err: "--jobid wants a job ID"},
	} {
		o, err := parse(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if o.label != tc.lab || !slices.Equal(o.req.Args, tc.want.Args) {
			t.Errorf("%q: label %v args %q", tc.args, o.label, o.req.Args)
		}
		o.req.Args, tc.want.Args = nil, nil
		if o.req.NTasks != tc.want.NTasks || o.req.Nodes != tc.want.Nodes || o.req.NTasksPerNode != tc.want.NTasksPerNode ||
			o.req.CPUsPerTask != tc.want.CPUsPerTask || o.req.GPUsPerTask != tc.want.GPUsPerTask ||
			o.req.KillOnBadExit != tc.want.KillOnBadExit || o.req.Overlap != tc.want.Overlap ||
			o.req.GPUs != tc.want.GPUs || o.req.GPUsPerNode != tc.want.GPUsPerNode || o.req.NodeList != tc.want.NodeList ||
			o.req.GPUBind != tc.want.GPUBind || o.req.Exact != tc.want.Exact || o.req.Exclusive != tc.want.Exclusive ||
			o.req.MPI != tc.want.MPI || o.req.CPUBind != tc.want.CPUBind || o.req.Hint != tc.want.Hint || o.req.Distribution != tc.want.Distribution {
			t.Errorf("%q: %+v, want %+v", tc.args, o.req, tc.want)
		}
	}
}

// TestEnvDefaults: srun takes the job's layout from SLURM_NTASKS and
// friends unless the command line names a task count.
func TestEnvDefaults(t *testing.T) {
	env := map[string]string{"SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "2"}
	o, _ := parse([]string{"true"})
	o.envDefaults(func(k string) string { return env[k] })
	if o.req.NTasks != 8 || o.req.NTasksPerNode != 4 || o.req.CPUsPerTask != 2 {
		t.Errorf("defaults from the job: %+v", o.req)
	}
	o, _ = parse([]string{"-N1", "--cpus-per-task=1", "true"})
	o.envDefaults(func(k string) string { return env[k] })
	if o.req.NTasks != 0 || o.req.NTasksPerNode != 0 || o.req.Nodes != 1 || o.req.CPUsPerTask != 1 {
		t.Errorf("-N1 -c1 must not take the job's task counts: %+v", o.req)
	}
}

// TestEnvBinding: SLURM_MPI_TYPE, SLURM_CPU_BIND, SLURM_HINT,
// SLURM_DISTRIBUTION and SLURM_GPU_BIND stand for options the command
// line leaves out (mpirun sets SLURM_CPU_BIND=none for its daemons), and
// --cpu-bind and --hint given on it override each other's variable.
func TestEnvBinding(t *testing.T) {
	env := map[string]string{"SLURM_MPI_TYPE": "pmix", "SLURM_CPU_BIND": "none", "SLURM_DISTRIBUTION": "cyclic",
		"SLURM_GPU_BIND": "closest", "SLURM_HINT": "multithread"}
	get := func(k string) string { return env[k] }
	o, _ := parse([]string{"true"})
	o.envDefaults(get)
	if o.req.MPI != "pmix" || o.req.CPUBind != "none" || o.req.Distribution != "cyclic" || o.req.GPUBind != "closest" || o.req.Hint != "multithread" {
		t.Errorf("from the environment: %+v", o.req)
	}
	o, _ = parse([]string{"--mpi=none", "--cpu-bind=cores", "-m", "block", "true"})
	o.envDefaults(get)
	if o.req.MPI != "none" || o.req.CPUBind != "cores" || o.req.Distribution != "block" || o.req.Hint != "" {
		t.Errorf("the command line wins: %+v", o.req)
	}
	o, _ = parse([]string{"--hint=compute_bound", "true"})
	o.envDefaults(get)
	if o.req.Hint != "compute_bound" || o.req.CPUBind != "" {
		t.Errorf("--hint drops SLURM_CPU_BIND: %+v", o.req)
	}
	o, err := parse([]string{"--mpi=list"})
	if err != nil || !o.listMPI {
		t.Errorf("--mpi=list without a command: %+v %v", o, err)
	}
}

func TestLabelSink(t *testing.T) {
	var b strings.Builder
	s := newSink(&b, true)
	s.write(1, []byte("a\nb"))
	s.write(0, []byte("x\n"))
	s.write(1, []byte("c\n"))
	s.write(1, []byte("tail"))
	s.flushTask(1)
	if got, want := b.String(), "1: a\n0: x\n1: bc\n1: tail\n"; got != want {
		t.Errorf("labelled output %q, want %q", got, want)
	}
}

func TestExportEnv(t *testing.T) {
	env := []string{"A=1", "SLURM_JOB_ID=7", "B=2"}
	if got := exportEnv("NONE", env); !slices.Equal(got, []string{"SLURM_JOB_ID=7"}) {
		t.Errorf("NONE: %q", got)
	}
	if got := exportEnv("B,C=3", env); !slices.Equal(got, []string{"SLURM_JOB_ID=7", "B=2", "C=3"}) {
		t.Errorf("B,C=3: %q", got)
	}
	if got := exportEnv("ALL,C=3", env); !slices.Equal(got, append(slices.Clone(env), "C=3")) {
		t.Errorf("ALL,C=3: %q", got)
	}
}

// TestExpandArrayPatterns: %A and %a are the array's job and task (what
// submitit's map_array names its logs by), the job's own id and Slurm's
// NO_VAL outside an array; before, srun wrote them literally.
func TestExpandArrayPatterns(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "12")
	t.Setenv("SLURM_ARRAY_JOB_ID", "")
	t.Setenv("SLURM_ARRAY_TASK_ID", "")
	if got := expand("/l/%A_%a/%j_%t.out", 0, 1, 0); got != "/l/12_4294967294/12_1.out" {
		t.Errorf("outside an array: %s", got)
	}
	if got := expand("/l/%j.%s-%n-%t.out", 3, 5, 1); got != "/l/12.3-1-5.out" {
		t.Errorf("%%n (node in the step): %s", got)
	}
	if got := taskNodes(api.StepMsg{TaskNodes: []int{0, 1, 0}}); !slices.Equal(got, []int{0, 1, 0}) {
		t.Errorf("taskNodes of a cyclic layout = %v", got)
	}
	if got := taskNodes(api.StepMsg{TasksPerNode: []int{2, 1}}); len(got) != 3 || got[0] != 0 || got[1] != 0 || got[2] != 1 {
		t.Errorf("taskNodes(2,1) = %v", got)
	}
	t.Setenv("SLURM_ARRAY_JOB_ID", "10")
	t.Setenv("SLURM_ARRAY_TASK_ID", "2")
	if got := expand("/l/%A_%a/%A_%a_%t_log.out", 0, 0, 0); got != "/l/10_2/10_2_0_log.out" {
		t.Errorf("in an array: %s", got)
	}
}

// TestJobIDOption: scripts pass their own SLURM_JOB_ID to srun --jobid
// (stas00/ml-engineering's launchers): accepted; another job's ID inside
// a job is refused, naming both, before any step starts.
func TestJobIDOption(t *testing.T) {
	o, err := parse([]string{"--jobid", "15", "true"})
	if err != nil || o.jobOpt != "15" {
		t.Fatalf("parse --jobid 15: %q, %v", o.jobOpt, err)
	}
	t.Setenv(api.EnvStepSocket, filepath.Join(t.TempDir(), "step.sock"))
	t.Setenv("SLURM_JOB_ID", "15")
	var stderr strings.Builder
	if code := Main([]string{"srun", "--jobid=16", "true"}, io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "--jobid=16: this srun runs inside job 15") {
		t.Errorf("srun --jobid=16 in job 15: exit %d, %q; want %d naming both jobs", code, stderr.String(), exitUsage)
	}
	if got := jobFromEnv("16"); got != 16 {
		t.Errorf("outside a job, --jobid=16 runs in job %d", got)
	}
	if got := jobFromEnv(""); got != 15 {
		t.Errorf("outside a job without --jobid, SLURM_JOB_ID=15 gives job %d", got)
	}
}
