package slurm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpud/gpud/cli/exitcode"
	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/format"
)

// DefaultController is used when GPUD_CONTROLLER is unset.
const DefaultController = "unix:///run/gpud/gpud.sock"

// Names are the Slurm command names this package runs.
var Names = []string{"squeue", "scancel", "sacct", "scontrol", "sinfo", "sacctmgr", "sprio", "sshare", "sreport"}

// Is reports whether name is one of Names.
func Is(name string) bool { return slices.Contains(Names, name) }

// Cmd is one run of a command.
type Cmd struct {
	Name   string
	Args   []string // without the program name
	Stdout io.Writer
	Stderr io.Writer
	Now    time.Time
	// Controller is the controller's address (GPUD_CONTROLLER).
	Controller string
	// User is the caller's name, for --me.
	User string
}

// Main runs the command called name with args (args[0] is the program)
// and returns its exit status. Errors go to stderr, never stdout.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	// Standard output goes out at the end (or per 64 KiB), as Slurm's
	// commands write theirs through stdio, fully buffered on a pipe. A
	// reader that stops early then finds the output already written:
	// with a write per line, `scontrol show hostnames | head -n 1` under
	// `set -o pipefail` (stas00/ml-engineering's launchers) died of
	// SIGPIPE when head had exited before the second line.
	out := bufio.NewWriterSize(stdout, 64<<10)
	c := &Cmd{Name: name, Args: args[1:], Stdout: out, Stderr: stderr, Now: time.Now(),
		Controller: os.Getenv(api.EnvController)}
	if c.Controller == "" {
		c.Controller = DefaultController
	}
	if u, err := user.Current(); err == nil {
		c.User = u.Username
	}
	err := c.Run(ctx)
	out.Flush()
	exitcode.Print(stderr, name, err)
	return exitcode.Code(err)
}

// Run runs the command.
func (c *Cmd) Run(ctx context.Context) error {
	switch c.Name {
	case "squeue":
		return c.squeue(ctx)
	case "scancel":
		return c.scancel(ctx)
	case "sacct":
		return c.sacct(ctx)
	case "scontrol":
		return c.scontrol(ctx)
	case "sinfo":
		return c.sinfo(ctx)
	case "sacctmgr":
		return c.sacctmgr(ctx)
	case "sprio":
		return c.sprio(ctx)
	case "sshare":
		return c.sshare(ctx)
	case "sreport":
		return c.sreport(ctx)
	}
	return fmt.Errorf("unknown command %s", c.Name)
}

func invalid(f string, a ...any) error { return spec.Errorf(spec.ErrInvalid, f, a...) }

// parse reads c.Args with set; usage errors are joined with a pointer to
// the compatibility notes.
func (c *Cmd) parse(set *getopt.Set) ([]getopt.Parsed, []string, error) {
	ps, rest, errs := set.Parse(c.Args)
	if len(errs) > 0 {
		var es []error
		for _, e := range errs {
			es = append(es, invalid("%s", e.Msg))
		}
		es = append(es, invalid("see docs/slurm-compat.md for the %s options gpud takes", c.Name))
		return nil, nil, errors.Join(es...)
	}
	if getopt.Has(ps, "help") || getopt.Has(ps, "usage") {
		return ps, rest, errHelp
	}
	if getopt.Has(ps, "version") {
		return ps, rest, errVersion
	}
	return ps, rest, nil
}

var (
	errHelp    = errors.New("help")
	errVersion = errors.New("version")
)

// common are the options every command takes.
var common = []getopt.Opt{
	{Long: "help"}, {Long: "usage"}, {Long: "version", Short: 'V'},
	{Long: "verbose", Short: 'v'}, {Long: "quiet", Short: 'Q'},
	{Long: "clusters", Short: 'M', Arg: getopt.Required},
}

func (c *Cmd) handled(err error, usage string) (bool, error) {
	switch err {
	case errHelp:
		fmt.Fprintf(c.Stdout, "Usage: %s %s\ngpud's %s; see docs/slurm-compat.md for what it honours.\n", c.Name, usage, c.Name)
		return true, nil
	case errVersion:
		fmt.Fprintln(c.Stdout, api.SlurmVersion)
		return true, nil
	}
	return false, err
}

func (c *Cmd) client() (*api.Client, error) { return api.NewClient(c.Controller) }

// warn prints one warning line on stderr.
func (c *Cmd) warn(f string, a ...any) {
	fmt.Fprintf(c.Stderr, "%s: warning: %s\n", c.Name, fmt.Sprintf(f, a...))
}

// splitList splits a comma list, dropping empty items.
func splitList(vs ...string) []string {
	var out []string
	for _, s := range vs {
		for it := range strings.SplitSeq(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				out = append(out, it)
			}
		}
	}
	return out
}

// jobSel is a job id as Slurm's commands take it: N, A_T, A (an array:
// every task), N+K (component K of heterogeneous job N) or any of them
// with .S (a step).
type jobSel struct {
	ref  spec.JobRef
	step string
	// het: the selector was N+K; ref.ID is then the component's own id
	// (a heterogeneous job's components take the ids after the
	// leader's, N+K is job N+K) and hetOf the leader N.
	het   bool
	hetOf spec.JobID
}

func parseSel(s string) (jobSel, error) {
	head, step, hasStep := strings.Cut(s, ".")
	if hasStep && step == "" {
		return jobSel{}, invalid("%q: a step id follows the dot (42.0, 42.batch)", s)
	}
	if lead, off, ok := strings.Cut(head, "+"); ok {
		n, err1 := strconv.ParseUint(lead, 10, 32)
		k, err2 := strconv.ParseUint(off, 10, 16)
		if err1 != nil || err2 != nil || n == 0 {
			return jobSel{}, invalid("%q: a heterogeneous job's component is LEADER+OFFSET (42+1)", s)
		}
		return jobSel{ref: spec.JobRef{ID: spec.JobID(n + k)}, step: step, het: true, hetOf: spec.JobID(n)}, nil
	}
	ref, err := spec.ParseJobRef(head)
	if err != nil {
		return jobSel{}, err
	}
	return jobSel{ref: ref, step: step}, nil
}

// matches reports whether j is selected by sel: its id, or the array it is
// a task of; N+K only the component K of N.
func (s jobSel) matches(j *spec.Job) bool {
	switch {
	case s.het:
		return j.ID == s.ref.ID && j.HetJobID == s.hetOf
	case s.ref.IsTask:
		return j.ArrayJobID == s.ref.ID && j.ArrayTaskID == s.ref.Task
	}
	return j.ID == s.ref.ID || j.ArrayJobID == s.ref.ID
}

// leader reports whether sel names heterogeneous job id's leader as a
// whole (N, not N+0), which names every component.
func (s jobSel) leader(id spec.JobID) bool { return !s.ref.IsTask && !s.het && s.ref.ID == id }

func parseSels(vs []string) ([]jobSel, error) {
	var out []jobSel
	var errs []error
	for _, v := range splitList(vs...) {
		s, err := parseSel(v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// parseStates reads -t/--states: long or short names, or all.
func parseStates(vs []string) (states []spec.JobState, all bool, err error) {
	for _, s := range splitList(vs...) {
		if strings.EqualFold(s, "all") {
			return nil, true, nil
		}
		st, err := format.ParseState(s)
		if err != nil {
			return nil, false, invalid("--states: %v", err)
		}
		states = append(states, st)
	}
	return states, false, nil
}

// users resolves -u and --me.
func (c *Cmd) users(ps []getopt.Parsed) []string {
	us := splitList(getopt.All(ps, "user")...)
	if getopt.Has(ps, "me") && c.User != "" {
		us = append(us, c.User)
	}
	return us
}

func itoa(n int) string { return strconv.Itoa(n) }
