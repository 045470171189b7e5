package clients

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// corpusScript is one [[script]] of testdata/slurm-corpus/index.toml: a
// real public batch script and what Slurm does with it (index.toml's
// header says what each field means).
type corpusScript struct {
	File     string            `toml:"file"`
	Source   string            `toml:"source"`
	License  string            `toml:"license"`
	Covers   string            `toml:"covers"`
	Local    []string          `toml:"local"`
	State    string            `toml:"state"`
	ExitCode int               `toml:"exit_code"`
	Payload  string            `toml:"payload"`
	Runs     *int              `toml:"runs"`
	Nodes    int               `toml:"nodes"`
	Ranks    bool              `toml:"ranks"`
	GPUs     *int              `toml:"gpus"`
	Env      map[string]string `toml:"env"`
	Args     []string          `toml:"args"`
	Outputs  []string          `toml:"outputs"`
	Array    []int             `toml:"array"`
	Also     map[string]int    `toml:"also"`
	Gap      string            `toml:"gap"`
}

// corpusStubs are the payload programs every script finds on PATH: the
// launchers, interpreters and environment tools the corpus runs. The
// scripts' own programs (./a.out) are each script's local list.
var corpusStubs = []string{
	"python", "python3", "torchrun", "deepspeed", "accelerate", "module", "conda",
	"nvidia-smi", "dcgmi", "singularity_wrapper", "kernprof", "julia", "Rscript", "matlab",
}

// corpusStub records one run (its name, argv, working directory and
// environment) in a file of its own under $CORPUS_RECORDS (whole or
// empty: a stub killed while writing leaves a .part, not a run), then does
// nothing: the corpus checks how Slurm would have launched the payload,
// not the payload. A container wrapper's "exec CMD..." runs CMD, as the
// real wrapper does inside its container.
const corpusStub = `#!/bin/sh
f=$(mktemp "$CORPUS_RECORDS/run.XXXXXX") || exit 1
{
	printf 'name=%s\n' "${0##*/}"
	printf 'cwd=%s\n' "$(pwd)"
	for a in "$@"; do printf 'arg=%s\n' "$a"; done
	env | sed 's/^/env=/'
} > "$f.part" && mv "$f.part" "$f"
if [ "${0##*/}" = singularity_wrapper ] && [ "$1" = exec ]; then
	shift
	exec "$@"
fi
exit 0
`

// corpusSite is the site the scripts were written for, as its gpud.toml
// maps it: the partitions and the account they name, on every node.
const corpusSite = `version = 1
default_qos = "normal"
default_account = "default"

[[partition]]
name = "gpu"
nodes = ["ALL"]
default = true

[[partition]]
name = "gputest"
nodes = ["ALL"]
default_time = "15m"
max_time = "15m"

[[partition]]
name = "gpumedium"
nodes = ["ALL"]
default_time = "1h"
max_time = "36h"

[[partition]]
name = "train"
nodes = ["ALL"]

[[partition]]
name = "xyz-cluster"
nodes = ["ALL"]

[[qos]]
name = "normal"
priority = 100
preempt_mode = "off"

[[account]]
name = "default"
shares = 1

[[account]]
name = "project_2001659"
shares = 1
`

// corpusRun is one stub run as its record file has it.
type corpusRun struct {
	name, cwd string
	args      []string
	env       map[string]string
}

// corpusResult is what became of one script.
type corpusResult struct {
	refused  string        // sbatch's refusal ("" if accepted)
	problems []string      // differences from Slurm's behaviour
	took     time.Duration // from sbatch to the job's (every task's) end
}

// TestSlurmCorpus runs real public Slurm batch scripts (GPU training
// launchers, MPI, OpenMP, arrays; testdata/slurm-corpus) unchanged, every
// #SBATCH and srun line as published, with only their payload stubbed,
// against a site configured as theirs, and checks each behaves as on
// Slurm: the tasks launched, where, with which SLURM_* variables and
// GPUs, the end state and the output files. At least 90% must be accepted
// and 90% behave as on Slurm; a script may fail only where index.toml
// names the gap, and the refusals that remain are logged.
func TestSlurmCorpus(t *testing.T) {
	t.Parallel()
	dir := e2etest.RepoPath(t, "gpud/e2e/clients/testdata/slurm-corpus")
	raw, err := os.ReadFile(filepath.Join(dir, "index.toml"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Script []corpusScript `toml:"script"`
	}
	if err := toml.Unmarshal(raw, &index); err != nil {
		t.Fatalf("index.toml: %v", err)
	}
	if len(index.Script) < 30 {
		t.Fatalf("index.toml lists %d scripts, want at least 30", len(index.Script))
	}
	profile, err := os.ReadFile(e2etest.RepoPath(t, "etc/profile.d/gpud.sh"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(e2etest.ShortTempDir(t), "gpud.toml")
	if err := os.WriteFile(conf, []byte(corpusSite), 0o644); err != nil {
		t.Fatal(err)
	}
	// Eight DGX A100 nodes (the GPU type the scripts name) with 256 CPUs
	// and 1 TiB each, as the scripts' --cpus-per-task and --mem assume.
	// The site allows jobs 5 minutes over their limit (Slurm's
	// OverTimeLimit): the scripts' 10-second limits are shorter than
	// creating their containers and launching 32 tasks take on a loaded
	// 2-core test host (2 minutes were not enough at load average 70).
	nodeConf := filepath.Join(filepath.Dir(conf), "node.toml")
	if err := os.WriteFile(nodeConf, []byte("version = 1\n[node]\nover_time_limit = \"5m\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 8, "--config", conf, "--node-config", nodeConf, "--gpus", "mock:dgx-a100", "--cpus", "256", "--mem", "1T", "--kill-grace", "2s")

	results := make([]corpusResult, len(index.Script))
	var wg sync.WaitGroup
	for i, s := range index.Script {
		work := t.TempDir()
		if err := prepareCorpusDir(work, dir, s, profile); err != nil {
			t.Fatalf("%s: %v", s.File, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = runCorpusScript(c, work, s)
			results[i].took = time.Since(start)
		}()
	}
	wg.Wait()

	accepted, behaved := 0, 0
	var refusals []string
	for i, s := range index.Script {
		r := results[i]
		if r.refused == "" {
			accepted++
		} else {
			refusals = append(refusals, fmt.Sprintf("%s: %s", s.File, r.refused))
		}
		if r.refused == "" && len(r.problems) == 0 {
			behaved++
			if s.Gap != "" {
				t.Logf("%s now behaves as on Slurm: drop its gap %q from index.toml", s.File, s.Gap)
			}
			continue
		}
		what := r.refused
		if what == "" {
			what = strings.Join(r.problems, "; ")
		}
		if s.Gap != "" {
			t.Logf("%s (known gap: %s): %s", s.File, s.Gap, what)
		} else {
			t.Errorf("%s (%s): %s", s.File, s.Source, what)
		}
	}
	n := len(index.Script)
	slowest := 0
	for i := range results {
		if results[i].took > results[slowest].took {
			slowest = i
		}
	}
	t.Logf("the slowest script: %s, %s from sbatch to its end", index.Script[slowest].File, results[slowest].took.Round(time.Second))
	t.Logf("Slurm corpus: %d scripts, %d accepted (%d%%), %d behaved as on Slurm (%d%%)", n, accepted, 100*accepted/n, behaved, 100*behaved/n)
	for _, r := range refusals {
		t.Logf("refused: %s", r)
	}
	if 10*accepted < 9*n || 10*behaved < 9*n {
		t.Errorf("want at least 90%% accepted and 90%% behaving as on Slurm")
	}
}

// prepareCorpusDir makes a script's submit directory: the script, its
// local programs, the payload stubs and a record directory. The directory
// is the job's HOME too, with the .bash_profile a user of the site has:
// a login shell (#!/bin/bash -l) resets PATH, and the profile puts gpud's
// tools (the site's /etc/profile.d/gpud.sh, not installed on test hosts)
// and the user's environment (here the stubs, as conda init would) back.
func prepareCorpusDir(work, corpus string, s corpusScript, profile []byte) error {
	body, err := os.ReadFile(filepath.Join(corpus, s.File))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, s.File), body, 0o755); err != nil {
		return err
	}
	stubs := filepath.Join(work, ".stubs")
	for _, d := range []string{stubs, filepath.Join(work, ".records")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	for _, name := range corpusStubs {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(corpusStub), 0o755); err != nil {
			return err
		}
	}
	for _, name := range s.Local {
		if err := os.WriteFile(filepath.Join(work, name), []byte(corpusStub), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(work, ".gpud-profile.sh"), profile, 0o644); err != nil {
		return err
	}
	bashProfile := fmt.Sprintf(". %s/.gpud-profile.sh\nPATH=%s:$PATH\n", work, stubs)
	return os.WriteFile(filepath.Join(work, ".bash_profile"), []byte(bashProfile), 0o644)
}

// runCorpusScript submits one script with sbatch from its directory, waits
// for its job (each task of an array) to end, and compares what its stubs
// recorded with what Slurm does.
func runCorpusScript(c *e2etest.Cluster, work string, s corpusScript) corpusResult {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e2etest.BinDir, "sbatch"), "--parsable", s.File)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), api.EnvController+"="+c.Addr,
		"PATH="+filepath.Join(work, ".stubs")+":"+e2etest.BinDir+":"+os.Getenv("PATH"),
		"HOME="+work, "CORPUS_RECORDS="+filepath.Join(work, ".records"))
	out, err := cmd.Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg = fmt.Sprintf("exit %d: %s", ee.ExitCode(), strings.TrimSpace(string(ee.Stderr)))
		}
		return corpusResult{refused: msg}
	}
	idStr, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	id, err := strconv.ParseUint(idStr, 10, 32)
	if err != nil {
		return corpusResult{refused: fmt.Sprintf("sbatch --parsable printed %q", out)}
	}
	cl := c.Client()
	jobs, err := corpusJobs(ctx, cl, spec.JobID(id), len(s.Array))
	if err != nil {
		return corpusResult{problems: []string{err.Error()}}
	}
	var problems []string
	wantState := s.State
	if wantState == "" {
		wantState = "COMPLETED"
	}
	for _, j := range jobs {
		if string(j.State) != wantState || j.ExitCode != s.ExitCode {
			problems = append(problems, fmt.Sprintf("job %d ended %s exit %d (%s), want %s exit %d", j.ID, j.State, j.ExitCode, j.Reason, wantState, s.ExitCode))
		}
	}
	runs, err := readCorpusRuns(filepath.Join(work, ".records"))
	if err != nil {
		return corpusResult{problems: append(problems, err.Error())}
	}
	problems = append(problems, checkCorpusRuns(s, spec.JobID(id), runs)...)
	for _, o := range corpusOutputs(s, spec.JobID(id)) {
		if _, err := os.Stat(filepath.Join(work, o)); err != nil {
			problems = append(problems, fmt.Sprintf("no output file %s", o))
		}
	}
	if len(problems) > 0 {
		if b, err := os.ReadFile(filepath.Join(work, firstOr(corpusOutputs(s, spec.JobID(id)), "slurm-"+idStr+".out"))); err == nil {
			problems = append(problems, fmt.Sprintf("its output: %q", tail(string(b), 600)))
		}
	}
	return corpusResult{problems: problems}
}

// corpusJobs waits for job id, or each of the n tasks of array id, to end.
func corpusJobs(ctx context.Context, cl *api.Client, id spec.JobID, n int) ([]spec.Job, error) {
	ids := []spec.JobID{id}
	if n > 0 {
		all, err := cl.Jobs(ctx, api.JobFilter{All: true})
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		ids = ids[:0]
		for _, j := range all {
			if j.ID == id || j.ArrayJobID == id {
				ids = append(ids, j.ID)
			}
		}
		if len(ids) != n {
			return nil, fmt.Errorf("array %d has %d tasks, want %d", id, len(ids), n)
		}
	}
	var out []spec.Job
	for _, i := range ids {
		j, err := cl.WaitJob(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("wait for job %d: %w", i, err)
		}
		out = append(out, j)
	}
	return out, nil
}

func readCorpusRuns(dir string) ([]corpusRun, error) {
	files, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var runs []corpusRun
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".part") {
			continue // a stub killed while it wrote
		}
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			return nil, err
		}
		r := corpusRun{env: map[string]string{}}
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "name":
				r.name = v
			case "cwd":
				r.cwd = v
			case "arg":
				r.args = append(r.args, v)
			case "env":
				ek, ev, ok := strings.Cut(v, "=")
				if ok {
					r.env[ek] = ev
				}
			}
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// checkCorpusRuns compares the payload's runs with s's expectations.
func checkCorpusRuns(s corpusScript, id spec.JobID, all []corpusRun) []string {
	var problems []string
	count := func(name string) []corpusRun {
		var rs []corpusRun
		for _, r := range all {
			if r.name == name {
				rs = append(rs, r)
			}
		}
		return rs
	}
	runs := count(s.Payload)
	want := len(s.Array)
	if s.Runs != nil {
		want = *s.Runs
	}
	if len(runs) != want {
		problems = append(problems, fmt.Sprintf("%s ran %d times, want %d", s.Payload, len(runs), want))
	}
	for name, n := range s.Also {
		if got := len(count(name)); got != n {
			problems = append(problems, fmt.Sprintf("%s ran %d times, want %d", name, got, n))
		}
	}
	if len(runs) == 0 {
		return problems
	}
	nodes := map[string]bool{}
	var ranks, tasks []int
	for _, r := range runs {
		nodes[r.env["SLURMD_NODENAME"]] = true
		if p, err := strconv.Atoi(r.env["SLURM_PROCID"]); err == nil {
			ranks = append(ranks, p)
		}
		if a, err := strconv.Atoi(r.env["SLURM_ARRAY_TASK_ID"]); err == nil {
			tasks = append(tasks, a)
		}
	}
	if s.Nodes > 0 && len(nodes) != s.Nodes {
		problems = append(problems, fmt.Sprintf("%s ran on %d nodes %v, want %d", s.Payload, len(nodes), keys(nodes), s.Nodes))
	}
	if s.Ranks {
		sort.Ints(ranks)
		ok := len(ranks) == len(runs)
		for i, p := range ranks {
			ok = ok && p == i
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("SLURM_PROCID of the %d runs: %v, want 0..%d each once", len(runs), ranks, len(runs)-1))
		}
	}
	if len(s.Array) > 0 {
		sort.Ints(tasks)
		if !slices.Equal(tasks, s.Array) {
			problems = append(problems, fmt.Sprintf("SLURM_ARRAY_TASK_ID of the runs: %v, want %v", tasks, s.Array))
		}
	}
	for _, r := range runs {
		where := fmt.Sprintf("%s on %s (SLURM_PROCID %s)", s.Payload, r.env["SLURMD_NODENAME"], r.env["SLURM_PROCID"])
		for k, v := range s.Env {
			if ref, ok := strings.CutPrefix(v, "$"); ok {
				v = r.env[ref]
			}
			if got, ok := r.env[k]; !ok || got != v {
				problems = append(problems, fmt.Sprintf("%s: %s=%q (set %v), want %q", where, k, got, ok, v))
			}
		}
		if s.GPUs != nil {
			got := 0
			if cvd := r.env["CUDA_VISIBLE_DEVICES"]; cvd != "" {
				got = len(strings.Split(cvd, ","))
			}
			if got != *s.GPUs {
				problems = append(problems, fmt.Sprintf("%s: CUDA_VISIBLE_DEVICES=%q, want %d GPUs", where, r.env["CUDA_VISIBLE_DEVICES"], *s.GPUs))
			}
		}
		argv := " " + strings.Join(r.args, " ") + " "
		for _, a := range s.Args {
			a = strings.ReplaceAll(a, "{j}", strconv.FormatUint(uint64(id), 10))
			a = strings.ReplaceAll(a, "$SLURM_PROCID", r.env["SLURM_PROCID"])
			if !strings.Contains(argv, " "+a+" ") {
				problems = append(problems, fmt.Sprintf("%s: argv %q lacks %q", where, r.args, a))
			}
		}
	}
	return problems
}

// corpusOutputs are the files s's job writes, its patterns filled in.
func corpusOutputs(s corpusScript, id spec.JobID) []string {
	j := strconv.FormatUint(uint64(id), 10)
	var out []string
	for _, o := range s.Outputs {
		if len(s.Array) == 0 || !strings.Contains(o, "{a}") {
			out = append(out, strings.NewReplacer("{j}", j, "{A}", j).Replace(o))
			continue
		}
		for _, a := range s.Array {
			out = append(out, strings.NewReplacer("{A}", j, "{a}", strconv.Itoa(a)).Replace(o))
		}
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
