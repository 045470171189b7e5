package slurmrest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// A job description (job_desc_msg) becomes sbatch options, and the
// options become a job through the sbatch option table
// (cli/directive): a field here means exactly what its sbatch
// option means, with the same checks, warnings and refusals.
//
// Like slurmrestd, the script's #SBATCH lines are not read: the job is
// what the description says (a warning says so when the script has any).

// descField maps one job_desc_msg member to sbatch options.
type descField struct {
	name string
	// opt is the sbatch option a plain value becomes ("" when conv
	// decides); conv turns the JSON value into option values.
	opt  string
	conv func(v any) ([]directive.Option, error)
	// ignored: accepted with a warning saying why it changes nothing.
	ignored string
}

func opt(name, value string) []directive.Option {
	return []directive.Option{{Name: name, Value: value}}
}

// asString reads a JSON string, or a number or bool as its text.
func asString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	}
	return "", fmt.Errorf("want a string, got %s", jsonType(v))
}

// asList reads a JSON array of strings, or one comma-separated string
// (Slurm's csv_string takes both).
func asList(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return nil, nil
		}
		return strings.Split(x, ","), nil
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, err := asString(e)
			if err != nil {
				return nil, fmt.Errorf("want a list of strings: %w", err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a list of strings, got %s", jsonType(v))
}

// noVal is a number that may be unset or infinite: Slurm takes a plain
// number or {"set":…, "infinite":…, "number":…}.
type noVal struct {
	set, infinite bool
	n             int64
}

func asNoVal(v any) (noVal, error) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		if err != nil {
			f, ferr := x.Float64()
			if ferr != nil || f != math.Trunc(f) {
				return noVal{}, fmt.Errorf("want a whole number, got %s", x)
			}
			n = int64(f)
		}
		return noVal{set: true, n: n}, nil
	case string:
		if strings.EqualFold(x, "infinite") || strings.EqualFold(x, "unlimited") {
			return noVal{set: true, infinite: true}, nil
		}
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return noVal{}, fmt.Errorf("want a whole number, got %q", x)
		}
		return noVal{set: true, n: n}, nil
	case map[string]any:
		var nv noVal
		for k, e := range x {
			switch k {
			case "set":
				b, ok := e.(bool)
				if !ok {
					return noVal{}, fmt.Errorf("set: want true or false, got %s", jsonType(e))
				}
				nv.set = b
			case "infinite":
				b, ok := e.(bool)
				if !ok {
					return noVal{}, fmt.Errorf("infinite: want true or false, got %s", jsonType(e))
				}
				nv.infinite = b
			case "number":
				n, ok := e.(json.Number)
				if !ok {
					return noVal{}, fmt.Errorf("number: want a number, got %s", jsonType(e))
				}
				i, err := n.Int64()
				if err != nil {
					return noVal{}, fmt.Errorf("number: want a whole number, got %s", n)
				}
				nv.n = i
				if _, given := x["set"]; !given {
					nv.set = true
				}
			default:
				return noVal{}, fmt.Errorf("unknown member %q; use set, infinite and number", k)
			}
		}
		if nv.infinite {
			nv.set = true
		}
		return nv, nil
	}
	return noVal{}, fmt.Errorf("want a number or {set, infinite, number}, got %s", jsonType(v))
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "true/false"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func plain(name string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		s, err := asString(v)
		if err != nil {
			return nil, err
		}
		return opt(name, s), nil
	}
}

func positive(name string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		nv, err := asNoVal(v)
		if err != nil || !nv.set {
			return nil, err
		}
		if nv.infinite || nv.n < 0 {
			return nil, fmt.Errorf("want a whole number ≥ 0")
		}
		return opt(name, strconv.FormatInt(nv.n, 10)), nil
	}
}

func switchOpt(on, off string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("want true or false, got %s", jsonType(v))
		}
		switch {
		case b:
			return opt(on, "true"), nil
		case off != "":
			return opt(off, "true"), nil
		}
		return nil, nil
	}
}

func hosts(name string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		l, err := asList(v)
		if err != nil || len(l) == 0 {
			return nil, err
		}
		return opt(name, strings.Join(l, ",")), nil
	}
}

// tres turns a TRES string ("gres/gpu:2", "gres/gpu:h100:2") into the GPU
// option name; only GPUs are scheduled.
func tres(name string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		s, err := asString(v)
		if err != nil || s == "" {
			return nil, err
		}
		var gpus []string
		for item := range strings.SplitSeq(s, ",") {
			rest, ok := strings.CutPrefix(strings.TrimSpace(item), "gres/")
			if !ok {
				rest, ok = strings.CutPrefix(item, "gres:")
			}
			kind, count, _ := strings.Cut(rest, ":")
			if !ok || kind != "gpu" {
				return nil, fmt.Errorf("%q: gpud schedules only GPUs here; write gres/gpu:N or gres/gpu:TYPE:N (CPUs and memory have their own fields)", item)
			}
			if count == "" {
				count = "1"
			}
			gpus = append(gpus, count)
		}
		if len(gpus) > 1 {
			return nil, fmt.Errorf("%q names gres/gpu twice; give one", s)
		}
		if name == "gres" {
			return opt("gres", "gpu:"+gpus[0]), nil
		}
		return opt(name, gpus[0]), nil
	}
}

// mem turns MiB (Slurm's unit for memory fields) into an sbatch size.
func mem(name string) func(v any) ([]directive.Option, error) {
	return func(v any) ([]directive.Option, error) {
		nv, err := asNoVal(v)
		if err != nil || !nv.set {
			return nil, err
		}
		if nv.infinite || nv.n < 0 {
			return nil, errors.New("want a size in MiB ≥ 0")
		}
		return opt(name, strconv.FormatInt(nv.n, 10)+"M"), nil
	}
}

var descFields = []descField{
	{name: "name", opt: "job-name"},
	{name: "partition", opt: "partition"},
	{name: "qos", opt: "qos"},
	{name: "account", opt: "account"},
	{name: "nodes", opt: "nodes"},
	{name: "minimum_nodes", conv: positive("nodes")},
	{name: "maximum_nodes", ignored: "gpud starts a job on the nodes it asks for (minimum_nodes or nodes)"},
	{name: "tasks", conv: positive("ntasks")},
	{name: "tasks_per_node", conv: positive("ntasks-per-node")},
	{name: "cpus_per_task", conv: positive("cpus-per-task")},
	{name: "minimum_cpus_per_node", conv: positive("mincpus")},
	{name: "minimum_cpus", ignored: "CPUs come from tasks, cpus_per_task and minimum_cpus_per_node"},
	{name: "memory_per_node", conv: mem("mem")},
	{name: "memory_per_cpu", conv: mem("mem-per-cpu")},
	{name: "memory_per_tres", conv: func(v any) ([]directive.Option, error) {
		s, err := asString(v)
		if err != nil || s == "" {
			return nil, err
		}
		n, ok := strings.CutPrefix(s, "gres/gpu:")
		if !ok {
			return nil, fmt.Errorf("%q: write gres/gpu:MiB", s)
		}
		return opt("mem-per-gpu", n+"M"), nil
	}},
	{name: "time_limit", conv: func(v any) ([]directive.Option, error) {
		nv, err := asNoVal(v)
		if err != nil || !nv.set {
			return nil, err
		}
		if nv.infinite {
			return opt("time", "UNLIMITED"), nil
		}
		if nv.n < 0 {
			return nil, errors.New("want minutes ≥ 0")
		}
		return opt("time", strconv.FormatInt(nv.n, 10)), nil
	}},
	{name: "time_minimum", conv: func(v any) ([]directive.Option, error) {
		nv, err := asNoVal(v)
		if err != nil || !nv.set || !nv.infinite && nv.n == 0 {
			return nil, err
		}
		if nv.infinite || nv.n < 0 {
			return nil, errors.New("want minutes > 0 (the least time the job may be started with; infinite is time_limit's)")
		}
		return opt("time-min", strconv.FormatInt(nv.n, 10)), nil
	}},
	{name: "tres_per_node", conv: tres("gres")},
	{name: "tres_per_job", conv: tres("gpus")},
	{name: "tres_per_task", conv: tres("gpus-per-task")},
	{name: "cpus_per_tres", conv: func(v any) ([]directive.Option, error) {
		s, err := asString(v)
		if err != nil || s == "" {
			return nil, err
		}
		n, ok := strings.CutPrefix(s, "gres/gpu:")
		if !ok {
			return nil, fmt.Errorf("%q: write gres/gpu:N", s)
		}
		return opt("cpus-per-gpu", n), nil
	}},
	{name: "standard_output", opt: "output"},
	{name: "standard_error", opt: "error"},
	{name: "standard_input", conv: func(v any) ([]directive.Option, error) {
		s, err := asString(v)
		if err != nil || s == "" || s == "/dev/null" {
			return nil, err
		}
		return nil, fmt.Errorf("%q: gpud batch jobs read no input file; leave standard_input out or /dev/null", s)
	}},
	{name: "current_working_directory", opt: "chdir"},
	{name: "array", opt: "array"},
	{name: "dependency", opt: "dependency"},
	{name: "hold", conv: switchOpt("hold", "")},
	{name: "nice", opt: "nice"},
	{name: "begin_time", conv: func(v any) ([]directive.Option, error) {
		nv, err := asNoVal(v)
		if err != nil || !nv.set || nv.infinite || nv.n == 0 {
			return nil, err
		}
		return opt("begin", time.Unix(nv.n, 0).UTC().Format("2006-01-02T15:04:05")), nil
	}},
	{name: "requeue", conv: switchOpt("requeue", "no-requeue")},
	{name: "required_nodes", conv: hosts("nodelist")},
	{name: "excluded_nodes", conv: hosts("exclude")},
	{name: "constraints", opt: "constraint"},
	{name: "comment", opt: "comment"},
	{name: "wckey", opt: "wckey"},
	{name: "container", opt: "image"},
	{name: "open_mode", conv: func(v any) ([]directive.Option, error) {
		l, err := asList(v)
		if err != nil || len(l) == 0 {
			return nil, err
		}
		return opt("open-mode", strings.ToLower(l[0])), nil
	}},
	{name: "shared", conv: func(v any) ([]directive.Option, error) {
		l, err := asList(v)
		if err != nil {
			return nil, err
		}
		for _, s := range l {
			switch s {
			case "none":
				return opt("exclusive", "true"), nil
			case "oversubscribe", "user", "mcs", "topo":
			default:
				return nil, fmt.Errorf("%q: use none (exclusive nodes) or oversubscribe", s)
			}
		}
		return nil, nil
	}},
	{name: "kill_warning_signal"}, // read with kill_warning_delay (signalOpt)
	{name: "kill_warning_delay"},
	{name: "mail_type", ignored: "gpud sends no mail"},
	{name: "mail_user", ignored: "gpud sends no mail"},
	{name: "licenses", ignored: "gpud schedules no licenses; the job may start while none is free"},
	{name: "reservation", opt: "reservation"},
	{name: "distribution", ignored: "tasks are laid out in blocks over the nodes, Slurm's default"},
	{name: "overcommit", ignored: "gpud never gives a job fewer CPUs than it asks for"},
	{name: "wait_all_nodes", ignored: "every node of a gpud job starts together"},
	{name: "environment"}, // read by the caller
	{name: "argv"},
	{name: "script"},
	{name: "user_id", ignored: "the job runs as the authenticated user"},
	{name: "group_id", ignored: "the job runs with the authenticated user's group"},
	{name: "flags", ignored: "gpud sets no job flags"},
	{name: "profile", ignored: "gpud samples GPU energy and utilisation for every job"},
	{name: "cpu_binding", ignored: "the node binds CPUs itself"},
	{name: "cpu_binding_flags", ignored: "the node binds CPUs itself"},
	{name: "memory_binding", ignored: "the node binds memory itself"},
	{name: "memory_binding_type", ignored: "the node binds memory itself"},
	{name: "tres_bind", ignored: "the node binds GPUs itself (NVLink and NUMA aware)"},
	{name: "threads_per_core", ignored: "gpud does not schedule hardware threads"},
	{name: "tasks_per_core", ignored: "gpud does not schedule hardware threads"},
	{name: "sockets_per_node", ignored: "gpud allocates CPU counts, not sockets"},
	{name: "cores_per_socket", ignored: "gpud allocates CPU counts, not sockets"},
	{name: "priority", ignored: "priority comes from the multifactor policy; use nice"},
	{name: "exclusive", conv: func(v any) ([]directive.Option, error) {
		l, err := asList(v)
		if err != nil || len(l) == 0 {
			return nil, err
		}
		return opt("exclusive", "true"), nil
	}},
}

var descByName = func() map[string]*descField {
	m := make(map[string]*descField, len(descFields))
	for i := range descFields {
		m[descFields[i].name] = &descFields[i]
	}
	return m
}()

// jobSpec turns a job description into a job as sbatch would submit it.
// script is the request's top-level script (job_submit_req.script); the
// description's own wins. src names the description ("job").
func (c *call) jobSpec(desc map[string]any, script, src string) (spec.JobSpec, bool) {
	var (
		opts    []directive.Option
		errs    []problem
		environ []string
		cwd     string
		args    []string
	)
	bad := func(field string, err error) {
		errs = append(errs, problem{num: errRESTInvalidJobDesc, desc: fmt.Sprintf("%s.%s: %v", src, field, err), source: src + "." + field})
	}
	names := make([]string, 0, len(desc))
	for k := range desc {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := desc[k]
		d, ok := descByName[k]
		if !ok {
			c.warn(fmt.Sprintf("%s.%s is not a job description field gpud reads (data_parser %s); ignored", src, k, versionName(c.v)), src+"."+k)
			continue
		}
		switch {
		case d.ignored != "":
			c.warn(fmt.Sprintf("%s.%s has no effect in gpud and is ignored: %s", src, k, d.ignored), src+"."+k)
			continue
		case k == "environment":
			l, err := asList(v)
			if err != nil {
				bad(k, err)
			}
			environ = l
			continue
		case k == "argv":
			l, err := asList(v)
			if err != nil {
				bad(k, err)
			}
			if len(l) > 1 {
				args = l[1:]
			}
			continue
		case k == "script":
			s, err := asString(v)
			if err != nil {
				bad(k, err)
			}
			script = s
			continue
		case k == "current_working_directory":
			s, err := asString(v)
			if err != nil {
				bad(k, err)
			}
			cwd = s
			continue
		case k == "kill_warning_signal" || k == "kill_warning_delay":
			continue
		}
		var o []directive.Option
		var err error
		if d.conv != nil {
			o, err = d.conv(v)
		} else {
			o, err = plain(d.opt)(v)
		}
		if err != nil {
			bad(k, err)
			continue
		}
		for i := range o {
			o[i].Source = directive.Source{Field: src + "." + k}
		}
		opts = append(opts, o...)
	}
	if sig, ok := desc["kill_warning_signal"]; ok {
		s, err := asString(sig)
		if err != nil {
			bad("kill_warning_signal", err)
		} else if s != "" {
			if d, ok := desc["kill_warning_delay"]; ok {
				nv, err := asNoVal(d)
				if err != nil {
					bad("kill_warning_delay", err)
				} else if nv.set && !nv.infinite {
					s += "@" + strconv.FormatInt(nv.n, 10)
				}
			}
			opts = append(opts, directive.Option{Name: "signal", Value: s, Source: directive.Source{Field: src + ".kill_warning_signal"}})
		}
	}
	if script == "" {
		errs = append(errs, problem{num: errScriptMissing, desc: src + ".script: a batch job needs a script (#!/bin/sh ...)", source: src + ".script"})
	}
	if cwd == "" {
		errs = append(errs, problem{num: errMissingWorkDir, desc: src + ".current_working_directory: give the absolute directory the job runs in", source: src + ".current_working_directory"})
	} else if !strings.HasPrefix(cwd, "/") {
		errs = append(errs, problem{num: errMissingWorkDir, desc: fmt.Sprintf("%s.current_working_directory %q: give an absolute path", src, clipText(cwd)), source: src + ".current_working_directory"})
	}
	name, _ := desc["name"].(string)
	req, err := directive.Build(opts, directive.Env{Now: c.h.o.Now(), Cwd: cwd, Environ: environ, ScriptName: firstNonEmpty(name, "wrap"), Slurm: true})
	if err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, problem{num: errRESTInvalidJobDesc, desc: e.Error(), source: src})
		}
	}
	if len(errs) > 0 {
		c.errors = append(c.errors, errs...)
		c.failAll(http.StatusBadRequest)
		return spec.JobSpec{}, false
	}
	for _, w := range req.Warnings {
		c.warn(w, src)
	}
	if hasDirectives(script) {
		c.warn("the script's #SBATCH lines are not read (as with slurmrestd): the job is what the description says", src+".script")
	}
	js := req.Spec
	js.Script = script
	js.Args = args
	return js, true
}

// unjoin splits an errors.Join result into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func hasDirectives(script string) bool {
	for line := range strings.SplitSeq(script, "\n") {
		if strings.HasPrefix(line, "#SBATCH") || strings.HasPrefix(line, "#GPU") {
			return true
		}
	}
	return false
}

// submit answers POST job/submit: one job (job) or, with jobs, a
// heterogeneous job, which gpud does not run.
func submit(c *call) {
	body, ok := c.body()
	if !ok {
		return
	}
	if body == nil {
		c.fail(http.StatusBadRequest, errRESTInvalidJobDesc, "send a job_submit_req: {\"job\": {...}, \"script\": ...}", "")
		return
	}
	script, _ := body["script"].(string)
	for k := range body {
		if k != "job" && k != "jobs" && k != "script" {
			c.warn(fmt.Sprintf("%s is not a member of job_submit_req; ignored", k), k)
		}
	}
	if _, het := body["jobs"]; het {
		c.fail(http.StatusBadRequest, errNotSupported, "gpud runs no heterogeneous jobs (jobs); submit each component as its own job with job", "jobs")
		return
	}
	desc, isObj := body["job"].(map[string]any)
	if !isObj {
		c.fail(http.StatusBadRequest, errRESTInvalidJobDesc, "job: send the job description as an object", "job")
		return
	}
	js, ok := c.jobSpec(desc, script, "job")
	if !ok {
		return
	}
	var out api.SubmitResponse
	if err := c.h.v1.Call(c.r, http.MethodPost, "/v1/jobs", api.SubmitRequest{Job: js}, &out); err != nil {
		c.failV1(err, errInvalidJobID, errRESTInvalidJobDesc)
		return
	}
	c.reply(func(w *jw) {
		w.key("job_id")
		w.uint(uint64(out.ID))
		w.key("step_id")
		w.str("batch")
		w.key("job_submit_user_msg")
		w.str(submitMessage(out))
	})
}

func submitMessage(out api.SubmitResponse) string {
	if len(out.IDs) > 1 {
		return fmt.Sprintf("array of %d tasks submitted as jobs %d-%d", len(out.IDs), out.IDs[0], out.IDs[len(out.IDs)-1])
	}
	return ""
}
