package jobs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// TestScontrolNotify is issue 33's scontrol notify: a message to a
// running batch job lands in its stderr as Slurm's slurmstepd writes it
// ("slurmstepd: error: MESSAGE"), once each, written with the job
// user's rights into the user's own file (--error apart from --output:
// the message goes to stderr only). The owner and root may notify;
// another user is refused, and so is a job that is not running.
func TestScontrolNotify(t *testing.T) {
	t.Parallel()
	owner := e2etest.AddUserTag(t, "nown")
	other := e2etest.AddUserTag(t, "noth")
	c := e2etest.OpenCluster(t, false)
	errFile := filepath.Join(owner.Home, "job.err")
	outFile := filepath.Join(owner.Home, "job.out")
	id := submitAs(t, c, owner, "--time=5", "-o", outFile, "-e", errFile, "--wrap", "echo started >&2; sleep 600")
	c.WaitState(id, 60*time.Second, "RUNNING")
	e2etest.WaitFor(t, 30*time.Second, "the job's own first line in its stderr", func() bool {
		b, _ := os.ReadFile(errFile)
		return strings.Contains(string(b), "started")
	})

	if r := c.As(owner, nil, "scontrol", "notify", id, "checkpoint", "now,", "please"); r.Code != 0 {
		t.Fatalf("scontrol notify by the owner: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(owner.Home, "scontrol", "notify", id, "the file system goes read-only at 18:00"); r.Code != 0 {
		t.Fatalf("scontrol notify by root: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.As(other, nil, "scontrol", "notify", id, "not yours"); r.Code != 3 {
		t.Errorf("scontrol notify by another user: exit %d (want 3, refused): %s", r.Code, r.Stderr)
	}
	want := "started\nslurmstepd: error: checkpoint now, please\nslurmstepd: error: the file system goes read-only at 18:00\n"
	var got string
	e2etest.WaitFor(t, 60*time.Second, "both messages in the job's stderr", func() bool {
		b, _ := os.ReadFile(errFile)
		got = string(b)
		return strings.Count(got, "slurmstepd: error:") >= 2
	})
	if got != want {
		t.Errorf("the job's stderr:\n%q\nwant\n%q", got, want)
	}
	if fi, err := os.Stat(errFile); err != nil || fi.Sys() == nil {
		t.Errorf("stat %s: %v", errFile, err)
	} else if st := fi.Sys().(*syscall.Stat_t); st.Uid != owner.UID {
		t.Errorf("%s belongs to uid %d, want the job's user %d", errFile, st.Uid, owner.UID)
	}
	if b, _ := os.ReadFile(outFile); strings.Contains(string(b), "slurmstepd") {
		t.Errorf("a notify message went to the job's stdout too:\n%s", b)
	}

	// Refusals: no message, a pending job, an ended one.
	if r := c.CLI(owner.Home, "scontrol", "notify", id); r.Code != 2 {
		t.Errorf("scontrol notify without a message: exit %d (want 2): %s", r.Code, r.Stderr)
	}
	held := submitAs(t, c, owner, "--hold", "--time=5", "--wrap", "true")
	if r := c.CLI(owner.Home, "scontrol", "notify", held, "hello"); r.Code == 0 || !strings.Contains(r.Stderr, "presently disabled") {
		t.Errorf("scontrol notify of a pending job: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(owner.Home, "scancel", id, held); r.Code != 0 {
		t.Fatalf("scancel: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(id, 60*time.Second, "CANCELLED")
	if r := c.CLI(owner.Home, "scontrol", "notify", id, "too late"); r.Code == 0 || !strings.Contains(r.Stderr, "already completing or completed") {
		t.Errorf("scontrol notify of an ended job: exit %d: %s", r.Code, r.Stderr)
	}
	if b, _ := os.ReadFile(errFile); strings.Count(string(b), "slurmstepd: error:") != 2 {
		t.Errorf("the job's stderr after the end (each message once):\n%s", b)
	}
}
