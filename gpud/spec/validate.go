package spec

import (
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds of a JobSpec that Validate enforces. They catch typos and keep
// every later computation in range; the controller's policy (max nodes
// per job, partition time limits, the nice range it allows) is tighter.
const (
	MaxNameBytes   = 256      // job, partition, QOS, account, node, GPU model, ...
	MaxPathBytes   = 4096     // PATH_MAX
	MaxTextBytes   = 64 << 10 // one argument, one environment entry, a comment
	MaxScriptBytes = 4 << 20  // a batch script larger than this is a mistake, not a job
	MaxItems       = 4096     // args, env, nodelist, exclude
	MaxCPUs        = 1 << 20  // per node, per task
	MaxGPUs        = 1 << 12  // per node
	MaxTotalGPUs   = 1 << 20  // per job
	MaxNodes       = 1 << 31  // per job
	MaxNice        = 2147483645
	// MaxRDMA is the most NICs --rdma=N may ask for on one node.
	MaxRDMA = 64
	// MaxSeconds bounds every duration of a job (time limit, checkpoint
	// interval): 100 years, so adding one to any time the cluster sees
	// stays far inside time.Duration and time.Time.
	MaxSeconds = 100 * 366 * 24 * 3600
)

// MinBegin and MaxBegin bound --begin: every instant in [MinBegin,
// MaxBegin) has a UnixNano (which ends in 2262), and none is absurd.
var (
	MinBegin = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxBegin = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// FieldError is one problem of a JobSpec. Field is the sbatch option that
// sets the field ("--gpus-per-task"), or the field's name where no option
// does ("script", "submit dir"); the message names it too, so Error() is
// a complete sentence. Its kind is ErrInvalid. gpusubmit maps Field back
// to the script line or command-line flag that gave the value.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string        { return e.Msg }
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// FieldErrors lists the FieldErrors in err (one, or several joined).
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		if fe, ok := err.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}

// ValidateFields is Validate keeping only the problems of the named
// fields (as FieldError.Field names them: "--job-name", "--time",
// "--nice"...). It is for a change to some fields of a job (scontrol
// update): a new value is refused with the very message sbatch gives at
// submit, and nothing else about the job is judged again.
func (js *JobSpec) ValidateFields(fields ...string) error {
	var keep []error
	for _, fe := range FieldErrors(js.Validate()) {
		if slices.Contains(fields, fe.Field) {
			keep = append(keep, fe)
		}
	}
	return errors.Join(keep...)
}

// Validate reports every structural problem of js at once: errors.Join
// of *FieldError, each of kind ErrInvalid and naming its field. It checks
// what a job is on its own: sizes and bounds, printable names, paths
// without "..", how resources combine (a GPU share on one node, --gpus
// over the nodes, tasks over the nodes), the array syntax. Zero values
// are accepted where the controller fills a default (nodes, CPUs, name,
// partition, QOS, account, time limit, working directory). What depends
// on the cluster (partitions and QOS that exist, limits, permissions,
// whether any node can hold the job) is the controller's policy.
//
// gpusubmit calls it before sending, the server on receipt and the
// controller before its policy: all three refuse the same jobs with the
// same messages.
func (js *JobSpec) Validate() error {
	var c fieldChecker
	c.name("--job-name", js.Name, MaxNameBytes)
	c.name("--partition", js.Partition, MaxNameBytes)
	c.name("--qos", js.QOS, MaxNameBytes)
	c.name("--account", js.Account, MaxNameBytes)
	// The script may hold any text but NUL; gpuq escapes it when shown.
	if c.text("script", "script", js.Script, MaxScriptBytes) && strings.TrimSpace(js.Script) == "" {
		c.bad("script", "script is empty; pass a batch script or --wrap 'CMD'")
	}
	c.list("args", "args", js.Args, func(f, v string) { c.multiline("args", f, v, MaxTextBytes) })
	c.list("--export", "env", js.Env, func(f, v string) {
		if c.text("--export", f, v, MaxTextBytes) {
			if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
				c.bad("--export", "%s %s is not KEY=VALUE", f, quoteShort(v))
			}
		}
	})
	c.path("--chdir", js.WorkDir)
	c.path("submit dir", js.SubmitDir)
	c.name("submit host", js.SubmitHost, MaxNameBytes)
	if dir := cmpOr(js.WorkDir, js.SubmitDir); !path.IsAbs(dir) {
		c.bad("--chdir", "--chdir: working directory %q is not an absolute path; pass --chdir /abs/dir", dir)
	}
	c.path("--output", js.Output)
	c.path("--error", js.Error)
	js.Container.validate(&c, js.Image)
	if c.name("--image", js.Image, MaxPathBytes) {
		if _, err := ParseImage(js.Image); err != nil {
			c.bad("--image", "--image: %s", err.Error())
		}
	}
	if c.name("--array", js.Array, MaxNameBytes) && js.Array != "" {
		if _, _, err := ParseArray(js.Array); err != nil {
			c.bad("--array", "%s", err.Error())
		}
	}
	if c.name("--dependency", js.Depend, MaxPathBytes) && js.Depend != "" {
		if _, err := ParseDependency(js.Depend); err != nil {
			c.bad("--dependency", "%s", err.Error())
		}
	}
	c.name("--signal", js.Signal, MaxNameBytes)
	c.name("--comment", js.Comment, MaxTextBytes)
	if c.name("--checkpoint-mode", js.CkptMode, MaxNameBytes) {
		switch js.CkptMode {
		case "", CkptModeCooperative, CkptModeCRIU:
		default:
			c.bad("--checkpoint-mode", "--checkpoint-mode=%q is not a checkpoint mode; use cooperative (the default) or criu", js.CkptMode)
		}
	}
	c.duration("--time", js.TimeLimit)
	if js.TimeUnlimited && js.TimeLimit != 0 {
		c.bad("--time", "--time=UNLIMITED and a time limit of %s were both given; send one", js.TimeLimit.Std())
	}
	c.duration("--checkpoint-interval", js.Ckpt)
	c.between("--nice", int64(js.Nice), -MaxNice, MaxNice)
	if b := js.BeginTime; !b.IsZero() && (b.Before(MinBegin) || !b.Before(MaxBegin)) {
		c.bad("--begin", "--begin=%s is out of range; give a time from %d to %d", b.UTC().Format(time.RFC3339), MinBegin.Year(), MaxBegin.Year()-1)
	}
	if c.name("--open-mode", js.OpenMode, MaxNameBytes) {
		switch js.OpenMode {
		case "", OpenAppend, OpenTruncate:
		default:
			c.bad("--open-mode", "--open-mode=%q: use append or truncate", js.OpenMode)
		}
	}
	c.name("--wckey", js.WCKey, MaxNameBytes)

	r := &js.Resources
	nodes := max(r.Nodes, 1)
	t := &js.Tasks
	c.between("--ntasks", int64(t.NTasks), 0, MaxCPUs)
	c.between("--ntasks-per-node", int64(t.NTasksPerNode), 0, MaxCPUs)
	c.between("--cpus-per-task", int64(t.CPUsPerTask), 0, MaxCPUs)
	c.between("--gpus-per-task", int64(t.GPUsPerTask), 0, MaxGPUs)
	switch {
	case t.NTasks > 0 && t.NTasks < nodes:
		c.bad("--ntasks", "--ntasks: %d tasks on %d nodes leaves nodes without a task; use -n >= -N", t.NTasks, nodes)
	case t.NTasks > 0 && t.NTasksPerNode > 0 && int64(t.NTasks) > int64(t.NTasksPerNode)*int64(nodes):
		c.bad("--ntasks", "--ntasks: %d tasks do not fit %d nodes × %d tasks per node; raise -N or --ntasks-per-node", t.NTasks, nodes, t.NTasksPerNode)
	}

	switch {
	case r.Nodes < 0:
		c.bad("--nodes", "--nodes=%d must be at least 1", r.Nodes)
	case r.Nodes > MaxNodes:
		c.bad("--nodes", "--nodes=%d is absurd; at most %d", r.Nodes, MaxNodes)
	}
	switch {
	case r.CPUsPerNode < 0:
		c.bad("--cpus-per-task", "--cpus-per-task=%d must not be negative", r.CPUsPerNode)
	case r.CPUsPerNode > MaxCPUs:
		c.bad("--cpus-per-task", "--cpus-per-task=%d is absurd; at most %d CPUs per node", r.CPUsPerNode, MaxCPUs)
	}
	switch {
	case r.MemMiB < 0:
		c.bad("--mem", "--mem=%dM must not be negative", r.MemMiB)
	case r.MemMiB > MaxMemMiB:
		c.bad("--mem", "--mem=%dM is absurd; at most %d MiB per node", r.MemMiB, MaxMemMiB)
	case r.MemWholeNode && r.MemMiB != 0:
		c.bad("--mem", "--mem=0 (the whole node's memory) and --mem=%dM were both given; send one", r.MemMiB)
	}
	switch {
	case r.GPUsPerNode < 0 || r.TotalGPUs < 0:
		c.bad("--gpus-per-node", "--gpus/--gpus-per-node must not be negative (got %d per node, %d in all)", r.GPUsPerNode, r.TotalGPUs)
	case r.GPUsPerNode > MaxGPUs:
		c.bad("--gpus-per-node", "--gpus-per-node=%d is absurd; at most %d", r.GPUsPerNode, MaxGPUs)
	case r.TotalGPUs > MaxTotalGPUs:
		c.bad("--gpus", "--gpus=%d is absurd; at most %d", r.TotalGPUs, MaxTotalGPUs)
	case r.TotalGPUs > 0 && r.GPUsPerNode == 0 && r.TotalGPUs%nodes != 0:
		c.bad("--gpus", "--gpus=%d does not divide evenly over %d nodes (gpud gives every node the same); use --gpus-per-node", r.TotalGPUs, nodes)
	case r.TotalGPUs > 0 && r.GPUsPerNode > 0 && int64(r.GPUsPerNode)*int64(nodes) != int64(r.TotalGPUs):
		c.bad("--gpus", "--gpus=%d contradicts --gpus-per-node=%d on %d nodes; give one of them", r.TotalGPUs, r.GPUsPerNode, nodes)
	}
	if t.GPUsPerTask > 0 && t.NTasks > 0 && t.NTasksPerNode == 0 && t.NTasks%nodes != 0 {
		c.bad("--gpus-per-task", "--gpus-per-task: %d tasks cannot be split evenly over %d nodes, so neither can their GPUs (gpud gives every node the same); use --ntasks-per-node", t.NTasks, nodes)
	}
	c.name("GPU model", r.GPUModel, MaxNameBytes)
	c.name("GPU profile", r.GPUProfile, MaxNameBytes)
	if r.GPUProfile != "" && r.GPUFraction != 0 {
		c.bad("--gpus", "--gpus: a MIG slice (%s) cannot be shared; ask for whole slices", r.GPUProfile)
	}
	if f := r.GPUFraction; f != 0 {
		// A share of one non-MIG GPU (best-effort isolation via CUDA MPS,
		// set up by the node).
		switch {
		case math.IsNaN(f) || f <= 0 || f >= 1:
			c.bad("--gpus", "--gpus=%g: a GPU fraction must be between 0 and 1 (exclusive); ask for whole GPUs with an integer count", f)
		case r.GPUsPerNode != 0 || r.TotalGPUs != 0:
			c.bad("--gpus", "--gpus: a GPU fraction (%g) is a share of one GPU; it cannot be combined with a GPU count", f)
		case r.Nodes > 1:
			c.bad("--gpus", "--gpus: a GPU fraction (%g) runs on one node; got --nodes=%d", f, r.Nodes)
		case r.Exclusive:
			c.bad("--gpus", "--gpus: a GPU fraction (%g) shares a GPU; it cannot be combined with --exclusive", f)
		}
	}
	switch {
	case r.RDMA < RDMAPaired || r.RDMA > MaxRDMA:
		c.bad("--rdma", "--rdma=%d is out of range; give --rdma (the NICs paired with the job's GPUs) or --rdma=N with N from 1 to %d", r.RDMA, MaxRDMA)
	case r.RDMA == RDMAPaired && r.GPUsPerNode == 0 && r.TotalGPUs == 0 && r.GPUProfile == "" && r.GPUFraction == 0:
		c.bad("--rdma", "--rdma pairs NICs with the job's GPUs, but the job asks for none; ask for GPUs or give --rdma=N")
	}
	if c.name("--constraint", r.Constraint, MaxTextBytes) && strings.ContainsAny(r.Constraint, "|[]*,") {
		c.bad("--constraint", "--constraint=%q: only features joined by & are supported", r.Constraint)
	}
	c.list("--nodelist", "--nodelist", r.NodeList, func(f, v string) { c.name1("--nodelist", f, v, MaxNameBytes) })
	c.list("--exclude", "--exclude", r.Exclude, func(f, v string) { c.name1("--exclude", f, v, MaxNameBytes) })
	return errors.Join(c.errs...)
}

// MaxHetComponents bounds the components of a heterogeneous job (Slurm's
// MAX_HET_JOB_COMPONENTS is 128).
const MaxHetComponents = 128

// HetScript is the script of a heterogeneous job's components after the
// first: their nodes hold their share and run what srun --het-group
// sends them; component 0's script is the job's.
const HetScript = "#!/bin/sh\n# heterogeneous job component: its nodes hold; steps come from srun --het-group\n"

// ValidateHet checks the further components comps of the heterogeneous
// job whose component 0 is lead (each spec on its own is Validate's),
// each problem named with its component ("hetjob component 1: ...").
func ValidateHet(lead *JobSpec, comps []JobSpec) error {
	var c fieldChecker
	if len(comps)+1 > MaxHetComponents {
		c.bad("hetjob", "a heterogeneous job has %d components; at most %d", len(comps)+1, MaxHetComponents)
		return errors.Join(c.errs...)
	}
	if lead.Array != "" {
		c.bad("--array", "--array: a heterogeneous job cannot be an array job (Slurm refuses them too); submit the array and the heterogeneous job separately")
	}
	for i := range comps {
		comp := comps[i]
		if comp.Script == "" {
			comp.Script = HetScript
		}
		if comp.Array != "" {
			c.bad("--array", "hetjob component %d: --array: a component cannot be an array job; remove --array", i+1)
		}
		for _, fe := range FieldErrors(comp.Validate()) {
			c.errs = append(c.errs, &FieldError{Field: fe.Field, Msg: fmt.Sprintf("hetjob component %d: %s", i+1, fe.Msg)})
		}
	}
	return errors.Join(c.errs...)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// fieldChecker collects every problem of one spec.
type fieldChecker struct{ errs []error }

// bad records a problem of field; the message must name the field (it
// is prefixed with "field: " when it does not start with it).
func (c *fieldChecker) bad(field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(msg, field) {
		msg = field + ": " + msg
	}
	c.errs = append(c.errs, &FieldError{Field: field, Msg: msg})
}

// text checks a free-text value (named what in messages) of field: no
// NUL, at most limit bytes.
func (c *fieldChecker) text(field, what, v string, limit int) bool {
	switch {
	case len(v) > limit:
		c.bad(field, "%s is %d bytes; at most %d are allowed", what, len(v), limit)
	case strings.IndexByte(v, 0) >= 0:
		c.bad(field, "%s contains a NUL byte at offset %d; remove it", what, strings.IndexByte(v, 0))
	default:
		return true
	}
	return false
}

// name checks a one-line field shown in listings: also no control
// characters (a job name must not carry terminal escapes into another
// user's gpuq). It reports whether the value passed.
func (c *fieldChecker) name(field, v string, limit int) bool { return c.name1(field, field, v, limit) }

func (c *fieldChecker) name1(field, what, v string, limit int) bool {
	if !c.text(field, what, v, limit) {
		return false
	}
	if i := strings.IndexFunc(v, IsControl); i >= 0 {
		c.bad(field, "%s %s contains a control character at offset %d; use printable text", what, quoteShort(v), i)
		return false
	}
	return true
}

// IsControl reports whether r is a C0 or C1 control character or DEL.
func IsControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// multiline checks a free-text value that may span lines (a command-line
// argument): no control characters but newline and tab.
func (c *fieldChecker) multiline(field, what, v string, limit int) {
	if !c.text(field, what, v, limit) {
		return
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return IsControl(r) && r != '\n' && r != '\t' }); i >= 0 {
		c.bad(field, "%s %s contains a control character at offset %d; only newline and tab are allowed", what, quoteShort(v), i)
	}
}

// path checks an output/working-directory path: a name, no ".."
// component (an output path climbing out of the working directory is
// refused outright, absolute or not).
func (c *fieldChecker) path(field, v string) {
	if !c.name(field, v, MaxPathBytes) {
		return
	}
	for part := range strings.SplitSeq(v, "/") {
		if part == ".." {
			c.bad(field, "%s %s has a '..' component; give a path without '..' (absolute, or relative to --chdir)", field, quoteShort(v))
			return
		}
	}
}

func (c *fieldChecker) list(field, what string, vs []string, each func(string, string)) {
	if len(vs) > MaxItems {
		c.bad(field, "%s has %d entries; at most %d are allowed", what, len(vs), MaxItems)
		return
	}
	for i, v := range vs {
		each(what+"["+strconv.Itoa(i)+"]", v)
	}
}

// between checks lo <= v <= hi.
func (c *fieldChecker) between(field string, v, lo, hi int64) {
	switch {
	case v > hi:
		c.bad(field, "%s=%d is absurd; at most %d", field, v, hi)
	case v < lo:
		c.bad(field, "%s=%d is out of range; give %d to %d", field, v, lo, hi)
	}
}

// duration checks a duration: whole seconds from 0 to MaxSeconds.
func (c *fieldChecker) duration(field string, d Duration) {
	if d < 0 || d.Std() > MaxSeconds*time.Second {
		c.bad(field, "%s=%ds is out of range; give 0 to %d seconds (100 years)", field, int64(d.Std()/time.Second), int64(MaxSeconds))
	}
}

// quoteShort quotes v for a message, cut to 64 bytes.
func quoteShort(v string) string {
	if len(v) > 64 {
		return fmt.Sprintf("%q…", v[:64])
	}
	return fmt.Sprintf("%q", v)
}
