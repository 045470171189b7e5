package security

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestStateFilesPrivate (holes 3 and 7): while gpud standalone runs,
// another local user can neither cat nor grep -a the controller's
// state.db and its WAL, accounting.db or a node's outbox.db, although
// root finds a job's script in them; the same user still submits through
// gpud.sock. A GPUD_TOKEN in the submitter's environment is in neither
// the stored job nor the files. Files an older gpud left 0644 (and a
// 0755 state dir) are made private again at the next start, with a log
// line each. Before the fix every file was 0644 and grep -a as the other
// user found the script and the token.
func TestStateFilesPrivate(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	u := e2etest.AddUser(t)
	c := e2etest.StartCluster(t, 1, "--kill-grace", "2s")
	// As TestMultiUserSecurity: the test's own dirs are 0700; open them
	// as a careless site would (the files inside must not care).
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	r := c.CLI(work, "gpusubmit", "--parsable", "--export=ALL,STATE_SECRET=S3CR3T-IN-ENV", "--wrap", "echo S3CR3T-IN-SCRIPT; sleep 600")
	if r.Code != 0 {
		t.Fatalf("root submit: %d %s", r.Code, r.Stderr)
	}
	rootJob := strings.TrimSpace(r.Stdout)
	c.WaitState(rootJob, 60*time.Second, "RUNNING")
	r = c.As(u, []string{"GPUD_TOKEN=tok-MUST-NOT-TRAVEL"}, "gpusubmit", "--parsable", "--wrap", "true")
	if r.Code != 0 {
		t.Fatalf("%s submits through gpud.sock: exit %d %s", u.Name, r.Code, r.Stderr)
	}
	userJob := strings.TrimSpace(r.Stdout)
	c.WaitState(userJob, 60*time.Second, "COMPLETED", "FAILED")

	files := []string{"state.db", "state.db-wal", "state.db-shm", "accounting.db", "accounting.db-wal", "nodes/node1/outbox.db", "nodes/node1/outbox.db-wal"}
	var all []string
	for _, f := range files {
		p := filepath.Join(c.Dir, f)
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v (want it present while the daemon runs)", f, err)
			continue
		}
		all = append(all, p)
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o600 || st.Uid != 0 {
			t.Errorf("%s: mode %#o uid %d; want 0600 root", f, fi.Mode().Perm(), st.Uid)
		}
		if r := c.As(u, nil, "/bin/cat", p); r.Code == 0 || !strings.Contains(r.Stderr, "Permission denied") {
			t.Errorf("%s cat %s: exit %d %q; want Permission denied", u.Name, f, r.Code, r.Stderr)
		}
		if r := c.As(u, nil, "/bin/grep", "-a", "S3CR3T", p); r.Code != 2 {
			t.Errorf("%s grep -a S3CR3T %s: exit %d (%d bytes matched) %q; want 2 (cannot read)", u.Name, f, r.Code, len(r.Stdout), r.Stderr)
		}
	}
	// Control: the secrets are on disk, so the refusals above mean something.
	grep := func(pattern string) int {
		err := exec.Command("grep", append([]string{"-a", "-q", pattern}, all...)...).Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if grep("S3CR3T-IN-SCRIPT") != 0 {
		t.Errorf("root does not find the job's script in %v: the test proves nothing", files)
	}
	if code := grep("tok-MUST-NOT-TRAVEL"); code != 1 {
		t.Errorf("grep -a for the submitter's GPUD_TOKEN in the state files: exit %d; want 1 (absent)", code)
	}
	var shown struct {
		Env []string `json:"env"`
	}
	if r := c.CLI(work, "gpuq", "show", userJob, "--json"); r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &shown) != nil {
		t.Fatalf("gpuq show %s: %d %s", userJob, r.Code, r.Stderr)
	}
	for _, kv := range shown.Env {
		if strings.HasPrefix(kv, "GPUD_TOKEN=") {
			t.Errorf("stored job %s carries %s", userJob, kv)
		}
	}

	// An older gpud's modes: tightened at the next start, each logged.
	c.Stop(syscall.SIGTERM)
	var loosened []string
	for _, f := range files {
		p := filepath.Join(c.Dir, f)
		if err := os.Chmod(p, 0o644); err == nil {
			loosened = append(loosened, p)
		}
	}
	c.Start(1)
	// The node agent checks its outbox once it starts, which may be after
	// the cluster answers: poll the modes.
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range loosened {
		for {
			fi, err := os.Stat(p)
			if err != nil || fi.Mode().Perm() == 0o600 {
				break // SQLite may have folded a WAL away
			}
			if time.Now().After(deadline) {
				t.Errorf("%s after restart: mode %#o, want 0600", p, fi.Mode().Perm())
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if fi, err := os.Stat(c.Dir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("state dir (holds gpud.sock) after restart: %v %v; want 0711", fi.Mode().Perm(), err)
	}
	if r := c.As(u, nil, "gpuq", "show", rootJob, "--json"); r.Code != 0 {
		t.Errorf("%s reaches the socket in the 0711 state dir: exit %d %s", u.Name, r.Code, r.Stderr)
	}
	if r := c.As(u, nil, "/bin/ls", c.Dir); r.Code == 0 {
		t.Errorf("%s lists the state dir: %s", u.Name, r.Stdout)
	}
	// The log is read once the daemon has stopped writing it.
	c.CancelAll()
	c.Stop(syscall.SIGTERM)
	log := c.Log.String()
	for _, p := range loosened {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if !strings.Contains(log, `"path":"`+p+`","old_mode":"0644","new_mode":"0600"`) && !strings.Contains(log, "path="+p+" old_mode=0644") {
			t.Errorf("restart log does not report tightening %s", p)
		}
	}
	if !strings.Contains(log, "made it private") {
		t.Errorf("restart log has no line about the files made private")
	}
}
