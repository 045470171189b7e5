// Package srun is the srun command (gpuq run as srun): inside a job it
// starts a job step through the job's node agent and streams the tasks'
// output back (docs/architecture.md, "Allocations and steps").
package srun

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/cpubind"
	"github.com/gpud/gpud/gpud/pmi"
	"github.com/gpud/gpud/gpud/spec"
)

// Exit codes beyond the tasks' own.
const (
	exitUsage = 2
	exitError = 1
)

// options is what srun's command line asks for.
type options struct {
	req            api.StepRequest
	label          bool
	output, errout string
	export         string
	// given are the options named on the command line.
	given map[string]bool
	// alloc are the options that shape an allocation srun makes outside
	// a job (alloc.go).
	alloc []directive.Option
	// pty: task 0 on a terminal (pty.go); disableStatus (-X) and
	// quitOnInterrupt (-q): what ^C does (session.go).
	pty, disableStatus, quitOnInterrupt bool
	// container are the pyxis options given (checkContainer).
	container []directive.Option
	// jobID names the step in srun's messages (StepId=JOB.STEP).
	jobID string
	// jobOpt is --jobid's job ("": not given): inside a job it must be
	// that job; outside one it is the allocation to run in.
	jobOpt string
	// listMPI: --mpi=list; noInput: --input=none.
	listMPI, noInput bool
	// redial connects to the node agent again, to follow the step after
	// the agent restarted; nil: srun does not try.
	redial func() (net.Conn, error)
}

// envDefaults fills what the command line left out from the job's
// layout, as Slurm's srun reads SLURM_NTASKS and friends: the task counts
// only when none of -n, -N and --ntasks-per-node was given.
func (o *options) envDefaults(getenv func(string) string) {
	layout := getenv
	if o.req.HetGroup > 0 && getenv("SLURM_HET_SIZE") != "" {
		// The task layout of the component the step runs in, not the
		// batch script's (Slurm's _HET_GROUP_N variables).
		sfx := "_HET_GROUP_" + strconv.Itoa(o.req.HetGroup-1)
		layout = func(k string) string { return getenv(k + sfx) }
	}
	num := func(k string) int { n, _ := strconv.Atoi(layout(k)); return max(n, 0) }
	if !o.given["n"] && !o.given["N"] && !o.given["ntasks-per-node"] {
		o.req.NTasks = num("SLURM_NTASKS")
		o.req.NTasksPerNode = num("SLURM_NTASKS_PER_NODE")
	}
	if !o.given["c"] {
		o.req.CPUsPerTask = num("SLURM_CPUS_PER_TASK")
	}
	if !o.given["gpus-per-task"] {
		o.req.GPUsPerTask = num("SLURM_GPUS_PER_TASK")
	}
	// Slurm's input variables of the binding and MPI options: what the
	// command line leaves out (sbatch --distribution and --gpu-bind set
	// two of them; mpirun sets SLURM_CPU_BIND=none for its daemons).
	// Checked by the agent, like the options themselves.
	for _, v := range []struct {
		opt, env string
		to       *string
	}{{"mpi", "SLURM_MPI_TYPE", &o.req.MPI}, {"cpu-bind", "SLURM_CPU_BIND", &o.req.CPUBind}, {"hint", "SLURM_HINT", &o.req.Hint},
		{"distribution", "SLURM_DISTRIBUTION", &o.req.Distribution}, {"gpu-bind", "SLURM_GPU_BIND", &o.req.GPUBind}} {
		if !o.given[v.opt] && *v.to == "" {
			*v.to = getenv(v.env)
		}
	}
	if o.given["cpu-bind"] && !o.given["hint"] {
		o.req.Hint = "" // --cpu-bind on the command line wins over SLURM_HINT
	}
	if o.given["hint"] && !o.given["cpu-bind"] {
		o.req.CPUBind = "" // and --hint over SLURM_CPU_BIND
	}
	if getenv("SLURM_DISABLE_STATUS") != "" {
		o.disableStatus = true
	}
	o.jobID = getenv("SLURM_JOB_ID")
}

// Usage is srun's short help.
const Usage = `usage: srun [options] COMMAND [ARGS...]
  -n, --ntasks=N            tasks to run (default: one per node)
  -N, --nodes=N             nodes to use (default: all of the allocation's, or as -n needs)
      --ntasks-per-node=N   tasks on each node
  -c, --cpus-per-task=N     CPUs each task needs
      --gpus-per-task=N     GPUs of each task (its own CUDA_VISIBLE_DEVICES)
      --gpus-per-node=N     GPUs the step takes on each node (default: all the job's there)
  -G, --gpus=N              GPUs the step takes in all, spread over its nodes
  -w, --nodelist=HOSTS      run on these nodes of the job (a hostlist: node[1-2])
      --gpu-bind=[verbose,]none|closest|single:N|per_task:N|map_gpu:LIST|mask_gpu:LIST
                            tasks' GPUs: all the step's (none), those on their CPUs' NUMA nodes, N tasks
                            per GPU, N each, local task i the i-th of LIST (a GPU index or a hex mask)
  -l, --label               prefix each output line with its task number
  -u, --unbuffered          accepted: output is never buffered by srun
  -o, --output=FILE         tasks' stdout to FILE (%j job, %J job.step, %s step, %t task, %n node in the step,
                            %N node name, %A %a array, %x job name, %u user, %%)
  -e, --error=FILE          tasks' stderr to FILE
  -K, --kill-on-bad-exit[=0|1]  end the step when a task exits non-zero
      --export=ALL|NONE|VARS  environment of the tasks (default ALL)
      --overlap             share the allocation's resources with other steps
      --jobid=ID            the job to run in: inside a job, that job (scripts name their own
                            SLURM_JOB_ID); outside one, the allocation of job ID
      --exact               take only the CPUs the tasks ask for (-c each, 1 without), not the nodes' all
      --exclusive           dedicated CPUs for the step: --exact (steps that do not fit wait)
      --mpi=pmi2|pmix|none|list  the tasks' MPI process management: a PMI-1/PMI-2 server over PMI_FD
                            (MPICH), an OpenPMIx server (Open MPI), none (mpirun's daemons); list shows them
      --cpu-bind=[quiet|verbose,]TYPE  bind each task's CPUs (also --cpu_bind): none, threads, cores,
                            sockets, ldoms, rank, rank_ldom, map_cpu:LIST, mask_cpu:LIST, map_ldom:LIST,
                            mask_ldom:LIST; verbose prints each task's mask
      --hint=compute_bound|memory_bound|multithread|nomultithread  bind for the kind of program
  -m, --distribution=block|cyclic|plane=N[:block|cyclic|fcyclic[:block|cyclic|fcyclic]]
                            tasks over the nodes, then the node's CPUs over the tasks (sockets, cores)
  -i, --input=all|none|0    srun's input to task 0 (all, 0) or to no task (none)
      --het-group=N         run in component N of a heterogeneous job (sbatch's hetjob), with its nodes and variables
  -D, --chdir=DIR           tasks' working directory
      --pty                 run task 0 on a terminal (srun's own in raw mode; the other tasks' output is dropped)
  -X, --disable-status      a single ^C sends SIGINT to the tasks (default: it shows their state; two within 1 s abort)
      --quit-on-interrupt   a single ^C sends SIGINT to the tasks and ends the step
Outside a job srun runs in the allocation of a salloc shell (SLURM_JOB_ID), or
makes one for this step from its options (sbatch's: -N -n -c --gpus-per-node
-G -t -p --mem -J -A -q -C -w -x ...) and releases it when the step ends.
`

// optSet is srun's options, parsed as glibc's getopt_long does (as the
// other Slurm commands): unique prefixes of long options, bundled short
// ones (-lK), "--opt value" and "--opt=value"; the command starts at the
// first word that is not an option (or after --).
var optSet = withAllocOptions(&getopt.Set{Mode: getopt.StopAtFirst, Opts: []getopt.Opt{
	{Long: "ntasks", Short: 'n', Arg: getopt.Required},
	{Long: "nodes", Short: 'N', Arg: getopt.Required},
	{Long: "ntasks-per-node", Arg: getopt.Required},
	{Long: "cpus-per-task", Short: 'c', Arg: getopt.Required},
	{Long: "gpus-per-task", Arg: getopt.Required},
	{Long: "gpus-per-node", Arg: getopt.Required},
	{Long: "gpus", Short: 'G', Arg: getopt.Required},
	{Long: "nodelist", Short: 'w', Arg: getopt.Required},
	{Long: "gpu-bind", Arg: getopt.Required},
	{Long: "output", Short: 'o', Arg: getopt.Required},
	{Long: "error", Short: 'e', Arg: getopt.Required},
	{Long: "export", Arg: getopt.Required},
	{Long: "chdir", Short: 'D', Arg: getopt.Required},
	{Long: "cpu-bind", Arg: getopt.Required},
	{Long: "cpu_bind", Arg: getopt.Required},
	{Long: "hint", Arg: getopt.Required},
	{Long: "distribution", Short: 'm', Arg: getopt.Required},
	{Long: "input", Short: 'i', Arg: getopt.Required},
	{Long: "mpi", Arg: getopt.Required},
	{Long: "label", Short: 'l'},
	{Long: "unbuffered", Short: 'u'},
	{Long: "kill-on-bad-exit", Short: 'K', Arg: getopt.Optional},
	{Long: "overlap"},
	// Slurm's heterogeneous job component of the step (and its older
	// name, pack-group).
	{Long: "het-group", Arg: getopt.Required},
	{Long: "pack-group", Arg: getopt.Required},
	{Long: "jobid", Arg: getopt.Required},
	{Long: "exclusive", Arg: getopt.Optional},
	{Long: "exact"},
	// srun --pty and what ^C does (session.go). --quit-on-interrupt has
	// no short form: -q is --qos, as in Slurm's srun.
	{Long: "pty"},
	{Long: "disable-status", Short: 'X'},
	{Long: "quit-on-interrupt"},
	// pyxis's switches (its options with values come from sbatch's).
	{Long: "container-writable"},
	{Long: "container-readonly"},
	{Long: "container-mount-home"},
	{Long: "no-container-mount-home"},
	{Long: "no-container-remap-root"},
	{Long: "container-remap-root"},
	{Long: "container-entrypoint"},
	{Long: "container-save", Arg: getopt.Required},
}})

// containerOpts are pyxis's options that shape the job's container: srun
// outside a job gives them to the allocation it makes; inside one the
// container exists already (checkContainer).
var containerOpts = map[string]bool{"container-image": true, "container-mounts": true, "container-workdir": true,
	"container-name": true, "container-writable": true, "container-readonly": true, "container-mount-home": true,
	"no-container-mount-home": true, "no-container-remap-root": true, "container-env": true}

// given names: the short letter for -n, -N and -c (envDefaults reads
// them so), the long name otherwise.
var givenAs = map[string]string{"ntasks": "n", "nodes": "N", "cpus-per-task": "c", "cpu_bind": "cpu-bind"}

// parse reads srun's options; the command starts at the first argument
// that is not an option (or after --).
func parse(args []string) (options, error) {
	o := options{export: "ALL", given: map[string]bool{}}
	ps, rest, errs := optSet.Parse(args)
	if len(errs) > 0 {
		e := errs[0]
		if e.Kind == getopt.Unknown {
			return o, fmt.Errorf("srun: unknown option %s; see srun --help", e.Option)
		}
		return o, fmt.Errorf("srun: %s", e.Msg)
	}
	num := func(p getopt.Parsed) (int, error) {
		n, err := strconv.Atoi(p.Value)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("srun: %s wants a number, not %q", p.As, p.Value)
		}
		return n, nil
	}
	for _, p := range ps {
		name := p.Name()
		o.given[cmpOr(givenAs[name], name)] = true
		var err error
		if strings.HasPrefix(name, "container-") {
			if rerr, ok := directive.Refusal(name); ok {
				return o, fmt.Errorf("srun: %w", rerr)
			}
		}
		if containerOpts[name] {
			if d, _ := directive.Lookup(name); d != nil && d.Bool {
				o.alloc = append(o.alloc, directive.Option{Name: name, Source: directive.CommandLine})
			}
			o.container = append(o.container, directive.Option{Name: name, Value: p.Value, Source: directive.CommandLine})
		}
		if name == "container-workdir" {
			o.req.Cwd = p.Value // the step's, in the job's container
		}
		if o.noteAlloc(name, p.Value) {
			continue // shapes only an allocation srun makes (alloc.go)
		}
		switch name {
		case "ntasks":
			o.req.NTasks, err = num(p)
		case "nodes":
			o.req.Nodes, err = num(p)
		case "ntasks-per-node":
			o.req.NTasksPerNode, err = num(p)
		case "cpus-per-task":
			o.req.CPUsPerTask, err = num(p)
		case "gpus-per-task":
			o.req.GPUsPerTask, err = gpuCount(p)
		case "gpus-per-node":
			o.req.GPUsPerNode, err = gpuCount(p)
		case "gpus":
			o.req.GPUs, err = gpuCount(p)
		case "nodelist":
			o.req.NodeList = p.Value
		case "gpu-bind":
			o.req.GPUBind = p.Value
		case "output":
			o.output = p.Value
		case "error":
			o.errout = p.Value
		case "export":
			o.export = p.Value
		case "chdir":
			o.req.Cwd = p.Value
		case "cpu-bind", "cpu_bind":
			if _, err = cpubind.ParseBind(p.Value); err == nil {
				o.req.CPUBind = p.Value
			}
		case "hint":
			o.req.Hint, err = cpubind.ParseHint(p.Value)
		case "distribution":
			plane, _ := strconv.Atoi(os.Getenv("SLURM_DIST_PLANESIZE"))
			if _, err = cpubind.ParseDist(p.Value, plane); err == nil {
				o.req.Distribution = p.Value
				if p.Value == "plane" {
					o.req.Distribution = "plane=" + strconv.Itoa(plane)
				}
			}
		case "input":
			switch p.Value {
			case "all", "0":
			case "none":
				o.noInput = true
			default:
				err = fmt.Errorf("srun: --input=%s: gpud sends srun's input to task 0 (all, 0) or to none (none)", p.Value)
			}
		case "mpi":
			if p.Value == "list" {
				o.listMPI = true
				break
			}
			if _, perr := pmi.Parse(p.Value); perr != nil {
				err = fmt.Errorf("srun: error: Invalid MPI type '%s', --mpi=list for acceptable types", p.Value)
			} else {
				o.req.MPI = p.Value
			}
		case "label":
			o.label = true
		case "unbuffered":
		case "kill-on-bad-exit":
			// -K, or --kill-on-bad-exit[=0|1] as Slurm's.
			o.req.KillOnBadExit = !p.HasValue || p.Value != "0"
		case "overlap":
			o.req.Overlap = true
		case "het-group", "pack-group":
			var n int
			n, err = strconv.Atoi(p.Value)
			switch {
			case err != nil && strings.ContainsAny(p.Value, ",-"):
				err = fmt.Errorf("srun: --het-group=%s: a step across several components is not supported by gpud; run one srun per component (srun --het-group=N ... &) and wait for them", p.Value)
			case err != nil || n < 0 || n >= 128:
				err = fmt.Errorf("srun: --het-group=%s: give a component number, 0 to 127", p.Value)
			default:
				o.req.HetGroup = n + 1
			}
		case "jobid":
			if n, perr := strconv.ParseUint(p.Value, 10, 32); perr != nil || n == 0 {
				err = fmt.Errorf("srun: --jobid wants a job ID (a number), not %q", p.Value)
			}
			o.jobOpt = p.Value
		case "exclusive":
			// A step's --exclusive: dedicated CPUs, only those asked for.
			if p.HasValue && p.Value != "user" && p.Value != "mcs" {
				return o, fmt.Errorf("srun: --exclusive=%s: use --exclusive alone in a job step", p.Value)
			}
			o.req.Exclusive = true
		case "exact":
			o.req.Exact = true
		case "pty":
			o.pty = true
		case "disable-status":
			o.disableStatus = true
		case "quit-on-interrupt":
			o.quitOnInterrupt = true
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "srun: ") {
				err = fmt.Errorf("srun: %w", err)
			}
			return o, err
		}
	}
	if o.given["hint"] && o.req.CPUBind != "" {
		if b, _ := cpubind.ParseBind(o.req.CPUBind); b.Type != "" {
			return o, fmt.Errorf("srun: --hint and --cpu-bind=%s are mutually exclusive (as in Slurm, only --cpu-bind=verbose goes with --hint); give one", o.req.CPUBind)
		}
	}
	if o.listMPI {
		return o, nil
	}
	if len(rest) == 0 {
		return o, errors.New("srun: no command given\n" + Usage)
	}
	o.req.Args = rest
	return o, nil
}

// gpuCount reads a GPU count, with or without a type ("2", "h100:2"):
// the allocation's GPUs are what they are, so a type is not checked.
func gpuCount(p getopt.Parsed) (int, error) {
	v := p.Value
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		v = v[i+1:]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("srun: %s wants a GPU count ([TYPE:]N), not %q", p.As, p.Value)
	}
	return n, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// exportEnv is the tasks' environment under --export: ALL (srun's
// environment, plus VAR=value items), NONE (only what the agent sets), or
// a list of variables to pass on (with SLURM_* always passed, as Slurm).
func exportEnv(spec string, env []string) []string {
	items := strings.Split(spec, ",")
	var out []string
	all := false
	var names []string
	var extra []string
	for _, it := range items {
		switch {
		case it == "ALL":
			all = true
		case it == "NONE" || it == "":
		case strings.Contains(it, "="):
			extra = append(extra, it)
		default:
			names = append(names, it)
		}
	}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		pass := all || strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "GPUD_")
		for _, n := range names {
			pass = pass || n == k
		}
		if pass {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// Informational answers what srun and salloc answer before reading any
// option, as Slurm's do: --help or -h first (usage), --version or -V
// alone. It reports whether it answered.
func Informational(args []string, usage string, stdout io.Writer) bool {
	switch {
	case len(args) > 1 && (args[1] == "--help" || args[1] == "-h"):
		_, _ = io.WriteString(stdout, usage)
	case len(args) == 2 && (args[1] == "--version" || args[1] == "-V"):
		fmt.Fprintln(stdout, api.SlurmVersion)
	default:
		return false
	}
	return true
}

// Main runs srun with args (args[0] is the program name) and returns its
// exit code: the highest task exit code, or 1 / 2 for srun's own errors.
func Main(args []string, stdout, stderr io.Writer) int {
	if Informational(args, Usage, stdout) {
		return 0
	}
	o, err := parse(args[1:])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if o.listMPI {
		_, _ = io.WriteString(stdout, pmi.ListText())
		return 0
	}
	sock := os.Getenv(api.EnvStepSocket)
	if sock == "" {
		// A login host or a salloc shell (alloc.go).
		return outside(o, stdout, stderr)
	}
	if err := o.checkContainer(os.Getenv("GPUD_IMAGE")); err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	o.envDefaults(os.Getenv)
	if o.jobOpt != "" && o.jobOpt != o.jobID {
		// Slurm's srun would start the step in that other job; gpud's
		// steps reach only the job whose step socket this is.
		fmt.Fprintf(stderr, "srun: --jobid=%s: this srun runs inside job %s, and gpud starts steps only in the job srun runs in; drop --jobid, or run srun --jobid=%s from outside a job\n", o.jobOpt, o.jobID, o.jobOpt)
		return exitUsage
	}
	o.req.Stdin = !o.noInput && hasInput(os.Stdin)
	if o.req.Cwd == "" {
		o.req.Cwd, _ = os.Getwd()
	}
	o.req.Env = exportEnv(o.export, os.Environ())
	o.redial = func() (net.Conn, error) { return net.Dial("unix", sock) }
	c, err := dialAgain(o.redial, stderr, sock) // resend.go
	if err != nil {
		fmt.Fprintf(stderr, "srun: reach this job's node agent at %s: %v\n", sock, err)
		return exitError
	}
	defer c.Close()
	return runStep(c, o, stdout, stderr)
}

// runStep runs the step over c, with srun's terminal in raw mode under
// --pty (restored on every way out), from inside a job or outside one.
func runStep(c net.Conn, o options, stdout, stderr io.Writer) int {
	if o.pty {
		restore, err := setupPty(&o, os.Stdin, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "srun: --pty: %v\n", err)
			return exitError
		}
		defer restore()
		if o.req.Pty {
			stderr = crlf{stderr}
		}
	}
	return run(c, o, stdout, stderr)
}

func sigName(n int) string {
	if s := syscall.Signal(n).String(); s != "" {
		return s
	}
	return "signal " + strconv.Itoa(n)
}

// expand is srun's output pattern: %j job, %J job.step, %s step, %t
// task, %n the task's node in the step, %N node name (this host), %A array job, %a array task, %x job
// name, %u user, %% a percent sign.
func expand(p string, step, task, node int) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+1 == len(p) {
			b.WriteByte(p[i])
			continue
		}
		i++
		switch p[i] {
		case 'j', 'J':
			b.WriteString(os.Getenv("SLURM_JOB_ID"))
			if p[i] == 'J' {
				b.WriteString("." + strconv.Itoa(step))
			}
		case 's':
			b.WriteString(strconv.Itoa(step))
		case 't':
			b.WriteString(strconv.Itoa(task))
		case 'n': // the task's node, relative to the step
			b.WriteString(strconv.Itoa(node))
		case 'N':
			h, _ := os.Hostname()
			b.WriteString(h)
		case 'A': // the array's job id, or the job's own outside an array
			if a := os.Getenv("SLURM_ARRAY_JOB_ID"); a != "" {
				b.WriteString(a)
			} else {
				b.WriteString(os.Getenv("SLURM_JOB_ID"))
			}
		case 'a': // the array task, or Slurm's NO_VAL outside an array (as sbatch's)
			if a := os.Getenv("SLURM_ARRAY_TASK_ID"); a != "" {
				b.WriteString(a)
			} else {
				b.WriteString("4294967294")
			}
		case 'x':
			b.WriteString(os.Getenv("SLURM_JOB_NAME"))
		case 'u':
			b.WriteString(os.Getenv("USER"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(p[i])
		}
	}
	return filepath.Clean(b.String())
}

// sink writes tasks' output; with labels it writes whole lines, each
// prefixed "TASK: ", keeping each task's partial line until it ends.
type sink struct {
	w       io.Writer
	label   bool
	partial map[int][]byte
}

func newSink(w io.Writer, label bool) *sink {
	return &sink{w: w, label: label, partial: map[int][]byte{}}
}

func (s *sink) write(task int, data []byte) {
	if !s.label {
		_, _ = s.w.Write(data)
		return
	}
	buf := append(s.partial[task], data...)
	var out bytes.Buffer
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(&out, "%d: %s\n", task, buf[:i])
		buf = buf[i+1:]
	}
	s.partial[task] = buf
	_, _ = s.w.Write(out.Bytes())
}

func (s *sink) flushTask(task int) {
	if b := s.partial[task]; len(b) > 0 {
		fmt.Fprintf(s.w, "%d: %s\n", task, b)
	}
	delete(s.partial, task)
}

func (s *sink) flush() {
	for t := range s.partial {
		s.flushTask(t)
	}
}

// hasInput reports whether srun's stdin may hold input for task 0: not
// /dev/null (a batch script's stdin) and not closed.
func hasInput(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// checkContainer checks pyxis's options of a step inside a job, whose
// image is jobImage: a step runs in the job's own container (gpud has no
// containers per step), so --container-image must name the job's image
// and --container-name names that container; --container-workdir is the
// step's working directory there. Options that would make another
// container are refused, saying where they belong.
func (o *options) checkContainer(jobImage string) error {
	for _, c := range o.container {
		switch c.Name {
		case "container-name", "container-workdir", "container-env", "no-container-remap-root":
		case "container-image":
			ref, err := spec.ParseImage(c.Value)
			if err != nil {
				return fmt.Errorf("srun: --container-image: %w", err)
			}
			if jobImage != "" && !sameImage(ref, jobImage) {
				return fmt.Errorf("srun: --container-image=%s: this job runs in %s, and gpud runs a job's steps in the job's own container; give --container-image to sbatch or salloc (#SBATCH --container-image=%s) instead", c.Value, jobImage, c.Value)
			}
		default:
			return fmt.Errorf("srun: --%s: the job's container exists already (gpud runs steps in it); give --%s to sbatch or salloc instead", c.Name, c.Name)
		}
	}
	return nil
}

// sameImage reports whether two OCI references name one image, Docker
// Hub's short names and a missing :latest included.
func sameImage(a, b string) bool {
	norm := func(r string) string {
		if r == spec.ImageHost {
			return r
		}
		first, _, ok := strings.Cut(r, "/")
		if !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
			if !ok {
				r = "library/" + r
			}
			r = "docker.io/" + r
		}
		last := r[strings.LastIndexByte(r, '/')+1:]
		if !strings.ContainsAny(last, ":@") {
			r += ":latest"
		}
		return r
	}
	return norm(a) == norm(b)
}
