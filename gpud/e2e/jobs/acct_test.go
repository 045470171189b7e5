package jobs

import (
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/api"
	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestAccountingMatchesAllocations runs whole-GPU, fractional, failing,
// cancelled and requeued jobs on gpud standalone, with the nodes sampling
// usage every second, and checks what accounting says: GPU-seconds are
// allocation × elapsed within 1% (every attempt of the requeued job),
// energy was sampled, gpuq report's total is the sum of the jobs, and
// gpuq acct's CSV says what its JSON says.
func TestAccountingMatchesAllocations(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s", "--usage-interval", "1s")
	work := t.TempDir()
	submit := func(args ...string) string {
		t.Helper()
		r := c.CLI(work, "gpusubmit", append([]string{"--parsable"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("gpusubmit %v: exit %d: %s", args, r.Code, r.Stderr)
		}
		return strings.TrimSpace(r.Stdout)
	}
	gpuq := func(args ...string) string {
		t.Helper()
		r := c.CLI(work, "gpuq", args...)
		if r.Code != 0 {
			t.Fatalf("gpuq %v: exit %d: %s", args, r.Code, r.Stderr)
		}
		return r.Stdout
	}
	// GPUs each job holds (whole-GPU equivalents).
	want := map[string]float64{}
	whole := submit("-G", "2", "--wrap", "sleep 4")
	want[whole] = 2
	frac := submit("--gpus", "0.5", "--wrap", "sleep 4")
	want[frac] = 0.5
	failed := submit("-G", "1", "--wrap", "sleep 3; exit 3")
	want[failed] = 1
	cancelled := submit("-G", "1", "--wrap", "sleep 600")
	want[cancelled] = 1
	// The requeued job marks each attempt's start, so the requeue comes
	// when its first attempt has really run (the controller says RUNNING
	// when it dispatches; the container may start seconds later under load).
	marks := filepath.Join(work, "requeued.starts")
	requeued := submit("-G", "1", "--wrap", "echo start >> "+marks+"; sleep 3")
	want[requeued] = 1

	c.WaitState(cancelled, 60*time.Second, "RUNNING")
	time.Sleep(3 * time.Second)
	gpuq("cancel", cancelled)
	c.WaitState(requeued, 60*time.Second, "RUNNING")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if b, _ := os.ReadFile(marks); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the requeued job's first attempt did not start its script in 60s")
		}
	}
	time.Sleep(2 * time.Second)
	gpuq("requeue", requeued)
	for id, states := range map[string][]string{whole: {"COMPLETED"}, frac: {"COMPLETED"}, failed: {"FAILED"},
		cancelled: {"CANCELLED"}, requeued: {"COMPLETED"}} {
		c.WaitState(id, 90*time.Second, states...)
	}

	if b, _ := os.ReadFile(marks); strings.Count(string(b), "start") != 2 {
		t.Errorf("the requeued job's script started %d times, want 2 (one per attempt)", strings.Count(string(b), "start"))
	}

	// Ended jobs reach accounting through the recorder, asynchronously.
	var jobs []api.AcctJob
	deadline := time.Now().Add(30 * time.Second)
	for {
		jobs = nil
		if err := json.Unmarshal([]byte(gpuq("acct", "-S", "2020-01-01", "--json")), &jobs); err != nil {
			t.Fatal(err)
		}
		if len(jobs) == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(jobs) != len(want) {
		t.Fatalf("gpuq acct lists %d jobs, want %d: %+v", len(jobs), len(want), jobs)
	}
	var sum float64
	for _, j := range jobs {
		id := strconv.FormatUint(uint64(j.ID), 10)
		gpuSec := j.GPUHours * 3600
		sum += j.GPUHours
		if id == requeued {
			// Two attempts: more than the last one's, and both billed.
			if j.Attempts != 2 || gpuSec < want[id]*float64(j.Elapsed)+1 {
				t.Errorf("requeued job %s: %d attempts, %v GPU-s over a last attempt of %ds; want 2 attempts billed", id, j.Attempts, gpuSec, j.Elapsed)
			}
			continue
		}
		if exp := want[id] * float64(j.Elapsed); math.Abs(gpuSec-exp) > 0.01*exp || j.Elapsed == 0 {
			t.Errorf("job %s (%s): %v GPU-s, want %v GPUs × %ds = %v within 1%%", id, j.State, gpuSec, want[id], j.Elapsed, exp)
		}
		if j.Elapsed >= 3 && (j.EnergyKWh <= 0 || j.GPUUtil < 0 || j.GPUUtil > 100) {
			t.Errorf("job %s ran %ds: energy %v kWh, utilisation %v%%; want samples with energy", id, j.Elapsed, j.EnergyKWh, j.GPUUtil)
		}
	}

	var rep struct {
		Total struct {
			Jobs     int     `json:"jobs"`
			GPUHours float64 `json:"gpu_hours"`
		} `json:"total"`
	}
	if err := json.Unmarshal([]byte(gpuq("report", "-S", "2020-01-01", "-E", "now", "--json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Total.Jobs != len(jobs) || math.Abs(rep.Total.GPUHours-sum) > 1e-9 {
		t.Errorf("report total = %d jobs, %v GPU-hours; want the sum of gpuq acct: %d, %v", rep.Total.Jobs, rep.Total.GPUHours, len(jobs), sum)
	}

	rows, err := csv.NewReader(strings.NewReader(gpuq("acct", "-S", "2020-01-01", "--csv", "--noheader",
		"--format", "jobid,state,gpu_hours,energy_kwh,attempts"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(jobs) {
		t.Fatalf("CSV has %d rows, JSON %d jobs", len(rows), len(jobs))
	}
	for i, j := range jobs {
		wantRow := []string{strconv.FormatUint(uint64(j.ID), 10), string(j.State), strconv.FormatFloat(j.GPUHours, 'f', 4, 64),
			strconv.FormatFloat(j.EnergyKWh, 'f', 4, 64), strconv.Itoa(j.Attempts)}
		if strings.Join(rows[i], ",") != strings.Join(wantRow, ",") {
			t.Errorf("CSV row %v, JSON says %v", rows[i], wantRow)
		}
	}
}

// TestPurgeAfterMinJobAge: with min_job_age = "2s", an ended job leaves
// the controller (gpuq show no longer finds it) while sacct keeps it,
// and a dependency on it is refused, naming sacct.
func TestPurgeAfterMinJobAge(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "gpud.toml")
	if err := os.WriteFile(conf, []byte("version = 1\n[controller]\nmin_job_age = \"2s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", conf)
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "--wait", "--wrap", "true")
	id := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || id == "" {
		t.Fatalf("gpusubmit --wait: exit %d %q %s", r.Code, r.Stdout, r.Stderr)
	}
	if r := c.CLI(work, "gpuq", "show", id); r.Code != 0 {
		t.Fatalf("gpuq show %s right after the end: exit %d %s; want the ended job", id, r.Code, r.Stderr)
	}
	e2etest.WaitFor(t, 30*time.Second, "job "+id+" purged from the controller", func() bool {
		r := c.CLI(work, "gpuq", "show", id)
		return r.Code != 0 && strings.Contains(r.Stderr, "not")
	})
	if r := c.CLI(work, "sacct", "-j", id, "-X", "-n", "-P", "-o", "JobID,State"); r.Stdout != id+"|COMPLETED\n" {
		t.Errorf("sacct after the purge: %q %s; want %s|COMPLETED", r.Stdout, r.Stderr, id)
	}
	r = c.CLI(work, "sbatch", "--dependency=afterok:"+id, "--wrap", "true")
	if r.Code == 0 || !strings.Contains(r.Stderr, "sacct -j "+id) {
		t.Errorf("sbatch --dependency on a purged job: exit %d %q; want refused, naming sacct", r.Code, r.Stderr)
	}
}
