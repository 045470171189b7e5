package clients

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// Real Slurm clients, run unchanged against gpud standalone with Slurm's
// command names first on PATH and nothing between them: Snakemake's
// --slurm executor and Toil's Slurm batch system (Debian's snakemake and
// toil, `make test-clients`) and submitit
// (../shared/clients/submitit, `make test`).

// clientsEnv gates the Snakemake and Toil tests: `make test-clients` sets
// it after installing snakemake and toil; without it the tests skip, so
// `make test` does not take their minutes.
const clientsEnv = "GPUD_TEST_CLIENTS"

// clientBin copies the built binaries and Slurm's names into a directory
// outside /tmp: a job sees its own private /tmp, and the clients call
// sbatch, sacct, srun from inside their jobs too.
func clientBin(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(wd, ".clients-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(e2etest.BinDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src, dst := filepath.Join(e2etest.BinDir, e.Name()), filepath.Join(dir, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
		if err != nil {
			in.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(out, in)
		in.Close()
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// clientEnv is the environment of a client run: bin first on PATH, the
// cluster's address, USER and HOME set as a login shell sets them.
func clientEnv(c *e2etest.Cluster, bin string, extra ...string) []string {
	name, home := "root", "/root"
	if u, err := user.Current(); err == nil {
		name, home = u.Username, u.HomeDir
	}
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "USER=" + name, "LOGNAME=" + name, "HOME=" + home,
		"LANG=C.UTF-8", api.EnvController + "=" + c.Addr}
	return append(env, extra...)
}

// runClient runs a client program to completion and returns its combined
// output.
func runClient(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// snakefile is a two-rule workflow: b reads what a wrote. Without srun,
// the rules are Snakemake mpi rules, which Snakemake starts in the job
// without wrapping them in srun; with srun, they are plain rules, which
// the job runs through `srun -n1 --cpu-bind=q`.
func snakefile(mpi bool) string {
	res := ""
	if mpi {
		res = "    resources: mpi=\"mpirun\"\n"
	}
	return `rule all:
    input: "b.txt"

rule a:
    output: "a.txt"
` + res + `    shell: "echo job $SLURM_JOB_ID > {output}"

rule b:
    input: "a.txt"
    output: "b.txt"
` + res + `    shell: "cat {input} > {output}; echo b >> {output}"
`
}

// TestSnakemakeSlurm runs a two-rule workflow with Snakemake's --slurm
// executor, first with slurm_account and slurm_partition given (checked
// with sacctmgr), then with both guessed (sacct -nu USER -o Account, sinfo
// -o %P). Snakemake polls with sacct -P -n --format=JobIdRaw,State -j ID.
func TestSnakemakeSlurm(t *testing.T) {
	if os.Getenv(clientsEnv) == "" {
		t.Skipf("SKIP: set %s=1 (make test-clients installs snakemake and runs this)", clientsEnv)
	}
	snakemake, err := exec.LookPath("snakemake")
	if err != nil {
		t.Fatalf("snakemake is not installed (apt-get install snakemake; make test-clients does): %v", err)
	}
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	bin := clientBin(t)
	_, err = os.Stat(filepath.Join(bin, "srun"))
	mpi := err != nil
	if mpi {
		t.Logf("NOTE: no srun among the built binaries (issue 13, steps): the rules run as Snakemake mpi rules, which Snakemake starts without srun; plain rules need srun")
	}
	for _, tc := range []struct {
		name     string
		defaults []string
	}{
		{"given", []string{"slurm_account=default", "slurm_partition=gpu", "runtime=5", "mem_mb=1000"}},
		{"guessed", []string{"runtime=5", "mem_mb=1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "Snakefile"), []byte(snakefile(mpi)), 0o644); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"--slurm", "--jobs", "2", "--max-status-checks-per-second", "1",
				"--default-resources"}, tc.defaults...)
			out, err := runClient(t, work, clientEnv(c, bin), 5*time.Minute, snakemake, args...)
			if err != nil {
				for _, l := range []string{"a", "b"} {
					logs, _ := filepath.Glob(filepath.Join(work, ".snakemake", "slurm_logs", "rule_"+l, "*.log"))
					for _, p := range logs {
						b, _ := os.ReadFile(p)
						t.Logf("%s:\n%s", p, b)
					}
				}
				t.Fatalf("snakemake --slurm: %v\n%s", err, out)
			}
			got, err := os.ReadFile(filepath.Join(work, "b.txt"))
			if err != nil {
				t.Fatalf("b.txt: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "job ") || lines[1] != "b" {
				t.Fatalf("b.txt = %q, want the job id line of rule a then b", got)
			}
			if tc.name == "guessed" && !strings.Contains(out, "Guessed SLURM account: default") {
				t.Errorf("snakemake did not guess the account from sacct:\n%s", out)
			}
			// Each rule ran as a job of its own, charged and placed as
			// given or guessed, its script as the batch step and the rule
			// itself as step 0 (Snakemake runs it through srun -n1).
			jid := strings.TrimPrefix(lines[0], "job ")
			r := c.CLI(work, "sacct", "-P", "-n", "-j", jid, "-o", "JobName,Account,Partition,State,ExitCode")
			if r.Code != 0 || strings.TrimSpace(r.Stdout) != "snakejob_a_2|default|gpu|COMPLETED|0:0\nbatch|default||COMPLETED|0:0\npython3|default||COMPLETED|0:0" {
				t.Errorf("sacct of rule a's job %s: exit %d, %q, %s", jid, r.Code, r.Stdout, r.Stderr)
			}
		})
	}
}

// submititDir finds submitit's source: $SUBMITIT_DIR, else
// ../shared/clients/submitit or shared/clients/submitit beside the
// repository root.
func submititDir() string {
	if d := os.Getenv("SUBMITIT_DIR"); d != "" {
		return d
	}
	for _, d := range []string{"../../../../shared/clients/submitit", "../../../shared/clients/submitit"} { // from gpud/e2e/clients
		if abs, err := filepath.Abs(d); err == nil {
			if _, err := os.Stat(filepath.Join(abs, "submitit", "__init__.py")); err == nil {
				return abs
			}
		}
	}
	return ""
}

// submititFlows are the flows of testdata/submitit_flows.py, each run as a
// subtest of its own, and whether each runs without srun
// (slurm_use_srun=False). Without srun a job has no steps: a 2-node x
// 2-task job is one task, and submitit's --signal=USR2@N (no B:) has, as in
// Slurm, no step to reach, so its timeout and preemption handlers never
// run there.
var submititFlows = []struct {
	name   string
	nosrun bool
}{
	{"result", true}, {"exception", true}, {"map_array", true}, {"cancel", true},
	{"ranks", false}, {"checkpoint", false}, {"interrupt", false},
}

// TestSubmitit drives submitit's AutoExecutor(cluster="slurm") through
// gpud's Slurm names on a 2-node gpud standalone: a function's result, an
// exception's traceback, map_array over 4 items with array_parallelism=2,
// job.cancel(), a 2-node x 2-task job whose JobEnvironment shows ranks 0-3,
// a Checkpointable job that times out (USR2 signal_delay_s before its
// limit), checkpoints, requeues itself from inside the job (scontrol
// requeue) and resumes, and job._interrupt() (scancel --signal TERM, then
// USR2) — with the function run through srun (submitit's default) and in
// the batch script itself (slurm_use_srun=False).
//
// submitit's SlurmExecutor refuses to start unless shutil.which("srun")
// finds srun, whichever mode: without srun nothing of submitit's Slurm
// executor runs, so the test skips until srun exists (issue 13).
func TestSubmitit(t *testing.T) {
	e2etest.RequirePrereq(t)
	if _, err := os.Stat(filepath.Join(e2etest.BinDir, "srun")); err != nil {
		t.Skip("SKIP: submitit needs srun on PATH (its SlurmExecutor checks shutil.which(\"srun\") before anything else); gpud has no srun until job steps (issue 13)")
	}
	src := submititDir()
	if src == "" {
		t.Skip("SKIP: submitit's source not found (../shared/clients/submitit); set SUBMITIT_DIR")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import cloudpickle, typing_extensions").CombinedOutput(); err != nil {
		t.Fatalf("submitit's Python dependencies are missing (apt-get install python3-cloudpickle python3-typing-extensions; scripts/deps.sh does): %v\n%s", err, out)
	}
	flows, err := filepath.Abs(filepath.Join("testdata", "submitit_flows.py"))
	if err != nil {
		t.Fatal(err)
	}
	// The state directory (and so the controller's socket) is under /tmp,
	// which every job sees as its own private /tmp: scontrol requeue from
	// inside a job reaches the controller only through the socket the
	// agents bind back into jobs.
	c := e2etest.StartCluster(t, 2, "--kill-grace", "2s")
	bin := clientBin(t)
	for _, mode := range []string{"srun", "nosrun"} {
		t.Run(mode, func(t *testing.T) {
			for _, f := range submititFlows {
				if mode == "nosrun" && !f.nosrun {
					continue
				}
				t.Run(f.name, func(t *testing.T) {
					work := t.TempDir()
					env := clientEnv(c, bin, "PYTHONPATH="+src)
					out, err := runClient(t, work, env, 5*time.Minute, "/usr/bin/python3", flows, filepath.Join(work, "logs", "%j"), "gpu", mode, f.name)
					if err != nil {
						logs, _ := filepath.Glob(filepath.Join(work, "logs", "*", "*.err"))
						for _, p := range logs {
							b, _ := os.ReadFile(p)
							t.Logf("%s:\n%s", p, b)
						}
						t.Fatalf("submitit flow %s (%s): %v\n%s", f.name, mode, err, out)
					}
					if !strings.Contains(out, "ok "+f.name+" ") {
						t.Errorf("flow %s did not pass:\n%s", f.name, out)
					}
				})
			}
		})
	}
}

// toilWorkflow is a Toil workflow as its users write one: a root job with
// two children (each computes a square and says which Slurm job ran it)
// and a follow-on that gathers their results, which the leader writes to
// the file named by its last argument.
const toilWorkflow = `import os
from toil.common import Toil
from toil.job import Job


def square(job, n):
    return "%d %s" % (n * n, os.environ.get("SLURM_JOB_ID", "none"))


def gather(job, results):
    return sorted(results)


def root(job):
    kids = [job.addChildJobFn(square, n).rv() for n in (2, 3)]
    return job.addFollowOnJobFn(gather, kids).rv()


if __name__ == "__main__":
    parser = Job.Runner.getDefaultArgumentParser()
    parser.add_argument("result")
    options = parser.parse_args()
    with Toil(options) as toil:
        got = toil.start(Job.wrapJobFn(root))
    with open(options.result, "w") as f:
        f.write("\n".join(got) + "\n")
`

// TestToilSlurm runs a Toil workflow with Debian's toil (5.9) and its
// Slurm batch system, with Toil's default options: Toil reads scontrol
// show config for its polling interval, submits each job with sbatch
// --export=ALL,... --mem --cpus-per-task -o -e --wrap, and follows them
// with squeue -h --format '%i %t %M' and sacct -n -P -j IDS --format
// JobIDRaw,State,ExitCode -S 1970-01-01. Each job runs Toil's
// _toil_worker against the file job store in the work directory.
func TestToilSlurm(t *testing.T) {
	if os.Getenv(clientsEnv) == "" {
		t.Skipf("SKIP: set %s=1 (make test-clients installs toil and runs this)", clientsEnv)
	}
	worker, err := exec.LookPath("_toil_worker")
	if err != nil {
		t.Fatalf("Toil is not installed (apt-get install toil; make test-clients does): %v", err)
	}
	// The workflow runs under the Python Toil is installed for (Debian's
	// /usr/bin/python3), which its _toil_worker names: the first python3
	// on PATH may be another one (pyenv's).
	head, err := os.ReadFile(worker)
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(head), "\n")
	python := strings.TrimSpace(strings.TrimPrefix(first, "#!"))
	if !strings.HasPrefix(first, "#!") || strings.ContainsAny(python, " \t") {
		t.Fatalf("%s does not start with #!PYTHON: %q", worker, first)
	}
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	bin := clientBin(t)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "workflow.py"), []byte(toilWorkflow), 0o644); err != nil {
		t.Fatal(err)
	}
	result := filepath.Join(work, "result.txt")
	out, err := runClient(t, work, clientEnv(c, bin), 8*time.Minute, python, "workflow.py",
		"file:"+filepath.Join(work, "jobstore"), result, "--batchSystem", "slurm")
	if err != nil {
		t.Fatalf("toil --batchSystem slurm: %v\n%s", err, out)
	}
	got, err := os.ReadFile(result)
	if err != nil {
		t.Fatalf("the workflow's result: %v\n%s", err, out)
	}
	// Each square ran in a Slurm job of its own.
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "4 ") || !strings.HasPrefix(lines[1], "9 ") {
		t.Fatalf("result = %q, want the squares 4 and 9 each with its job id\n%s", got, out)
	}
	ids := []string{strings.TrimPrefix(lines[0], "4 "), strings.TrimPrefix(lines[1], "9 ")}
	if ids[0] == "none" || ids[1] == "none" || ids[0] == ids[1] {
		t.Fatalf("the squares ran in jobs %q and %q, want two Slurm jobs\n%s", ids[0], ids[1], out)
	}
	// Every job Toil submitted ended COMPLETED, under Toil's job names.
	r := c.CLI(work, "sacct", "-n", "-X", "-P", "-o", "JobIDRaw,JobName,State,ExitCode")
	if r.Code != 0 {
		t.Fatalf("sacct: exit %d: %s", r.Code, r.Stderr)
	}
	rows := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(rows) < 3 {
		t.Errorf("sacct lists %d jobs, want the root, its two children and the follow-on (at least 3: Toil may chain the follow-on):\n%s", len(rows), r.Stdout)
	}
	failed := false
	for _, row := range rows {
		f := strings.Split(row, "|")
		if len(f) != 4 || !strings.HasPrefix(f[1], "toil_job_") || f[2] != "COMPLETED" || f[3] != "0:0" {
			t.Errorf("sacct row %q: want a toil_job_* job COMPLETED 0:0", row)
			failed = true
			if len(f) > 0 {
				logToilJobFiles(t, f[0])
			}
		}
	}
	if failed {
		// Toil's leader logs a failed job's worker log and the batch
		// system's non-empty output files: whose failure it was.
		t.Logf("Toil's output (the workflow itself succeeded):\n%s", out)
	}
	for _, id := range ids {
		if !slices.ContainsFunc(rows, func(row string) bool { return strings.HasPrefix(row, id+"|") }) {
			t.Errorf("job %s, which ran a square, is not in sacct:\n%s", id, r.Stdout)
		}
	}
}

// logToilJobFiles logs the output and error files of Slurm job id that
// Toil's Slurm batch system had sbatch write (-o, -e: toil_WORKFLOW.
// TOILJOB.ID.{out,err}.log in Toil's work directory, by default the
// temporary directory), so that a failed job's test log says why it failed.
func logToilJobFiles(t *testing.T, id string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(os.TempDir(), "toil_*.*."+id+".*.log"))
	if err != nil || len(files) == 0 {
		t.Logf("job %s: no Toil output files for it in %s (%v)", id, os.TempDir(), err)
		return
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Logf("job %s: %v", id, err)
			continue
		}
		t.Logf("job %s: %s (%d bytes):\n%s", id, p, len(b), b)
	}
}
