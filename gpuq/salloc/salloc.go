// Package salloc is the salloc command (gpuq run as salloc): it makes an
// interactive allocation, waits for it, and runs a command (the user's
// shell by default) on the submit host with the allocation's SLURM_*
// variables, in which srun launches steps; the command's end releases the
// allocation (docs/architecture.md, "Allocations and steps").
package salloc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpud/gpud/cli/directive"
	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/hostlist"
	"github.com/gpud/gpud/gpud/spec"
	"github.com/gpud/gpud/gpuq/srun"
)

// Usage is salloc's short help.
const Usage = `usage: salloc [options] [COMMAND [ARGS...]]
Makes an interactive allocation (scheduled like any job: priority, limits,
preemption), waits for it, and runs COMMAND (default: $SHELL) here with
SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NNODES ... set; srun inside it
starts steps on the allocation's nodes. The allocation ends with COMMAND.
^C while the request waits cancels it.
Options are sbatch's resource options, among them:
  -N, --nodes=N  -n, --ntasks=N  --ntasks-per-node=N  -c, --cpus-per-task=N
  -G, --gpus=N   --gpus-per-node=N  --gpus-per-task=N  --mem=SIZE
  -t, --time=TIME  -p, --partition=P  -A, --account=A  -q, --qos=Q  -J, --job-name=NAME
`

// Exit codes of salloc's own errors (else the command's).
const (
	exitUsage = 2
	exitError = 1
)

// refused are sbatch options that make no sense for an allocation.
var refused = map[string]string{"array": "an allocation is one job", "wrap": "give the command after the options",
	"output": "the command's output is on this terminal", "error": "the command's output is on this terminal",
	"wait": "salloc always waits", "parsable": "salloc prints Slurm's lines", "test-only": "use sbatch --test-only"}

// parse reads sbatch's options up to the command, as sbatch reads them
// (getopt_long: prefixes, bundles, attached values); every problem is
// reported, each on its own line.
func parse(args []string) ([]directive.Option, []string, error) {
	opts, cmd, err := directive.ParseCommandLine(args)
	var problems []string
	if err != nil {
		problems = strings.Split(err.Error(), "\n")
	}
	for _, o := range opts {
		if why, ok := refused[o.Name]; ok {
			problems = append(problems, fmt.Sprintf("--%s is not an salloc option: %s", o.Name, why))
		}
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("salloc: %s", strings.Join(problems, "\nsalloc: "))
	}
	return opts, cmd, nil
}

// Main runs salloc with args (args[0] is the program name) and returns
// the command's exit code, or 1 / 2 for salloc's own errors.
func Main(args []string, stdout, stderr io.Writer) int {
	if srun.Informational(args, Usage, stdout) {
		return 0
	}
	opts, cmdArgs, err := parse(args[1:])
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	if len(cmdArgs) == 0 {
		sh := os.Getenv("SHELL")
		if sh == "" {
			sh = "/bin/sh"
		}
		cmdArgs = []string{sh}
	}
	if os.Getenv(api.EnvStepSocket) != "" {
		fmt.Fprintln(stderr, "salloc: warning: running inside a job: the new allocation is a separate job")
	}
	client, err := srun.Client()
	if err != nil {
		fmt.Fprintf(stderr, "salloc: %v\n", err)
		return exitError
	}
	ctx := context.Background()
	al, err := srun.Allocate(ctx, client, "salloc", filepath.Base(cmdArgs[0]), opts, stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitError
	}
	// The allocation ends with the command's status (COMPLETED or FAILED,
	// as Slurm's salloc), or is released if salloc leaves before it runs.
	code, sig, ran := 0, 0, false
	defer func() {
		if ran {
			al.Complete(code, sig)
		} else {
			al.Release("salloc command ended")
		}
	}()
	j, err := client.Job(ctx, al.Job)
	if err != nil {
		fmt.Fprintf(stderr, "salloc: read job allocation %d: %v\n", al.Job, err)
		return exitError
	}
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), allocEnv(j)...)
	// The terminal's ^C is the command's (an interactive shell's), not
	// salloc's: salloc stays to release the allocation.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT)
	// SIGTERM and SIGHUP go on to the command; salloc releases the
	// allocation once it ends.
	sigC := make(chan os.Signal, 2)
	signal.Notify(sigC, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigC)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "salloc: run %s: %v\n", cmdArgs[0], err)
		return exitError
	}
	go func() {
		for s := range sigC {
			_ = cmd.Process.Signal(s)
		}
	}()
	// The allocation ending first (time limit, scancel) hangs the command
	// up, as Slurm's salloc does.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if end, err := client.WaitJob(wctx, al.Job); err == nil && end.State.Terminal() {
			fmt.Fprintf(stderr, "salloc: Job allocation %d has been revoked (%s)\n", al.Job, end.State)
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}
	}()
	err = cmd.Wait()
	ran = true
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			sig = int(st.Signal())
			return 128 + sig
		}
		code = ee.ExitCode()
		return code
	default:
		fmt.Fprintf(stderr, "salloc: %s: %v\n", cmdArgs[0], err)
		code = exitError
		return exitError
	}
}

// allocEnv is the allocation's environment, as Slurm's salloc sets it.
func allocEnv(j spec.Job) []string {
	id := strconv.FormatUint(uint64(j.ID), 10)
	nl := hostlist.Compress(j.Nodes)
	nn := strconv.Itoa(len(j.Nodes))
	env := []string{
		"SLURM_JOB_ID=" + id, "SLURM_JOBID=" + id, "SLURM_JOB_NAME=" + j.Name,
		"SLURM_JOB_NODELIST=" + nl, "SLURM_NODELIST=" + nl,
		"SLURM_NNODES=" + nn, "SLURM_JOB_NUM_NODES=" + nn,
		"SLURM_JOB_PARTITION=" + j.Partition, "SLURM_JOB_ACCOUNT=" + j.Account,
		"SLURM_SUBMIT_DIR=" + j.SubmitDir,
	}
	if t := j.Tasks; t.NTasks > 0 {
		env = append(env, "SLURM_NTASKS="+strconv.Itoa(t.NTasks), "SLURM_NPROCS="+strconv.Itoa(t.NTasks))
	}
	if t := j.Tasks; t.NTasksPerNode > 0 {
		env = append(env, "SLURM_NTASKS_PER_NODE="+strconv.Itoa(t.NTasksPerNode))
	}
	if t := j.Tasks; t.CPUsPerTask > 0 {
		env = append(env, "SLURM_CPUS_PER_TASK="+strconv.Itoa(t.CPUsPerTask))
	}
	if t := j.Tasks; t.GPUsPerTask > 0 {
		env = append(env, "SLURM_GPUS_PER_TASK="+strconv.Itoa(t.GPUsPerTask))
	}
	return env
}
