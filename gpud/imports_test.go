package main

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpud/gpud"

// boundaries lists, per package pattern, imports it must never reach
// (directly or transitively) and why: the layers of docs/architecture.md,
// enforced. (They began as the import allow-list of the project's design
// brief, DESIGN.md and STYLE.md, which are not kept in this repository;
// this table is the rule now.)
var boundaries = []struct {
	pkg       string // package path relative to the module; "/..." covers subpackages
	forbidden []string
	why       string
}{
	{"gpud/spec", []string{module + "/", "database/sql", "net/http"}, "spec is the leaf every layer shares"},
	{"gpud/wallclock", []string{module + "/", "net/http", "database/sql"}, "the daemons' wall clock (a test can step it) is a leaf: the standard library only"},
	{"gpud/api", []string{module + "/gpud/controller", module + "/gpud/store", module + "/runtime", "database/sql", "github.com/containerd"}, "api is stdlib + spec only, so external tools can use it"},
	{"gpud/sched/...", []string{"os", "net", "io/fs", "database/sql", "log/slog", "log", "math/rand", module + "/runtime", module + "/accounting", module + "/gpud/store", module + "/gpud/controller"}, "the scheduler core is pure: no I/O, no logging, no global randomness"},
	{"runtime/...", []string{module + "/gpud/"}, "runtime never imports gpud/*: the node agent adapts"},
	{"runtime", []string{"github.com/containerd", "github.com/NVIDIA"}, "the Runtime interface is engine-neutral"},
	{"runtime/safefs", []string{module + "/", "github.com/containerd"}, "safefs is a leaf (stdlib and x/sys): gpud/node, checkpoint and runtime do every root file operation under a user-controlled directory through it"},
	{"runtime/gpu", []string{"github.com/NVIDIA"}, "only runtime/gpu/nvml imports go-nvml"},
	{"gpud/plot", []string{module + "/"}, "plot is a leaf the simulator and gpuq share"},
	{"gpud/health", []string{module + "/", "os", "net", "io/fs", "database/sql", "log/slog", "log", "math/rand", "time/tzdata"},
		"the GPU health model is pure like the scheduler core (no I/O, no clock reads, no logging) and a leaf the agent, the controller and config share"},
	{"gpud/statefile", []string{module + "/"}, "statefile is a leaf the daemons and their stores share"},
	{"gpud/hostlist", []string{module + "/"}, "hostlist is a leaf (above spec, see exempt) the CLIs and the daemons share"},
	{"gpud/auth", []string{module + "/", "net/http"}, "auth (identities, revocation, step tickets) is a leaf the server, the node agent and gpud/ha share"},
	{"gpud/guard", []string{module + "/", "net/http"}, "guard (listener caps, rate-limited logs) is a leaf every listener shares, gpud/ha's Raft port included (which may not import net/http)"},
	{"gpud/pmi", []string{module + "/", "net/http", "github.com/containerd"},
		"pmi (the PMI wire protocols, a step's fence, the PMIx helper's protocol) is a leaf the node agent's steps and gpud-pmix share"},
	{"gpud/cpubind", []string{module + "/", "net", "net/http"},
		"cpubind (--cpu-bind, --hint, --distribution and the masks they make) is a leaf srun, the node agent and the task launcher share"},
	{"gpud/launch", []string{module + "/gpud/api", module + "/gpud/node", module + "/gpud/spec", module + "/runtime", "net/http", "crypto/tls"},
		"the task launcher runs in every binding step's container (inside gpuq): binding and PMI_FD, nothing more"},
	{"gpud/signame", []string{module + "/", "github.com/containerd"}, "signame is a leaf (stdlib and x/sys) the CLIs, the controller, the node agent and checkpoint share"},
	{"gpud/growstack", []string{module + "/"}, "growstack (a goroutine's stack grown once) is a leaf the server's request goroutines and the node agent's runners share"},
	{"gpud/config", []string{module + "/gpud/sched", module + "/gpud/controller", module + "/gpud/server", module + "/gpud/store", module + "/gpud/node",
		module + "/accounting", module + "/runtime", "database/sql", "net/http"},
		"config reads and validates files with the leaves' parsers (spec's sizes, auth's serials); gpud/controller maps it onto the scheduler"},
	{"gpud/controller", []string{module + "/gpud/server", module + "/gpud/store", module + "/gpud/node", module + "/accounting", module + "/runtime",
		"database/sql", "net/http", "github.com/containerd", "github.com/mattn/go-sqlite3"},
		"the controller is the owner loop: storage, accounting and HTTP reach it through its interfaces (Store, Recorder, UsageSource)"},
	{"gpud/node", []string{module + "/gpud/controller", module + "/gpud/server", module + "/gpud/store", module + "/gpud/sched",
		module + "/gpud/config", module + "/accounting", "github.com/containerd"},
		"the node agent talks to the controller through gpud/api and to containers through runtime.Runtime"},
	{"gpud/node/step", []string{module + "/gpud/node", module + "/gpud/controller", module + "/gpud/server", module + "/gpud/store", module + "/gpud/sched",
		module + "/gpud/config", module + "/accounting", "database/sql", "net/http", "github.com/containerd"},
		"steps reach their node agent only through step.Host (the agent imports step, never the reverse), containers through runtime.Runtime, peers through the step listener"},
	{"gpud/server", []string{module + "/gpud/store", module + "/gpud/node", module + "/runtime", "database/sql", "github.com/containerd"},
		"the API server reaches state through the controller and accounting, never the stores' SQL or a node"},
	{"gpud/slurmrest", []string{module + "/gpud/server", module + "/gpud/controller", module + "/gpud/store", module + "/gpud/node", module + "/gpud/auth",
		module + "/accounting", module + "/runtime", "database/sql", "github.com/containerd"},
		"Slurm's REST API reaches gpud only through the /v1 handlers (slurmrest.V1), so every access rule is /v1's, not a copy"},
	{"gpud/store", []string{module + "/gpud/controller", module + "/gpud/server", module + "/gpud/node", module + "/gpud/sched",
		module + "/gpud/config", module + "/accounting", module + "/runtime", "net/http"},
		"the store persists spec types and knows no layer above it"},
	{"gpud/ha", []string{module + "/gpud/controller", module + "/gpud/server", module + "/gpud/node", module + "/gpud/sched", module + "/gpud/config",
		module + "/runtime", "net/http", "github.com/containerd"},
		"the Raft group replicates the stores' writes and knows the controller and server only through their interfaces (Store, Recorder, server.HA), wired in gpud main"},
	{"gpud/daemon", []string{"github.com/urfave/cli"},
		"the daemons' wiring takes options, not flags: gpud main parses the command line, so the wiring is testable without one"},
	{"gpud/loadtest", []string{module + "/gpud/controller", module + "/gpud/server", module + "/gpud/store", module + "/gpud/ha", module + "/gpud/daemon",
		module + "/accounting", "database/sql", "github.com/urfave/cli", "github.com/containerd"},
		"the fleet harness measures a controller child process from outside, through the API, its files and signals, as a fleet would; its agents run fake runtimes"},
	{"gpud/simulate", []string{module + "/gpud/server", module + "/gpud/store", module + "/gpud/node", module + "/gpud/daemon", module + "/accounting",
		module + "/runtime", "net/http", "database/sql", "github.com/urfave/cli"},
		"gpud simulate runs the scheduler in virtual time over a trace: no daemon, no node, no stores"},
	{"gpud/process", []string{module + "/"}, "process is a leaf the daemons and the load-test harness share"},
	{"gpud/e2e/e2etest", []string{module + "/gpud/controller", module + "/gpud/server", module + "/gpud/store", module + "/gpud/node",
		module + "/gpud/daemon", module + "/gpud/ha", module + "/gpud/sched", module + "/accounting", "database/sql"},
		"the end-to-end harness drives the built binaries as users and operators do: through the API, files, signals and containerd, never the daemons' packages"},
	{"accounting/...", []string{module + "/gpud/controller", module + "/gpud/store", module + "/runtime"}, "accounting depends on spec and api only (its row types are the API's)"},
	{"cli/...", []string{"database/sql", "github.com/containerd", module + "/gpud/controller", module + "/gpud/node", module + "/gpud/server", module + "/gpud/store",
		module + "/runtime", module + "/accounting", module + "/gpuq", module + "/gpusubmit"},
		"cli is what the command-line programs share (getopt, exit codes, terminal safety, directives, the submission): it talks to the controller through gpud/api only and knows none of the programs built on it"},
	{"gpusubmit/...", []string{"database/sql", "github.com/containerd", module + "/gpud/controller", module + "/gpud/node", module + "/runtime", module + "/gpuq"},
		"CLIs talk to the controller through gpud/api only; what gpusubmit shares with gpuq lives in cli/"},
	{"gpuq/...", []string{"database/sql", "github.com/containerd", module + "/gpud/controller", module + "/gpud/node", module + "/runtime", module + "/gpusubmit"},
		"CLIs talk to the controller through gpud/api only; what gpuq shares with gpusubmit lives in cli/"},
}

// exempt names, per row of boundaries, the packages its forbidden list
// would catch that it may import all the same.
var exempt = map[string][]string{
	// hostlist reads its ranges' numbers with spec.ParseDigits, the digit
	// reader it shares with the directives; spec imports nothing of ours.
	"gpud/hostlist": {module + "/gpud/spec"},
}

// onlyImporter lists third-party modules that exactly one package tree may
// import directly.
var onlyImporter = map[string][]string{
	"github.com/NVIDIA/go-nvml":           {"runtime/gpu/nvml"},
	"github.com/containerd/containerd/v2": {"runtime/containerd", "runtime/ocispec"},
	// The daemons' packages offer plain counts and hooks; main wires them
	// to Prometheus through gpud/metrics.
	"github.com/prometheus/client_golang": {"gpud/metrics"},
	// PNG text (a fixed font) for gpud/plot.
	"golang.org/x/image": {"gpud/plot"},
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func goList(t *testing.T, pattern string) []listed {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "-deps=false", pattern).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s: %v\n%s", pattern, err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", pattern, err)
	}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func matches(path, forbidden string) bool {
	if strings.HasSuffix(forbidden, "/") {
		return strings.HasPrefix(path, forbidden)
	}
	return path == forbidden || strings.HasPrefix(path, forbidden+"/")
}

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestImportBoundaries(t *testing.T) {
	for _, b := range boundaries {
		pattern := "../" + b.pkg
		for _, p := range goList(t, pattern) {
			for _, f := range b.forbidden {
				// The standard library reaches os and friends from fmt and
				// time, so stdlib packages are checked as direct imports;
				// everything else transitively.
				deps := p.Deps
				if isStdlib(f) {
					deps = p.Imports
				}
				for _, dep := range deps {
					if matches(dep, f) && !strings.HasPrefix(dep, p.ImportPath) && !slices.Contains(exempt[b.pkg], dep) {
						t.Errorf("%s depends on %s: %s", p.ImportPath, dep, b.why)
					}
				}
			}
		}
	}
	all := goList(t, "../...")
	for _, p := range all {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			for mod, allowed := range onlyImporter {
				if !matches(imp, mod) {
					continue
				}
				ok := false
				for _, a := range allowed {
					if rel == a || strings.HasPrefix(rel, a+"/") {
						ok = true
					}
				}
				if !ok {
					t.Errorf("%s imports %s; only %v may", p.ImportPath, imp, allowed)
				}
			}
		}
	}
}

// TestSbatchLinksNoHTTPStack: bin/sbatch exists to start fast, so the
// packages it is built from must not reach, even transitively, the
// packages whose initialisation it avoids (gpusubmit/quick says why).
// Boundaries checks the standard library only as direct imports; this
// checks the whole program.
func TestSbatchLinksNoHTTPStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../gpusubmit/sbatch").Output()
	if err != nil {
		t.Fatalf("go list -deps gpusubmit/sbatch: %v", err)
	}
	heavy := []string{"net", "net/http", "crypto/tls", "crypto/x509", "github.com/urfave/cli/v2", module + "/gpud/api"}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, h := range heavy {
			if dep == h {
				t.Errorf("gpusubmit/sbatch links %s: sbatch's start would pay its initialisation again", dep)
			}
		}
	}
}

// TestNoRacePackagesStartNoGoroutine: make test runs the packages of the
// Makefile's NORACE_PKGS without -race, which is sound only while none of
// them starts a goroutine (their tests may: t.Parallel runs each test on
// its own). A go statement there must move the package back to -race.
func TestNoRacePackagesStartNoGoroutine(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.SplitSeq(string(mk), "\n") {
		if rest, ok := strings.CutPrefix(line, "NORACE_PKGS :="); ok {
			patterns = strings.Fields(rest)
		}
	}
	if len(patterns) == 0 {
		t.Fatal("the Makefile has no NORACE_PKGS line")
	}
	args := append([]string{"list", "-f", `{{range .GoFiles}}{{$.Dir}}/{{.}}{{"\n"}}{{end}}`}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	fset := token.NewFileSet()
	files := 0
	for path := range strings.FieldsSeq(string(out)) {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			if g, ok := n.(*ast.GoStmt); ok {
				t.Errorf("%s: a go statement in a package make test runs without -race (NORACE_PKGS); take the package out of NORACE_PKGS", fset.Position(g.Pos()))
			}
			return true
		})
	}
	if files < 10 {
		t.Errorf("NORACE_PKGS %v lists %d files; want the scheduler, simulator and plot packages", patterns, files)
	}
}

// TestRuntimeImportNames holds one naming convention: the top-level
// runtime/ package (its folder is part of the layout users were promised)
// shadows the standard library's runtime, so in every file "runtime" is
// gpud's, imported without a name, and the standard library's is always
// imported as goruntime, even where the file does not need gpud's: a
// reader never has to look up which runtime a call means.
func TestRuntimeImportNames(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			name := ""
			if imp.Name != nil {
				name = imp.Name.Name
			}
			switch imp.Path.Value {
			case `"runtime"`:
				if name != "goruntime" {
					t.Errorf("%s imports the standard library's runtime as %q; import it as goruntime (gpud's runtime/ takes the name)", fset.Position(imp.Pos()), name)
				}
			case `"` + module + `/runtime"`:
				if name != "" {
					t.Errorf("%s imports gpud's runtime as %q; import it unnamed (the standard library's is goruntime)", fset.Position(imp.Pos()), name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
