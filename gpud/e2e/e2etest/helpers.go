package e2etest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/spec"
)

// WaitJob polls job id through the API until cond holds. On a timeout it
// says where the job was (state, reason, attempt), so that a flake shows
// which step never came.
func WaitJob(t *testing.T, cl *api.Client, id spec.JobID, timeout time.Duration, what string, cond func(spec.Job) bool) spec.Job {
	t.Helper()
	var j spec.Job
	var err error
	deadline := time.Now().Add(timeout)
	for {
		j, err = cl.Job(context.Background(), id)
		if err == nil && cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: job %d %s (reason %q, attempt %d, nodes %v, gpus %v; err %v)",
				timeout, what, id, j.State, j.Reason, j.Attempt, j.Nodes, j.GPUs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KillStrayShims ends the shims of this cluster's containerd that are
// still running after the cluster stopped: those left by a containerd
// killed while creating a task (they hold no process), and those of a
// container the stop did not end (a node's part of a job whose end was
// still on its way when the agents stopped). A shim's children, the
// containers' first processes, are ended first: each is its container's
// PID namespace's init, so the container's other processes end with it,
// where killing the shim alone left them running with no parent but
// init (step.HolderScript shells were found so after full runs).
func KillStrayShims(t testing.TB, stateDir string) {
	t.Helper()
	for _, sh := range ShimProcs(stateDir) {
		for _, pid := range childrenOf(sh.Pid) {
			t.Logf("ending a container process %d of stray shim %d", pid, sh.Pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		t.Logf("ending stray shim %d: %s", sh.Pid, sh.Cmdline)
		_ = syscall.Kill(sh.Pid, syscall.SIGKILL)
	}
}

// childrenOf lists the processes whose parent is pid (/proc/*/stat).
func childrenOf(pid int) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		c, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if f := statFields(c); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// statFields is /proc/PID/stat's fields after the command name (state
// first, then the parent's pid, ...); nil when pid is gone. The name may
// hold spaces and parentheses: the fields start past its last ')'.
func statFields(pid int) []string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat)[i+1:])
}

// ShimProc is a containerd-shim process: its pid and its command line
// with the arguments joined by spaces.
type ShimProc struct {
	Pid     int
	Cmdline string
}

// ShimProcs finds the containerd-shim processes of the private containerd
// under stateDir (their command line names its socket, so stateDir+"/":
// another cluster's dir may start with this one's name) in /proc. Both the
// check that a stop leaves none (shimsOf) and the clean-up of stray ones
// (killStrayShims) look for them alike through it.
func ShimProcs(stateDir string) []ShimProc {
	var out []ShimProc
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.HasPrefix(filepath.Base(strings.Split(string(cmdline), "\x00")[0]), "containerd-shim") ||
			!strings.Contains(string(cmdline), stateDir+"/") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
			out = append(out, ShimProc{pid, strings.ReplaceAll(string(cmdline), "\x00", " ")})
		}
	}
	return out
}

// VMRSS reads a process's resident set size in bytes.
func VMRSS(tb testing.TB, pid int) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func Hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// iptables runs iptables with args.
func iptables(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// Cut drops every packet between a and b (both directions) and returns
// the function that heals it.
func Cut(t testing.TB, a, b string) func() {
	t.Helper()
	rules := [][]string{
		{"INPUT", "-s", a, "-d", b, "-j", "DROP", "-m", "comment", "--comment", "gpud-ha-e2e"},
		{"INPUT", "-s", b, "-d", a, "-j", "DROP", "-m", "comment", "--comment", "gpud-ha-e2e"},
	}
	for _, r := range rules {
		iptables(t, append([]string{"-I"}, r...)...)
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		for _, r := range rules {
			iptables(t, append([]string{"-D"}, r...)...)
		}
	}
	t.Cleanup(heal)
	return heal
}

// CounterScript counts five times a second, checkpoints its counter on
// SIGUSR1 (files first, then .done) and resumes from GPUD_RESTART_DIR.
const CounterScript = `#!/bin/bash
#GPU --checkpoint=2s
n=0
if [ -n "$GPUD_RESTART_DIR" ] && [ -f "$GPUD_RESTART_DIR/counter" ]; then
	n=$(cat "$GPUD_RESTART_DIR/counter")
	echo "resumed from $n"
else
	echo "fresh start"
fi
checkpoint() {
	echo "$n" > "$GPUD_CHECKPOINT_DIR/counter"
	touch "$GPUD_CHECKPOINT_DIR/.done"
	echo "checkpoint $n"
}
trap checkpoint USR1
trap 'echo "stopped at $n"; exit 143' TERM
while [ "$n" -lt 1000000 ]; do
	n=$((n+1))
	sleep 0.2
done
`
