// Package submission is what gpusubmit and sbatch do to a submission
// before and after it reaches the controller: read the command line's
// canonical words (Fast), read the script and build and check the
// request with every problem in one pass (Prepare), and print the answer.
// Sending it is the caller's: gpusubmit/app through gpud/api.Client,
// sbatch's one-shot path (gpusubmit/quick) over the unix socket itself.
//
// It imports gpud/spec, gpud/api/wire and cli/directive only (no
// net/http, no urfave/cli), so the one-shot sbatch binary that links it
// starts as fast as a Go program can; both paths share this code, so they
// cannot answer differently.
package submission

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/gpud/api/wire"
	"github.com/gpud/gpud/gpud/spec"
)

// DefaultController is the address used when neither --controller nor
// GPUD_CONTROLLER is set.
const DefaultController = "unix:///run/gpud/gpud.sock"

// MaxScriptBytes bounds what is read and sent: a batch script is a few
// kilobytes; megabytes mean a wrong file (a binary, a dataset).
const MaxScriptBytes = 4 << 20

// Invocation is what a submission reads from its command line: the
// options given (a switch as "true" or "false"), the problems Normalize
// found, the script and its arguments, the controller address and where
// to read and write. It comes from urfave/cli's context (gpusubmit/app)
// or from the canonical words themselves (Fast).
type Invocation struct {
	Name           string // gpusubmit or sbatch
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Values         map[string]string
	// Het are the command line's options of a heterogeneous job's
	// further components (sbatch A : B : C SCRIPT), one map each.
	Het        []map[string]string
	Problems   []string
	Args       []string
	Controller string
}

// Fast reads Normalize's words: --name or --name=value for each option,
// --x-gpud-problem=MESSAGE, --controller=ADDR, then "--" and the script
// with its arguments. It answers false for anything else, --help and
// --version among them, which only urfave/cli's App answers.
func Fast(name string, words []string) (*Invocation, bool) {
	if name != "sbatch" {
		name = "gpusubmit"
	}
	in := &Invocation{Name: name, Values: map[string]string{}}
	values := in.Values // the current component's
	ctlSet := false
	for i := 1; i < len(words); i++ {
		w := words[i]
		if w == "--" {
			in.Args = words[i+1:]
			if !ctlSet {
				// As the --controller flag's EnvVars and Value.
				var ok bool
				if in.Controller, ok = os.LookupEnv(wire.EnvController); !ok {
					in.Controller = DefaultController
				}
			}
			return in, true
		}
		opt, ok := strings.CutPrefix(w, "--")
		if !ok {
			return nil, false
		}
		key, val, hasVal := strings.Cut(opt, "=")
		switch key {
		case directive.HetFlag:
			values = map[string]string{}
			in.Het = append(in.Het, values)
		case directive.ProblemFlag:
			in.Problems = append(in.Problems, val)
		case "controller":
			in.Controller, ctlSet = val, true
		default:
			d, known := optionDefs()[key]
			switch {
			case !known:
				return nil, false
			case d.Bool && !hasVal:
				val = "true"
			case d.Bool && val != "true" && val != "false":
				return nil, false
			case !d.Bool && !hasVal:
				return nil, false
			}
			if key == "wrap" {
				in.Values[key] = val // the script, whichever component it follows
			} else {
				values[key] = val
			}
		}
	}
	return nil, false
}

// optionDefs indexes directive.Options by long name.
var optionDefs = sync.OnceValue(func() map[string]*directive.Def {
	defs := make(map[string]*directive.Def, len(directive.Options))
	for i := range directive.Options {
		defs[directive.Options[i].Name] = &directive.Options[i]
	}
	return defs
})

// Prepared is a submission ready to send: the request as directive.Build
// made it (script and arguments set) and the script's name for messages.
type Prepared struct {
	directive.Request
	// Het are a heterogeneous job's further components (Spec is its
	// component 0), nil for another job.
	Het        []spec.JobSpec
	ScriptName string
	// Cmd is the name the user called (gpusubmit or sbatch), which
	// messages go under.
	Cmd string
}

// SubmitRequest is the API request for p, named by a new idempotency key
// so that a resend after a broken connection makes no second job (none
// for --test-only, which makes no job to name).
func (p *Prepared) SubmitRequest() wire.SubmitRequest {
	r := wire.SubmitRequest{Job: p.Spec, Het: p.Het, TestOnly: p.TestOnly}
	if !p.TestOnly {
		r.IdempotencyKey = wire.NewIdempotencyKey()
	}
	return r
}

// Prepare reads the script and builds and checks the request, reporting
// every problem in one pass: the command line's, the script's directives'
// and the options' values together. Warnings (options accepted with no
// effect) are written to in.Stderr.
func Prepare(in *Invocation) (*Prepared, error) {
	var errs []error
	for _, p := range in.Problems {
		errs = append(errs, invalid("command line: %s", p))
	}
	name, text, args, err := readScript(in)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	sc, err := directive.ParseScript(name, text)
	if err != nil {
		errs = append(errs, err)
	}
	opts := withCommandLine(sc.Options, in.Values)
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("find the submit directory: %w; run gpusubmit from a directory that exists", err)
	}
	host, _ := os.Hostname() // "": SLURM_SUBMIT_HOST unset
	env := directive.Env{Now: time.Now(), Cwd: cwd, Host: host, Environ: os.Environ(), ScriptName: name, Slurm: in.Name == "sbatch"}
	req, err := directive.Build(opts, env)
	if err != nil {
		errs = append(errs, err)
	}
	// A heterogeneous job's further components: the script's (after each
	// #SBATCH hetjob) and the command line's (after each ":"), by their
	// order, each over what component 0 propagates.
	ncomp := max(len(sc.Het), len(in.Het))
	comps := make([]spec.JobSpec, 0, ncomp)
	compOpts := make([][]directive.Option, 0, ncomp)
	for k := range ncomp {
		o := directive.Propagated(opts)
		if k < len(sc.Het) {
			o = append(o, sc.Het[k]...)
		}
		if k < len(in.Het) {
			o = withCommandLine(o, in.Het[k])
		}
		r, err := directive.Build(o, env)
		if err != nil {
			errs = append(errs, hetProblems(k+1, err))
			continue
		}
		req.Warnings = append(req.Warnings, r.Warnings...)
		r.Spec.Script = spec.HetScript
		comps, compOpts = append(comps, r.Spec), append(compOpts, o)
	}
	if ncomp > 0 && req.Spec.Array != "" {
		errs = append(errs, invalid("--array: a heterogeneous job cannot be an array job (Slurm refuses them too); submit the array and the heterogeneous job separately"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, w := range append(sc.Warnings, req.Warnings...) {
		fmt.Fprintf(in.Stderr, "%s: warning: %s\n", in.Name, w)
	}
	req.Spec.Script = string(text)
	req.Spec.Args = args
	// The checks the server and the controller run (spec.JobSpec.Validate),
	// here first, each at the line or flag that gave the value.
	if err := directive.Check(&req.Spec, opts); err != nil {
		errs = append(errs, err)
	}
	for k := range comps {
		if err := directive.Check(&comps[k], compOpts[k]); err != nil {
			errs = append(errs, hetProblems(k+1, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Prepared{Request: req, Het: comps, ScriptName: name, Cmd: in.Name}, nil
}

// withCommandLine is opts with the command line's values after them (so
// they win), in the options' order; --wrap is the script, not an option.
func withCommandLine(opts []directive.Option, values map[string]string) []directive.Option {
	for _, d := range directive.Options {
		v, set := values[d.Name]
		if d.Name == "wrap" || !set {
			continue
		}
		opts = append(opts, directive.Option{Name: d.Name, Value: v, Source: directive.CommandLine})
	}
	return opts
}

// hetProblems names heterogeneous job component k in each of err's
// problems.
func hetProblems(k int, err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, hetProblems(k, e))
		}
		return errors.Join(out...)
	}
	return invalid("hetjob component %d: %v", k, err)
}

// PrintSubmitted writes the answer to a submission that made a job, as
// sbatch does: the id alone with --parsable, else "Submitted batch job N".
// A --test-only answer goes to stderr (PrintTestOnly).
func (p *Prepared) PrintSubmitted(stdout, stderr io.Writer, resp wire.SubmitResponse) {
	switch {
	case p.TestOnly:
		PrintTestOnly(stderr, p.Cmd, resp, p.Spec.Partition)
	case p.Parsable:
		fmt.Fprintln(stdout, resp.ID)
	default:
		fmt.Fprintf(stdout, "Submitted batch job %d\n", resp.ID)
	}
}

// readScript returns the script's name for messages, its text and the
// arguments that follow it.
func readScript(c *Invocation) (string, []byte, []string, error) {
	args := c.Args
	if cmd, ok := c.Values["wrap"]; ok {
		if strings.TrimSpace(cmd) == "" {
			return "", nil, nil, invalid("command line: --wrap needs a command, e.g. --wrap 'python train.py'")
		}
		if len(args) > 0 {
			return "", nil, nil, invalid("command line: --wrap and a script (%s) are both given; use one", args[0])
		}
		return "wrap", []byte("#!/bin/sh\n" + cmd + "\n"), nil, nil
	}
	if len(args) == 0 && c.Name == "sbatch" {
		args = []string{"-"} // sbatch reads the script from standard input when none is named
	}
	if len(args) == 0 {
		return "", nil, nil, invalid("no batch script given; pass SCRIPT [ARGS...], - to read standard input, or --wrap 'CMD' (see gpusubmit --help)")
	}
	path := args[0]
	var (
		text []byte
		err  error
		name = filepath.Base(path)
	)
	if path == "-" {
		name = "standard input"
		text, err = io.ReadAll(io.LimitReader(c.Stdin, MaxScriptBytes+1))
	} else {
		text, err = readFileLimited(path)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, nil, invalid("batch script %s does not exist; check the path", path)
	case err != nil:
		return "", nil, nil, fmt.Errorf("read batch script %s: %w", path, err)
	case len(text) > MaxScriptBytes:
		return "", nil, nil, invalid("batch script %s is larger than %d MiB; is it really a script? keep data in files the script reads", path, MaxScriptBytes>>20)
	}
	return name, text, args[1:], nil
}

func readFileLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, invalid("batch script %s is a directory; pass a script file", path)
	}
	return io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
}

// PrintTestOnly writes a --test-only answer: when and where the job would
// start, under the command's name.
func PrintTestOnly(w io.Writer, cmd string, resp wire.SubmitResponse, partition string) {
	var b strings.Builder
	if resp.ExpectedStart.IsZero() {
		b.WriteString(cmd + ": Job would be accepted; the controller gave no start estimate")
	} else {
		fmt.Fprintf(&b, "%s: Job would start at %s", cmd, resp.ExpectedStart.Local().Format("2006-01-02T15:04:05"))
		if len(resp.Nodes) > 0 {
			fmt.Fprintf(&b, " on %s", strings.Join(resp.Nodes, ","))
		}
		if partition != "" {
			fmt.Fprintf(&b, " in partition %s", partition)
		}
	}
	if resp.Message != "" {
		fmt.Fprintf(&b, " (%s)", resp.Message)
	}
	fmt.Fprintln(w, b.String())
}

func invalid(format string, args ...any) error { return spec.Errorf(spec.ErrInvalid, format, args...) }
