package server_test

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/controller"
	"github.com/gpud/gpud/gpud/server/servertest"
	"github.com/gpud/gpud/gpud/spec"
	gpuq "github.com/gpud/gpud/gpuq/app"
)

// TestPrioritiesAndFairshare: two accounts with equal shares, one with a
// running job; the other's pending job ranks first, and GET /v1/fairshare
// and /v1/priorities (and gpuq prio/share) show why.
func TestPrioritiesAndFairshare(t *testing.T) {
	// The controller's clock is the test's: usage and age come from it,
	// not from how long the test happens to take.
	var mu sync.Mutex
	now := time.Date(2025, 6, 1, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	addr, _, _ := servertest.Start(t, func(c *controller.Config) {
		c.Priority = controller.PriorityWeights{Age: 1000, Fairshare: 10000, JobSize: 1000}
		c.Accounts = []controller.Account{{Name: "physics", Shares: 1, Users: []string{"alice"}}, {Name: "chemistry", Shares: 1}}
		c.NodeTimeout = 1000 * time.Hour // the clock jumps; the node stays up
	}, servertest.Options{ControllerOptions: []controller.Option{controller.WithClock(clock)}})
	c := client(t, addr)
	ctx := ctxT(t)
	if _, err := c.Register(ctx, inventory("n1", 2)); err != nil {
		t.Fatal(err)
	}
	submit := func(name, account string) spec.JobID {
		js := jobSpec(name)
		js.Account = account
		js.Resources.GPUsPerNode = 2
		r, err := c.Submit(ctx, api.SubmitRequest{Job: js})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	running := submit("hog", "physics")
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := c.Job(ctx, running)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != spec.StatePending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d never started: %s %s", running, j.State, j.Reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	now = now.Add(time.Hour) // an hour of usage for physics
	mu.Unlock()
	phys := submit("p", "physics")
	chem := submit("c", "chemistry")

	rows, err := c.Fairshare(ctx)
	if err != nil {
		t.Fatal(err)
	}
	factor := map[string]float64{}
	for _, r := range rows {
		if r.User == "" && r.Account == "physics" && (r.RawUsage <= 0 || r.LevelFS == nil) {
			t.Errorf("physics row %+v: want usage and a finite LevelFS", r)
		}
		if r.User != "" {
			factor[r.Account+"/"+r.User] = r.Factor
		}
	}
	if len(rows) != 5 || rows[0].Account != "chemistry" || factor["chemistry/root"] <= factor["physics/root"] {
		t.Errorf("fairshare rows = %+v; want chemistry (no usage) first, then physics with alice (listed) and root (has usage), with the higher factor", rows)
	}

	ps, err := c.Priorities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].JobID != chem || ps[1].JobID != phys {
		t.Fatalf("priorities = %+v; want jobs %d then %d", ps, chem, phys)
	}
	if p := ps[0]; p.Account != "chemistry" || p.Factors.Fairshare != factor["chemistry/root"] ||
		p.Weighted.Fairshare != 10000*p.Factors.Fairshare || p.Factors.JobSize != 1 || p.Priority <= ps[1].Priority {
		t.Errorf("priority of job %d = %+v", chem, p)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"prio"}, []string{"JOBID", "FAIRSHARE", "chemistry", "physics"}},
		{[]string{"prio", "-j", strconv.FormatUint(uint64(chem), 10)}, []string{"chemistry"}},
		{[]string{"prio", "--json", "-u", "nobody"}, []string{"[]"}},
		{[]string{"share"}, []string{"EffectvUsage", " physics", "alice"}},
		{[]string{"share", "--json"}, []string{`"level_fs": null`, `"factor"`}},
	} {
		var out bytes.Buffer
		a := gpuq.New()
		a.Writer, a.ErrWriter = &out, io.Discard
		if err := a.RunContext(ctx, append([]string{"gpuq", "--controller", addr}, tc.args...)); err != nil {
			t.Fatalf("gpuq %v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("gpuq %v: missing %q in:\n%s", tc.args, w, out.String())
			}
		}
		if tc.args[0] == "prio" && len(tc.args) == 3 && strings.Contains(out.String(), "physics") {
			t.Errorf("gpuq %v lists other jobs:\n%s", tc.args, out.String())
		}
	}
}
