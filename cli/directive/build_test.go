package directive

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/spec"
)

var testEnv = Env{
	Now:        time.Date(2025, 3, 14, 15, 0, 0, 0, time.UTC),
	Cwd:        "/home/alice/proj",
	Environ:    []string{"PATH=/usr/bin", "HOME=/home/alice", "X=old"},
	ScriptName: "job.sh",
}

// base is what Build returns with no options at all.
func base() spec.JobSpec {
	return spec.JobSpec{
		Name:      "job.sh",
		Resources: spec.Resources{Nodes: 1},
		Env:       []string{"PATH=/usr/bin", "HOME=/home/alice", "X=old"},
		WorkDir:   "/home/alice/proj",
		SubmitDir: "/home/alice/proj",
		Output:    DefaultOutput,
		Requeue:   true,
	}
}

func script(line int, name, value string) Option {
	return Option{Name: name, Value: value, Source: Source{File: "job.sh", Line: line}}
}

func cli(name, value string) Option { return Option{Name: name, Value: value, Source: CommandLine} }

func TestBuild(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     []Option
		want     func(*spec.JobSpec)
		wantReq  Request // only the behaviour fields are compared
		wantWarn []string
	}{
		{name: "defaults", want: func(*spec.JobSpec) {}},
		{
			name: "real slurm script",
			opts: []Option{
				script(2, "gres", "gpu:a100:2"), script(2, "ntasks-per-node", "4"), script(2, "cpus-per-task", "8"),
				script(2, "mem-per-cpu", "4G"), script(3, "time", "1-00:00:00"), script(3, "output", "slurm-%j.out"),
			},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 32, MemMiB: 32 * 4096, GPUsPerNode: 2, GPUModel: "a100"}
				js.Tasks = spec.Tasks{NTasksPerNode: 4, CPUsPerTask: 8}
				js.TimeLimit = spec.Duration(24 * time.Hour)
				js.Output = "slurm-%j.out"
			},
		},
		{
			name: "command line wins over directives, even across a family",
			opts: []Option{
				script(2, "time", "10"), script(3, "mem-per-cpu", "1G"), script(4, "gres", "gpu:2"), script(5, "job-name", "s"),
				cli("time", "20"), cli("mem", "8G"), cli("gpus-per-node", "h100:4"), cli("job-name", "c"),
			},
			want: func(js *spec.JobSpec) {
				js.Name = "c"
				js.TimeLimit = spec.Duration(20 * time.Minute)
				js.Resources.MemMiB = 8192
				js.Resources.GPUsPerNode, js.Resources.GPUModel = 4, "h100"
			},
		},
		{
			name: "UNLIMITED is no limit of the job's own",
			opts: []Option{script(2, "time", "UNLIMITED")},
			want: func(js *spec.JobSpec) { js.TimeUnlimited = true },
		},
		{
			name: "total gpus over nodes, mem per gpu, cpus per gpu",
			opts: []Option{cli("nodes", "2"), cli("gpus", "1g.10gb:4"), cli("mem-per-gpu", "10G"), cli("cpus-per-gpu", "3")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 2, TotalGPUs: 4, GPUsPerNode: 2, GPUProfile: "1g.10gb", MemMiB: 20480, CPUsPerNode: 6}
			},
		},
		{
			name: "fraction",
			opts: []Option{cli("gpus", "h100:0.5")},
			want: func(js *spec.JobSpec) { js.Resources.GPUModel, js.Resources.GPUFraction = "h100", 0.5 },
		},
		{
			name: "ntasks spread over nodes",
			opts: []Option{cli("nodes", "3"), cli("ntasks", "7"), cli("cpus-per-task", "2")},
			want: func(js *spec.JobSpec) {
				js.Resources.Nodes, js.Resources.CPUsPerNode = 3, 6
				js.Tasks = spec.Tasks{NTasks: 7, CPUsPerTask: 2}
			},
		},
		{
			name: "array output default, chdir, places",
			opts: []Option{cli("array", "0-9%2"), cli("chdir", "../data"), cli("nodelist", "gpu[01-02]"), cli("exclude", "gpu03"), cli("constraint", "nvlink"), cli("exclusive", "true")},
			want: func(js *spec.JobSpec) {
				js.Array, js.Output, js.WorkDir = "0-9%2", DefaultArrayOutput, "/home/alice/data"
				js.Resources.NodeList, js.Resources.Exclude = []string{"gpu01", "gpu02"}, []string{"gpu03"}
				js.Resources.Constraint, js.Resources.Exclusive = "nvlink", true
			},
		},
		{
			name: "scheduling and lifecycle options",
			opts: []Option{
				script(2, "begin", "now+1hour"), script(3, "hold", "true"), script(4, "no-requeue", "true"), cli("nice", "10"),
				cli("dependency", "afterok:5"), cli("signal", "USR1@120"), cli("checkpoint", "30"), cli("image", "pytorch"),
				cli("comment", "hi there"), cli("qos", "high"), cli("partition", "h100"), cli("account", "ml"), cli("error", "e-%j.err"),
			},
			want: func(js *spec.JobSpec) {
				js.BeginTime = spec.NewTime(testEnv.Now.Add(time.Hour))
				js.Hold, js.Requeue, js.Nice = true, false, 10
				js.Depend, js.Signal, js.Ckpt, js.Image = "afterok:5", "USR1@120", spec.Duration(30*time.Minute), "pytorch"
				js.Comment, js.QOS, js.Partition, js.Account, js.Error = "hi there", "high", "h100", "ml", "e-%j.err"
			},
		},
		{
			name: "requeue on the command line beats no-requeue in the script",
			opts: []Option{script(2, "no-requeue", "true"), cli("requeue", "true")},
			want: func(*spec.JobSpec) {},
		},
		{
			name: "requeue=expedite",
			opts: []Option{script(2, "requeue", "expedite")},
			want: func(js *spec.JobSpec) { js.RequeueExpedite = true },
		},
		{name: "export NONE", opts: []Option{cli("export", "NONE")}, want: func(js *spec.JobSpec) { js.Env = []string{} }},
		{name: "export list", opts: []Option{cli("export", "HOME,Y=2,UNSET")}, want: func(js *spec.JobSpec) { js.Env = []string{"HOME=/home/alice", "Y=2"} }},
		{
			name: "export ALL plus", opts: []Option{cli("export", "ALL,X=new,Z=3")},
			want: func(js *spec.JobSpec) { js.Env = []string{"PATH=/usr/bin", "HOME=/home/alice", "X=new", "Z=3"} },
		},
		{
			// Options real Slurm scripts use (issue 14).
			name: "gpus per task over ntasks per node",
			opts: []Option{script(2, "nodes", "2"), script(3, "ntasks-per-node", "4"), script(4, "gpus-per-task", "1"), script(5, "cpus-per-task", "6")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 2, CPUsPerNode: 24, GPUsPerNode: 4}
				js.Tasks = spec.Tasks{NTasksPerNode: 4, CPUsPerTask: 6, GPUsPerTask: 1}
			},
		},
		{
			name: "gpus per task over ntasks",
			opts: []Option{cli("ntasks", "2"), cli("gpus-per-task", "h100:2")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 2, GPUsPerNode: 4, GPUModel: "h100"}
				js.Tasks = spec.Tasks{NTasks: 2, GPUsPerTask: 2}
			},
		},
		{
			// Slurm scripts give the node's GPUs and each task's (issue 26).
			name: "gres beside gpus per task",
			opts: []Option{script(2, "gres", "gpu:a100:4"), script(3, "ntasks-per-node", "4"), script(4, "gpus-per-task", "1")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 4, GPUsPerNode: 4, GPUModel: "a100"}
				js.Tasks = spec.Tasks{NTasksPerNode: 4, GPUsPerTask: 1}
			},
		},
		{
			name: "gres=gpu:1 with gpus per task, one task",
			opts: []Option{cli("gres", "gpu:1"), cli("gpus-per-task", "1")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, GPUsPerNode: 1}
				js.Tasks = spec.Tasks{GPUsPerTask: 1}
			},
		},
		{
			name: "mem=0, gres=gpu:0, mincpus, open-mode, wckey, @ account, partition list",
			opts: []Option{script(2, "mem", "0"), script(3, "gres", "gpu:0"), script(4, "mincpus", "8"), script(5, "open-mode", "append"),
				script(6, "wckey", "proj-x"), script(7, "account", "alice@lab"), script(8, "partition", "h100,a100")},
			want: func(js *spec.JobSpec) {
				js.Resources = spec.Resources{Nodes: 1, CPUsPerNode: 8, MemWholeNode: true}
				js.OpenMode, js.WCKey, js.Account, js.Partition = spec.OpenAppend, "proj-x", "alice@lab", "h100,a100"
			},
		},
		{
			name: "memory with a B suffix",
			opts: []Option{cli("mem", "20GB")},
			want: func(js *spec.JobSpec) { js.Resources.MemMiB = 20 << 10 },
		},
		{
			name:     "accepted with a warning that says why",
			opts:     []Option{script(2, "hint", "nomultithread"), script(3, "distribution", "block:block")},
			want:     func(*spec.JobSpec) {},
			wantWarn: []string{"line 2 of job.sh: --hint has no effect in gpud and is ignored: gpud allocates whole cores and does not schedule hardware threads", "line 3 of job.sh: --distribution has no effect in gpud and is ignored: tasks are laid out in blocks, Slurm's default"},
		},
		{
			name: "behaviour flags and no-op warning",
			opts: []Option{script(2, "mail-type", "END"), cli("parsable", "true"), cli("wait", "true")},
			want: func(*spec.JobSpec) {}, wantReq: Request{Parsable: true, Wait: true},
			wantWarn: []string{"line 2 of job.sh: --mail-type has no effect in gpud and is ignored"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Build(tc.opts, testEnv)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			want := base()
			tc.want(&want)
			if diff := cmp.Diff(want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			gotReq := Request{TestOnly: got.TestOnly, Parsable: got.Parsable, Wait: got.Wait}
			if diff := cmp.Diff(tc.wantReq, gotReq); diff != "" {
				t.Errorf("behaviour (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantWarn, got.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts []Option
		want string
	}{
		{"bad time names its line", []Option{script(7, "time", "soon")}, `line 7 of job.sh: --time: bad time "soon"; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED`},
		{"bad begin names its line", []Option{script(4, "begin", "soon")}, `line 4 of job.sh: --begin: bad begin time: "soon" is not a time ("soon" is not a time word); use ` + slurmtime.Forms},
		{"bad mem on the command line", []Option{cli("mem", "lots")}, `command line: --mem: bad memory size "lots"; use a whole number with an optional K, M, G or T suffix, B or iB allowed (500M, 4G, 8gb, 1T; no suffix means MiB)`},
		{"family clash in one source", []Option{script(2, "mem", "1G"), script(3, "mem-per-cpu", "1G")}, "line 3 of job.sh: --mem-per-cpu conflicts with --mem (line 2 of job.sh); give only one of them"},
		{"family clash on the command line", []Option{cli("gpus", "2"), cli("gres", "gpu:2")}, "command line: --gres conflicts with --gpus (command line); give only one of them"},
		{"uneven gpus", []Option{cli("nodes", "2"), cli("gpus", "3")}, "command line: --gpus: 3 GPUs cannot be split evenly over 2 nodes (gpud gives every node the same); use --gpus-per-node"},
		{"mem per gpu without gpu", []Option{cli("mem-per-gpu", "1G")}, "command line: --mem-per-gpu: needs a GPU request (--gpus, --gpus-per-node or --gres=gpu:N); or use --mem"},
		{"mem-per-cpu of zero", []Option{cli("mem-per-cpu", "0")}, "command line: --mem-per-cpu: 0 is not a size; --mem=0 asks for each node's whole memory, --mem-per-cpu needs a size"},
		{"bad open mode", []Option{cli("open-mode", "rw")}, `command line: --open-mode: bad open mode "rw"; use append or truncate`},
		{"gres short of gpus per task", []Option{cli("gres", "gpu:2"), cli("ntasks-per-node", "4"), cli("gpus-per-task", "1")},
			"command line: --gpus-per-task: 1 × 4 tasks per node needs 4 GPUs per node, more than --gres=gpu:2 gives"},
		{"gres and gpus per task of two types", []Option{cli("gres", "gpu:a100:2"), cli("gpus-per-task", "h100:1")},
			"command line: --gpus-per-task: GPU type h100 differs from --gres=gpu:a100:2; give one type"},
		{"uneven gpus per task", []Option{cli("nodes", "2"), cli("ntasks", "3"), cli("gpus-per-task", "1")}, "command line: --gpus-per-task: 3 tasks cannot be split evenly over 2 nodes, so neither can their GPUs (gpud gives every node the same); use --ntasks-per-node"},
		{"bad partition list", []Option{cli("partition", "a,,b")}, `command line: --partition: "a,,b" is not a valid partition list; use names of letters, digits, '.', '_' and '-' separated by commas`},
		{"fewer tasks than nodes", []Option{cli("nodes", "4"), cli("ntasks", "2")}, "command line: --ntasks: 2 tasks on 4 nodes leaves nodes without a task; use -n >= -N"},
		{"bad export name", []Option{cli("export", "ALL,1X=2")}, `command line: --export: "1X=2" is not a variable name; use ALL, NONE, VAR or VAR=value separated by commas`},
		{"nodelist file", []Option{cli("nodelist", "./hosts")}, `command line: --nodelist: "./hosts" looks like a file; gpud takes node names only (gpu01,gpu02 or gpu[01-04])`},
		{"wait with test-only", []Option{cli("wait", "true"), cli("test-only", "true")}, "command line: --wait: cannot be combined with --test-only, which submits nothing; drop one"},
		{"empty name", []Option{cli("job-name", " ")}, "command line: --job-name: needs a non-empty one-line value"},
		{"bad dependency with another problem", []Option{script(2, "dependency", "afterok:1+5"), script(3, "nice", "y")}, "line 2 of job.sh: --dependency: bad dependency \"afterok:1+5\": delays (+MINUTES) are not supported by gpud; use --begin on the job instead\nline 3 of job.sh: --nice: bad nice value \"y\"; use a whole number from -2147483645 to 2147483645"},
		{"every problem reported", []Option{script(2, "time", "x"), script(3, "nice", "y")}, "line 2 of job.sh: --time: bad time \"x\"; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED\nline 3 of job.sh: --nice: bad nice value \"y\"; use a whole number from -2147483645 to 2147483645"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Build(tc.opts, testEnv)
			if err == nil {
				t.Fatal("Build succeeded, want an error")
			}
			if !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("error is not spec.ErrInvalid: %v", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExportDropsCredentials: gpusubmit's default export (and ALL, and a
// name asked for) never carries GPUD_TOKEN or any other GPUD_* credential
// into the job; before this a job's stored environment held the
// submitter's token.
func TestExportDropsCredentials(t *testing.T) {
	env := testEnv
	env.Environ = []string{"PATH=/usr/bin", "GPUD_TOKEN=eyJ.secret", "GPUD_CONTROLLER=https://c:8443", "GPUD_JOIN_TOKEN=j"}
	for _, tc := range []struct {
		name     string
		opts     []Option
		want     []string
		wantWarn bool
	}{
		{"default", nil, []string{"PATH=/usr/bin", "GPUD_CONTROLLER=https://c:8443"}, false},
		{"ALL", []Option{cli("export", "ALL")}, []string{"PATH=/usr/bin", "GPUD_CONTROLLER=https://c:8443"}, false},
		{"by name", []Option{cli("export", "PATH,GPUD_TOKEN,GPUD_API_KEY=x")}, []string{"PATH=/usr/bin"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := Build(append(tc.opts, script(1, "job-name", "x")), env)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(req.Spec.Env, tc.want) {
				t.Errorf("env = %q, want %q", req.Spec.Env, tc.want)
			}
			if got := len(req.Warnings) > 0 && strings.Contains(strings.Join(req.Warnings, "\n"), "GPUD_TOKEN"); got != tc.wantWarn {
				t.Errorf("warnings %q; want a warning naming GPUD_TOKEN: %v", req.Warnings, tc.wantWarn)
			}
		})
	}
}
