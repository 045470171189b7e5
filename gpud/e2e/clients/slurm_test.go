package clients

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestSlurmNames drives a real cluster through Slurm's command names as a
// client library does: sbatch with an output pattern into a directory that
// does not exist yet, squeue, scancel --signal delivered to the running
// job's trap, scancel by name, scontrol, sacct --parsable2, and -o
// /dev/null.
func TestSlurmNames(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	work := t.TempDir()
	script := e2etest.WriteScript(t, work, "trap.sh", `
#!/bin/bash
#SBATCH --out=logs/%x-%J.%s.out --job-name=trapper --hint=nomultithread
trap 'echo got USR1' USR1
echo started
for i in $(seq 300); do sleep 0.1; done
echo finished
`)
	r := c.CLI(work, "sbatch", "--parsable", script)
	if r.Code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.Code, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "sbatch: warning: line 2 of trap.sh: --hint has no effect") {
		t.Errorf("sbatch stderr %q lacks the --hint warning", r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	c.WaitState(id, 60*time.Second, "RUNNING")
	out := filepath.Join(work, "logs", "trapper-"+id+".batch.out")
	e2etest.WaitFor(t, 30*time.Second, "the job to write started", func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "started") })

	if r := c.CLI(work, "squeue", "-h", "-j", id, "-o", "%i %T %j"); r.Code != 0 || strings.TrimSpace(r.Stdout) != id+" RUNNING trapper" {
		t.Errorf("squeue: exit %d, %q, %s", r.Code, r.Stdout, r.Stderr)
	}
	// The batch shell traps it: -b sends it there (without -b a signal
	// goes to the job's steps only, as in Slurm).
	if r := c.CLI(work, "scancel", "-b", "--signal=USR1", id); r.Code != 0 {
		t.Fatalf("scancel --signal: exit %d: %s", r.Code, r.Stderr)
	}
	e2etest.WaitFor(t, 30*time.Second, "the trap to report USR1", func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "got USR1") })
	if r := c.CLI(work, "scontrol", "show", "job", id, "-o"); r.Code != 0 || !strings.Contains(r.Stdout, "JobState=RUNNING") {
		t.Errorf("scontrol show job: exit %d, %q", r.Code, r.Stdout)
	}
	if r := c.CLI(work, "scancel", "-n", "trapper"); r.Code != 0 {
		t.Fatalf("scancel -n: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 60*time.Second, "CANCELLED")

	r = c.CLI(work, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "echo discarded")
	if r.Code != 0 {
		t.Fatalf("sbatch -o /dev/null: exit %d: %s", r.Code, r.Stderr)
	}
	quiet := strings.TrimSpace(r.Stdout)
	c.WaitState(quiet, 60*time.Second, "COMPLETED")
	r = c.CLI(work, "sacct", "-P", "-n", "-j", id+","+quiet, "-o", "JobID,JobName,State,ExitCode")
	if r.Code != 0 {
		t.Fatalf("sacct: exit %d: %s", r.Code, r.Stderr)
	}
	// A job killed by SIGTERM reads 0:15, as in Slurm (it read 143:15).
	// Each job, then its batch step (N.batch), as sacct lists them.
	want := id + "|trapper|CANCELLED|0:15\n" + id + ".batch|batch|CANCELLED|0:15\n" +
		quiet + "|wrap|COMPLETED|0:0\n" + quiet + ".batch|batch|COMPLETED|0:0\n"
	if r.Stdout != want {
		t.Errorf("sacct -P:\n%s\nwant:\n%s", r.Stdout, want)
	}
}

// TestSbatchHandsOff: bin/sbatch sends a plain submission itself and runs
// the full gpusubmit, as sbatch, for what it does not take: --help, and a
// script read from standard input whose directives ask for --wait (the
// script already read goes to gpusubmit in memory; the exit status is the
// job's).
func TestSbatchHandsOff(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1)
	work := t.TempDir()
	if r := c.CLI(work, "sbatch", "--help"); r.Code != 0 || !strings.Contains(r.Stdout, "sbatch - submit a batch job to gpud") {
		t.Errorf("sbatch --help: exit %d, %q, %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := c.CLI(work, "sbatch", "-V"); r.Code != 0 || r.Stdout != "slurm 22.05.0 (gpud)\n" {
		t.Errorf("sbatch -V: exit %d, %q, %s", r.Code, r.Stdout, r.Stderr)
	}
	cmd := exec.Command(filepath.Join(e2etest.BinDir, "sbatch"), "--parsable")
	cmd.Dir, cmd.Env = work, append(os.Environ(), api.EnvController+"="+c.Addr)
	cmd.Stdin = strings.NewReader("#!/bin/sh\n#SBATCH --wait -J waited\necho from stdin\nexit 3\n")
	r := e2etest.RunCommand(t, cmd, "sbatch --parsable < script with --wait")
	if r.Code != 3 {
		t.Fatalf("sbatch with #SBATCH --wait from stdin: exit %d, want the job's 3 (stdout %q, stderr %s)", r.Code, r.Stdout, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	if b, _ := os.ReadFile(filepath.Join(work, "slurm-"+id+".out")); string(b) != "from stdin\n" {
		t.Errorf("job %s wrote %q, want the script's echo", id, b)
	}
	if j := c.ShowJob(id); j["name"] != "waited" {
		t.Errorf("job %s is named %v, want the script's -J waited", id, j["name"])
	}
}
