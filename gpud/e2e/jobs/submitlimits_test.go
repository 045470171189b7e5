package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestArrayPayloadAndSubmitLimits is issue 12's holes 4 and 10 (pending
// jobs) against a real `gpud standalone`, as a local user made with
// useradd:
//   - an array's script is stored once: four tasks of a 900 KiB script
//     run (each writes its index) and leave state.db and its WAL under
//     4 MiB (before, every task's row, rewritten at each state change,
//     held a copy: over 10 MiB);
//   - [limits] max_submit_jobs_per_user and max_submit_size refuse with
//     exit 3, naming the limit and the count or size;
//   - after kill -9 and a restart the tasks still have their script and
//     the user's held jobs still count.
func TestArrayPayloadAndSubmitLimits(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	u := e2etest.AddUser(t)
	dir := e2etest.ShortTempDir(t)
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	for old, new := range map[string]string{
		`max_submit_size = "64M"`:          `max_submit_size = "1M"`,
		"max_submit_jobs_per_user = 10000": "max_submit_jobs_per_user = 4",
	} {
		if !strings.Contains(conf, old) {
			t.Fatalf("etc/gpud.toml lacks %s", old)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	confPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, 1, "--config", confPath, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := func(name string, size int) {
		body := "#!/bin/sh\necho ARRAY-TASK-$SLURM_ARRAY_TASK_ID\n" + strings.Repeat("# a long batch script, kept in state.db once per array\n", size/55)
		p := filepath.Join(u.Home, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(u.UID), int(u.GID)); err != nil {
			t.Fatal(err)
		}
	}
	script("big.sh", 900<<10)
	script("huge.sh", 1500<<10)

	// 1. Four tasks of a 900 KiB script run from one stored copy.
	r := c.As(u, nil, "gpusubmit", "--parsable", "--array=0-3", "big.sh")
	if r.Code != 0 {
		t.Fatalf("array of a 900 KiB script: exit %d: %s", r.Code, r.Stderr)
	}
	first := strings.TrimSpace(r.Stdout)
	for i := range 4 {
		id := first
		if i > 0 {
			id = first + "_" + string(rune('0'+i))
		}
		c.WaitState(id, 90*time.Second, "COMPLETED")
		out, err := os.ReadFile(filepath.Join(u.Home, "gpud-"+first+"_"+string(rune('0'+i))+".out"))
		if err != nil || !strings.Contains(string(out), "ARRAY-TASK-"+string(rune('0'+i))) {
			t.Errorf("task %d wrote %q (%v); want its index: the node got the script", i, out, err)
		}
	}
	var size int64
	for _, f := range []string{"state.db", "state.db-wal"} {
		if fi, err := os.Stat(filepath.Join(c.Dir, f)); err == nil {
			size += fi.Size()
		}
	}
	if size > 4<<20 {
		t.Errorf("state.db and its WAL hold %d KiB after a 4-task array of a 900 KiB script; the script must be stored once", size>>10)
	}

	// 2. The per-user cap on pending + running jobs.
	if r := c.As(u, nil, "gpusubmit", "--hold", "--array=0-2", "--wrap", "true"); r.Code != 0 {
		t.Fatalf("3 held tasks: exit %d: %s", r.Code, r.Stderr)
	}
	r = c.As(u, nil, "gpusubmit", "--hold", "--array=0-1", "--wrap", "true")
	if r.Code != 3 || !strings.Contains(r.Stderr, "has 3 jobs pending or running and [limits] max_submit_jobs_per_user is 4") {
		t.Errorf("2 more over a cap of 4: exit %d %q; want 3 naming the limit and the count", r.Code, r.Stderr)
	}
	// 3. The size cap.
	r = c.As(u, nil, "gpusubmit", "--hold", "huge.sh")
	if r.Code != 3 || !strings.Contains(r.Stderr, "more than the controller's max_submit_size of 1 MiB") {
		t.Errorf("a 1.5 MiB script under a 1 MiB cap: exit %d %q; want 3 naming the cap", r.Code, r.Stderr)
	}

	// 4. kill -9 and restart: the tasks keep their script, the held
	// jobs still count.
	c.Stop(9)
	killStrayDaemons(t, c.Dir)
	c.Start(1)
	if j := c.ShowJob(first + "_3"); !strings.Contains(j["script"].(string), "echo ARRAY-TASK-") {
		t.Errorf("task 3 after kill -9: script %.60q; want the array's", j["script"])
	}
	if r := c.As(u, nil, "gpusubmit", "--hold", "--array=0-1", "--wrap", "true"); r.Code != 3 {
		t.Errorf("over the cap after a restart: exit %d %q; want 3", r.Code, r.Stderr)
	}
}
