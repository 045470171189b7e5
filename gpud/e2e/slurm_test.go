package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
)

// TestSlurmNames drives a real cluster through Slurm's command names as a
// client library does: sbatch with an output pattern into a directory that
// does not exist yet, squeue, scancel --signal delivered to the running
// job's trap, scancel by name, scontrol, sacct --parsable2, and -o
// /dev/null.
func TestSlurmNames(t *testing.T) {
	c := startCluster(t, 1, "--kill-grace", "2s")
	work := t.TempDir()
	script := writeScript(t, work, "trap.sh", `
#!/bin/bash
#SBATCH --out=logs/%x-%J.%s.out --job-name=trapper --hint=nomultithread
trap 'echo got USR1' USR1
echo started
for i in $(seq 300); do sleep 0.1; done
echo finished
`)
	r := c.cli(work, "sbatch", "--parsable", script)
	if r.code != 0 {
		t.Fatalf("sbatch: exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "sbatch: warning: line 2 of trap.sh: --hint has no effect") {
		t.Errorf("sbatch stderr %q lacks the --hint warning", r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	c.waitState(id, 60*time.Second, "RUNNING")
	out := filepath.Join(work, "logs", "trapper-"+id+".batch.out")
	waitFor(t, 30*time.Second, "the job to write started", func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "started") })

	if r := c.cli(work, "squeue", "-h", "-j", id, "-o", "%i %T %j"); r.code != 0 || strings.TrimSpace(r.stdout) != id+" RUNNING trapper" {
		t.Errorf("squeue: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	// The batch shell traps it: -b sends it there (without -b a signal
	// goes to the job's steps only, as in Slurm).
	if r := c.cli(work, "scancel", "-b", "--signal=USR1", id); r.code != 0 {
		t.Fatalf("scancel --signal: exit %d: %s", r.code, r.stderr)
	}
	waitFor(t, 30*time.Second, "the trap to report USR1", func() bool { b, _ := os.ReadFile(out); return strings.Contains(string(b), "got USR1") })
	if r := c.cli(work, "scontrol", "show", "job", id, "-o"); r.code != 0 || !strings.Contains(r.stdout, "JobState=RUNNING") {
		t.Errorf("scontrol show job: exit %d, %q", r.code, r.stdout)
	}
	if r := c.cli(work, "scancel", "-n", "trapper"); r.code != 0 {
		t.Fatalf("scancel -n: exit %d: %s", r.code, r.stderr)
	}
	c.waitState(id, 60*time.Second, "CANCELLED")

	r = c.cli(work, "sbatch", "--parsable", "-o", "/dev/null", "--wrap", "echo discarded")
	if r.code != 0 {
		t.Fatalf("sbatch -o /dev/null: exit %d: %s", r.code, r.stderr)
	}
	quiet := strings.TrimSpace(r.stdout)
	c.waitState(quiet, 60*time.Second, "COMPLETED")
	r = c.cli(work, "sacct", "-P", "-n", "-j", id+","+quiet, "-o", "JobID,JobName,State,ExitCode")
	if r.code != 0 {
		t.Fatalf("sacct: exit %d: %s", r.code, r.stderr)
	}
	// A job killed by SIGTERM reads 0:15, as in Slurm (it read 143:15).
	// Each job, then its batch step (N.batch), as sacct lists them.
	want := id + "|trapper|CANCELLED|0:15\n" + id + ".batch|batch|CANCELLED|0:15\n" +
		quiet + "|wrap|COMPLETED|0:0\n" + quiet + ".batch|batch|COMPLETED|0:0\n"
	if r.stdout != want {
		t.Errorf("sacct -P:\n%s\nwant:\n%s", r.stdout, want)
	}
}

// TestSbatchHandsOff: bin/sbatch sends a plain submission itself and runs
// the full gpusubmit, as sbatch, for what it does not take: --help, and a
// script read from standard input whose directives ask for --wait (the
// script already read goes to gpusubmit in memory; the exit status is the
// job's).
func TestSbatchHandsOff(t *testing.T) {
	c := startCluster(t, 1)
	work := t.TempDir()
	if r := c.cli(work, "sbatch", "--help"); r.code != 0 || !strings.Contains(r.stdout, "sbatch - submit a batch job to gpud") {
		t.Errorf("sbatch --help: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	if r := c.cli(work, "sbatch", "-V"); r.code != 0 || r.stdout != "slurm 22.05.0 (gpud)\n" {
		t.Errorf("sbatch -V: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	cmd := exec.Command(filepath.Join(binDir, "sbatch"), "--parsable")
	cmd.Dir, cmd.Env = work, append(os.Environ(), api.EnvController+"="+c.addr)
	cmd.Stdin = strings.NewReader("#!/bin/sh\n#SBATCH --wait -J waited\necho from stdin\nexit 3\n")
	r := runCommand(t, cmd, "sbatch --parsable < script with --wait")
	if r.code != 3 {
		t.Fatalf("sbatch with #SBATCH --wait from stdin: exit %d, want the job's 3 (stdout %q, stderr %s)", r.code, r.stdout, r.stderr)
	}
	id := strings.TrimSpace(r.stdout)
	if b, _ := os.ReadFile(filepath.Join(work, "slurm-"+id+".out")); string(b) != "from stdin\n" {
		t.Errorf("job %s wrote %q, want the script's echo", id, b)
	}
	if j := c.showJob(id); j["name"] != "waited" {
		t.Errorf("job %s is named %v, want the script's -J waited", id, j["name"])
	}
}
