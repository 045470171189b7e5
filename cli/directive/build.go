package directive

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/slurmtime"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
)

// Env is what Build needs from the submitting process, passed in so Build
// stays pure.
type Env struct {
	Now time.Time
	// Cwd is the absolute directory gpusubmit runs in (the submit dir).
	Cwd string
	// Host is the submitting host's name (SLURM_SUBMIT_HOST; "": unknown).
	Host string
	// Environ is the submitting environment as KEY=VALUE strings.
	Environ []string
	// ScriptName names the job when --job-name is absent: the script's
	// base name, or "wrap".
	ScriptName string
	// Slurm is set when the command runs as sbatch: the default output
	// file is then Slurm's slurm-%j.out (slurm-%A_%a.out for arrays).
	Slurm bool
}

// Request is a submission: the job and how gpusubmit should behave.
type Request struct {
	Spec     spec.JobSpec
	TestOnly bool
	Parsable bool
	Wait     bool
	// Warnings name accepted options that have no effect.
	Warnings []string
}

// DefaultOutput and DefaultArrayOutput are the --output patterns when none
// is given; the node expands them.
const (
	DefaultOutput      = "gpud-%j.out"
	DefaultArrayOutput = "gpud-%A_%a.out"
	// SlurmOutput and SlurmArrayOutput are sbatch's defaults, used when
	// gpusubmit runs under the name sbatch.
	SlurmOutput      = "slurm-%j.out"
	SlurmArrayOutput = "slurm-%A_%a.out"
)

// Limits that keep arithmetic in range and catch typos.
const (
	maxCount = 1 << 20
	maxCPUs  = 1 << 20
	maxNice  = 2147483645
)

var nameRE = lazyRE(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// Build resolves opts (directives first, then command-line flags: later
// wins) into a Request. Every problem is reported, joined, each of kind
// spec.ErrInvalid and naming its source.
func Build(opts []Option, env Env) (Request, error) {
	var (
		errs   []error
		chosen = map[string]Option{}
		owner  = map[string]Option{}
	)
	for _, o := range opts {
		d, ok := Lookup(o.Name)
		if !ok {
			errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: %v", o.Source, unknownOption(o.Name)))
			continue
		}
		if d.family != "" {
			if prev, ok := owner[d.family]; ok && prev.Name != o.Name {
				if (prev.Source.Line == 0) == (o.Source.Line == 0) {
					errs = append(errs, spec.Errorf(spec.ErrInvalid, "%s: --%s conflicts with --%s (%s); give only one of them", o.Source, o.Name, prev.Name, prev.Source))
					continue
				}
				delete(chosen, prev.Name) // the command line overrides the script
			}
			owner[d.family] = o
		}
		chosen[o.Name] = o
	}
	b := builder{chosen: chosen, env: env}
	b.build()
	errs = append(errs, b.errs...)
	if len(errs) > 0 {
		return Request{}, errors.Join(errs...)
	}
	return b.req, nil
}

type builder struct {
	chosen map[string]Option
	env    Env
	req    Request
	errs   []error
}

// get returns the chosen option name, if any.
func (b *builder) get(name string) (Option, bool) {
	o, ok := b.chosen[name]
	return o, ok
}

func (b *builder) fail(o Option, err error) {
	b.errs = append(b.errs, spec.Errorf(spec.ErrInvalid, "%s: --%s: %v", o.Source, o.Name, err))
}

// str returns a string option's value, checking it is not empty.
func (b *builder) str(name string) (string, bool) {
	o, ok := b.get(name)
	if !ok {
		return "", false
	}
	if strings.TrimSpace(o.Value) == "" || strings.ContainsAny(o.Value, "\n\x00") {
		b.fail(o, errors.New("needs a non-empty one-line value"))
		return "", false
	}
	return o.Value, true
}

// name reads a partition, QOS or account name (accounts may hold '@',
// as site accounts like proj@site do). A partition may be a comma list:
// the job starts in whichever listed partition can start it first.
func (b *builder) name(opt string) string {
	v, ok := b.str(opt)
	if !ok {
		return ""
	}
	if opt == "partition" && strings.Contains(v, ",") {
		for p := range strings.SplitSeq(v, ",") {
			if !nameRE().MatchString(p) {
				b.fail(b.chosen[opt], fmt.Errorf("%q is not a valid partition list; use names of letters, digits, '.', '_' and '-' separated by commas", v))
				return ""
			}
		}
		return v
	}
	if strings.Contains(v, ",") {
		b.fail(b.chosen[opt], fmt.Errorf("%q lists several; gpud takes exactly one %s", v, opt))
		return ""
	}
	if !nameRE().MatchString(v) {
		b.fail(b.chosen[opt], fmt.Errorf("%q is not a valid name; use letters, digits, '.', '_' and '-'", v))
		return ""
	}
	return v
}

func (b *builder) flag(name string, def bool) bool {
	o, ok := b.get(name)
	if !ok {
		return def
	}
	v, err := parseBool(o.Value)
	if err != nil {
		b.fail(o, err)
		return def
	}
	return v
}

func (b *builder) count(name string) (int, bool) {
	o, ok := b.get(name)
	if !ok {
		return 0, false
	}
	n, err := parsePositive(o.Value, maxCount)
	if err != nil {
		b.fail(o, err)
		return 0, false
	}
	return n, true
}

func (b *builder) build() {
	js := &b.req.Spec
	for _, d := range Options {
		if o, ok := b.get(d.Name); ok && d.NoOp {
			w := fmt.Sprintf("%s: --%s has no effect in gpud and is ignored", o.Source, d.Name)
			if d.Warn != "" {
				w += ": " + d.Warn
			}
			b.req.Warnings = append(b.req.Warnings, w)
		}
	}

	js.Name = b.env.ScriptName
	if v, ok := b.str("job-name"); ok {
		js.Name = v
	}
	js.Partition = b.name("partition")
	js.QOS = b.name("qos")
	js.Account = b.name("account")

	b.resources()

	if o, ok := b.get("time"); ok {
		d, err := ParseTime(o.Value)
		switch {
		case err != nil:
			b.fail(o, err)
		case d == Unlimited:
			js.TimeUnlimited = true
		default:
			js.TimeLimit = spec.Duration(d)
		}
	}

	js.SubmitDir = b.env.Cwd
	js.SubmitHost = b.env.Host
	js.WorkDir = b.env.Cwd
	if v, ok := b.str("chdir"); ok {
		if filepath.IsAbs(v) {
			js.WorkDir = filepath.Clean(v)
		} else {
			js.WorkDir = filepath.Join(b.env.Cwd, v)
		}
	}
	if v, ok := b.str("array"); ok {
		if err := ValidateArray(v); err != nil {
			b.fail(b.chosen["array"], err)
		}
		js.Array = v
	}
	js.Output = DefaultOutput
	if js.Array != "" {
		js.Output = DefaultArrayOutput
	}
	if b.env.Slurm {
		js.Output = SlurmOutput
		if js.Array != "" {
			js.Output = SlurmArrayOutput
		}
	}
	if v, ok := b.str("output"); ok {
		js.Output = v
	}
	if v, ok := b.str("error"); ok {
		js.Error = v
	}
	if v, ok := b.str("dependency"); ok {
		// The one parser (JobSpec.Validate runs it too), here so that a
		// bad dependency is reported with the build's other problems.
		if _, err := spec.ParseDependency(v); err != nil {
			b.fail(b.chosen["dependency"], fmt.Errorf("bad dependency %q: %s", v, strings.TrimPrefix(err.Error(), "--dependency="+v+": ")))
		}
		js.Depend = v
	}
	js.Hold = b.flag("hold", false)
	js.Requeue, js.RequeueExpedite = !b.flag("no-requeue", false), false
	if o, ok := b.get("requeue"); ok && js.Requeue {
		if strings.EqualFold(o.Value, "expedite") {
			js.RequeueExpedite = true
		} else if v, err := parseBool(o.Value); err != nil {
			b.fail(o, fmt.Errorf("--requeue=%s: give --requeue, --requeue=expedite or --no-requeue", o.Value))
		} else {
			js.Requeue = v
		}
	}
	if o, ok := b.get("begin"); ok {
		t, err := slurmtime.Parse(o.Value, b.env.Now, slurmtime.Future)
		if err != nil {
			b.fail(o, fmt.Errorf("bad begin time: %w", err))
		}
		js.BeginTime = spec.NewTime(t)
	}
	if o, ok := b.get("nice"); ok {
		n, err := strconv.Atoi(o.Value)
		if err != nil || n < -maxNice || n > maxNice {
			b.fail(o, fmt.Errorf("bad nice value %q; use a whole number from %d to %d", o.Value, -maxNice, maxNice))
		}
		js.Nice = n
	}
	for _, name := range []string{"image", "container-image"} {
		if v, ok := b.str(name); ok {
			ref, err := spec.ParseImage(v)
			if err != nil {
				b.fail(b.chosen[name], err)
			}
			js.Image = ref
		}
	}
	js.Container = b.container()
	if o, ok := b.get("checkpoint"); ok {
		d, err := ParseCheckpointInterval(o.Value)
		if err != nil {
			b.fail(o, err)
		}
		js.Ckpt = spec.Duration(d)
	}
	if o, ok := b.get("checkpoint-mode"); ok {
		switch o.Value {
		case spec.CkptModeCooperative, spec.CkptModeCRIU:
			js.CkptMode = o.Value
		default:
			b.fail(o, fmt.Errorf("bad checkpoint mode %q; use cooperative or criu", o.Value))
		}
	}
	if o, ok := b.get("signal"); ok {
		s, err := ParseSignal(o.Value)
		if err != nil {
			b.fail(o, err)
		}
		js.Signal = s
	}
	if o, ok := b.get("comment"); ok {
		js.Comment = o.Value
	}
	if o, ok := b.get("open-mode"); ok {
		switch strings.ToLower(o.Value) {
		case "append", "a":
			js.OpenMode = spec.OpenAppend
		case "truncate", "t":
			js.OpenMode = spec.OpenTruncate
		default:
			b.fail(o, fmt.Errorf("bad open mode %q; use append or truncate", o.Value))
		}
	}
	if v, ok := b.str("wckey"); ok {
		js.WCKey = v
	}
	if v, ok := b.str("reservation"); ok {
		js.Reservation = v
	}
	if o, ok := b.get("time-min"); ok {
		d, err := ParseTime(o.Value)
		switch {
		case err != nil:
			b.fail(o, err)
		case d == Unlimited:
			b.fail(o, fmt.Errorf("--time-min=%s: give a time; UNLIMITED is --time's", o.Value))
		default:
			js.TimeMin = spec.Duration(d)
		}
	}
	b.export()
	// Credentials never travel with a job (the controller drops them too,
	// with the site's [auth] secret_env): a token in the job's environment
	// is readable by whoever reads the job. Asked for by name, it is said.
	var dropped []string
	js.Env, dropped = spec.DropSecretEnv(js.Env, nil)
	if o, ok := b.get("export"); ok && len(dropped) > 0 && strings.Contains(o.Value, "GPUD_") {
		b.req.Warnings = append(b.req.Warnings, fmt.Sprintf("%s: --export: %s not passed: gpud credentials never travel with a job", o.Source, strings.Join(dropped, ", ")))
	}

	b.req.TestOnly = b.flag("test-only", false)
	b.req.Parsable = b.flag("parsable", false)
	b.req.Wait = b.flag("wait", false)
	if b.req.TestOnly && b.req.Wait {
		b.fail(b.chosen["wait"], errors.New("cannot be combined with --test-only, which submits nothing; drop one"))
	}
}

// resources fills JobSpec.Resources from node, task, CPU, GPU and memory
// options.
func (b *builder) resources() {
	r := &b.req.Spec.Resources
	r.Nodes = 1
	if o, ok := b.get("nodes"); ok {
		lo, hi, err := ParseNodeRange(o.Value)
		switch {
		case err != nil:
			b.fail(o, err)
		case hi > lo && (b.has("ntasks") || b.has("gpus") || b.has("gpus-per-task")):
			// Totals cannot be split before the node count is known.
			b.fail(o, fmt.Errorf("-N %s: a node range takes per-node amounts; use --ntasks-per-node and --gpus-per-node instead of --ntasks, --gpus or --gpus-per-task", o.Value))
		default:
			r.Nodes = lo
			if hi > lo {
				r.MaxNodes = hi
			}
		}
	}

	tasksPerNode, sizedByTasks := 1, false
	if n, ok := b.count("ntasks-per-node"); ok {
		tasksPerNode, sizedByTasks = n, true
	}
	if n, ok := b.count("ntasks"); ok {
		sizedByTasks = true
		switch {
		case n < r.Nodes:
			b.fail(b.chosen["ntasks"], fmt.Errorf("%d tasks on %d nodes leaves nodes without a task; use -n >= -N", n, r.Nodes))
		case b.has("ntasks-per-node"):
			if n > tasksPerNode*r.Nodes {
				b.fail(b.chosen["ntasks"], fmt.Errorf("%d tasks do not fit %d nodes × %d tasks per node; raise -N or --ntasks-per-node", n, r.Nodes, tasksPerNode))
			}
		default:
			tasksPerNode = (n + r.Nodes - 1) / r.Nodes
		}
	}
	tasks := &b.req.Spec.Tasks
	if b.has("ntasks-per-node") {
		tasks.NTasksPerNode = tasksPerNode
	}
	if n, ok := b.count("ntasks"); ok {
		tasks.NTasks = n
	}

	// GPUs before CPUs and memory, which may be per GPU.
	gpusPerNode := 0
	var g GPURequest
	var gopt Option
	haveGPU := false
	perTask := 0 // --gpus-per-task beside a node's or the job's count
	for _, name := range []string{"gres", "gpus-per-node", "gpus"} {
		o, ok := b.get(name)
		if !ok {
			continue
		}
		var err error
		if name == "gres" {
			g, err = ParseGres(o.Value)
		} else {
			g, err = ParseGPUSpec(o.Value)
		}
		if err != nil {
			b.fail(o, err)
			continue
		}
		gopt, haveGPU = o, true
	}
	// --gpus-per-task alone sizes the node's GPUs by its tasks; beside a
	// node's or the job's count (--gres=gpu:4 --gpus-per-task=1, as
	// Slurm scripts write) that count stands and each task binds its own.
	if o, ok := b.get("gpus-per-task"); ok {
		pt, err := ParseGPUSpec(o.Value)
		switch {
		case err != nil:
			b.fail(o, err)
		case !haveGPU:
			g, gopt, haveGPU = pt, o, true
		case pt.Fraction > 0 || g.Fraction > 0:
			b.fail(o, fmt.Errorf("a share of a GPU cannot be bound per task; drop --gpus-per-task or ask --%s for whole GPUs", gopt.Name))
		case pt.Profile != "" || g.Profile != "":
			b.fail(o, errors.New("MIG slices per task are not supported; use --gpus-per-node=PROFILE:N"))
		case pt.Model != "" && g.Model != "" && !strings.EqualFold(pt.Model, g.Model):
			b.fail(o, fmt.Errorf("GPU type %s differs from --%s=%s; give one type", pt.Model, gopt.Name, gopt.Value))
		default:
			if g.Model == "" {
				g.Model = pt.Model
			}
			perTask = pt.Count
		}
	}
	if haveGPU && g.Count == 0 && g.Fraction == 0 {
		haveGPU = false // --gres=gpu:0: no GPUs, as in Slurm
	}
	if haveGPU {
		r.GPUModel, r.GPUProfile, r.GPUFraction = g.Model, g.Profile, g.Fraction
		switch {
		case g.Fraction > 0:
			if r.Nodes > 1 && gopt.Name == "gpus" {
				b.fail(gopt, fmt.Errorf("a GPU share is per node; with %d nodes use --gpus-per-node=%s", r.Nodes, gopt.Value))
			}
			gpusPerNode = 1
		case gopt.Name == "gpus-per-task":
			if g.Profile != "" {
				b.fail(gopt, errors.New("MIG slices per task are not supported; use --gpus-per-node=PROFILE:N"))
			}
			b.req.Spec.Tasks.GPUsPerTask = g.Count
			nt := b.req.Spec.Tasks.NTasks
			switch {
			case nt > 0 && !b.has("ntasks-per-node") && nt%r.Nodes != 0:
				b.fail(gopt, fmt.Errorf("%d tasks cannot be split evenly over %d nodes, so neither can their GPUs (gpud gives every node the same); use --ntasks-per-node", nt, r.Nodes))
			default:
				r.GPUsPerNode = g.Count * tasksPerNode
			}
			gpusPerNode = r.GPUsPerNode
		case gopt.Name == "gpus":
			r.TotalGPUs = g.Count
			if g.Count%r.Nodes != 0 {
				b.fail(gopt, fmt.Errorf("%d GPUs cannot be split evenly over %d nodes (gpud gives every node the same); use --gpus-per-node", g.Count, r.Nodes))
			} else {
				r.GPUsPerNode = g.Count / r.Nodes
			}
			gpusPerNode = r.GPUsPerNode
		default:
			r.GPUsPerNode = g.Count
			gpusPerNode = g.Count
		}
		if perTask > 0 {
			b.req.Spec.Tasks.GPUsPerTask = perTask
			if r.GPUsPerNode > 0 && perTask*tasksPerNode > r.GPUsPerNode {
				o := b.chosen["gpus-per-task"]
				b.fail(o, fmt.Errorf("%s × %d tasks per node needs %d GPUs per node, more than --%s=%s gives", o.Value, tasksPerNode, perTask*tasksPerNode, gopt.Name, gopt.Value))
			}
		}
	}

	if n, ok := b.count("cpus-per-gpu"); ok {
		if gpusPerNode == 0 {
			b.fail(b.chosen["cpus-per-gpu"], errors.New("needs a GPU request (--gpus, --gpus-per-node or --gres=gpu:N)"))
		}
		r.CPUsPerNode = n * gpusPerNode
	} else if n, ok := b.count("cpus-per-task"); ok || sizedByTasks {
		if !ok {
			n = 1
		}
		r.CPUsPerNode = n * tasksPerNode
		if ok {
			tasks.CPUsPerTask = n
		}
	}
	if n, ok := b.count("mincpus"); ok && n > r.CPUsPerNode {
		r.CPUsPerNode = n
	}
	if r.CPUsPerNode > maxCPUs {
		b.errs = append(b.errs, spec.Errorf(spec.ErrInvalid, "the job asks for %d CPUs per node, more than any node has; lower --cpus-per-task or the task count", r.CPUsPerNode))
	}

	for _, name := range []string{"mem", "mem-per-cpu", "mem-per-gpu"} {
		o, ok := b.get(name)
		if !ok {
			continue
		}
		mib, err := ParseMem(o.Value)
		if err != nil {
			b.fail(o, err)
			continue
		}
		if mib == WholeNodeMem {
			if name != "mem" {
				b.fail(o, fmt.Errorf("0 is not a size; --mem=0 asks for each node's whole memory, --%s needs a size", name))
				continue
			}
			r.MemWholeNode, r.MemMiB = true, 0
			continue
		}
		switch name {
		case "mem-per-cpu":
			mib *= int64(max(r.CPUsPerNode, 1))
		case "mem-per-gpu":
			if gpusPerNode == 0 {
				b.fail(o, errors.New("needs a GPU request (--gpus, --gpus-per-node or --gres=gpu:N); or use --mem"))
			}
			mib *= int64(max(gpusPerNode, 1))
		}
		if mib > maxMemMiB {
			b.fail(o, fmt.Errorf("the job would need %d MiB per node, more than any node has", mib))
		}
		r.MemMiB = mib
	}

	if o, ok := b.get("rdma"); ok {
		switch n, err := strconv.Atoi(o.Value); {
		case o.Value == RDMAPaired:
			r.RDMA = spec.RDMAPaired
			if !haveGPU {
				b.fail(o, fmt.Errorf("pairs NICs with the job's GPUs, but the job asks for none; ask for GPUs or give --rdma=N"))
			}
		case err != nil || n < 1:
			b.fail(o, fmt.Errorf("takes no value (the NICs paired with the job's GPUs) or a number of NICs, like --rdma=2"))
		default:
			r.RDMA = n
		}
	}
	r.Exclusive = b.flag("exclusive", false)
	r.NodeList = b.hosts("nodelist")
	r.Exclude = b.hosts("exclude")
	if v, ok := b.str("constraint"); ok {
		r.Constraint = v
	}
}

func (b *builder) has(name string) bool {
	_, ok := b.chosen[name]
	return ok
}

func (b *builder) hosts(name string) []string {
	v, ok := b.str(name)
	if !ok {
		return nil
	}
	if strings.Contains(v, "/") {
		b.fail(b.chosen[name], fmt.Errorf("%q looks like a file; gpud takes node names only (gpu01,gpu02 or gpu[01-04])", v))
		return nil
	}
	hs, err := hostlist.Expand(v)
	if err != nil {
		b.fail(b.chosen[name], err)
	}
	return hs
}

var envNameRE = lazyRE(`^[A-Za-z_][A-Za-z0-9_]*$`)

// export applies --export to the submitting environment.
func (b *builder) export() {
	js := &b.req.Spec
	o, ok := b.get("export")
	if !ok {
		js.Env = append([]string(nil), b.env.Environ...)
		return
	}
	lookup := func(k string) (string, bool) {
		for _, kv := range b.env.Environ {
			if name, v, ok := strings.Cut(kv, "="); ok && name == k {
				return v, true
			}
		}
		return "", false
	}
	items := strings.Split(o.Value, ",")
	switch strings.ToUpper(items[0]) {
	case "NONE", "NIL":
		if len(items) > 1 {
			b.fail(o, fmt.Errorf("%s cannot be combined with variables; use VAR,VAR=value to pass only those", items[0]))
		}
		js.Env = []string{}
		return
	case "ALL":
		js.Env = append([]string(nil), b.env.Environ...)
		items = items[1:]
	default:
		js.Env = []string{}
	}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		for i, e := range js.Env {
			if name, _, _ := strings.Cut(e, "="); name == k {
				js.Env[i] = kv
				return
			}
		}
		js.Env = append(js.Env, kv)
	}
	for _, it := range items {
		k, v, hasValue := strings.Cut(it, "=")
		if !envNameRE().MatchString(k) {
			b.fail(o, fmt.Errorf("%q is not a variable name; use ALL, NONE, VAR or VAR=value separated by commas", it))
			continue
		}
		if !hasValue {
			var found bool
			if v, found = lookup(k); !found {
				continue // like sbatch: an unset variable is simply not passed
			}
		}
		set(k + "=" + v)
	}
}

// container reads pyxis's --container-* options (nil when none is given).
func (b *builder) container() *spec.Container {
	var c spec.Container
	if o, ok := b.get("container-mounts"); ok {
		for m := range strings.SplitSeq(o.Value, ",") {
			if m = strings.TrimSpace(m); m == "" {
				continue
			}
			if _, err := spec.ParseContainerMount(m); err != nil {
				b.fail(o, err)
				continue
			}
			c.Mounts = append(c.Mounts, m)
		}
	}
	if v, ok := b.str("container-workdir"); ok {
		c.WorkDir = v
	}
	if v, ok := b.str("container-name"); ok {
		c.Name = v
	}
	c.ReadOnly = b.flag("container-readonly", false) || !b.flag("container-writable", true)
	c.MountHome = b.flag("container-mount-home", false) || !b.flag("no-container-mount-home", true)
	if c.IsZero() {
		return nil
	}
	return &c
}
