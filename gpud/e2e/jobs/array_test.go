package jobs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestJobArray submits a six-task array limited to two at once and checks
// every task wrote its own output file with its index.
func TestJobArray(t *testing.T) {
	t.Parallel()
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--wait", "--array=0-5%2", "--wrap", "echo $SLURM_ARRAY_TASK_ID")
	if r.Code != 0 {
		t.Fatalf("gpusubmit --array --wait: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	m := regexp.MustCompile(`Submitted batch job (\d+)`).FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("gpusubmit printed %q; want 'Submitted batch job <id>'", r.Stdout)
	}
	first, _ := strconv.Atoi(m[1])
	for i := range 6 {
		id := strconv.Itoa(first + i)
		j := c.WaitState(id, 30*time.Second, "COMPLETED")
		if j["array_job_id"] != float64(first) || i > 0 && j["array_task_id"] != float64(i) {
			t.Errorf("job %s: array_job_id %v array_task_id %v, want %d and %d", id, j["array_job_id"], j["array_task_id"], first, i)
		}
		out, err := os.ReadFile(filepath.Join(work, "gpud-"+m[1]+"_"+strconv.Itoa(i)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(out)); got != strconv.Itoa(i) {
			t.Errorf("task %d wrote %q, want %q", i, got, strconv.Itoa(i))
		}
	}
}
