package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// nsPID is the PID host process pid has in its own PID namespace (the
// last NSpid field): what $$ says inside the job's container.
func nsPID(t *testing.T, pid string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			return f[len(f)-1]
		}
	}
	return ""
}

// TestScontrolListpids is issue 33's scontrol listpids: on the host that
// runs a job, the job's processes in Slurm's layout, read from the
// kernel: the batch script as task 0 of step batch, each task of an srun
// step with its local and global id, every other process of the job with
// "-"; JOBID.STEP picks a step. The PIDs are the host's; the test checks
// them against the PIDs the job itself wrote ($$ in its PID namespace).
// Another user sees a note, not the job's processes.
func TestScontrolListpids(t *testing.T) {
	t.Parallel()
	other := e2etest.AddUserTag(t, "lpo")
	c := e2etest.OpenCluster(t, false)
	work := t.TempDir()
	pids := filepath.Join(work, "pids")
	e2etest.WriteScript(t, work, "job.sh", `#!/bin/bash
echo "batch $$" >> `+pids+`
srun -n2 bash -c 'echo "task $SLURM_PROCID $$" >> `+pids+`; sleep 600; true' &
sleep 600 &
wait
`)
	r := c.CLI(work, "sbatch", "--parsable", "-n2", "--time=5", "-o", "job.out", "job.sh")
	if r.Code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "RUNNING")
	want := map[string]string{} // "batch" / "task N" -> PID in the container
	e2etest.WaitFor(t, 60*time.Second, "the job's PIDs", func() bool {
		b, _ := os.ReadFile(pids)
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(l); len(f) >= 2 {
				want[strings.Join(f[:len(f)-1], " ")] = f[len(f)-1]
			}
		}
		return len(want) == 3
	})

	type row struct{ pid, job, step, local, global string }
	list := func(args ...string) []row {
		t.Helper()
		r := c.CLI(work, "scontrol", append([]string{"listpids"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("scontrol listpids %v: exit %d: %s", args, r.Code, r.Stderr)
		}
		lines := strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n")
		if lines[0] != "PID      JOBID    STEPID   LOCALID GLOBALID" {
			t.Fatalf("listpids header %q", lines[0])
		}
		var out []row
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) != 5 {
				t.Fatalf("listpids line %q", l)
			}
			out = append(out, row{f[0], f[1], f[2], f[3], f[4]})
		}
		return out
	}
	var got []row
	e2etest.WaitFor(t, 30*time.Second, "listpids to show the batch script and both tasks", func() bool {
		got = list(id)
		tasks := 0
		for _, r := range got {
			if r.local != "-" {
				tasks++
			}
		}
		return tasks == 3
	})
	others := 0
	for _, r := range got {
		if r.job != id {
			t.Errorf("row of another job: %+v", r)
		}
		ns := nsPID(t, r.pid)
		switch {
		case r.step == "batch" && r.local == "0":
			if r.global != "0" || ns != want["batch"] {
				t.Errorf("batch task %+v (PID %s in the container), want the script's %s", r, ns, want["batch"])
			}
		case r.step == "0" && r.local != "-":
			if r.local != r.global || ns != want["task "+r.global] {
				t.Errorf("step task %+v (PID %s in the container), want task %s's %s", r, ns, r.global, want["task "+r.global])
			}
		case r.local == "-" && r.global == "-" && (r.step == "batch" || r.step == "0"):
			others++
		default:
			cg, _ := os.ReadFile(filepath.Join("/proc", r.pid, "cgroup"))
			cmd, _ := os.ReadFile(filepath.Join("/proc", r.pid, "cmdline"))
			t.Errorf("unexpected row %+v (cgroup %q, command %q)", r, cg, cmd)
		}
	}
	if others < 2 { // at least the output wrapper, srun and the batch's sleep
		t.Errorf("%d other processes listed, want the wrapper, srun and sleep: %+v", others, got)
	}
	step := list(id + ".0")
	tasks := map[string]bool{}
	for _, r := range step {
		if r.step != "0" {
			t.Errorf("listpids %s.0 shows %+v", id, r)
		}
		if r.local != "-" {
			tasks[r.global] = true
		}
	}
	if !tasks["0"] || !tasks["1"] {
		t.Errorf("listpids %s.0 = %+v; want tasks 0 and 1", id, step)
	}
	for _, all := range [][]string{{}, {"*"}} {
		found := false
		for _, r := range list(all...) {
			found = found || r.job == id
		}
		if !found {
			t.Errorf("listpids %v leaves job %s out", all, id)
		}
	}
	if r := c.CLI(work, "scontrol", "listpids", "999999"); r.Code == 0 || !strings.Contains(r.Stderr, "does not exist on this node") {
		t.Errorf("listpids of an absent job: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.As(other, nil, "scontrol", "listpids", id); r.Code == 0 || !strings.Contains(r.Stderr, "not listed") {
		t.Errorf("listpids by another user: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if r := c.CLI(work, "scancel", id); r.Code != 0 {
		t.Fatalf("scancel: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 60*time.Second, "CANCELLED")
}
