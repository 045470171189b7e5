package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/node"
)

// envLoadtestChild makes this test binary act as gpud (the controller
// child of TestLoadtestNothingLost) instead of running tests.
const envLoadtestChild = "GPUD_TEST_AS_GPUD"

func TestMain(m *testing.M) {
	if os.Getenv(envLoadtestChild) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
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
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envLoadtestChild, "1") // for the controller child only
	dir := t.TempDir()
	svg := filepath.Join(dir, "run.svg")
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := runLoadtest(ctx, loadtestOptions{
		Nodes: 20, GPUsPerNode: 8, Jobs: 500, Submitters: 4, JobGPUs: 1, JobDuration: time.Second,
		Heartbeat: time.Second, UsageInterval: time.Second, SchedInterval: time.Second, MaxJobsPerCycle: 1000,
		Timeout: 3 * time.Minute, Dir: filepath.Join(dir, "work"), AgentDir: filepath.Join(dir, "agents"),
		Gpud: exe, Plot: svg, Log: node.TestLogger(t), Out: &out,
	})
	if rep != nil {
		rep.print(&out)
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
	if rep.HeartbeatsPerSec <= 0 || rep.SubmitStart[0] <= 0 || rep.EndFree[0] <= 0 {
		t.Errorf("heartbeats/s %g, submit→start p50 %s, end→free p50 %s: want all measured", rep.HeartbeatsPerSec, rep.SubmitStart[0], rep.EndFree[0])
	}
	if fi, err := os.Stat(svg); err != nil || fi.Size() < 1000 {
		t.Errorf("plot %s: %v (size %v)", svg, err, fi)
	}
}
