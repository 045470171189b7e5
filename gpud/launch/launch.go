// Package launch is what runs in a job's container between the node
// agent's exec of a step task and the task's own program, when the step
// asks for what only the task's process can do to itself: bind its CPUs
// (srun --cpu-bind, --hint, --distribution's socket and core levels),
// pick its GPUs closest to them (--gpu-bind=closest), and receive its PMI
// connection as an inherited descriptor (srun --mpi=pmi2: PMI_FD). It
// then execs the program in place: same process, same pid, so the
// agent's exec is the task.
//
// It runs as `gpuq __gpud_task [flags] -- PROGRAM ARGS...` (gpuq is
// static, so it runs in any image, and the node binds its directory into
// every job). It is a leaf above gpud/cpubind.
package launch

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpud/gpud/gpud/cpubind"
)

// Arg is the first argument of gpuq that runs the launcher.
const Arg = "__gpud_task"

// Opts is what the agent asks of the launcher for one task.
type Opts struct {
	CPUBind, Hint, Dist string
	CPUsPerTask         int
	// Local and NLocal place the task among the node's tasks of its
	// step; Task is its global ID, Node the node's name (for verbose).
	Local, NLocal, Task int
	Node                string
	// PMISock is the step's PMI socket on this node (--mpi=pmi2).
	PMISock string
	// GPUNUMA is the NUMA node of each of the step's GPUs on the node, in
	// CUDA_VISIBLE_DEVICES order (--gpu-bind=closest).
	GPUNUMA []int
}

// Args is the launcher's command line for opts and the task's argv.
func Args(gpuq string, o Opts, argv []string) []string {
	a := []string{gpuq, Arg}
	add := func(k, v string) {
		if v != "" {
			a = append(a, "--"+k+"="+v)
		}
	}
	add("cpu-bind", o.CPUBind)
	add("hint", o.Hint)
	add("distribution", o.Dist)
	if o.CPUsPerTask > 0 {
		add("cpus-per-task", strconv.Itoa(o.CPUsPerTask))
	}
	add("local", strconv.Itoa(o.Local))
	add("nlocal", strconv.Itoa(o.NLocal))
	add("task", strconv.Itoa(o.Task))
	add("node", o.Node)
	add("pmi-sock", o.PMISock)
	if o.GPUNUMA != nil {
		s := make([]string, len(o.GPUNUMA))
		for i, n := range o.GPUNUMA {
			s[i] = strconv.Itoa(n)
		}
		add("gpu-numa", strings.Join(s, ","))
	}
	return append(append(a, "--"), argv...)
}

// Main runs the launcher with args (after Arg) and, when all went well,
// does not return: the task's program replaces it. It returns an exit
// code when it could not start the program (2, as slurmstepd's failed
// execve).
func Main(args []string, stderr io.Writer) int {
	o, argv, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "slurmstepd: error: %v\n", err)
		return 2
	}
	// Affinity is per thread; the exec keeps the thread that calls it.
	goruntime.LockOSThread()
	env := os.Environ()
	if env, err = bind(o, env, stderr); err != nil {
		fmt.Fprintf(stderr, "slurmstepd: error: task %d on %s: %v\n", o.Task, o.Node, err)
		return 2
	}
	if o.PMISock != "" {
		fd, err := dialInherited(o.PMISock)
		if err != nil {
			fmt.Fprintf(stderr, "slurmstepd: error: task %d on %s: reach the step's PMI server: %v\n", o.Task, o.Node, err)
			return 2
		}
		env = setEnv(env, "PMI_FD", strconv.Itoa(fd))
	}
	path, err := lookPath(argv[0], env)
	if err != nil {
		fmt.Fprintf(stderr, "slurmstepd: error: execve(): %s: %v\n", argv[0], err)
		return 2
	}
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(stderr, "slurmstepd: error: execve(): %s: %v\n", argv[0], err)
	return 2
}

func parse(args []string) (Opts, []string, error) {
	var o Opts
	fs := flag.NewFlagSet(Arg, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.CPUBind, "cpu-bind", "", "")
	fs.StringVar(&o.Hint, "hint", "", "")
	fs.StringVar(&o.Dist, "distribution", "", "")
	fs.IntVar(&o.CPUsPerTask, "cpus-per-task", 0, "")
	fs.IntVar(&o.Local, "local", 0, "")
	fs.IntVar(&o.NLocal, "nlocal", 1, "")
	fs.IntVar(&o.Task, "task", 0, "")
	fs.StringVar(&o.Node, "node", "", "")
	fs.StringVar(&o.PMISock, "pmi-sock", "", "")
	numa := fs.String("gpu-numa", "", "")
	if err := fs.Parse(args); err != nil {
		return o, nil, fmt.Errorf("task launcher: %w", err)
	}
	if *numa != "" {
		for f := range strings.SplitSeq(*numa, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				return o, nil, fmt.Errorf("task launcher: --gpu-numa=%s", *numa)
			}
			o.GPUNUMA = append(o.GPUNUMA, n)
		}
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return o, nil, errors.New("task launcher: no program to run")
	}
	return o, argv, nil
}

// bind sets the calling thread's CPUs and returns env with Slurm's
// SLURM_CPU_BIND* variables and, under --gpu-bind=closest, the task's
// CUDA_VISIBLE_DEVICES.
func bind(o Opts, env []string, stderr io.Writer) ([]string, error) {
	if o.CPUBind == "" && o.Hint == "" && o.GPUNUMA == nil {
		return env, nil
	}
	b, err := cpubind.ParseBind(o.CPUBind)
	if err != nil {
		return env, err
	}
	d, err := cpubind.ParseDist(o.Dist, 0)
	if err != nil {
		return env, err
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return env, fmt.Errorf("read the task's CPUs: %w", err)
	}
	var allowed []int
	for c := range 1024 {
		if set.IsSet(c) {
			allowed = append(allowed, c)
		}
	}
	topo, err := cpubind.ReadTopology("/sys")
	if err != nil {
		return env, err
	}
	masks := make([][]int, o.NLocal)
	for l := range masks {
		if masks[l], err = cpubind.Mask(topo, allowed, b, o.Hint, d, cpubind.Task{Local: l, NLocal: o.NLocal, CPUsPerTask: o.CPUsPerTask}); err != nil {
			return env, err
		}
	}
	mine := masks[min(o.Local, len(masks)-1)]
	bound := (b.Type != "" && b.Type != cpubind.None) || o.Hint != ""
	if bound {
		set.Zero()
		for _, c := range mine {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return env, fmt.Errorf("bind to CPUs %s: %w", cpubind.List(mine), err)
		}
		list := make([]string, len(masks))
		for i, m := range masks {
			list[i] = "0x" + cpubind.Format(m)
		}
		verb := "quiet"
		if b.Verbose {
			verb = "verbose"
		}
		typ := "mask_cpu:"
		if b.Type == cpubind.MapCPU {
			typ = "map_cpu:"
			for i, m := range masks {
				list[i] = strconv.Itoa(m[0])
			}
		}
		env = setEnv(env, "SLURM_CPU_BIND_VERBOSE", verb)
		env = setEnv(env, "SLURM_CPU_BIND_TYPE", typ)
		env = setEnv(env, "SLURM_CPU_BIND_LIST", strings.Join(list, ","))
		env = setEnv(env, "SLURM_CPU_BIND", verb+","+typ+strings.Join(list, ","))
	}
	if b.Verbose {
		_, _ = io.WriteString(stderr, cpubind.Verbose(b, o.Hint, o.Node, o.Task, o.Local, os.Getpid(), mine))
	}
	if o.GPUNUMA != nil {
		env = closestGPUs(env, o.GPUNUMA, topo.NodesOf(mine))
	}
	return env, nil
}

// closestGPUs keeps, of the task's CUDA_VISIBLE_DEVICES, the GPUs on the
// NUMA nodes of its CPUs (gpuNUMA: each one's node, in order); all of
// them when none is.
func closestGPUs(env []string, gpuNUMA []int, cpuNodes []int) []string {
	var cur string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CUDA_VISIBLE_DEVICES="); ok {
			cur = v
		}
	}
	devs := strings.FieldsFunc(cur, func(r rune) bool { return r == ',' })
	var keep []string
	for i, d := range devs {
		if i < len(gpuNUMA) && slices.Contains(cpuNodes, gpuNUMA[i]) {
			keep = append(keep, d)
		}
	}
	if len(keep) == 0 {
		return env
	}
	env = setEnv(env, "CUDA_VISIBLE_DEVICES", strings.Join(keep, ","))
	return setEnv(env, "SLURM_GPUS_ON_NODE", strconv.Itoa(len(keep)))
}

// dialInherited connects to the unix socket path with a descriptor the
// program will inherit (no close-on-exec), and returns it.
func dialInherited(path string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func setEnv(env []string, k, v string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	return append(env, k+"="+v)
}

// lookPath finds the program as execvp does, on the task's PATH.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
