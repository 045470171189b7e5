package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/node"
	"github.com/gpud/gpud/gpud/spec"
)

// gpudBinary builds gpud once for the tests that start a controller
// child (and agents children): the harness runs the real binary, as make
// bench-fleet does; under make test, the one make build made
// (GPUD_E2E_BIN).
func gpudBinary(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("GPUD_E2E_BIN"); dir != "" {
		return filepath.Join(dir, "gpud") // make test built it just now
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpud-loadtest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtDir = dir
		bin := filepath.Join(dir, "gpud")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/gpud/gpud/gpud")
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build gpud: %v\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

var (
	buildOnce          sync.Once
	builtDir, builtBin string
	buildErr           error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// TestLoadtestNothingLost runs `gpud loadtest` end to end at a small size:
// a real controller child process over TLS on loopback, 20 real node
// agents with fake runtimes, 500 jobs from 4 submitters. Every
// acknowledged job must end exactly once in accounting, COMPLETED, and
// every node must be idle at the end.
func TestLoadtestNothingLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a controller and 20 agents")
	}
	exe := gpudBinary(t)
	dir := t.TempDir()
	svg := filepath.Join(dir, "run.svg")
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// NodeTimeout a minute: on a loaded machine (make test beside other
	// work) heartbeats come late, and what this checks is that nothing
	// acknowledged is lost, not how soon a silent node goes DOWN.
	rep, err := Run(ctx, Options{
		Nodes: 20, GPUsPerNode: 8, Jobs: 500, Submitters: 4, JobGPUs: 1, JobDuration: time.Second,
		Heartbeat: time.Second, NodeTimeout: time.Minute, UsageInterval: time.Second, SchedInterval: time.Second, MaxJobsPerCycle: 1000,
		Timeout: 3 * time.Minute, Dir: filepath.Join(dir, "work"), AgentDir: filepath.Join(dir, "agents"),
		Gpud: exe, Plot: svg, Log: node.TestLogger(t), Out: &out,
	})
	if rep != nil {
		rep.Print(&out)
	}
	t.Log(out.String())
	if err != nil {
		t.Fatalf("loadtest: %v", err)
	}
	if rep.Acked != 500 || rep.Accounted != 500 || len(rep.Lost) > 0 {
		t.Errorf("acknowledged %d, accounted once %d of 500; problems: %v", rep.Acked, rep.Accounted, rep.Lost)
	}
	if len(rep.NotUp) > 0 {
		t.Errorf("nodes not idle at the end: %v", rep.NotUp)
	}
	if rep.HeartbeatsPerSec <= 0 || rep.SubmitStart[0] <= 0 || rep.EndFree[0] <= 0 || rep.SubmitAck[0] <= 0 || rep.SubmitAck[1] > rep.SubmitStart[2] {
		t.Errorf("heartbeats/s %g, submit→start p50 %s (max %s), submit→ack p50 %s p99 %s, end→free p50 %s: want all measured, acks before starts",
			rep.HeartbeatsPerSec, rep.SubmitStart[0], rep.SubmitStart[2], rep.SubmitAck[0], rep.SubmitAck[1], rep.EndFree[0])
	}
	if fi, err := os.Stat(svg); err != nil || fi.Size() < 1000 {
		t.Errorf("plot %s: %v (size %v)", svg, err, fi)
	}
}

// TestLoadtestProcs runs the agents in two child processes (--procs 2):
// each child's agents register, start and end their jobs, and the
// parent, which sees them only through the children's reports, measures
// and checks the run as with the agents in-process. Its burst is paced
// (--rate).
func TestLoadtestProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a controller and two agents children")
	}
	exe := gpudBinary(t)
	dir := t.TempDir()
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{
		Nodes: 10, GPUsPerNode: 4, Jobs: 200, Submitters: 2, JobGPUs: 1, JobDuration: 500 * time.Millisecond,
		Heartbeat: time.Second, NodeTimeout: time.Minute, UsageInterval: time.Second, SchedInterval: time.Second, MaxJobsPerCycle: 1000,
		Timeout: 3 * time.Minute, Dir: filepath.Join(dir, "work"), AgentDir: filepath.Join(dir, "agents"),
		Gpud: exe, Procs: 2, AgentsNice: 3, MemoryOutbox: true, Rate: 100, Log: node.TestLogger(t), Out: &out,
	})
	if rep != nil {
		rep.Print(&out)
	}
	t.Log(out.String())
	if err != nil {
		t.Fatalf("loadtest --procs 2: %v", err)
	}
	if rep.Acked != 200 || rep.Accounted != 200 || len(rep.Lost) > 0 {
		t.Errorf("acknowledged %d, accounted once %d of 200; problems: %v", rep.Acked, rep.Accounted, rep.Lost)
	}
	if len(rep.NotUp) > 0 {
		t.Errorf("nodes not idle at the end: %v", rep.NotUp)
	}
	if rep.HeartbeatsPerSec <= 0 || rep.SubmitStart[0] <= 0 || rep.EndFree[0] <= 0 || rep.UsageSamples == 0 {
		t.Errorf("heartbeats/s %g, submit→start p50 %s, end→free p50 %s, usage samples %d: want all measured from the children's reports",
			rep.HeartbeatsPerSec, rep.SubmitStart[0], rep.EndFree[0], rep.UsageSamples)
	}
	// Paced at 100/s (--rate): the 200th job is due 1.99 s in; two
	// clients unpaced submit several hundred a second.
	if rep.Offered != 100 || rep.SubmitPerSec > 105 || !strings.Contains(out.String(), "of 100 offered") {
		t.Errorf("offered %g/s, acknowledged %.0f/s: want at most the offered 100/s, and the report to say it", rep.Offered, rep.SubmitPerSec)
	}
	// Read from /proc over the workload: the whole machine's CPU, and the
	// page faults of the controller and of the children with the parent.
	if rep.MachineBusy <= 0 || rep.MachineBusy > 1 || rep.MachineKernel <= 0 || rep.MachineKernel > rep.MachineBusy ||
		rep.FaultsPerJob <= 0 || rep.HarnessFaultsPerJob <= 0 || !strings.Contains(out.String(), "minor page faults per job") {
		t.Errorf("machine busy %g (kernel %g), page faults per job controller %g harness %g: want a busy fraction in (0, 1] and faults counted",
			rep.MachineBusy, rep.MachineKernel, rep.FaultsPerJob, rep.HarnessFaultsPerJob)
	}
	if rep.AgentsNiceSeen != 3 || !strings.Contains(out.String(), "nice +3 over the controller") {
		t.Errorf("agents children at nice %+d over the controller: want +3 (AgentsNice), and the report to say it", rep.AgentsNiceSeen)
	}
	if rep.HarnessGoroutines < 10*4 {
		t.Errorf("harness goroutines %d: want the children's counted (several per agent)", rep.HarnessGoroutines)
	}
	for p := range 2 {
		if _, err := os.Stat(filepath.Join(dir, "work", fmt.Sprintf("agents-child-%d.log", p))); err != nil {
			t.Errorf("child %d's log: %v", p, err)
		}
	}
}

// TestLoadtestCheckFindsProblems feeds the accounting check an
// accounting answer with every kind of problem: an acknowledged job
// missing, one that did not complete, one never acknowledged, and one
// started twice. Each must be reported; the clean job must count.
func TestLoadtestCheckFindsProblems(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/accounting/jobs" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(api.AcctJobsResponse{Jobs: []api.AcctJob{
			{AcctRecord: api.AcctRecord{ID: 1, State: spec.StateCompleted}},
			{AcctRecord: api.AcctRecord{ID: 2, State: spec.StateNodeFail, Reason: "node lt00001 not responding"}},
			{AcctRecord: api.AcctRecord{ID: 4, State: spec.StateCompleted}},
			{AcctRecord: api.AcctRecord{ID: 5, State: spec.StateCompleted}},
		}})
	}))
	defer srv.Close()
	cl, err := api.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lt := &loadtest{jobs: map[spec.JobID]*ltJob{
		1: {sentAt: now, ackAt: now, starts: 1},
		2: {sentAt: now, ackAt: now, starts: 1},
		3: {sentAt: now, ackAt: now, starts: 1}, // not in accounting
		5: {sentAt: now, ackAt: now, starts: 2}, // requeued
	}}
	rep := &Report{}
	if err := lt.checkAccounting(t.Context(), cl, rep); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"acknowledged job 3 is not in accounting",
		"job 2 ended NODE_FAIL (node lt00001 not responding), not COMPLETED",
		"job 4 is in accounting but was never acknowledged",
		"job 5 started 2 times",
	}
	if diff := cmp.Diff(want, rep.Lost); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if rep.Accounted != 3 {
		t.Errorf("accounted once = %d, want 3 (jobs 1, 2 and 5 are there once)", rep.Accounted)
	}
}

// TestRateChecked: a negative --rate, or one beside --trace (whose
// arrivals pace the run), is refused with the flag named; a rate paces
// the burst's jobs 1/rate apart.
func TestRateChecked(t *testing.T) {
	for _, o := range []Options{
		{Nodes: 1, GPUsPerNode: 1, JobGPUs: 1, Submitters: 1, Heartbeat: time.Second, Rate: -1},
		{Nodes: 1, GPUsPerNode: 1, JobGPUs: 1, Submitters: 1, Heartbeat: time.Second, Rate: 10, Trace: "x.swf", TraceSpeed: 1},
	} {
		if err := o.check(); err == nil || !strings.Contains(err.Error(), "--rate") {
			t.Errorf("rate %g trace %q: error %v, want one about --rate", o.Rate, o.Trace, err)
		}
	}
	for _, o := range []Options{
		{Nodes: 2, GPUsPerNode: 1, JobGPUs: 1, Submitters: 1, Heartbeat: time.Second, AgentsNice: 5},            // agents in-process
		{Nodes: 2, GPUsPerNode: 1, JobGPUs: 1, Submitters: 1, Heartbeat: time.Second, AgentsNice: 20, Procs: 2}, // past nice(1)'s range
		{Nodes: 2, GPUsPerNode: 1, JobGPUs: 1, Submitters: 1, Heartbeat: time.Second, AgentsNice: -1, Procs: 2},
	} {
		if err := o.check(); err == nil || !strings.Contains(err.Error(), "--agents-nice") {
			t.Errorf("agents nice %d, procs %d: error %v, want one about --agents-nice", o.AgentsNice, o.Procs, err)
		}
	}
	lt := &loadtest{o: Options{Jobs: 3, JobGPUs: 1, JobDuration: time.Second, Rate: 4}}
	w, err := lt.workload()
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Duration
	for _, x := range w {
		at = append(at, x.at)
	}
	if want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond}; !slices.Equal(at, want) {
		t.Errorf("paced at 4/s: due %v, want %v", at, want)
	}
}
