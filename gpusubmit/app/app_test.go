package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/fakectl"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, ctl *fakectl.Server, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), "gpusubmit", append([]string{"gpusubmit", "--controller", ctl.Addr}, args...), strings.NewReader(""), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func writeScript(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const slurmScript = `#!/bin/bash
#SBATCH --job-name=train-llm
#SBATCH --gres=gpu:a100:2 --ntasks-per-node=4 --cpus-per-task=8 --mem-per-cpu=4G
#SBATCH --time=1-00:00:00 --output=slurm-%j.out
#SBATCH --mail-type=END

module load cuda
srun python train.py "$@"
`

func TestSubmitSlurmScript(t *testing.T) {
	ctl := fakectl.New(t)
	path := writeScript(t, slurmScript)
	got := run(t, ctl, "--export=NONE", path, "--epochs", "3")
	if got.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", got.code, got.stderr)
	}
	if diff := cmp.Diff("Submitted batch job 101\n", got.stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("gpusubmit: warning: line 5 of job.sh: --mail-type has no effect in gpud and is ignored\n", got.stderr); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	subs := ctl.Submitted(t)
	if len(subs) != 1 {
		t.Fatalf("got %d submissions, want 1", len(subs))
	}
	cwd, _ := os.Getwd()
	host, _ := os.Hostname() // SLURM_SUBMIT_HOST
	want := spec.JobSpec{
		Name:       "train-llm",
		Resources:  spec.Resources{Nodes: 1, CPUsPerNode: 32, MemMiB: 32 * 4096, GPUsPerNode: 2, GPUModel: "a100"},
		TimeLimit:  spec.Duration(24 * time.Hour),
		Script:     slurmScript,
		Args:       []string{"--epochs", "3"},
		Env:        nil, // --export=NONE: an empty environment (omitted on the wire)
		WorkDir:    cwd,
		SubmitDir:  cwd,
		SubmitHost: host,
		Output:     "slurm-%j.out",
		Tasks:      spec.Tasks{NTasksPerNode: 4, CPUsPerTask: 8},
		Requeue:    true,
	}
	if diff := cmp.Diff(api.SubmitRequest{Job: want}, subs[0]); diff != "" {
		t.Errorf("submission (-want +got):\n%s", diff)
	}
}

func TestSubmitOptions(t *testing.T) {
	t.Setenv("GPUD_TEST_VAR", "v1")
	script := "#!/bin/sh\n#GPU --time=10 --partition=a100 -N 2\n#SBATCH --mem 8G\necho hi\n"
	tests := []struct {
		name   string
		args   []string
		stdin  string
		check  func(*testing.T, spec.JobSpec)
		stdout string
	}{
		{
			name: "command line wins over directives",
			args: []string{"-t", "20", "--mem-per-cpu=1G", "-c", "4", "--export=GPUD_TEST_VAR,X=1", "SCRIPT"},
			check: func(t *testing.T, js spec.JobSpec) {
				want := spec.Resources{Nodes: 2, CPUsPerNode: 4, MemMiB: 4096}
				if diff := cmp.Diff(want, js.Resources); diff != "" {
					t.Errorf("resources (-want +got):\n%s", diff)
				}
				if js.TimeLimit.Std() != 20*time.Minute || js.Partition != "a100" {
					t.Errorf("time %v partition %q, want 20m a100", js.TimeLimit.Std(), js.Partition)
				}
				if diff := cmp.Diff([]string{"GPUD_TEST_VAR=v1", "X=1"}, js.Env); diff != "" {
					t.Errorf("env (-want +got):\n%s", diff)
				}
			},
			stdout: "Submitted batch job 101\n",
		},
		{
			name: "wrap and parsable",
			args: []string{"--parsable", "-J", "w", "--hold", "--no-requeue", "--wrap", "nvidia-smi -L"},
			check: func(t *testing.T, js spec.JobSpec) {
				if js.Script != "#!/bin/sh\nnvidia-smi -L\n" || js.Name != "w" || !js.Hold || js.Requeue {
					t.Errorf("got script %q name %q hold %v requeue %v", js.Script, js.Name, js.Hold, js.Requeue)
				}
				if !strings.Contains(strings.Join(js.Env, "\n"), "GPUD_TEST_VAR=v1") {
					t.Errorf("default --export=ALL lost the environment: %v", js.Env)
				}
			},
			stdout: "101\n",
		},
		{
			name:  "script from standard input, array default output",
			args:  []string{"--array=0-3", "-"},
			stdin: "#!/bin/sh\n#SBATCH -G h100:0.5\ntrue\n",
			check: func(t *testing.T, js spec.JobSpec) {
				if js.Output != "gpud-%A_%a.out" || js.Resources.GPUFraction != 0.5 || js.Resources.GPUModel != "h100" || js.Name != "standard input" {
					t.Errorf("got output %q resources %+v name %q", js.Output, js.Resources, js.Name)
				}
			},
			stdout: "Submitted batch job 101\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fakectl.New(t)
			path := writeScript(t, script)
			args := make([]string, len(tc.args))
			for i, a := range tc.args {
				args[i] = strings.ReplaceAll(a, "SCRIPT", path)
			}
			var out, errb bytes.Buffer
			a := New()
			a.Writer, a.ErrWriter, a.Reader = &out, &errb, strings.NewReader(tc.stdin)
			code := exitcode.Main(context.Background(), a, Args(append([]string{"gpusubmit", "--controller", ctl.Addr}, args...)), &errb)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
			}
			if diff := cmp.Diff(tc.stdout, out.String()); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
			subs := ctl.Submitted(t)
			if len(subs) != 1 {
				t.Fatalf("got %d submissions, want 1", len(subs))
			}
			tc.check(t, subs[0].Job)
		})
	}
}

func TestSubmitErrors(t *testing.T) {
	tests := []struct {
		name      string
		script    string
		args      []string
		submitErr error
		wantCode  int
		wantErr   string
	}{
		{
			name: "bad directive", script: "#!/bin/sh\n#SBATCH -t 5\n#SBATCH --gres=gpu:2 --time=soon\n",
			wantCode: 2, wantErr: `gpusubmit: line 3 of job.sh: --time: bad time "soon"; use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED` + "\n",
		},
		{
			name: "unknown directive", script: "#!/bin/sh\n#SBATCH --frobnicate\n",
			wantCode: 2, wantErr: "gpusubmit: line 2 of job.sh: unknown option --frobnicate; see gpusubmit --help for the options gpud honours\n",
		},
		{
			name: "bad flag value", script: "#!/bin/sh\ntrue\n", args: []string{"--mem=lots"},
			wantCode: 2, wantErr: `gpusubmit: command line: --mem: bad memory size "lots"; use a whole number with an optional K, M, G or T suffix, B or iB allowed (500M, 4G, 8gb, 1T; no suffix means MiB)` + "\n",
		},
		{
			name: "unknown flag", script: "#!/bin/sh\ntrue\n", args: []string{"--frobnicate"},
			wantCode: 2, wantErr: "gpusubmit: command line: unknown option --frobnicate; see gpusubmit --help for the options gpud honours\n",
		},
		{
			name: "binary script", script: "\x7fELF\x00\x00",
			wantCode: 2, wantErr: "gpusubmit: job.sh contains a NUL byte at offset 4: it is not a text script; pass a shell script or use --wrap 'CMD'\n",
		},
		{
			name: "refused by policy", script: "#!/bin/sh\ntrue\n",
			submitErr: spec.Errorf(spec.ErrRefused, "account ml may use at most 8 GPUs (asks 16); ask for fewer or use another account"),
			wantCode:  3, wantErr: "gpusubmit: submit job.sh: account ml may use at most 8 GPUs (asks 16); ask for fewer or use another account\n",
		},
		{
			name: "invalid at the controller", script: "#!/bin/sh\ntrue\n",
			submitErr: spec.Errorf(spec.ErrInvalid, "partition h100 offers no 4g.40gb slice"),
			wantCode:  2, wantErr: "gpusubmit: submit job.sh: partition h100 offers no 4g.40gb slice\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fakectl.New(t)
			ctl.Set(func(s *fakectl.Server) { s.SubmitErr = tc.submitErr })
			got := run(t, ctl, append(tc.args, writeScript(t, tc.script))...)
			if got.code != tc.wantCode {
				t.Errorf("exit %d, want %d", got.code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantErr, got.stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if tc.submitErr == nil && len(ctl.Submitted(t)) != 0 {
				t.Errorf("a bad request was submitted")
			}
		})
	}
}

func TestUnreachableController(t *testing.T) {
	var errb bytes.Buffer
	a := New()
	a.Writer, a.ErrWriter = &bytes.Buffer{}, &errb
	code := exitcode.Main(context.Background(), a, []string{"gpusubmit", "--controller", "unix:///nonexistent/gpud.sock", "--wrap", "true"}, &errb)
	if code != 1 || !strings.Contains(errb.String(), "cannot reach the gpud controller") {
		t.Errorf("exit %d stderr %q, want 1 and a connection message", code, errb.String())
	}
}

func TestWait(t *testing.T) {
	tests := []struct {
		name     string
		jobs     []spec.Job
		ids      []spec.JobID
		wantCode int
		wantErr  string
	}{
		{name: "completed", jobs: []spec.Job{{ID: 7, State: spec.StateCompleted}}, ids: []spec.JobID{7}},
		{name: "failed keeps its code", jobs: []spec.Job{{ID: 7, State: spec.StateFailed, ExitCode: 42}}, ids: []spec.JobID{7}, wantCode: 42, wantErr: "gpusubmit: job 7 ended FAILED with exit code 42\n"},
		{name: "timeout with 0 exits 1", jobs: []spec.Job{{ID: 7, State: spec.StateTimeout, Reason: "TimeLimit"}}, ids: []spec.JobID{7}, wantCode: 1, wantErr: "gpusubmit: job 7 ended TIMEOUT with exit code 0 (TimeLimit)\n"},
		{
			name: "array: the largest code", ids: []spec.JobID{7, 8, 9},
			jobs:     []spec.Job{{ID: 7, State: spec.StateCompleted}, {ID: 8, State: spec.StateFailed, ExitCode: 3}, {ID: 9, State: spec.StateOutOfMemory, ExitCode: 137}},
			wantCode: 137, wantErr: "gpusubmit: job 8 ended FAILED with exit code 3\ngpusubmit: job 9 ended OUT_OF_MEMORY with exit code 137\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fakectl.New(t)
			ctl.Set(func(s *fakectl.Server) {
				s.Jobs = tc.jobs
				s.SubmitResp = api.SubmitResponse{ID: tc.ids[0], IDs: tc.ids}
			})
			got := run(t, ctl, "--wait", "--wrap", "true")
			if got.code != tc.wantCode {
				t.Errorf("exit %d, want %d", got.code, tc.wantCode)
			}
			if diff := cmp.Diff(tc.wantErr, got.stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff("Submitted batch job 7\n", got.stdout); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTestOnly(t *testing.T) {
	ctl := fakectl.New(t)
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.Local)
	ctl.Set(func(s *fakectl.Server) {
		s.SubmitResp = api.SubmitResponse{ID: 1, ExpectedStart: spec.NewTime(start), Nodes: []string{"gpu01", "gpu02"}}
	})
	got := run(t, ctl, "--test-only", "-p", "h100", "--wrap", "true")
	if got.code != 0 || got.stdout != "" {
		t.Fatalf("exit %d stdout %q stderr %q", got.code, got.stdout, got.stderr)
	}
	if diff := cmp.Diff("gpusubmit: Job would start at 2030-01-02T03:04:05 on gpu01,gpu02 in partition h100\n", got.stderr); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	if subs := ctl.Submitted(t); len(subs) != 1 || !subs[0].TestOnly {
		t.Errorf("submissions %+v, want one with TestOnly", subs)
	}
}

// TestSbatchName: run as sbatch, gpusubmit reads options as getopt_long
// does, defaults the output to slurm-%j.out and names itself in messages.
func TestSbatchName(t *testing.T) {
	ctl := fakectl.New(t)
	path := writeScript(t, "#!/bin/sh\n#SBATCH --hint=nomultithread\n#SBATCH --tasks=2 --gpus-per-task=1\ntrue\n")
	var out, errb bytes.Buffer
	a := ForName("sbatch")
	a.Writer, a.ErrWriter = &out, &errb
	code := exitcode.Main(context.Background(), a, Args([]string{"sbatch", "--contr", ctl.Addr, "--out=o-%j.log", "-HJtrain", path}), &errb)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
	if want := "sbatch: warning: line 2 of job.sh: --hint has no effect in gpud and is ignored: gpud allocates whole cores and does not schedule hardware threads\n"; errb.String() != want {
		t.Errorf("stderr %q, want %q", errb.String(), want)
	}
	js := ctl.Submitted(t)[0].Job
	if js.Output != "o-%j.log" || js.Name != "train" || !js.Hold || js.Resources.GPUsPerNode != 2 || js.Tasks.NTasksPerNode != 2 {
		t.Errorf("got output %q name %q hold %v GPUs/node %d tasks %+v", js.Output, js.Name, js.Hold, js.Resources.GPUsPerNode, js.Tasks)
	}

	out.Reset()
	errb.Reset()
	a = ForName("sbatch")
	a.Writer, a.ErrWriter = &out, &errb
	plain := writeScript(t, "#!/bin/sh\ntrue\n")
	if code := exitcode.Main(context.Background(), a, Args([]string{"sbatch", "--controller", ctl.Addr, plain}), &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if js := ctl.Submitted(t)[1].Job; js.Output != "slurm-%j.out" {
		t.Errorf("default output %q, want slurm-%%j.out", js.Output)
	}

	// --wait's and --test-only's messages are sbatch's too.
	ctl.Set(func(s *fakectl.Server) {
		s.Jobs = []spec.Job{{ID: 7, State: spec.StateFailed, ExitCode: 3}}
		s.SubmitResp = api.SubmitResponse{ID: 7}
	})
	for _, tc := range []struct{ flag, want string }{
		{"--wait", "sbatch: job 7 ended FAILED with exit code 3\n"},
		{"--test-only", "sbatch: Job would be accepted; the controller gave no start estimate\n"},
	} {
		errb.Reset()
		a = ForName("sbatch")
		a.Writer, a.ErrWriter = &out, &errb
		exitcode.Main(context.Background(), a, Args([]string{"sbatch", "--controller", ctl.Addr, tc.flag, plain}), &errb)
		if errb.String() != tc.want {
			t.Errorf("sbatch %s: stderr %q, want %q", tc.flag, errb.String(), tc.want)
		}
	}
}

// TestEveryProblemInOnePass: the command line's and every directive's
// problems come back together, with line numbers and "did you mean".
func TestEveryProblemInOnePass(t *testing.T) {
	ctl := fakectl.New(t)
	path := writeScript(t, "#!/bin/sh\n#SBATCH --tme=10\n#SBATCH --mem=lots --cpu-bind=cores\n#SBATCH hetjob\n#SBATCH --nodes=0\ntrue\n")
	got := run(t, ctl, "--partiton=a", path)
	want := "gpusubmit: command line: unknown option --partiton; did you mean --partition? see gpusubmit --help for the options gpud honours\n" +
		"gpusubmit: line 2 of job.sh: unknown option --tme; did you mean --time? see gpusubmit --help for the options gpud honours\n" +
		"gpusubmit: line 3 of job.sh: --cpu-bind is an sbatch option gpud cannot honour (the node does not bind tasks to CPUs); remove it\n" +
		"gpusubmit: line 3 of job.sh: --mem: bad memory size \"lots\"; use a whole number with an optional K, M, G or T suffix, B or iB allowed (500M, 4G, 8gb, 1T; no suffix means MiB)\n" +
		// Line 4 (#SBATCH hetjob) begins a heterogeneous job's component 1.
		"gpusubmit: hetjob component 1: line 5 of job.sh: --nodes: bad node count \"0\"; use N or MIN-MAX with N >= 1 and MIN <= MAX\n"
	if got.code != 2 {
		t.Errorf("exit %d, want 2", got.code)
	}
	if diff := cmp.Diff(want, got.stderr); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
}

// TestSbatchReadsStandardInput: sbatch with no script reads it from
// standard input, as Slurm's does (sbatch <<EOF ... EOF).
func TestSbatchReadsStandardInput(t *testing.T) {
	ctl := fakectl.New(t)
	var out, errb bytes.Buffer
	a := ForName("sbatch")
	a.Writer, a.ErrWriter = &out, &errb
	a.Reader = strings.NewReader("#!/bin/sh\n#SBATCH -J piped\ntrue\n")
	if code := exitcode.Main(context.Background(), a, Args([]string{"sbatch", "--controller", ctl.Addr, "--parsable"}), &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if js := ctl.Submitted(t)[0].Job; js.Name != "piped" {
		t.Errorf("job name %q, want piped", js.Name)
	}
}

// BenchmarkSbatchClient is the client's share of one `sbatch --hold
// --parsable --wrap true` in a shell loop, process start aside: reading
// the arguments as getopt_long does, the options, the request and its
// answer (from fakectl, over its unix socket). main is Main, as the
// binary runs it; app is the same through urfave/cli's App, the way every
// submission went before Main read the words itself.
func BenchmarkSbatchClient(b *testing.B) {
	ctl := fakectl.New(b)
	argv := []string{"sbatch", "--controller", ctl.Addr, "--hold", "--parsable", "--wrap", "true"}
	b.Run("main", func(b *testing.B) {
		for b.Loop() {
			var out, errb bytes.Buffer
			if code := Main(context.Background(), "sbatch", argv, strings.NewReader(""), &out, &errb); code != 0 {
				b.Fatalf("exit %d: %s", code, errb.String())
			}
		}
	})
	b.Run("app", func(b *testing.B) {
		args := Args(argv)
		for b.Loop() {
			var out, errb bytes.Buffer
			a := ForName("sbatch")
			a.Writer, a.ErrWriter = &out, &errb
			if code := exitcode.Main(context.Background(), a, args, &errb); code != 0 {
				b.Fatalf("exit %d: %s", code, errb.String())
			}
		}
	})
}

// TestHetJobComponents: a heterogeneous job's components, from a
// script's `#SBATCH hetjob` lines and from ":" on the command line, each
// with its own resources, over what component 0 propagates (Slurm's
// rules: the job name and account are, the node and GPU counts not).
func TestHetJobComponents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		args   []string
	}{
		{"script", "#!/bin/sh\n#SBATCH -J het -A lab -p cpu -N2 -c4\n#SBATCH hetjob\n#SBATCH -p gpu --gpus-per-node=2 -n1\n#SBATCH packjob\n#SBATCH -N1 --mem=1G\ntrue\n", nil},
		{"command line", "#!/bin/sh\ntrue\n", []string{"-J", "het", "-A", "lab", "-p", "cpu", "-N2", "-c4", ":", "-p", "gpu", "--gpus-per-node=2", "-n1", ":", "-N1", "--mem=1G"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctl := fakectl.New(t)
			path := writeScript(t, tc.script)
			got := run(t, ctl, append(tc.args, path)...)
			if got.code != 0 {
				t.Fatalf("exit %d: %s", got.code, got.stderr)
			}
			sub := ctl.Submitted(t)[0]
			js := sub.Job
			if js.Partition != "cpu" || js.Resources.Nodes != 2 || js.Resources.CPUsPerNode != 4 || len(sub.Het) != 2 {
				t.Fatalf("component 0: partition %q nodes %d cpus %d, %d more components", js.Partition, js.Resources.Nodes, js.Resources.CPUsPerNode, len(sub.Het))
			}
			c1, c2 := sub.Het[0], sub.Het[1]
			if c1.Name != "het" || c1.Account != "lab" || c1.Partition != "gpu" || c1.Resources.GPUsPerNode != 2 || c1.Tasks.NTasks != 1 || c1.Resources.Nodes > 1 {
				t.Errorf("component 1: %+v", c1)
			}
			if c2.Partition != "cpu" || c2.Resources.MemMiB != 1024 || c2.Resources.GPUsPerNode != 0 || c2.Resources.Nodes != 1 || c2.Script != spec.HetScript {
				t.Errorf("component 2 (propagated partition, own memory): %+v", c2)
			}
		})
	}
	ctl := fakectl.New(t)
	got := run(t, ctl, "--array=1-3", "-N1", ":", "-N1", "--wrap", "true")
	if got.code != 2 || !strings.Contains(got.stderr, "cannot be an array job") {
		t.Errorf("an array heterogeneous job: exit %d, %q; want a refusal", got.code, got.stderr)
	}
}
