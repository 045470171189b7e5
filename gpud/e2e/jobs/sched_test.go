package jobs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// submit runs gpusubmit with args in dir and returns the job id.
func submit(c *e2etest.Cluster, dir string, args ...string) string {
	c.T.Helper()
	r := c.CLI(dir, "gpusubmit", args...)
	if r.Code != 0 {
		c.T.Fatalf("gpusubmit %v: exit %d\n%s%s", args, r.Code, r.Stdout, r.Stderr)
	}
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.Stdout)
	if m == nil {
		c.T.Fatalf("gpusubmit printed %q; want 'Submitted batch job <id>'", r.Stdout)
	}
	return m[1]
}

// waitReason polls until pending job id waits for reason.
func waitReason(c *e2etest.Cluster, id, reason string, timeout time.Duration) map[string]any {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	var last map[string]any
	for time.Now().Before(deadline) {
		if last = c.ShowJob(id); last["state"] == "PENDING" && last["reason"] == reason {
			return last
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.T.Fatalf("job %s not PENDING (%s) after %v; last: state=%v reason=%v", id, reason, timeout, last["state"], last["reason"])
	return nil
}

func timeField(t *testing.T, j map[string]any, key string) time.Time {
	t.Helper()
	s, _ := j[key].(string)
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("job %v: %s = %q: %v", j["id"], key, s, err)
	}
	return v
}

// TestBackfillReservationPreemption is the scheduler issue's first
// must-show on one mock node of 8 GPUs: a big job waits for Resources with
// an expected start at the running job's end, a short job backfills, a
// long one waits for the Reservation, and a high-QOS job preempts a low
// one by requeue; the low job later runs again under its own id.
func TestBackfillReservationPreemption(t *testing.T) {
	t.Parallel()
	// 16 CPUs so that GPUs, not this machine's 2 cores, are what jobs wait for.
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s", "--cpus", "16")
	work := t.TempDir()
	low := submit(c, work, "--qos=low", "--gpus-per-node=4", "--time=10", "-o", "low.out", "--wrap",
		`if [ "$SLURM_RESTART_COUNT" -gt 0 ]; then echo "rerun $SLURM_RESTART_COUNT"; exit 0; fi; sleep 600`)
	jl := c.WaitState(low, 30*time.Second, "RUNNING")
	big := submit(c, work, "--gpus-per-node=8", "--time=10", "--wrap", "true")
	jb := waitReason(c, big, "Resources", 30*time.Second)
	// gpuq show counts the nodes per reason they do not run it.
	if r := c.CLI(work, "gpuq", "show", big); !strings.Contains(r.Stdout, "\n   NodeReasons=1 node: 1 insufficient free GPUs\n") {
		t.Errorf("gpuq show of the waiting 8-GPU job lacks NodeReasons=1 node: 1 insufficient free GPUs:\n%s", r.Stdout)
	}
	end := timeField(t, jl, "start_time").Add(10 * time.Minute)
	if d := timeField(t, jb, "expected_start").Sub(end); d < -time.Minute || d > time.Minute {
		t.Errorf("8-GPU job expected to start %v from the running job's end, want within a minute", d)
	}
	short := submit(c, work, "--gpus-per-node=2", "--time=1", "--wrap", "sleep 600")
	c.WaitState(short, 30*time.Second, "RUNNING")
	long := submit(c, work, "--gpus-per-node=2", "--time=60", "--wrap", "true")
	waitReason(c, long, "Reservation", 30*time.Second)

	high := submit(c, work, "--qos=high", "--gpus-per-node=4", "--time=10", "--wrap", "sleep 600")
	c.WaitState(high, 30*time.Second, "RUNNING")
	jl = c.WaitState(low, 30*time.Second, "PENDING")
	if jl["attempt"] != float64(1) || jl["alloc"] != nil {
		t.Errorf("low job after preemption: attempt %v, alloc %v; want PENDING after attempt 1, holding nothing", jl["attempt"], jl["alloc"])
	}
	// The queue, as a user sees it: the pending jobs with their reasons.
	r := c.CLI(work, "gpuq", "-o", "%i %t %r")
	if r.Code != 0 || !strings.Contains(r.Stdout, big+" PD ") || !strings.Contains(r.Stdout, high+" R ") {
		t.Errorf("gpuq:\n%s%s", r.Stdout, r.Stderr)
	}
	// Once the others are gone the low job runs again, same id, and ends.
	for _, id := range []string{high, big, short, long} {
		if r := c.CLI(work, "gpuq", "cancel", id); r.Code != 0 && !strings.Contains(r.Stderr, "already ended") {
			t.Fatalf("gpuq cancel %s: %s", id, r.Stderr)
		}
	}
	jl = c.WaitState(low, 60*time.Second, "COMPLETED")
	if jl["attempt"] != float64(2) {
		t.Errorf("low job ended after attempt %v, want 2", jl["attempt"])
	}
	out, err := os.ReadFile(filepath.Join(work, "low.out"))
	if err != nil || !strings.Contains(string(out), "rerun 1") {
		t.Errorf("low job output %q (%v), want it to say rerun 1", out, err)
	}
}

// TestArrayLimitAndDependencies: a 20-task array with %4 never has more
// than 4 tasks running, an afterok chain runs in order, and afterok on a
// failed job gives DependencyNeverSatisfied without blocking others.
func TestArrayLimitAndDependencies(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s", "--cpus", "16")
	work := t.TempDir()
	arr := submit(c, work, "--array=0-19%4", "--gpus-per-node=1", "--wrap", "sleep 1")
	first, _ := strconv.Atoi(arr)
	most := 0
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := c.CLI(work, "gpuq", "-t", "all", "--noheader", "-o", "%i %T")
		if r.Code != 0 {
			t.Fatalf("gpuq: %s", r.Stderr)
		}
		running, done := 0, 0
		for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 || !strings.HasPrefix(f[0], arr+"_") {
				continue
			}
			switch f[1] {
			case "RUNNING":
				running++
			case "COMPLETED":
				done++
			}
		}
		if running > 4 {
			t.Fatalf("%d tasks of array %s running at once, want at most 4:\n%s", running, arr, r.Stdout)
		}
		most = max(most, running)
		if done == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("array %s: %d of 20 tasks done after 2 minutes", arr, done)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if most < 2 {
		t.Errorf("at most %d tasks ever ran at once; the %%4 limit should let up to 4 run", most)
	}
	_ = first

	// afterok chain.
	a := submit(c, work, "--wrap", "sleep 2")
	b := submit(c, work, "-d", "afterok:"+a, "--wrap", "sleep 1")
	cc := submit(c, work, "-d", "afterok:"+b, "--wrap", "true")
	ja := c.WaitState(a, 30*time.Second, "COMPLETED")
	jb := c.WaitState(b, 30*time.Second, "COMPLETED")
	jc := c.WaitState(cc, 30*time.Second, "COMPLETED")
	if timeField(t, jb, "start_time").Before(timeField(t, ja, "end_time")) || timeField(t, jc, "start_time").Before(timeField(t, jb, "end_time")) {
		t.Errorf("afterok chain out of order: a ends %v, b %v–%v, c starts %v", ja["end_time"], jb["start_time"], jb["end_time"], jc["start_time"])
	}

	// afterok on a failed job never runs; others are not held up by it.
	bad := submit(c, work, "--wrap", "exit 3")
	never := submit(c, work, "-d", "afterok:"+bad, "--wrap", "true")
	c.WaitState(bad, 30*time.Second, "FAILED")
	waitReason(c, never, "DependencyNeverSatisfied", 30*time.Second)
	other := submit(c, work, "--wrap", "true")
	c.WaitState(other, 30*time.Second, "COMPLETED")
}

// TestFairshareOrdersAccounts: two accounts with equal shares, one with
// heavy past GPU usage. With the node busy, a job of the other account is
// ordered first, gpuq prio and gpuq share say why, and it starts first.
func TestFairshareOrdersAccounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(conf, []byte(`version = 1
default_account = "ops"

[[account]]
name = "heavy"
shares = 1
users = ["root"]

[[account]]
name = "light"
shares = 1
users = ["root"]

[[account]]
name = "ops"
shares = 1
users = ["root"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s", "--cpus", "16", "--config", conf)
	work := t.TempDir()
	past := submit(c, work, "-A", "heavy", "--gpus-per-node=8", "--wrap", "sleep 3")
	c.WaitState(past, 30*time.Second, "COMPLETED")
	blocker := submit(c, work, "-A", "ops", "--gpus-per-node=8", "--wrap", "sleep 600")
	c.WaitState(blocker, 30*time.Second, "RUNNING")
	// The heavy account's job is submitted first: only fairshare can put
	// the light one ahead.
	heavy := submit(c, work, "-A", "heavy", "--gpus-per-node=8", "--wrap", "true")
	light := submit(c, work, "-A", "light", "--gpus-per-node=8", "--wrap", "true")

	var prios []struct {
		JobID    json.Number `json:"job_id"`
		Priority int64       `json:"priority"`
		Factors  struct {
			Fairshare float64 `json:"fairshare"`
		} `json:"factors"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.CLI(work, "gpuq", "prio", "--json")
		if r.Code != 0 {
			t.Fatalf("gpuq prio --json: %s", r.Stderr)
		}
		if err := json.Unmarshal([]byte(r.Stdout), &prios); err != nil {
			t.Fatalf("gpuq prio --json: %v\n%s", err, r.Stdout)
		}
		if len(prios) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(prios) != 2 || prios[0].JobID.String() != light || prios[1].JobID.String() != heavy {
		t.Fatalf("gpuq prio order %+v, want job %s (light) before %s (heavy)", prios, light, heavy)
	}
	if l, h := prios[0], prios[1]; l.Factors.Fairshare <= h.Factors.Fairshare || l.Priority <= h.Priority {
		t.Errorf("light job fairshare %v priority %d, heavy %v %d: want the light account's higher", l.Factors.Fairshare, l.Priority, h.Factors.Fairshare, h.Priority)
	}
	r := c.CLI(work, "gpuq", "share", "--json")
	var share []struct {
		Account  string  `json:"account"`
		User     string  `json:"user"`
		RawUsage float64 `json:"raw_usage"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &share); r.Code != 0 || err != nil {
		t.Fatalf("gpuq share --json: exit %d, %v\n%s%s", r.Code, err, r.Stdout, r.Stderr)
	}
	usage := map[string]float64{}
	for _, row := range share {
		if row.User == "" {
			usage[row.Account] = row.RawUsage
		}
	}
	// 8 GPUs for about 3 s: some 24 GPU-seconds (container start included).
	if usage["heavy"] < 16 || usage["light"] != 0 {
		t.Errorf("gpuq share raw usage heavy %v light %v; want heavy's ~24 GPU-seconds and light none\n%s", usage["heavy"], usage["light"], r.Stdout)
	}
	if r := c.CLI(work, "gpuq", "share"); r.Code != 0 || !strings.Contains(r.Stdout, "heavy") {
		t.Errorf("gpuq share table:\n%s%s", r.Stdout, r.Stderr)
	}
	if r := c.CLI(work, "gpuq", "cancel", blocker); r.Code != 0 {
		t.Fatalf("gpuq cancel %s: %s", blocker, r.Stderr)
	}
	jl := c.WaitState(light, 30*time.Second, "RUNNING", "COMPLETED")
	if jh := c.ShowJob(heavy); jh["state"] != "PENDING" && timeField(t, jh, "start_time").Before(timeField(t, jl, "start_time")) {
		t.Errorf("heavy account's job started at %v, before the light one's %v", jh["start_time"], jl["start_time"])
	}
}
