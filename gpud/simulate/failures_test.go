package simulate

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailuresCommand runs gpud simulate --failures over a small Philly
// trace: both arms, each seed, the summary lines; bad options are refused.
func TestFailuresCommand(t *testing.T) {
	var b strings.Builder
	b.WriteString("#job id,arrival time (sec),topology,shape,size,duration (sec)\n")
	for i := range 200 {
		fmt.Fprintf(&b, "%d,%d.0,CLOS,1,%d,%d.0\n", i, i*600, 1<<(i%4), 3600*(1+i%48))
	}
	path := filepath.Join(t.TempDir(), "philly_trace.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	fo := DefaultFailureOptions()
	fo.Scale = 200
	var out bytes.Buffer
	err := Run(Options{Trace: path, Format: "philly", Cluster: "8x8", Policies: []string{"sched"}, RuntimeEstimate: "exact",
		Seed: "1..2", Failure: fo, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	for _, want := range []string{"gpud: per-GPU drain + expedite + checkpoint-first: goodput", "baseline: whole-node drain + ordinary requeue: goodput", "over 2 seed(s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, bad := range []FailureOptions{{Mix: "google", Scale: 1}, {Mix: "meta", Scale: 0}} {
		err := Run(Options{Trace: path, Format: "philly", Cluster: "8x8", Policies: []string{"sched"}, RuntimeEstimate: "exact",
			Seed: "1", Failure: bad, Out: &out})
		if err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
