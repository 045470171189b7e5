package jobs

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
	"github.com/gpud/gpud/gpud/spec"
)

// TestGPUReservation is issue 33's GPU-count reservation: scontrol create
// reservation TRES=gres/gpu=4 on an 8-GPU node holds four of its GPUs
// alone. A job outside the reservation runs on the same node beside them
// (on the other four), another that would need a reserved GPU waits, and
// a job inside (--reservation) gets exactly the reserved four; scontrol
// show reservation prints TRES=gres/gpu=4 and which GPUs.
func TestGPUReservation(t *testing.T) {
	t.Parallel()
	inside := e2etest.AddUserTag(t, "gin")
	outside := e2etest.AddUserTag(t, "gout")
	c := e2etest.StartCluster(t, 1, "--cpus", "16")
	work := t.TempDir()
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=gpus", "StartTime=now", "Duration=120",
		"TRES=gres/gpu=4", "Users="+inside.Name); r.Code != 0 || strings.TrimSpace(r.Stdout) != "Reservation created: gpus" {
		t.Fatalf("create gpus: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	out := showResv(t, c, work, "gpus")
	for _, re := range []string{
		`(?m)^   Nodes=node1 NodeCnt=1 CoreCnt=0 Features=\(null\) PartitionName=\(null\) Flags=$`,
		`(?m)^     NodeName=node1 GPUIDs=0-3$`,
		`(?m)^   TRES=gres/gpu=4$`,
		`(?m)^   Users=` + inside.Name + ` Groups=\(null\) Accounts=\(null\) Licenses=\(null\) State=ACTIVE `,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("scontrol show reservation gpus does not match %s:\n%s", re, out)
		}
	}
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=more", "StartTime=now", "Duration=60",
		"TRES=gres/gpu=5", "Users=root"); r.Code == 0 || !strings.Contains(r.Stderr, "Requested nodes are busy: TRES=gres/gpu=5 but only 4 GPUs") {
		t.Errorf("5 more GPUs of the 4 left: exit %d: %s", r.Code, r.Stderr)
	}

	// node1's GPUs by index.
	r := c.CLI(c.Dir, "gpuq", "nodes", "--json")
	var nodes []spec.Node
	if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil || len(nodes) != 1 || len(nodes[0].GPUs) != 8 {
		t.Fatalf("gpuq nodes --json: %v (exit %d) %s", err, r.Code, r.Stdout)
	}
	reserved := map[string]bool{}
	for k, g := range nodes[0].GPUs {
		reserved[g.UUID] = k < 4
	}
	gpusOf := func(j map[string]any) []string {
		var out []string
		gs, _ := j["gpus"].([]any)
		for _, g := range gs {
			s, _ := g.(string)
			out = append(out, s)
		}
		return out
	}

	beside := submitAs(t, c, outside, "--gpus-per-node=4", "--time=30", "--wrap", "sleep 600")
	j := c.WaitState(beside, 30*time.Second, "RUNNING")
	got := gpusOf(j)
	if len(got) != 4 || slices.ContainsFunc(got, func(u string) bool { return reserved[u] }) {
		t.Errorf("the job outside the reservation has GPUs %v; want four of node1's unreserved ones (4-7)", got)
	}
	blocked := submitAs(t, c, outside, "--gpus-per-node=1", "--time=30", "--wrap", "sleep 600")
	waitReason(c, blocked, "Reservation", 30*time.Second) // the free GPUs are reserved
	in := submitAs(t, c, inside, "--reservation=gpus", "--gpus-per-node=4", "--time=30", "--wrap", "sleep 600")
	j = c.WaitState(in, 30*time.Second, "RUNNING")
	got = gpusOf(j)
	if len(got) != 4 || slices.ContainsFunc(got, func(u string) bool { return !reserved[u] }) {
		t.Errorf("the job in the reservation has GPUs %v; want exactly the reserved ones (0-3)", got)
	}
	for _, id := range []string{beside, blocked, in} {
		c.CLI(work, "scancel", id)
	}
}
