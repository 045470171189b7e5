package jobs

import (
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// showResv is scontrol show reservation NAME's output.
func showResv(t *testing.T, c *e2etest.Cluster, dir, name string) string {
	t.Helper()
	r := c.CLI(dir, "scontrol", "show", "reservation", name)
	if r.Code != 0 {
		t.Fatalf("scontrol show reservation %s: exit %d: %s", name, r.Code, r.Stderr)
	}
	return r.Stdout
}

// TestReservations is issue 33's reservation must-show: a MAINT
// reservation in 10 minutes on two nodes keeps a 30-minute job off them
// (with Slurm's pending reason) while a 5-minute one starts; a user
// outside a reservation cannot use its nodes, one inside can with
// --reservation; a weekly reservation recurs; scontrol show reservation
// and sinfo -T print Slurm's layouts; reservations survive kill -9.
func TestReservations(t *testing.T) {
	t.Parallel()
	// The users first: cleanups run last-first, so the cluster (and the
	// users' jobs) stop before userdel.
	inside := e2etest.AddUserTag(t, "rin")
	outside := e2etest.AddUserTag(t, "rout")
	c := e2etest.StartCluster(t, 3, "--cpus", "16")
	work := t.TempDir()
	for _, d := range []string{c.Dir, e2etest.BinDir} { // users reach the cluster (as OpenCluster)
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Refusals in Slurm's words, all at once.
	if r := c.CLI(work, "scontrol", "create", "reservation", "Nodes=node1"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "StartTime must be specified") || !strings.Contains(r.Stderr, "Either Users/Groups and/or Accounts must be specified") {
		t.Errorf("incomplete create: exit %d: %s", r.Code, r.Stderr)
	}

	// MAINT in 10 minutes on node[1-2].
	r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=maint", "StartTime=now+10minutes", "Duration=60",
		"Nodes=node[1-2]", "Users=root", "Flags=MAINT,IGNORE_JOBS")
	if r.Code != 0 || strings.TrimSpace(r.Stdout) != "Reservation created: maint" {
		t.Fatalf("create maint: exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	out := showResv(t, c, work, "maint")
	for _, re := range []string{
		`(?m)^ReservationName=maint StartTime=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d EndTime=\S+ Duration=01:00:00$`,
		`(?m)^   Nodes=node\[1-2\] NodeCnt=2 CoreCnt=32 Features=\(null\) PartitionName=\(null\) Flags=IGNORE_JOBS,MAINT,SPEC_NODES$`,
		`(?m)^   TRES=cpu=32,gres/gpu=16$`,
		`(?m)^   Users=root Groups=\(null\) Accounts=\(null\) Licenses=\(null\) State=INACTIVE BurstBuffer=\(null\) Watts=n/a$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("scontrol show reservation maint does not match %s:\n%s", re, out)
		}
	}
	long := submit(c, work, "--nodelist=node1", "--gpus-per-node=1", "--time=30", "--wrap", "sleep 600")
	short := submit(c, work, "--nodelist=node1", "--gpus-per-node=1", "--time=5", "--wrap", "sleep 600")
	waitReason(c, long, "ReqNodeNotAvail, Reserved for maintenance", 30*time.Second)
	c.WaitState(short, 30*time.Second, "RUNNING")
	if sq := c.CLI(work, "squeue", "-h", "-j", long, "-o", "%r"); !strings.Contains(sq.Stdout, "ReqNodeNotAvail, Reserved for maintenance") {
		t.Errorf("squeue %%r of the 30-minute job: %q", sq.Stdout)
	}

	// A reservation now on node3 for one user only.
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=class", "StartTime=now", "Duration=120",
		"Nodes=node3", "Users="+inside.Name); r.Code != 0 {
		t.Fatalf("create class: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.As(outside, nil, "sbatch", "--reservation=class", "--time=5", "--wrap", "true"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "Access denied to requested reservation") {
		t.Errorf("outside user with --reservation: exit %d: %s", r.Code, r.Stderr)
	}
	barred := submitAs(t, c, outside, "--nodelist=node3", "--gpus-per-node=1", "--time=5", "--wrap", "sleep 600")
	in := submitAs(t, c, inside, "--reservation=class", "--gpus-per-node=1", "--time=5", "--wrap", "sleep 600")
	j := c.WaitState(in, 30*time.Second, "RUNNING")
	if nodes, _ := j["nodes"].([]any); len(nodes) != 1 || nodes[0] != "node3" {
		t.Errorf("the job in reservation class runs on %v, want node3", j["nodes"])
	}
	if s := c.ShowJob(barred); s["state"] != "PENDING" {
		t.Errorf("the outside user's job on node3 is %v (%v), want PENDING", s["state"], s["reason"])
	}

	// Weekly: created a week ago, its next window is in 5 minutes.
	weekAgo := time.Now().Add(-7*24*time.Hour + 5*time.Minute).Format("2006-01-02T15:04:05")
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=weekly", "StartTime="+weekAgo,
		"Duration=30", "Nodes=node2", "Users=root", "Flags=WEEKLY,OVERLAP"); r.Code != 0 {
		t.Fatalf("create weekly: exit %d: %s", r.Code, r.Stderr)
	}
	m := regexp.MustCompile(`StartTime=(\S+)`).FindStringSubmatch(showResv(t, c, work, "weekly"))
	if m == nil {
		t.Fatal("no StartTime in scontrol show reservation weekly")
	}
	next, err := time.ParseInLocation("2006-01-02T15:04:05", m[1], time.Local)
	if err != nil || next.Before(time.Now()) || next.After(time.Now().Add(6*time.Minute)) {
		t.Errorf("weekly reservation's shown start %s (%v): want this week's window, within 5 minutes", m[1], err)
	}

	// sinfo -T.
	st := c.CLI(work, "sinfo", "-T")
	lines := strings.Split(strings.TrimSpace(st.Stdout), "\n")
	if st.Code != 0 || len(lines) != 4 || !regexp.MustCompile(`^RESV_NAME\s+STATE\s+START_TIME\s+END_TIME\s+DURATION\s+NODELIST$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^class\s+ACTIVE\s+\S+\s+\S+\s+02:00:00\s+node3$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^maint\s+INACTIVE\s+\S+\s+\S+\s+01:00:00\s+node\[1-2\]$`).MatchString(lines[2]) {
		t.Errorf("sinfo -T: exit %d:\n%s%s", st.Code, st.Stdout, st.Stderr)
	}

	// Users=-name: every user but the ones named (Slurm's); a list
	// mixing refused and admitted names is refused.
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=allbut", "StartTime=now+1days", "Duration=60",
		"Nodes=node3", "Users=-"+outside.Name+",root"); r.Code != 2 || !strings.Contains(r.Stderr, "prefixed with '-'") {
		t.Errorf("create with mixed users: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "scontrol", "create", "reservation", "ReservationName=allbut", "StartTime=now+1days", "Duration=60",
		"Nodes=node3", "Users=-"+outside.Name); r.Code != 0 {
		t.Fatalf("create allbut: exit %d: %s", r.Code, r.Stderr)
	}
	if out := showResv(t, c, work, "allbut"); !strings.Contains(out, "Users=-"+outside.Name+" ") {
		t.Errorf("scontrol show reservation allbut:\n%s", out)
	}
	if r := c.As(outside, nil, "sbatch", "--reservation=allbut", "--time=5", "--wrap", "true"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "Access denied to requested reservation") {
		t.Errorf("refused user with --reservation=allbut: exit %d: %s", r.Code, r.Stderr)
	}
	later := submitAs(t, c, inside, "--reservation=allbut", "--time=5", "--wrap", "true")
	waitReason(c, later, "Reservation", 30*time.Second)

	// Durable across kill -9 of the controller.
	c.Stop(syscall.SIGKILL)
	killStrayDaemons(t, c.Dir)
	c.Start(3)
	if out := showResv(t, c, work, "maint"); !strings.Contains(out, "Flags=IGNORE_JOBS,MAINT,SPEC_NODES") {
		t.Errorf("after kill -9: %s", out)
	}
	waitReason(c, long, "ReqNodeNotAvail, Reserved for maintenance", 30*time.Second)

	// Delete: refused while a job runs in it; the maintenance window's
	// end lets the 30-minute job start.
	if r := c.CLI(work, "scontrol", "delete", "ReservationName=class"); r.Code == 0 || !strings.Contains(r.Stderr, "Reservation is in use") {
		t.Errorf("delete of a reservation in use: exit %d: %s", r.Code, r.Stderr)
	}
	if r := c.CLI(work, "scontrol", "delete", "ReservationName=maint"); r.Code != 0 {
		t.Fatalf("delete maint: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(long, 30*time.Second, "RUNNING")
	if r := c.CLI(work, "scontrol", "show", "reservation", "maint"); r.Code == 0 || !strings.Contains(r.Stderr, "Reservation maint not found") {
		t.Errorf("show of a deleted reservation: exit %d: %s", r.Code, r.Stderr)
	}
}
