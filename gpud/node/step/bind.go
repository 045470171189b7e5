package step

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/cpubind"
	"github.com/gpud/gpud/gpud/launch"
	"github.com/gpud/gpud/gpud/pmi"
	"github.com/gpud/gpud/gpud/spec"
)

// Binding (srun --cpu-bind, --hint, --distribution's socket and core
// levels, --gpu-bind=closest): a process binds only itself, so a step
// that binds runs each task through the task launcher (gpud/launch, gpuq
// in the job's container), which computes the task's CPUs within the
// allocation's cpuset, binds itself, and execs the task's program in
// place. Steps that bind nothing run their programs directly, as before.

// cpuBind is how a step binds its tasks' CPUs.
type cpuBind struct {
	bind, hint, dist string
	cpusPerTask      int
}

// binds says whether the tasks need the launcher for their CPUs: a
// binding other than none, a hint, or verbose (which prints the mask).
func (b cpuBind) binds() bool {
	if b.hint != "" {
		return true
	}
	p, err := cpubind.ParseBind(b.bind)
	return err != nil || p.Verbose || (p.Type != "" && p.Type != cpubind.None)
}

// stepMPIBind checks a step's --mpi (empty: the site's mpiDefault, else
// none) and CPU binding, and returns the MPI type and the binding.
func stepMPIBind(req api.StepRequest, mpiDefault string) (string, cpuBind, error) {
	var errs []error
	typ := pmi.None
	if m := cmpOr(req.MPI, mpiDefault); m != "" {
		t, err := pmi.Parse(m)
		if err != nil {
			errs = append(errs, spec.Errorf(spec.ErrInvalid, "--mpi=%s: %v", m, err))
		}
		typ = t
	}
	if _, err := cpubind.ParseBind(req.CPUBind); err != nil {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%v", err))
	}
	if req.Hint != "" {
		if _, err := cpubind.ParseHint(req.Hint); err != nil {
			errs = append(errs, spec.Errorf(spec.ErrInvalid, "%v", err))
		}
	}
	if _, err := cpubind.ParseDist(req.Distribution, 0); err != nil {
		errs = append(errs, spec.Errorf(spec.ErrInvalid, "%v", err))
	}
	cpu := cpuBind{bind: req.CPUBind, hint: req.Hint, dist: req.Distribution, cpusPerTask: req.CPUsPerTask}
	return typ, cpu, errors.Join(errs...)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// taskArgs is the argv of a node's local task: its program, or the
// launcher before it when the step binds, picks GPUs by closeness or
// serves PMI-2 (gpuNUMA: the NUMA node of each of the task's GPUs, for
// closest).
func (n *Node) taskArgs(st tasks, local, task int, mp *mpiPart, gpuNUMA []int) ([]string, error) {
	sock := ""
	if mp != nil {
		sock = mp.sock
	}
	closest := st.Bind.closest && gpuNUMA != nil
	if !st.CPU.binds() && !closest && sock == "" {
		return st.Args, nil
	}
	if n.cfg.Tools == "" {
		return nil, fmt.Errorf("node %s: binding tasks (--cpu-bind, --hint, --gpu-bind=closest) and --mpi=pmi2 need gpud's task launcher, gpuq beside gpud, which this node's agent lacks", n.cfg.Node)
	}
	o := launch.Opts{CPUBind: st.CPU.bind, Hint: st.CPU.hint, Dist: st.CPU.dist, CPUsPerTask: st.CPU.cpusPerTask,
		Local: local, NLocal: len(st.Tasks), Task: task, Node: n.cfg.Node, PMISock: sock}
	if closest {
		o.GPUNUMA = gpuNUMA
	}
	return launch.Args(filepath.Join(n.cfg.Tools, "gpuq"), o, st.Args), nil
}

// gpuNUMA is the NUMA node of each of a task's GPUs (entries of the
// node's CUDA_VISIBLE_DEVICES, whose UUIDs GPUD_GPUS lists in the same
// order), nil when a GPU's node is not known (a MIG slice).
func (n *Node) gpuNUMA(nodeDevs, uuids, mine []string) []int {
	out := make([]int, 0, len(mine))
	for _, d := range mine {
		k := -1
		for i, nd := range nodeDevs {
			if nd == d {
				k = i
			}
		}
		if k < 0 || k >= len(uuids) {
			return nil
		}
		numa, ok := n.cfg.GPUNUMA[uuids[k]]
		if !ok {
			return nil
		}
		out = append(out, numa)
	}
	return out
}

// splitList splits a comma-separated variable's value.
func splitList(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == ',' })
}
