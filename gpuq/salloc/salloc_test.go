package salloc

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

func TestParse(t *testing.T) {
	// As sbatch reads them: bundles, attached values, unique prefixes.
	opts, cmd, err := parse([]string{"-N2", "--gpus-per-n=1", "-t", "10", "--exclusive", "-HJx", "bash", "-c", "srun -N2 true"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range opts {
		got = append(got, o.Name+"="+o.Value)
	}
	want := []string{"nodes=2", "gpus-per-node=1", "time=10", "exclusive=true", "hold=true", "job-name=x"}
	if !slices.Equal(got, want) || !slices.Equal(cmd, []string{"bash", "-c", "srun -N2 true"}) {
		t.Errorf("parse: %v %v; want %v and the command after the options", got, cmd, want)
	}
	for args, msg := range map[string]string{
		"--array=0-3 sh":         "salloc: --array is not an salloc option",
		"--bogus sh":             "salloc: unknown option --bogus",
		"-N":                     "salloc: --nodes needs a value",
		"--hold=maybe sh":        `salloc: --hold takes no value (got "maybe")`,
		"--nod 2 --wrap=x -J":    "salloc: option '--nod' is ambiguous",
		"-N 2 --wrap=x --bogus":  "salloc: --wrap is not an salloc option: give the command after the options",
		"--controller=unix:/x":   "salloc: --controller is not a job option",
		"--array=1 --output=x a": "salloc: --array is not an salloc option: an allocation is one job\nsalloc: --output is not",
	} {
		if _, _, err := parse(strings.Fields(args)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("parse(%q): %v; want an error with %q", args, err, msg)
		}
	}
}

func TestAllocEnv(t *testing.T) {
	j := spec.Job{ID: 42, Nodes: []string{"gpu1", "gpu2", "gpu3"}}
	j.Name, j.Partition, j.Tasks.NTasks = "bash", "gpu", 4
	env := allocEnv(j)
	for _, want := range []string{"SLURM_JOB_ID=42", "SLURM_JOBID=42", "SLURM_JOB_NODELIST=gpu[1-3]", "SLURM_NNODES=3", "SLURM_NTASKS=4", "SLURM_JOB_PARTITION=gpu"} {
		if !slices.Contains(env, want) {
			t.Errorf("allocation environment lacks %s: %v", want, env)
		}
	}
}
