package spec_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/spec"
)

func validSpec() spec.JobSpec {
	return spec.JobSpec{Name: "train", Script: "#!/bin/sh\ntrue\n", WorkDir: "/home/alice", SubmitDir: "/home/alice",
		Output: "out-%j.log", Env: []string{"PATH=/bin"}, Resources: spec.Resources{Nodes: 2, CPUsPerNode: 8, GPUsPerNode: 4}}
}

// TestValidate: each structural problem is refused as ErrInvalid with a
// FieldError naming its field, and a spec with several problems reports
// every one of them.
func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*spec.JobSpec)
		field []string // the FieldErrors' fields, in order; nil: valid
		msg   string   // a part of the message
	}{
		{"valid", func(*spec.JobSpec) {}, nil, ""},
		{"defaults left to the controller", func(js *spec.JobSpec) {
			js.Name, js.WorkDir, js.Resources = "", "", spec.Resources{}
		}, nil, ""},
		{"empty script", func(js *spec.JobSpec) { js.Script = " \n" }, []string{"script"}, "script is empty"},
		{"NUL in script", func(js *spec.JobSpec) { js.Script = "a\x00b" }, []string{"script"}, "NUL byte at offset 1"},
		{"escape in name", func(js *spec.JobSpec) { js.Name = "\x1b]0;x" }, []string{"--job-name"}, "control character"},
		{"long name", func(js *spec.JobSpec) { js.Name = strings.Repeat("x", 300) }, []string{"--job-name"}, "at most 256"},
		{"env without =", func(js *spec.JobSpec) { js.Env = []string{"PATH"} }, []string{"--export"}, `env[0] "PATH" is not KEY=VALUE`},
		{"relative workdir", func(js *spec.JobSpec) { js.WorkDir, js.SubmitDir = "rel", "" }, []string{"--chdir"}, "not an absolute path"},
		{"traversal", func(js *spec.JobSpec) { js.Output = "../x" }, []string{"--output"}, "'..' component"},
		{"array", func(js *spec.JobSpec) { js.Array = "0-20000" }, []string{"--array"}, "more than 10000 tasks"},
		{"bad array", func(js *spec.JobSpec) { js.Array = "a-b" }, []string{"--array"}, "is not N, N-M"},
		{"checkpoint mode", func(js *spec.JobSpec) { js.CkptMode = "magic" }, []string{"--checkpoint-mode"}, "not a checkpoint mode"},
		{"negative time", func(js *spec.JobSpec) { js.TimeLimit = spec.Duration(-time.Minute) }, []string{"--time"}, "--time=-60s is out of range"},
		{"unlimited and a limit", func(js *spec.JobSpec) { js.TimeUnlimited, js.TimeLimit = true, spec.Duration(time.Hour) }, []string{"--time"}, "both given"},
		{"begin", func(js *spec.JobSpec) { js.BeginTime = spec.NewTime(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)) }, []string{"--begin"}, "out of range"},
		{"open mode", func(js *spec.JobSpec) { js.OpenMode = "x" }, []string{"--open-mode"}, "use append or truncate"},
		{"nice", func(js *spec.JobSpec) { js.Nice = math.MaxInt32 }, []string{"--nice"}, "absurd"},
		{"fewer tasks than nodes", func(js *spec.JobSpec) { js.Tasks.NTasks = 1 }, []string{"--ntasks"}, "1 tasks on 2 nodes"},
		{"tasks over per-node", func(js *spec.JobSpec) { js.Tasks = spec.Tasks{NTasks: 5, NTasksPerNode: 2} }, []string{"--ntasks"}, "5 tasks do not fit 2 nodes × 2"},
		{"gpus per task uneven", func(js *spec.JobSpec) { js.Tasks = spec.Tasks{NTasks: 3, GPUsPerTask: 1} }, []string{"--gpus-per-task"}, "3 tasks cannot be split evenly over 2 nodes"},
		{"negative nodes", func(js *spec.JobSpec) { js.Resources.Nodes = -1 }, []string{"--nodes"}, "--nodes=-1 must be at least 1"},
		{"absurd CPUs", func(js *spec.JobSpec) { js.Resources.CPUsPerNode = 1 << 40 }, []string{"--cpus-per-task"}, "absurd"},
		{"negative mem", func(js *spec.JobSpec) { js.Resources.MemMiB = -1 }, []string{"--mem"}, "must not be negative"},
		{"negative GPUs", func(js *spec.JobSpec) { js.Resources.GPUsPerNode = -1 }, []string{"--gpus-per-node"}, "must not be negative"},
		{"gpus uneven", func(js *spec.JobSpec) { js.Resources.GPUsPerNode, js.Resources.TotalGPUs = 0, 3 }, []string{"--gpus"}, "does not divide evenly over 2 nodes"},
		{"gpus contradict", func(js *spec.JobSpec) { js.Resources.TotalGPUs = 6 }, []string{"--gpus"}, "contradicts --gpus-per-node=4"},
		{"fraction on two nodes", func(js *spec.JobSpec) { js.Resources.GPUsPerNode, js.Resources.GPUFraction = 0, 0.5 }, []string{"--gpus"}, "runs on one node"},
		{"fraction NaN", func(js *spec.JobSpec) { js.Resources.GPUsPerNode, js.Resources.GPUFraction = 0, math.NaN() }, []string{"--gpus"}, "between 0 and 1"},
		{"shared MIG slice", func(js *spec.JobSpec) {
			js.Resources = spec.Resources{GPUProfile: "1g.10gb", GPUFraction: 0.5}
		}, []string{"--gpus"}, "cannot be shared"},
		{"rdma without GPUs", func(js *spec.JobSpec) { js.Resources.GPUsPerNode, js.Resources.RDMA = 0, spec.RDMAPaired }, []string{"--rdma"}, "asks for none"},
		{"rdma range", func(js *spec.JobSpec) { js.Resources.RDMA = 1 << 40 }, []string{"--rdma"}, "out of range"},
		{"constraint", func(js *spec.JobSpec) { js.Resources.Constraint = "a|b" }, []string{"--constraint"}, "only features joined by &"},
		{"nodelist entry", func(js *spec.JobSpec) { js.Resources.NodeList = []string{"n1", "n\x00"} }, []string{"--nodelist"}, "--nodelist[1] contains a NUL byte"},
		{"three at once", func(js *spec.JobSpec) {
			js.Tasks.GPUsPerTask, js.Resources.MemMiB, js.Output = -1, -5, "a/../b"
		}, []string{"--output", "--gpus-per-task", "--mem"}, "--gpus-per-task=-1 is out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := validSpec()
			tc.mod(&js)
			err := js.Validate()
			if tc.field == nil {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, spec.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Validate() = %v; want invalid containing %q", err, tc.msg)
			}
			var got []string
			for _, fe := range spec.FieldErrors(err) {
				got = append(got, fe.Field)
				if !strings.HasPrefix(fe.Error(), fe.Field) {
					t.Errorf("message %q does not start with its field %q", fe.Error(), fe.Field)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.field, " ") {
				t.Errorf("fields %q; want %q (error %v)", got, tc.field, err)
			}
		})
	}
}

// TestValidateFields: only the named fields' problems are reported, with
// Validate's messages; a spec that is invalid elsewhere passes.
func TestValidateFields(t *testing.T) {
	js := spec.JobSpec{Name: "a\x1bb", Nice: math.MaxInt32, Comment: "ok"} // no script, no work dir
	if err := js.ValidateFields("--comment", "--partition"); err != nil {
		t.Errorf("fields without problems: %v", err)
	}
	err := js.ValidateFields("--job-name", "--nice")
	fes := spec.FieldErrors(err)
	if len(fes) != 2 || fes[0].Field != "--job-name" || fes[1].Field != "--nice" || !errors.Is(err, spec.ErrInvalid) {
		t.Fatalf("ValidateFields(--job-name, --nice) = %v; want those two, invalid", err)
	}
	all := js.Validate().Error()
	for _, fe := range fes {
		if !strings.Contains(all, fe.Msg) {
			t.Errorf("%q is not what Validate says (%q)", fe.Msg, all)
		}
	}
}
