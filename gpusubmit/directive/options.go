package directive

import (
	"fmt"
	"strings"
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
	{Name: "partition", Short: "p", Value: "PARTITION", Usage: "partition to run in (default: the controller's default partition)"},
	{Name: "qos", Short: "q", Value: "QOS", Usage: "quality of service (default: the account's default QOS)"},
	{Name: "account", Short: "A", Value: "ACCOUNT", Usage: "account charged for the job (default: your default account)"},
	{Name: "nodes", Short: "N", Value: "N", Usage: "number of nodes, all started together (N, or N-N); default 1"},
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
	{Name: "requeue", Bool: true, Usage: "requeue the job after node failure or preemption (the default)", family: "requeue"},
	{Name: "no-requeue", Bool: true, Usage: "never requeue the job", family: "requeue"},
	{Name: "begin", Value: "TIME", Usage: "do not start before " + BeginForms},
	{Name: "nice", Value: "N", Usage: "lower the job's priority by N (negative raises it; needs operator rights)"},
	{Name: "rdma", Value: "[N]", Optional: RDMAPaired, Usage: "RDMA NICs on each node for NCCL/MPI over InfiniBand or RoCE: alone, the NICs paired with the job's GPUs (same PCIe switch, else NUMA node); =N, N NICs, paired ones first, then those on their NUMA node. The job gets their /dev/infiniband devices, NCCL_IB_HCA naming them and unlimited locked memory"},
	{Name: "exclusive", Bool: true, Usage: "do not share nodes with other jobs"},
	{Name: "nodelist", Short: "w", Value: "HOSTS", Usage: "run on these nodes: gpu01,gpu02 or gpu[01-04]"},
	{Name: "exclude", Short: "x", Value: "HOSTS", Usage: "never run on these nodes, same forms as --nodelist"},
	{Name: "constraint", Short: "C", Value: "FEATURES", Usage: "node features the job needs: nvlink, ib&nvlink, a|b"},
	{Name: "export", Value: "VARS", Usage: "environment passed to the job: ALL (default), NONE, VAR,VAR=value (only those) or ALL,VAR=value"},
	{Name: "image", Value: "IMAGE", Usage: "container image to run in, or host for the node's root filesystem (default: the node's default)"},
	{Name: "checkpoint", Value: "INTERVAL", Usage: "ask the job to checkpoint every INTERVAL (minutes, a Slurm time, or 30m/1h); the job gets GPUD_CHECKPOINT_DIR"},
	{Name: "signal", Value: "[B:]SIG[@SECONDS]", Usage: "send SIG this many seconds (default 60) before the time limit; also the checkpoint signal"},
	{Name: "checkpoint-mode", Value: "MODE", Usage: "cooperative (default: the job saves its own state on the checkpoint signal) or criu (refused unless a node of the partition passes criu check)"},
	{Name: "comment", Value: "TEXT", Usage: "free text kept with the job"},
	{Name: "test-only", Bool: true, Usage: "do not submit; print when and where the job would start"},
	{Name: "parsable", Bool: true, Usage: "print only the job id"},
	{Name: "wait", Short: "W", Bool: true, Usage: "wait for the job to end and exit with its exit code"},
	{Name: "wrap", Value: "CMD", Usage: "run CMD with /bin/sh instead of a script", CommandLineOnly: true},
	{Name: "mail-type", Value: "TYPE", Usage: "accepted for Slurm scripts and ignored: gpud sends no mail", NoOp: true},
	{Name: "mail-user", Value: "ADDR", Usage: "accepted for Slurm scripts and ignored: gpud sends no mail", NoOp: true},
	{Name: "get-user-env", Bool: true, Usage: "accepted for Slurm scripts and ignored: --export=ALL already passes your environment", NoOp: true},
}

// unsupported are sbatch options real scripts use that gpud cannot honour;
// naming them gives a better message than "unknown option".
var unsupported = map[string]string{
	"reservation":         "gpud has no advance reservations",
	"licenses":            "gpud schedules no licenses",
	"open-mode":           "output files are always truncated",
	"gpu-bind":            "the node binds GPUs itself (NVLink/NUMA aware)",
	"cpu-bind":            "the node does not bind tasks to CPUs",
	"distribution":        "gpud starts one process per node, not tasks",
	"gpus-per-task":       "gpud starts one process per node; use --gpus-per-node",
	"ntasks-per-gpu":      "gpud starts one process per node; use --gpus-per-node and --ntasks-per-node",
	"mincpus":             "use --cpus-per-task",
	"tmp":                 "gpud does not schedule local disk",
	"overcommit":          "gpud never overcommits CPUs",
	"oversubscribe":       "use --exclusive or nothing",
	"threads-per-core":    "gpud does not schedule hardware threads",
	"hint":                "gpud does not schedule hardware threads",
	"mem-bind":            "the node does not bind memory",
	"switches":            "gpud places by NVLink/NUMA/RDMA affinity, not switch counts",
	"uid":                 "jobs run as the submitting user",
	"gid":                 "jobs run as the submitting user",
	"clusters":            "gpud manages one cluster",
	"batch":               "gpud has no batch features",
	"deadline":            "use --time",
	"time-min":            "gpud schedules with the full --time",
	"export-file":         "use --export",
	"propagate":           "limits come from the allocation",
	"kill-on-invalid-dep": "jobs with unsatisfiable dependencies stay pending with reason DependencyNeverSatisfied",
}

// RDMAPaired is --rdma given alone.
const RDMAPaired = "gpus"

// ExpandOptional rewrites a command line so that an option with an
// Optional value given alone ("--rdma") carries it ("--rdma=gpus"); flag
// parsing would otherwise take the next word as its value. It stops at
// the script (the first word that is neither an option nor an option's
// value) and at "--".
func ExpandOptional(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if i == 0 {
			continue // the program name
		}
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			return append(out, args[i+1:]...)
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		d, ok := Lookup(name)
		switch {
		case !ok || d.Bool:
		case d.Optional != "":
			out[len(out)-1] = "--" + d.Name + "=" + d.Optional
		case i+1 < len(args):
			i++
			out = append(out, args[i]) // the option's value
		}
	}
	return out
}

// Lookup finds an option by its long name or short letter (without dashes).
func Lookup(name string) (*Def, bool) {
	for i := range Options {
		if Options[i].Name == name || (len(name) == 1 && Options[i].Short == name) {
			return &Options[i], true
		}
	}
	return nil, false
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
	return fmt.Errorf("unknown option %s%s; see gpusubmit --help for the options gpud honours", dash, name)
}

// Source says where an option came from, for messages.
type Source struct {
	// File is the script's name; Line is 1-based. Line 0 is the command line.
	File string
	Line int
}

// CommandLine is the source of options given as flags.
var CommandLine = Source{}

func (s Source) String() string {
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
