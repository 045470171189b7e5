package steps

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// stepAcctScript runs steps whose ends the test checks in accounting:
// step 0 completes, step 1 exits 3, step 2 runs until the test cancels it
// (gpuq cancel N.2), step 3 traps USR1 and ends when the test signals the
// job's steps (scancel --signal=USR1: the untrapped batch shell must
// survive it), step 4 is cancelled by the job itself (scancel N.4 from
// inside), and then the batch shell traps USR2, which the test sends to
// it alone (scancel -b).
const stepAcctScript = `#!/bin/bash
echo batchpid=$$ children=$(cat /proc/1/task/1/children)
srun -n2 true
srun -n2 bash -c 'exit $((SLURM_PROCID * 3))'
echo rc1=$?
srun -N2 bash -c 'echo started-$SLURM_PROCID; sleep 120' > /tmp/s2.out &
pid=$!
for i in $(seq 300); do [ "$(grep -c started /tmp/s2.out)" = 2 ] && break; sleep 0.1; done
echo step2-running
wait $pid
echo rc2=$?
srun -n1 bash -c 'trap "echo step-got-USR1; exit 0" USR1; echo ready; for i in $(seq 600); do sleep 0.1; done; echo no-USR1' > /tmp/s3.out &
pid=$!
for i in $(seq 300); do grep -q ready /tmp/s3.out && break; sleep 0.1; done
echo step3-running
wait $pid
echo survived-USR1 rc3=$?
cat /tmp/s3.out
srun -n1 sleep 120 &
pid=$!
for i in $(seq 100); do [ -n "$(squeue -h -s --steps=$SLURM_JOB_ID.4)" ] && break; sleep 0.1; done
scancel $SLURM_JOB_ID.4
wait $pid
echo self-cancel rc=$?
got=0
trap 'echo batch-got-USR2; got=1' USR2
echo trapped
for i in $(seq 600); do [ $got = 1 ] && break; sleep 0.1; done
echo end
`

// TestStepAccounting: on a real two-node gpud standalone, steps are
// numbered per job, listed while they run (squeue -s, gpuq show), ended
// one at a time (gpuq cancel N.S), signalled by Slurm's rules (scancel
// --signal reaches the steps and not the batch shell, -b the batch shell
// only) and accounted with their exit codes (sacct -j N, gpuq acct -j N).
func TestStepAccounting(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	work := t.TempDir()
	e2etest.WriteScript(t, work, "steps.sh", stepAcctScript)
	r := c.CLI(work, "gpusubmit", "--parsable", "-N", "2", "--gpus-per-node", "1", "--output", "steps.out", "steps.sh")
	if r.Code != 0 {
		t.Fatalf("submit: exit %d: %s", r.Code, r.Stderr)
	}
	id := strings.TrimSpace(r.Stdout)
	outPath := filepath.Join(work, "steps.out")
	output := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	waitOut := func(what string) {
		t.Helper()
		e2etest.WaitFor(t, 60*time.Second, "the job to print "+what, func() bool { return strings.Contains(output(), what) })
	}
	defer func() { t.Logf("job output:\n%s", output()) }()

	waitOut("step2-running")
	sq := c.CLI(work, "squeue", "-s", "-h")
	if sq.Code != 0 || !regexp.MustCompile(`(?m)^\s+`+id+`\.batch\s+batch .* node1$`).MatchString(sq.Stdout) ||
		!regexp.MustCompile(`(?m)^\s+`+id+`\.2\s+bash .* node\[1-2\]$`).MatchString(sq.Stdout) || strings.Contains(sq.Stdout, id+".1 ") {
		t.Errorf("squeue -s: exit %d %s\n%s\nwant the batch step and the running step 2 only", sq.Code, sq.Stderr, sq.Stdout)
	}
	if show := c.CLI(work, "gpuq", "show", id); !strings.Contains(show.Stdout, "StepId="+id+".2 Name=bash State=RUNNING NodeList=node[1-2] Tasks=2") {
		t.Errorf("gpuq show lacks the running step 2:\n%s", show.Stdout)
	}
	if r := c.CLI(work, "gpuq", "cancel", id+".1"); r.Code == 0 || !strings.Contains(r.Stderr, "already ended") {
		t.Errorf("gpuq cancel of the ended step 1: exit %d %s; want refused, already ended", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "gpuq", "cancel", id+".2"); r.Code != 0 {
		t.Fatalf("gpuq cancel %s.2: exit %d: %s", id, r.Code, r.Stderr)
	}
	waitOut("step3-running")
	if r := c.CLI(work, "scancel", "--signal=USR1", id); r.Code != 0 {
		t.Fatalf("scancel --signal=USR1: exit %d: %s", r.Code, r.Stderr)
	}
	waitOut("trapped")
	if r := c.CLI(work, "scancel", "-b", "--signal=USR2", id); r.Code != 0 {
		t.Fatalf("scancel -b --signal=USR2: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 60*time.Second, "COMPLETED")
	text := output()
	for _, want := range []string{"rc1=3\n", "survived-USR1 rc3=0\n", "step-got-USR1\n", "batch-got-USR2\n", "end\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("job output lacks %q", want)
		}
	}
	if strings.Contains(text, "no-USR1") {
		t.Errorf("step 3 never got the USR1 sent to the job's steps")
	}

	// Accounting: the job, then its steps with their own ends.
	acct := c.CLI(work, "sacct", "-P", "-n", "-j", id, "-o", "JobID,JobName,State,ExitCode,NTasks,NodeList")
	if acct.Code != 0 {
		t.Fatalf("sacct: exit %d: %s", acct.Code, acct.Stderr)
	}
	wantRows := []string{
		`^` + id + `\|steps\.sh\|COMPLETED\|0:0\|\|node\[1-2\]$`,
		`^` + id + `\.batch\|batch\|COMPLETED\|0:0\|1\|node1$`,
		`^` + id + `\.0\|true\|COMPLETED\|0:0\|2\|node\[1-2\]$`,
		`^` + id + `\.1\|bash\|FAILED\|3:0\|2\|node\[1-2\]$`,
		`^` + id + `\.2\|bash\|CANCELLED\|0:15\|2\|node\[1-2\]$`,
		`^` + id + `\.3\|bash\|COMPLETED\|0:0\|1\|node1$`,
		`^` + id + `\.4\|sleep\|CANCELLED\|0:15\|1\|node1$`,
	}
	lines := strings.Split(strings.TrimSpace(acct.Stdout), "\n")
	if len(lines) != len(wantRows) {
		t.Errorf("sacct -j %s: %d rows, want %d:\n%s", id, len(lines), len(wantRows), acct.Stdout)
	}
	for i := range min(len(lines), len(wantRows)) {
		if !regexp.MustCompile(wantRows[i]).MatchString(lines[i]) {
			t.Errorf("sacct row %d = %q, want %s", i, lines[i], wantRows[i])
		}
	}
	if x := c.CLI(work, "sacct", "-P", "-n", "-X", "-j", id, "-o", "JobIDRaw,State"); strings.TrimSpace(x.Stdout) != id+"|COMPLETED" {
		t.Errorf("sacct -X: %q, want the job alone", x.Stdout)
	}
	if one := c.CLI(work, "sacct", "-P", "-n", "-j", id+".1", "-o", "JobID,ExitCode"); strings.TrimSpace(one.Stdout) != id+".1|3:0" {
		t.Errorf("sacct -j %s.1: %q", id, one.Stdout)
	}
	ga := c.CLI(work, "gpuq", "acct", "-j", id, "-p", "-o", "jobid,jobname,state,exitcode")
	if !strings.Contains(ga.Stdout, id+".batch|batch|COMPLETED|0:0|") || !strings.Contains(ga.Stdout, id+".1|bash|FAILED|3:0|") {
		t.Errorf("gpuq acct -j %s:\n%s", id, ga.Stdout)
	}
}
