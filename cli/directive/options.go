package directive

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/cli/slurmtime"
)

// Def describes one gpusubmit option. The same table drives directive
// parsing, the command-line flags and the man page, so they cannot drift.
type Def struct {
	// Name is the long name without dashes ("job-name").
	Name string
	// Short is the one-letter form without its dash ("J"), or "".
	Short string
	// Bool options are switches: they take no value.
	Bool bool
	// Value is the placeholder shown in help ("HH:MM:SS").
	Value string
	Usage string
	// NoOp options are accepted with a warning because they only change
	// notification or are already what gpud does.
	NoOp bool
	// Warn, for a NoOp option, says why ignoring it changes no result; it
	// ends the warning.
	Warn string
	// CommandLineOnly options may not appear as script directives.
	CommandLineOnly bool
	// Optional is the value of an option given alone ("--rdma"); its own
	// value must then be attached with "=" ("--rdma=2").
	Optional string
	// family groups mutually exclusive options (mem, gpu, cpus, requeue):
	// a later source replaces an earlier one's choice, while two members
	// from the same source are an error.
	family string
}

// Options is gpusubmit's option table, in help order.
var Options = []Def{
	{Name: "job-name", Short: "J", Value: "NAME", Usage: "job name (default: the script's file name, or \"wrap\")"},
	{Name: "partition", Short: "p", Value: "PARTITION", Usage: "partition to run in (default: the controller's default partition); a comma list a,b starts the job in whichever can start it first, as Slurm"},
	{Name: "qos", Short: "q", Value: "QOS", Usage: "quality of service (default: the account's default QOS)"},
	{Name: "account", Short: "A", Value: "ACCOUNT", Usage: "account charged for the job (default: your default account)"},
	{Name: "nodes", Short: "N", Value: "N", Usage: "number of nodes, all started together: N, or MIN-MAX to start on as many as are free within the range; default 1"},
	{Name: "ntasks", Short: "n", Value: "N", Usage: "tasks in total, spread evenly over the nodes; sizes the CPU request"},
	{Name: "ntasks-per-node", Value: "N", Usage: "tasks on each node; CPUs per node = cpus-per-task × tasks per node"},
	{Name: "cpus-per-task", Short: "c", Value: "N", Usage: "CPUs for each task (default 1)", family: "cpus"},
	{Name: "cpus-per-gpu", Value: "N", Usage: "CPUs for each allocated GPU (instead of --cpus-per-task)", family: "cpus"},
	{Name: "mem", Value: "SIZE", Usage: "memory per node: 500M, 4G, 1T, 2048 (MiB), 512K", family: "mem"},
	{Name: "mem-per-cpu", Value: "SIZE", Usage: "memory per allocated CPU (instead of --mem)", family: "mem"},
	{Name: "mem-per-gpu", Value: "SIZE", Usage: "memory per allocated GPU (instead of --mem)", family: "mem"},
	{Name: "gpus", Short: "G", Value: "[TYPE:]N", Usage: "GPUs for the whole job: 2, h100:2, 1g.10gb:2 (MIG slices), 0.5 or h100:0.5 (a share of one GPU)", family: "gpu"},
	{Name: "gpus-per-node", Value: "[TYPE:]N", Usage: "GPUs on each node, same forms as --gpus", family: "gpu"},
	{Name: "gres", Value: "gpu[:TYPE]:N", Usage: "generic resources, Slurm style; only gpu is scheduled (gpu:a100:2 means 2 A100 per node)", family: "gpu"},
	{Name: "time", Short: "t", Value: "TIME", Usage: "time limit: " + TimeForms + " (0 or UNLIMITED: the partition's maximum)"},
	{Name: "output", Short: "o", Value: "PATTERN", Usage: "stdout file, relative to --chdir; %j job id, %x name, %u user, %A array job, %a task, %N node, %% (default gpud-%j.out, gpud-%A_%a.out for arrays)"},
	{Name: "error", Short: "e", Value: "PATTERN", Usage: "stderr file, same patterns as --output (default: with stdout)"},
	{Name: "chdir", Short: "D", Value: "DIR", Usage: "working directory of the job (default: the current directory)"},
	{Name: "array", Short: "a", Value: "SPEC", Usage: "job array: 0-15, 1,3,5, 0-15:4, 0-99%10 (at most 10 running)"},
	{Name: "dependency", Short: "d", Value: "TYPE:ID[:ID]", Usage: "start after other jobs: after, afterany, afterok, afternotok, aftercorr (joined by , for all or ? for any), or singleton"},
	{Name: "hold", Short: "H", Bool: true, Usage: "submit held; start with gpuq release"},
	{Name: "requeue", Value: "[expedite]", Optional: "true", Usage: "requeue the job after node failure or preemption (the default); =expedite: when a hardware fault (a GPU or node gpud's health model takes out, a failed node) requeues it, it goes ahead of every other job, away from the failed GPU or node", family: "requeue"},
	{Name: "no-requeue", Bool: true, Usage: "never requeue the job", family: "requeue"},
	{Name: "begin", Value: "TIME", Usage: "do not start before TIME: " + slurmtime.Summary},
	{Name: "nice", Value: "N", Usage: "lower the job's priority by N (negative raises it; needs operator rights)"},
	{Name: "rdma", Value: "[N]", Optional: RDMAPaired, Usage: "RDMA NICs on each node for NCCL/MPI over InfiniBand or RoCE: alone, the NICs paired with the job's GPUs (same PCIe switch, else NUMA node); =N, N NICs, paired ones first, then those on their NUMA node. The job gets their /dev/infiniband devices, NCCL_IB_HCA naming them and unlimited locked memory"},
	{Name: "exclusive", Bool: true, Usage: "do not share nodes with other jobs"},
	{Name: "nodelist", Short: "w", Value: "HOSTS", Usage: "run on these nodes: gpu01,gpu02 or gpu[01-04]"},
	{Name: "exclude", Short: "x", Value: "HOSTS", Usage: "never run on these nodes, same forms as --nodelist"},
	{Name: "constraint", Short: "C", Value: "FEATURES", Usage: "node features the job needs: nvlink, ib&nvlink, a|b"},
	{Name: "export", Value: "VARS", Usage: "environment passed to the job: ALL (default), NONE, VAR,VAR=value (only those) or ALL,VAR=value"},
	{Name: "image", Value: "IMAGE", Usage: "container image to run in: REGISTRY/IMAGE:TAG, enroot's REGISTRY#IMAGE:TAG, or host for the node's root filesystem (default: the node's default); pulled with your credentials from ~/.config/enroot/.credentials or ~/.docker/config.json", family: "image"},
	{Name: "container-image", Value: "IMAGE", Usage: "pyxis's name for --image: enroot's [docker://]REGISTRY#IMAGE:TAG or an OCI reference", family: "image"},
	{Name: "container-mounts", Value: "SRC[:DST[:ro]],...", Usage: "pyxis: bind node directories or files into the image, read-write unless :ro (DST defaults to SRC)"},
	{Name: "container-workdir", Value: "DIR", Usage: "pyxis: working directory inside the image (default: --chdir if given, else the image's)"},
	{Name: "container-name", Value: "NAME", Usage: "pyxis: name the job's container; steps (srun) that give the same name run in it and see its files"},
	{Name: "container-writable", Bool: true, Usage: "pyxis: the image's root is writable (gpud's default); writes last as long as the job", family: "container-rw"},
	{Name: "container-readonly", Bool: true, Usage: "pyxis: the image's root is read-only", family: "container-rw"},
	{Name: "container-mount-home", Bool: true, Usage: "pyxis: bind your home directory at its path into the image", family: "container-home"},
	{Name: "no-container-mount-home", Bool: true, Usage: "pyxis: do not bind your home into the image (gpud's default)", family: "container-home"},
	{Name: "no-container-remap-root", Bool: true, Usage: "pyxis: accepted; jobs always run as your own user", NoOp: true, Warn: "jobs always run as your own user"},
	{Name: "container-env", Value: "NAME,...", Usage: "pyxis: accepted and ignored: the job's environment (--export) already wins over the image's for every variable", NoOp: true, Warn: "the job's environment (--export) already wins over the image's for every variable"},
	{Name: "checkpoint", Value: "INTERVAL", Usage: "ask the job to checkpoint every INTERVAL (minutes, a Slurm time, or 30m/1h); the job gets GPUD_CHECKPOINT_DIR"},
	{Name: "signal", Value: "[B:]SIG[@SECONDS]", Usage: "send SIG this many seconds (default 60) before the time limit; also the checkpoint signal"},
	{Name: "checkpoint-mode", Value: "MODE", Usage: "cooperative (default: the job saves its own state on the checkpoint signal) or criu (refused unless a node of the partition passes criu check)"},
	{Name: "comment", Value: "TEXT", Usage: "free text kept with the job"},
	{Name: "test-only", Bool: true, Usage: "do not submit; print when and where the job would start"},
	{Name: "parsable", Bool: true, Usage: "print only the job id"},
	{Name: "wait", Short: "W", Bool: true, Usage: "wait for the job to end and exit with its exit code"},
	{Name: "wrap", Value: "CMD", Usage: "run CMD with /bin/sh instead of a script", CommandLineOnly: true},
	{Name: "gpus-per-task", Value: "[TYPE:]N", Usage: "GPUs for each task: times the tasks on a node (--ntasks-per-node, or -n spread over -N) gives the GPUs per node; with --gres=gpu:N, --gpus-per-node or --gpus those give the node's GPUs and each task binds its own"},
	{Name: "open-mode", Value: "MODE", Usage: "append to or truncate (the default) the --output and --error files"},
	{Name: "time-min", Value: "TIME", Usage: "the least time the job may run: where its --time does not fit, the scheduler may start it with less (at least this), which becomes its limit"},
	{Name: "reservation", Value: "NAME", Usage: "run in this advance reservation (scontrol show reservation): on its nodes, in its windows"},
	{Name: "wckey", Value: "KEY", Usage: "workload characterisation key, kept with the job and shown by gpuq acct and sacct"},
	{Name: "mincpus", Value: "N", Usage: "at least N CPUs on each node: raises the CPUs per node to N when fewer were asked"},
	{Name: "mail-type", Value: "TYPE", Usage: "accepted for Slurm scripts and ignored: gpud sends no mail", NoOp: true},
	{Name: "mail-user", Value: "ADDR", Usage: "accepted for Slurm scripts and ignored: gpud sends no mail", NoOp: true},
	{Name: "get-user-env", Bool: true, Usage: "accepted for Slurm scripts and ignored: --export=ALL already passes your environment", NoOp: true},
	{Name: "hint", Value: "HINT", Usage: "accepted and ignored: gpud allocates whole cores and does not schedule hardware threads, so the hint changes nothing", NoOp: true, Warn: "gpud allocates whole cores and does not schedule hardware threads"},
	{Name: "ntasks-per-core", Value: "N", Usage: "accepted and ignored: gpud does not schedule hardware threads; CPUs come from --ntasks and --cpus-per-task", NoOp: true, Warn: "gpud does not schedule hardware threads; CPUs come from --ntasks and --cpus-per-task"},
	{Name: "gres-flags", Value: "FLAGS", Usage: "accepted and ignored: the node places GPUs next to their NUMA node's CPUs where it can", NoOp: true, Warn: "the node places GPUs next to their NUMA node's CPUs where it can"},
	{Name: "wait-all-nodes", Value: "0|1", Usage: "accepted and ignored: every node of a gpud job starts together, so the script always sees them all", NoOp: true, Warn: "every node of a gpud job starts together"},
	{Name: "overcommit", Short: "O", Bool: true, Usage: "accepted and ignored: gpud never gives a job fewer CPUs than it asks for", NoOp: true, Warn: "gpud never gives a job fewer CPUs than it asks for"},
	{Name: "distribution", Short: "m", Value: "DIST", Usage: "accepted and ignored: tasks are laid out in blocks over the nodes, Slurm's default", NoOp: true, Warn: "tasks are laid out in blocks, Slurm's default"},
	{Name: "licenses", Short: "L", Value: "LICENSES", Usage: "accepted and ignored: gpud schedules no licenses, so the job may start while none is free", NoOp: true, Warn: "gpud schedules no licenses; the job may start while none is free"},
	{Name: "gpu-bind", Value: "TYPE", Usage: "accepted and ignored: the node binds GPUs itself (NVLink and NUMA aware)", NoOp: true, Warn: "the node binds GPUs itself (NVLink and NUMA aware)"},
	{Name: "ntasks-per-gpu", Value: "N", Usage: "accepted and ignored: the job's GPUs come from --gpus, --gpus-per-node or --gpus-per-task", NoOp: true, Warn: "the job's GPUs come from --gpus, --gpus-per-node or --gpus-per-task"},
}

// aliases are other long names sbatch takes for options of the table.
var aliases = map[string]string{
	"tasks-per-node": "ntasks-per-node",
	"workdir":        "chdir",
}

// cliOnly are the options the commands take besides Options: the
// controller address and help. They are not directives.
var cliOnly = []getopt.Opt{
	{Long: "controller", Arg: getopt.Required},
	{Long: "help", Short: 'h'},
	{Long: "usage"},
	{Long: "version", Short: 'V'},
}

// unsupportedNoArg are the refused options that take no value, so parsing
// steps over the others' values and reports every problem at once.
var unsupportedNoArg = map[string]bool{"container-remap-root": true, "container-entrypoint": true, "oversubscribe": true, "contiguous": true, "ignore-pbs": true, "no-kill": true, "quiet": true, "verbose": true, "spread-job": true, "use-min-nodes": true, "x11": true}

// unsupportedShort are the letters of refused options.
var unsupportedShort = map[string]byte{"oversubscribe": 's', "clusters": 'M', "core-spec": 'S', "extra-node-info": 'B', "nodefile": 'F', "input": 'i', "no-kill": 'k', "quiet": 'Q', "verbose": 'v'}

// OptionSet is the getopt table of gpusubmit and sbatch: every option of
// Options, the refused ones (so their values are stepped over and the
// refusal says why), and cliOnly. It is built once per process; each call
// returns its own Set over the shared, read-only table.
func OptionSet() *getopt.Set {
	s := *optionSet()
	return &s
}

var optionSet = sync.OnceValue(buildOptionSet)

func buildOptionSet() *getopt.Set {
	s := &getopt.Set{Mode: getopt.StopAtFirst}
	for _, d := range Options {
		o := getopt.Opt{Long: d.Name, Arg: getopt.Required}
		if d.Short != "" {
			o.Short = d.Short[0]
		}
		switch {
		case d.Name == "exclusive" || d.Name == "get-user-env":
			o.Arg = getopt.Optional // --exclusive[=user|mcs], --get-user-env[=timeout]
		case d.Bool:
			o.Arg = getopt.Optional // --hold=no is read as gpusubmit always has
		case d.Optional != "":
			o.Arg = getopt.Optional
		}
		s.Opts = append(s.Opts, o)
	}
	for name := range unsupported {
		o := getopt.Opt{Long: name, Arg: getopt.Required, Short: unsupportedShort[name]}
		if unsupportedNoArg[name] {
			o.Arg = getopt.NoArg
		}
		if name == "propagate" {
			o.Arg = getopt.Optional
		}
		s.Opts = append(s.Opts, o)
	}
	for alias, name := range aliases {
		d, _ := Lookup(name)
		arg := getopt.Required
		if d.Bool {
			arg = getopt.Optional
		}
		s.Opts = append(s.Opts, getopt.Opt{Long: alias, Arg: arg})
	}
	s.Opts = append(s.Opts, cliOnly...)
	// Map order must not decide the order of "possibilities" in messages.
	slices.SortStableFunc(s.Opts, func(a, b getopt.Opt) int { return strings.Compare(a.Long, b.Long) })
	return s
}

// unsupported are sbatch options real scripts use that gpud cannot honour;
// naming them gives a better message than "unknown option".
var unsupported = map[string]string{
	"cpu-bind":            "the node does not bind tasks to CPUs",
	"tmp":                 "gpud does not schedule local disk",
	"oversubscribe":       "use --exclusive or nothing",
	"threads-per-core":    "gpud does not schedule hardware threads",
	"mem-bind":            "the node does not bind memory",
	"cores-per-socket":    "gpud does not schedule sockets; use --cpus-per-task",
	"sockets-per-node":    "gpud does not schedule sockets; use --cpus-per-task",
	"extra-node-info":     "gpud does not schedule sockets, cores or threads; use --cpus-per-task",
	"core-spec":           "gpud does not reserve cores for the system",
	"thread-spec":         "gpud does not reserve threads for the system",
	"nodefile":            "use --nodelist",
	"input":               "batch jobs read no standard input in gpud",
	"no-kill":             "a gpud job ends when one of its nodes fails, and is requeued if it may be",
	"contiguous":          "gpud does not order nodes by network position",
	"priority":            "priority comes from the fairshare and QOS policy; use --nice",
	"network":             "use --rdma for RDMA NICs",
	"profile":             "gpud samples every job's GPU, CPU and memory use already (gpuq acct)",
	"acctg-freq":          "the node agent's sampling interval is set by the site",
	"gpu-freq":            "gpud does not set GPU clocks",
	"cpu-freq":            "gpud does not set CPU clocks",
	"bb":                  "gpud has no burst buffers",
	"bbf":                 "gpud has no burst buffers",
	"container":           "use --image or --container-image",
	"x11":                 "batch jobs have no display",
	"quiet":               "gpusubmit prints only the job id line and warnings already",
	"verbose":             "gpud logs submissions on the controller",
	"spread-job":          "gpud places multi-node jobs by GPU affinity",
	"use-min-nodes":       "gpud allocates a fixed number of nodes",
	"delay-boot":          "gpud nodes do not reboot for jobs",
	"mcs-label":           "gpud has no MCS labels",
	"power":               "gpud does not manage power",
	"tres-per-task":       "use --cpus-per-task and --gpus-per-task",
	"cluster-constraint":  "gpud manages one cluster",
	"ignore-pbs":          "gpud reads only #SBATCH and #GPU directives",
	"switches":            "gpud places by NVLink/NUMA/RDMA affinity, not switch counts",
	"uid":                 "jobs run as the submitting user",
	"gid":                 "jobs run as the submitting user",
	"clusters":            "gpud manages one cluster",
	"batch":               "gpud has no batch features",
	"deadline":            "use --time",
	"export-file":         "use --export",
	"propagate":           "limits come from the allocation",
	"kill-on-invalid-dep": "jobs with unsatisfiable dependencies stay pending with reason DependencyNeverSatisfied",
	// pyxis's, which gpud cannot honour.
	"container-remap-root": "gpud runs jobs as your own user and cannot make you root inside the image; use an image that works as a normal user",
	"container-save":       "gpud does not save containers as squashfs files; write results to a --container-mounts directory, or build an image and push it to a registry",
	"container-entrypoint": "gpud runs your command without the image's ENTRYPOINT; call the entrypoint yourself at the start of the command",
}

// RDMAPaired is --rdma given alone.
const RDMAPaired = "gpus"

// ProblemFlag is the hidden flag Normalize hands command-line problems to
// the app by, which reports them with the script's in one pass.
const ProblemFlag = "x-gpud-problem"

// Normalize rewrites a command line (args[0] is the program) the way
// getopt_long reads it into canonical words urfave/cli takes: every option
// as --name or --name=value (prefixes resolved, short options unbundled,
// optional values filled), then "--" and the script with its arguments.
// Unknown and refused options become --x-gpud-problem=MESSAGE, so they are
// reported together with every other problem.
//
// A heterogeneous job's components, separated by ":" words on sbatch's
// command line (sbatch -N1 : -p gpu -G1 job.sh), each follow a
// --x-gpud-hetjob word with their own options.
func Normalize(args []string) []string {
	if len(args) == 0 {
		return args
	}
	out := make([]string, 0, len(args)+2)
	out = append(out, args[0])
	rest := normalizeComponent(&out, args[1:])
	for len(rest) > 0 && rest[0] == ":" {
		out = append(out, "--"+HetFlag)
		rest = normalizeComponent(&out, rest[1:])
	}
	out = append(out, "--")
	return append(out, rest...)
}

// HetFlag is the hidden word Normalize puts before each further component
// of a heterogeneous job.
const HetFlag = "x-gpud-hetjob"

// normalizeComponent appends the canonical words of the options at the
// front of args to *out and returns the words after them.
func normalizeComponent(out *[]string, args []string) []string {
	ps, rest, errs := OptionSet().Parse(args)
	problem := func(msg string) { *out = append(*out, "--"+ProblemFlag+"="+msg) }
	for _, e := range errs {
		problem(UsageMessage(e))
	}
	var job []getopt.Parsed
	for _, p := range ps {
		switch p.Name() {
		case "help", "usage":
			*out = append(*out, "--help")
		case "version":
			*out = append(*out, "--version")
		case "controller":
			*out = append(*out, "--controller="+p.Value)
		default:
			job = append(job, p)
		}
	}
	opts, problems := resolve(job, CommandLine)
	for _, m := range problems {
		problem(m)
	}
	for _, o := range opts {
		if d, _ := Lookup(o.Name); !d.Bool {
			*out = append(*out, "--"+o.Name+"="+o.Value)
		} else if v, _ := parseBool(o.Value); v && o.Value == "true" {
			*out = append(*out, "--"+o.Name)
		} else {
			*out = append(*out, fmt.Sprintf("--%s=%t", o.Name, v))
		}
	}
	return rest
}

// UsageMessage words a getopt error for gpusubmit: unknown options get
// the refusal's reason or "did you mean", missing values the form.
func UsageMessage(e *getopt.Error) string {
	switch e.Kind {
	case getopt.Unknown:
		return unknownOption(e.Name).Error()
	case getopt.NeedsValue:
		if d, ok := Lookup(e.Name); ok {
			return fmt.Sprintf("--%s needs a value (--%s=%s)", d.Name, d.Name, d.Value)
		}
	}
	return e.Msg
}

// Lookup finds an option by its long name, an alias, or its short letter
// (without dashes).
func Lookup(name string) (*Def, bool) {
	if a, ok := aliases[name]; ok {
		name = a
	}
	for i := range Options {
		if Options[i].Name == name || (len(name) == 1 && Options[i].Short == name) {
			return &Options[i], true
		}
	}
	return nil, false
}

// Refusal explains why gpud refuses option name, for the commands
// (srun) that parse it themselves; ok is false for options it takes.
func Refusal(name string) (err error, ok bool) {
	if _, ok := unsupported[name]; !ok {
		return nil, false
	}
	return unknownOption(name), true
}

// unknownOption explains why name is not accepted.
func unknownOption(name string) error {
	if why, ok := unsupported[name]; ok {
		return fmt.Errorf("--%s is an sbatch option gpud cannot honour (%s); remove it", name, why)
	}
	dash := "--"
	if len(name) == 1 {
		dash = "-"
	}
	hint := ""
	if len(name) > 1 {
		if m := OptionSet().Suggest(name); m != "" {
			hint = "did you mean --" + m + "? "
		}
	}
	return fmt.Errorf("unknown option %s%s; %ssee gpusubmit --help for the options gpud honours", dash, name, hint)
}

// Source says where an option came from, for messages.
type Source struct {
	// File is the script's name; Line is 1-based. Line 0 is the command line.
	File string
	Line int
	// Field, when set, names a field of a job description that is not a
	// command line (Slurm's REST API: "job.tres_per_node"); such options
	// count as one source, like the command line's.
	Field string
}

// CommandLine is the source of options given as flags.
var CommandLine = Source{}

func (s Source) String() string {
	if s.Field != "" {
		return s.Field
	}
	if s.Line == 0 {
		return "command line"
	}
	return fmt.Sprintf("line %d of %s", s.Line, s.File)
}

// Option is one occurrence of an option: from a directive or a flag.
type Option struct {
	// Name is the long name (Def.Name).
	Name string
	// Value is the option's text; "true"/"false" for switches.
	Value  string
	Source Source
}

func (o Option) String() string {
	d, _ := Lookup(o.Name)
	if d != nil && d.Bool {
		return "--" + o.Name
	}
	return "--" + o.Name + "=" + o.Value
}

// parseBool reads a switch's value: absent or true means on.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(v) {
	case "", "true", "yes", "1":
		return true, nil
	case "false", "no", "0":
		return false, nil
	}
	return false, fmt.Errorf("takes no value (got %q)", v)
}

// propagated are the options a heterogeneous job's first component gives
// the others unless they set their own (Slurm's list in
// heterogeneous_jobs.html, less what gpud has no option for); the rest
// (resources, task layout) start from their defaults in each component.
var propagated = map[string]bool{
	"account": true, "begin": true, "chdir": true, "comment": true, "dependency": true, "error": true,
	"exclude": true, "export": true, "hold": true, "job-name": true, "nice": true, "no-requeue": true,
	"open-mode": true, "output": true, "partition": true, "qos": true, "requeue": true, "reservation": true,
	"signal": true, "time": true, "time-min": true, "wckey": true,
}

// Propagated are the options of opts a heterogeneous job's further
// components take from its first, in order.
func Propagated(opts []Option) []Option {
	var out []Option
	for _, o := range opts {
		if propagated[o.Name] {
			out = append(out, o)
		}
	}
	return out
}
