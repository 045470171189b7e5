package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestXID94OnMIGInstance: on a mock DGX H100 node in dynamic MIG mode, two
// 3g.40gb jobs share one GPU. A contained ECC error (XID 94) attributed
// to the first job's MIG instance moves that job alone (to another GPU);
// the job on the GPU's other instance runs on; the GPU takes nothing new
// while it is out (its instance went with the job) and its reason names
// the instance; once the mock is clean the instance's probe readmits it;
// gpuq health shows the instance's fault and readmission under its GPU.
func TestXID94OnMIGInstance(t *testing.T) {
	e2etest.RequirePrereq(t)
	c := e2etest.StartCluster(t, 0, "--config", e2etest.FaultControllerConfig(t, e2etest.ShortTempDir(t)), "--kill-grace", "2s")
	conf := e2etest.FaultNodeConfig(t, c)
	body, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(strings.Replace(string(body), "[node]\n", "[node]\ncpus = 32\nmig = \"dynamic\"\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	n := c.StartNode(t, "node1", conf)
	cl := c.Client()
	ctx := context.Background()
	work := t.TempDir()
	healthFile := filepath.Join(n.Dir, "mock-gpu-health.json")
	inv := func() spec.Node {
		t.Helper()
		ns, err := cl.Nodes(ctx)
		if err != nil || len(ns) != 1 {
			t.Fatalf("nodes: %v %v", ns, err)
		}
		return ns[0]
	}
	// where returns the GPU index and MIG UUID of job id's instance.
	where := func(id spec.JobID) (int, string) {
		for _, g := range inv().GPUs {
			for _, s := range g.MIGSlices {
				if s.Job == id && strings.HasPrefix(s.UUID, "MIG-") {
					return g.Index, s.UUID
				}
			}
		}
		return -1, ""
	}
	submit := func() spec.JobID {
		t.Helper()
		r := c.CLI(work, "gpusubmit", "--parsable", "--time", "10", "--gpus=3g.40gb:1", "--wrap", "sleep 600")
		if r.Code != 0 {
			t.Fatalf("gpusubmit: exit %d: %s", r.Code, r.Stderr)
		}
		var id spec.JobID
		if _, err := fmt.Sscan(strings.TrimSpace(r.Stdout), &id); err != nil {
			t.Fatalf("gpusubmit printed %q", r.Stdout)
		}
		return id
	}
	a, b := submit(), submit()
	for _, id := range []spec.JobID{a, b} {
		e2etest.WaitJob(t, cl, id, 60*time.Second, "MIG job running", func(j spec.Job) bool { return j.State == spec.StateRunning })
		e2etest.WaitFor(t, 30*time.Second, "the node names the job's instance", func() bool { _, u := where(id); return u != "" })
	}
	bad, mig := where(a)
	if gb, _ := where(b); gb != bad {
		t.Fatalf("jobs on GPUs %d and %d, want both on one GPU (two 3g.40gb fit)", bad, gb)
	}
	ja := e2etest.WaitJob(t, cl, a, time.Second, "job a", func(spec.Job) bool { return true })
	jb := e2etest.WaitJob(t, cl, b, time.Second, "job b", func(spec.Job) bool { return true })

	if err := os.WriteFile(healthFile, fmt.Appendf(nil, `{"%d": {"xid": 94, "mig": %q}}`, bad, mig), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e2etest.WaitJob(t, cl, a, 60*time.Second, "job a running again", func(j spec.Job) bool {
		return j.Attempt == ja.Attempt+1 && j.State == spec.StateRunning
	})
	t.Logf("FAULT XID 94 on MIG instance %s of GPU %d: its job running again in %v", mig, bad, time.Since(start).Round(time.Millisecond))
	e2etest.WaitFor(t, 30*time.Second, "job a's new instance named", func() bool { g, u := where(a); return u != "" && g >= 0 })
	if g, _ := where(a); g == bad {
		t.Fatalf("job a requeued onto GPU %d, the one out of service", g)
	}
	if j := e2etest.WaitJob(t, cl, b, time.Second, "job b", func(spec.Job) bool { return true }); j.State != spec.StateRunning || j.Attempt != jb.Attempt {
		t.Fatalf("job b on the GPU's other instance: %s attempt %d, want RUNNING at attempt %d", j.State, j.Attempt, jb.Attempt)
	}
	node := inv()
	if h := node.GPUs[bad].Health; !strings.HasPrefix(h, fmt.Sprintf("gpud:xid94 gpu%d ", bad)) || !strings.Contains(h, mig) {
		t.Fatalf("GPU %d health %q, want gpud:xid94 naming %s", bad, h, mig)
	}
	if node.State == spec.NodeDrain || node.State == spec.NodeDown {
		t.Fatalf("node %s, want it up", node.State)
	}
	if err := os.Remove(healthFile); err != nil {
		t.Fatal(err)
	}
	e2etest.WaitFor(t, 60*time.Second, fmt.Sprintf("GPU %d readmitted", bad), func() bool { return inv().GPUs[bad].Health == "" })

	r := c.CLI(work, "gpuq", "health", "--json")
	var evs []spec.GPUEvent
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &evs) != nil {
		t.Fatalf("gpuq health --json: exit %d %s%s", r.Code, r.Stdout, r.Stderr)
	}
	var hist []string
	for _, e := range evs {
		if e.UUID == mig {
			hist = append(hist, e.Kind+":"+e.Code)
			if e.GPU != bad || e.Serial == "" {
				t.Errorf("event %+v: want GPU %d and its serial", e, bad)
			}
		}
	}
	if len(hist) < 2 || hist[0] != "fault:xid94" || hist[len(hist)-1] != "readmit:xid94" {
		t.Errorf("instance %s's history %v, want fault:xid94 ... readmit:xid94", mig, hist)
	}
}
