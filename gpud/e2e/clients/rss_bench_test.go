package clients

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

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
		c := e2etest.StartCluster(b, 0)
		work := b.TempDir()
		cl := c.Client()
		env := make([]string, 60)
		for i := range env {
			env[i] = fmt.Sprintf("VAR_%02d=%s", i, strings.Repeat("v", 40))
		}
		js := spec.JobSpec{Name: "held", Script: "#!/bin/sh\nsrun python train.py --epochs 10\n", Env: env,
			WorkDir: work, SubmitDir: work, Hold: true}
		before := e2etest.VMRSS(b, c.Cmd.Process.Pid)
		b.StartTimer()
		submitConcurrently(b, cl, js, n)
		b.StopTimer()
		after := e2etest.VMRSS(b, c.Cmd.Process.Pid)
		var db int64
		for _, f := range []string{"state.db", "state.db-wal"} {
			if fi, err := os.Stat(filepath.Join(c.Dir, f)); err == nil {
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
