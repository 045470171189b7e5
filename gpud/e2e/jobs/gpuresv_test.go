package jobs

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
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
// show reservation prints TRES=gres/gpu=4 and which GPUs; sreport
// reservation utilization reports its allocated and idle GPU-time from
// the accounting database; a Groups= reservation admits the group's
// members only.
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
	// The member job runs a few seconds, for its reservation's accounting.
	in := submitAs(t, c, inside, "--reservation=gpus", "--gpus-per-node=4", "--time=30", "--wrap", "sleep 5")
	j = c.WaitState(in, 30*time.Second, "RUNNING")
	got = gpusOf(j)
	if len(got) != 4 || slices.ContainsFunc(got, func(u string) bool { return !reserved[u] }) {
		t.Errorf("the job in the reservation has GPUs %v; want exactly the reserved ones (0-3)", got)
	}

	// sreport reservation utilization from the accounting database: the
	// member job's four GPUs for its run time are the reservation's
	// allocated time (the job beside it, on four other GPUs for longer,
	// is not); the rest of 4 GPUs × the window so far is idle.
	j = c.WaitState(in, time.Minute, "COMPLETED")
	for _, id := range []string{beside, blocked} {
		c.CLI(work, "scancel", id)
	}
	// The cancelled job beside holds its GPUs until its node reports the
	// exit (the reservation grp below needs two of them).
	for _, id := range []string{beside, blocked} {
		c.WaitState(id, time.Minute, "CANCELLED")
	}
	st, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(j["start_time"]))
	et, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(j["end_time"]))
	if err1 != nil || err2 != nil {
		t.Fatalf("member job times: %v %v (%v, %v)", j["start_time"], j["end_time"], err1, err2)
	}
	want := 4 * (et.Unix() - st.Unix())
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for {
		r := c.CLI(work, "sreport", "-nP", "-t", "seconds", "reservation", "utilization", "start=now-1hours", "end=now", "names=gpus")
		last = r.Stdout + r.Stderr
		f := strings.Split(strings.TrimSpace(r.Stdout), "|")
		if r.Code == 0 && len(f) == 7 && f[1] == "gpus" && f[4] == "gres/gpu" {
			alloc, _ := strconv.ParseInt(f[5], 10, 64)
			idle, _ := strconv.ParseInt(f[6], 10, 64)
			if alloc > 0 && alloc >= want-8 && alloc <= want+8 && idle > 0 {
				t.Logf("sreport -nP -t seconds reservation utilization: %s (member job %s on 4 GPUs)", strings.TrimSpace(r.Stdout), et.Sub(st))
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sreport reservation utilization: want gpus with %d±8 allocated GPU-seconds (4 × the member job's %s) and some idle; last:\n%s", want, et.Sub(st), last)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Groups=: the members of a unix group (here the inside user's own,
	// as useradd made it) may use it; others are refused at submit.
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=grp", "StartTime=now", "Duration=60",
		"TRES=gres/gpu=2", "Groups="+inside.Name); r.Code != 0 {
		t.Fatalf("create grp: exit %d: %s", r.Code, r.Stderr)
	}
	if out := showResv(t, c, work, "grp"); !strings.Contains(out, "Users=(null) Groups="+inside.Name+" Accounts=(null)") {
		t.Errorf("scontrol show reservation grp:\n%s", out)
	}
	if r := c.As(outside, nil, "sbatch", "--reservation=grp", "--time=5", "--wrap", "true"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "Access denied to requested reservation") {
		t.Errorf("a user outside group %s with --reservation=grp: exit %d: %s", inside.Name, r.Code, r.Stderr)
	}
	member := submitAs(t, c, inside, "--reservation=grp", "--gpus-per-node=2", "--time=5", "--wrap", "true")
	c.WaitState(member, time.Minute, "COMPLETED")

	if r := c.CLI(work, "sreport", "reservation", "utilization", "start=now-1hours", "end=now"); r.Code != 0 ||
		!regexp.MustCompile(`(?m)^  Cluster      Name               Start                 End      TRES Name            Allocated                 Idle$`).MatchString(r.Stdout) {
		t.Errorf("sreport reservation utilization: exit %d:\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
