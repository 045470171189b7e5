package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/spec"
)

// vmRSS reads a process's resident set size in bytes.
func vmRSS(tb testing.TB, pid int) int64 {
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

// BenchmarkControllerRSS100k is issue 12's hole 10 measurement on a real
// `gpud standalone`: its RSS (controller and in-process node agent)
// before and after 100,000 held jobs submitted one by one over the API,
// each with a 60-variable environment as gpusubmit exports, and the
// state.db bytes they take. root submits, so the per-user caps do not
// apply.
//
//	go test -run '^$' -bench ControllerRSS100k -benchtime 1x -timeout 30m ./gpud/e2e/
func BenchmarkControllerRSS100k(b *testing.B) {
	const n = 100000
	for b.Loop() {
		b.StopTimer()
		c := startCluster(b, 0)
		work := b.TempDir()
		cl := c.client()
		env := make([]string, 60)
		for i := range env {
			env[i] = fmt.Sprintf("VAR_%02d=%s", i, strings.Repeat("v", 40))
		}
		js := spec.JobSpec{Name: "held", Script: "#!/bin/sh\nsrun python train.py --epochs 10\n", Env: env,
			WorkDir: work, SubmitDir: work, Hold: true}
		before := vmRSS(b, c.cmd.Process.Pid)
		b.StartTimer()
		submitConcurrently(b, cl, js, n)
		b.StopTimer()
		after := vmRSS(b, c.cmd.Process.Pid)
		var db int64
		for _, f := range []string{"state.db", "state.db-wal"} {
			if fi, err := os.Stat(filepath.Join(c.dir, f)); err == nil {
				db += fi.Size()
			}
		}
		b.ReportMetric(float64(before)/(1<<20), "rss-before-MB")
		b.ReportMetric(float64(after)/(1<<20), "rss-after-MB")
		b.ReportMetric(float64(after-before)/n, "rssB/pending-job")
		b.ReportMetric(float64(db)/n, "dbB/pending-job")
		b.StartTimer()
	}
}
