package srun

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/cli/getopt"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/auth"
	"github.com/gpud/gpud/gpud/spec"
)

// srun and salloc outside a job's containers (docs/architecture.md,
// "Allocations and steps"): an allocation
// is a job whose nodes only hold (spec.JobSpec.Interactive); steps reach
// its first node's step listener over TLS with the allocation's step
// ticket, which only the job's owner (or root) gets from the controller.

// DefaultController is used when GPUD_CONTROLLER is unset.
const DefaultController = "unix:///run/gpud/gpud.sock"

// Client is the controller client srun and salloc use (GPUD_CONTROLLER).
func Client() (*api.Client, error) {
	addr := os.Getenv(api.EnvController)
	if addr == "" {
		addr = DefaultController
	}
	return api.NewClient(addr)
}

// allocOnly are srun options that only shape an allocation (outside a
// job): inside one they are accepted and have no effect, as Slurm's.
var allocOnly = map[string]bool{"time": true, "partition": true, "mem": true, "job-name": true, "account": true,
	"qos": true, "constraint": true, "mem-per-cpu": true, "mem-per-gpu": true, "cpus-per-gpu": true, "exclude": true,
	"image": true, "nice": true, "comment": true, "begin": true, "reservation": true}

// withAllocOptions adds to set sbatch's options that take a value and
// that srun's own set lacks, so srun outside a job takes them for the
// allocation it makes (noteAlloc), parsed as getopt_long does.
func withAllocOptions(set *getopt.Set) *getopt.Set {
	long, short := map[string]bool{}, map[byte]bool{}
	for _, o := range set.Opts {
		long[o.Long] = true
		short[o.Short] = true
	}
	for _, d := range directive.Options {
		if d.Bool || long[d.Name] {
			continue
		}
		o := getopt.Opt{Long: d.Name, Arg: getopt.Required}
		if len(d.Short) == 1 && !short[d.Short[0]] {
			o.Short = d.Short[0]
			short[o.Short] = true
		}
		set.Opts = append(set.Opts, o)
		long[d.Name] = true
	}
	return set
}

// noteAlloc records an option for an allocation srun may make: one of
// sbatch's that takes a value (directive.Lookup, as salloc and sbatch find
// them). It reports whether the option shapes only the allocation (so the
// step parser need not know it).
func (o *options) noteAlloc(name, v string) bool {
	d, ok := directive.Lookup(name)
	if !ok || d.Bool {
		return false
	}
	o.alloc = append(o.alloc, directive.Option{Name: d.Name, Value: v, Source: directive.CommandLine})
	return allocOnly[d.Name]
}

// Allocation is an interactive allocation srun or salloc made.
type Allocation struct {
	Job    spec.JobID
	client *api.Client
	prog   string
	stderr io.Writer
}

// Allocate submits an interactive allocation shaped by opts (sbatch's
// option names), reports it as Slurm does ("salloc: Pending job
// allocation N", "Granted"), and waits until it runs and every node can
// start tasks. ^C (or SIGTERM, SIGHUP) while it waits cancels the
// request. name names the job when opts give none (the command's name).
func Allocate(ctx context.Context, client *api.Client, prog, name string, opts []directive.Option, stderr io.Writer) (*Allocation, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("%s: find the submit directory: %w", prog, err)
	}
	host, _ := os.Hostname() // "": SLURM_SUBMIT_HOST unset
	req, err := directive.Build(opts, directive.Env{Now: time.Now(), Cwd: cwd, Host: host, Environ: os.Environ(), ScriptName: name, Slurm: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prog, err)
	}
	for _, w := range req.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", prog, w)
	}
	js := req.Spec
	js.Interactive = true
	// A requeued allocation would come back without its command: it
	// ends instead (preemption, node failure), and salloc hangs up.
	js.Requeue = false
	js.Output, js.Error = "", ""
	js.Script = "#!/bin/sh\n# interactive allocation (" + prog + "): steps come from outside; the nodes hold\n"
	resp, err := client.Submit(ctx, api.SubmitRequest{Job: js})
	if err != nil {
		return nil, fmt.Errorf("%s: request an allocation: %w", prog, err)
	}
	al := &Allocation{Job: resp.ID, client: client, prog: prog, stderr: stderr}
	fmt.Fprintf(stderr, "%s: Pending job allocation %d\n", prog, al.Job)
	sigC := make(chan os.Signal, 1)
	signal.Notify(sigC, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigC)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sigC:
			cancel()
		case <-wctx.Done():
		}
	}()
	if err := al.waitReady(wctx); err != nil {
		al.Release("allocation request given up")
		if wctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%s: Job allocation %d has been revoked: interrupted while waiting", prog, al.Job)
		}
		return nil, err
	}
	return al, nil
}

// readyTimeout bounds the wait for a granted allocation's nodes to start
// tasks.
const readyTimeout = 2 * time.Minute

// waitReady waits until the allocation runs and its nodes start tasks.
func (al *Allocation) waitReady(ctx context.Context) error {
	said := false
	var granted time.Time
	for delay := 20 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		j, err := al.client.Job(ctx, al.Job)
		switch {
		case err != nil:
			return fmt.Errorf("%s: follow job allocation %d: %w", al.prog, al.Job, err)
		case j.State.Terminal():
			return fmt.Errorf("%s: job allocation %d ended %s before it ran (%s)", al.prog, al.Job, j.State, j.Reason)
		case j.State == spec.StateRunning:
			if granted.IsZero() {
				fmt.Fprintf(al.stderr, "%s: Granted job allocation %d\n", al.prog, al.Job)
				said, granted = true, time.Now()
			}
			err := Probe(ctx, al.client, al.Job)
			if err == nil {
				return nil
			}
			var nr notReady
			if !errors.As(err, &nr) {
				return err
			}
			// Containers start in a second or so; a node that still
			// cannot start a task is broken, not slow.
			if time.Since(granted) > readyTimeout {
				return fmt.Errorf("%s: job allocation %d's nodes cannot start tasks after %v: %v", al.prog, al.Job, readyTimeout, err)
			}
		case !said && j.Reason != "" && j.Reason != spec.ReasonNone:
			// Slurm's line while the request waits.
			fmt.Fprintf(al.stderr, "%s: job %d queued and waiting for resources (%s)\n", al.prog, al.Job, j.Reason)
			said = true
			defer fmt.Fprintf(al.stderr, "%s: job %d has been allocated resources\n", al.prog, al.Job)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// Release ends the allocation (its nodes' holders stop).
func (al *Allocation) Release(reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := al.client.JobAction(ctx, al.Job, "cancel", api.JobActionRequest{Reason: reason}); err != nil && !errors.Is(err, spec.ErrConflict) {
		fmt.Fprintf(al.stderr, "%s: release job allocation %d: %v (cancel it with scancel %d)\n", al.prog, al.Job, err, al.Job)
		return
	}
	fmt.Fprintf(al.stderr, "%s: Relinquishing job allocation %d\n", al.prog, al.Job)
}

// Complete ends the allocation with the exit status of the work run in
// it (srun's step, salloc's command): the job ends COMPLETED or FAILED
// with that status, as Slurm's do, not CANCELLED. An allocation that
// cannot be completed (an older controller) is released instead.
func (al *Allocation) Complete(code, sig int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := al.client.JobAction(ctx, al.Job, "complete", api.JobActionRequest{ExitCode: code, ExitSignal: sig})
	switch {
	case err == nil:
		fmt.Fprintf(al.stderr, "%s: Relinquishing job allocation %d\n", al.prog, al.Job)
	case errors.Is(err, spec.ErrConflict):
		// Already ended (time limit, scancel): nothing to give back.
	default:
		al.Release("step ended")
	}
}

// notReady is a probe's answer that a node cannot start tasks yet.
type notReady struct{ msg string }

func (e notReady) Error() string { return e.msg }

// Probe asks the first node of job's allocation whether every node can
// start tasks (api.StepHello.Probe); notReady when not yet.
func Probe(ctx context.Context, client *api.Client, job spec.JobID) error {
	c, err := DialStep(ctx, client, job, true)
	if err != nil {
		return err
	}
	defer c.Close()
	m, err := api.ReadStepFrame(bufio.NewReader(c))
	switch {
	case err != nil:
		return notReady{fmt.Sprintf("probe job %d's nodes: %v", job, err)}
	case m.Kind == api.StepError:
		return notReady{m.Error}
	}
	return nil
}

// DialStep reaches the step listener of job's first node with the job's
// step ticket (the caller must own the job, or be root) and sends the
// hello; a StepRequest follows (unless probe). The listener's certificate
// must be that node's, from the cluster CA the controller names (or
// GPUD_CA's).
func DialStep(ctx context.Context, client *api.Client, job spec.JobID, probe bool) (net.Conn, error) {
	tk, err := client.StepTicket(ctx, job)
	if err != nil {
		return nil, fmt.Errorf("get a step ticket for job %d: %w", job, err)
	}
	if len(tk.Nodes) == 0 || tk.Nodes[0].StepAddr == "" {
		name := ""
		if len(tk.Nodes) > 0 {
			name = tk.Nodes[0].Name
		}
		return nil, fmt.Errorf("node %s of job %d serves no steps from outside the job (no step listener: the node did not join with a join token, or [node] step_listen is \"\"); run srun inside the job (sbatch)", name, job)
	}
	pool, err := stepCA(tk.CA)
	if err != nil {
		return nil, err
	}
	first := tk.Nodes[0]
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: auth.StepClientTLS(pool, first.Name, nil)}
	c, err := d.DialContext(ctx, "tcp", first.StepAddr)
	if err != nil {
		return nil, notReady{fmt.Sprintf("reach node %s's step listener at %s: %v", first.Name, first.StepAddr, err)}
	}
	hello := api.StepHello{Alloc: tk.Alloc, Ticket: tk.Ticket, Probe: probe}
	if err := json.NewEncoder(c).Encode(hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("send the step hello to node %s: %w", first.Name, err)
	}
	return c, nil
}

// stepCA is the pool to check step listeners with: the CA the controller
// gave (over the authenticated controller connection), else GPUD_CA's.
func stepCA(caPEM string) (*x509.CertPool, error) {
	if caPEM != "" {
		return auth.CAPool([]byte(caPEM))
	}
	path := os.Getenv(api.EnvCA)
	if path == "" {
		if home, err := os.UserHomeDir(); err == nil {
			path = filepath.Join(home, ".config", "gpud", "ca.pem")
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("no cluster CA to check the node's step listener with: the controller sent none and %s (or ~/.config/gpud/ca.pem) is not readable: %v", api.EnvCA, err)
	}
	return auth.CAPool(b)
}

// jobFromEnv is the job srun runs in when outside its containers: the
// job of --jobid, else a salloc shell's SLURM_JOB_ID (0: none).
func jobFromEnv(jobOpt string) spec.JobID {
	n, err := strconv.ParseUint(strings.TrimSpace(cmpOr(jobOpt, os.Getenv("SLURM_JOB_ID"))), 10, 64)
	if err != nil {
		return 0
	}
	return spec.JobID(n)
}

// wantsAllocation says whether srun's options ask for resources, so that
// outside any allocation it makes one.
func (o *options) wantsAllocation() bool {
	for _, a := range o.alloc {
		switch a.Name {
		case "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus", "gpus-per-node", "gpus-per-task",
			"mem", "nodelist", "partition", "time":
			return true
		}
	}
	return false
}

// outside runs srun outside a job's containers: in the allocation of
// SLURM_JOB_ID (a salloc shell), or in a new one its options shape.
func outside(o options, stdout, stderr io.Writer) int {
	ctx := context.Background()
	client, err := Client()
	if err != nil {
		fmt.Fprintf(stderr, "srun: %v\n", err)
		return exitError
	}
	job := jobFromEnv(o.jobOpt)
	var al *Allocation
	if job == 0 {
		if !o.wantsAllocation() {
			fmt.Fprintf(stderr, "srun: no allocation to run in: not inside a gpud job (%s unset), not in a salloc shell (SLURM_JOB_ID unset), and no resources asked for; ask for some (e.g. srun -N1 --gpus-per-node=1 CMD) or run inside sbatch or salloc\n", api.EnvStepSocket)
			return exitError
		}
		al, err = Allocate(ctx, client, "srun", filepath.Base(o.req.Args[0]), o.alloc, stderr)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitError
		}
		job = al.Job
	} else {
		if len(o.container) > 0 {
			j, err := client.Job(ctx, job)
			if err != nil {
				fmt.Fprintf(stderr, "srun: look up job %d for its image: %v\n", job, err)
				return exitError
			}
			if err := o.checkContainer(cmpOr(j.Image, spec.ImageHost)); err != nil {
				fmt.Fprintln(stderr, err)
				return exitUsage
			}
		}
		o.envDefaults(os.Getenv) // the salloc shell's layout
	}
	code := runTicket(ctx, client, job, o, stdout, stderr)
	if al != nil {
		al.Complete(code, 0)
	}
	return code
}

// runTicket runs srun's step in job's allocation through its first
// node's step listener.
func runTicket(ctx context.Context, client *api.Client, job spec.JobID, o options, stdout, stderr io.Writer) int {
	o.req.Stdin = !o.noInput && hasInput(os.Stdin)
	if o.req.Cwd == "" {
		o.req.Cwd, _ = os.Getwd()
	}
	env := os.Environ()
	if os.Getenv("SLURM_JOB_ID") == "" {
		env = append(env, "SLURM_JOB_ID="+strconv.FormatUint(uint64(job), 10))
	}
	o.req.Env = exportEnv(o.export, env)
	o.jobID = strconv.FormatUint(uint64(job), 10)
	// Following the step again after the first node's agent restarted:
	// a new connection with a fresh ticket (session.go).
	o.redial = func() (net.Conn, error) { return DialStep(ctx, client, job, false) }
	c, err := o.redial()
	if err != nil {
		fmt.Fprintf(stderr, "srun: %v\n", err)
		return exitError
	}
	defer c.Close()
	return runStep(c, o, stdout, stderr)
}
