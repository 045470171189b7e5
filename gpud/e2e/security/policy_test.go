package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpud/gpud/gpud/e2e/e2etest"
)

// policyCluster starts a one-node standalone with etc/gpud.toml, the
// replacements in repl, and more appended; the users reach its socket.
func policyCluster(t *testing.T, nodes int, repl map[string]string, more string) *e2etest.Cluster {
	t.Helper()
	base, err := os.ReadFile(e2etest.RepoPath(t, "etc/gpud.toml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(base)
	for old, new := range repl {
		if !strings.Contains(conf, old) {
			t.Fatalf("etc/gpud.toml lacks %s", old)
		}
		conf = strings.Replace(conf, old, new, 1)
	}
	dir := e2etest.ShortTempDir(t)
	confPath := filepath.Join(dir, "gpud.toml")
	if err := os.WriteFile(confPath, []byte(conf+more), 0o644); err != nil {
		t.Fatal(err)
	}
	c := e2etest.StartCluster(t, nodes, "--config", confPath, "--kill-grace", "2s")
	for _, d := range []string{c.Dir, e2etest.BinDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestPartitionAccessOnEveryPath is issue 24's hole 3 against a real
// `gpud standalone`, as local users made with useradd: with partition
// private open to account acctb only, alice (account accta) ran sbatch
// -p private to COMPLETED and moved a job there with scontrol update.
// Now sbatch, an array, srun's allocation and scontrol update are
// refused (exit 3, naming the rule), sbatch -p private,gpu runs in gpu,
// and bob (acctb) runs in private. (Every key on every path, reload and
// requeue included, is gpud/controller's TestEveryAccessRuleOnEveryPath.)
func TestPartitionAccessOnEveryPath(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice, bob := e2etest.AddUserTag(t, "pa"), e2etest.AddUserTag(t, "pb")
	c := policyCluster(t, 1, nil, fmt.Sprintf(`
[[account]]
name = "accta"
shares = 1
users = [%q]

[[account]]
name = "acctb"
shares = 1
users = [%q]

[[partition]]
name = "private"
nodes = ["ALL"]
default_time = "1h"
max_time = "UNLIMITED"
allow_accounts = ["acctb"]
`, alice.Name, bob.Name))
	const rule = "account accta may not use partition private (its allow_accounts: acctb)"
	refused := func(what string, r e2etest.Result) {
		t.Helper()
		if r.Code == 0 || !strings.Contains(r.Stderr, rule) {
			t.Errorf("%s: exit %d, stderr %q; want refused naming the rule (%s)", what, r.Code, r.Stderr, rule)
		}
	}
	r := c.As(alice, nil, "sbatch", "-p", "private", "-A", "accta", "--parsable", "--wrap", "true")
	refused("alice's sbatch -p private", r)
	if r.Code != 3 {
		t.Errorf("alice's sbatch -p private: exit %d; want 3 (refused by policy)", r.Code)
	}
	refused("alice's array in private", c.As(alice, nil, "sbatch", "-p", "private", "-A", "accta", "--array=0-1", "--wrap", "true"))
	refused("alice's srun -p private", c.As(alice, nil, "srun", "-p", "private", "-A", "accta", "true"))

	// scontrol update: her held job in gpu may not move to private.
	r = c.As(alice, nil, "sbatch", "--hold", "-A", "accta", "--parsable", "--wrap", "true")
	if r.Code != 0 {
		t.Fatalf("alice's held job: exit %d: %s", r.Code, r.Stderr)
	}
	held := strings.TrimSpace(r.Stdout)
	refused("alice's scontrol update Partition=private", c.As(alice, nil, "scontrol", "update", "JobId="+held, "Partition=private"))
	if j := c.ShowJob(held); j["partition"] != "gpu" {
		t.Errorf("alice's job after the refused update is in %v; want gpu", j["partition"])
	}

	// -p private,gpu: gpu. bob's own: private.
	r = c.As(alice, nil, "sbatch", "-p", "private,gpu", "-A", "accta", "--parsable", "--wrap", "true")
	if r.Code != 0 {
		t.Fatalf("alice's sbatch -p private,gpu: exit %d: %s", r.Code, r.Stderr)
	}
	if j := c.WaitState(strings.TrimSpace(r.Stdout), 90*time.Second, "COMPLETED"); j["partition"] != "gpu" {
		t.Errorf("alice's -p private,gpu job ran in %v; want gpu", j["partition"])
	}
	r = c.As(bob, nil, "sbatch", "-p", "private", "-A", "acctb", "--parsable", "--wrap", "true")
	if r.Code != 0 {
		t.Fatalf("bob's sbatch -p private: exit %d: %s", r.Code, r.Stderr)
	}
	c.WaitState(strings.TrimSpace(r.Stdout), 90*time.Second, "COMPLETED")
}

// TestArrayCommentUpdates is issue 24's hole 6 against a real `gpud
// standalone`, as a useradd user: updating each task's comment of a
// 25-task array with one 4 MB script grew state.db and its WAL from 8.4
// to 108.5 MB (the whole script rewritten into each updated task's row),
// and updates counted against nothing. Now the 25 updates add well under
// a megabyte, and with max_submit_size_per_user 5M the updates that
// would take alice past it are refused (exit 3) naming the limit.
func TestArrayCommentUpdates(t *testing.T) {
	t.Parallel()
	e2etest.RequirePrereq(t)
	alice := e2etest.AddUserTag(t, "ca")
	c := policyCluster(t, 0, map[string]string{`max_submit_size_per_user = "1G"`: `max_submit_size_per_user = "5M"`}, "")
	script := filepath.Join(alice.Home, "big.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntrue\n"+strings.Repeat("# four megabytes of script, stored once for the array\n", 4000000/55)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(script, int(alice.UID), int(alice.GID)); err != nil {
		t.Fatal(err)
	}
	r := c.As(alice, nil, "sbatch", "--hold", "--parsable", "--array=0-24", "big.sh")
	if r.Code != 0 {
		t.Fatalf("25-task array of a 4 MB script: exit %d: %s", r.Code, r.Stderr)
	}
	first := strings.TrimSpace(r.Stdout)
	size := func() int64 {
		var n int64
		for _, f := range []string{"state.db", "state.db-wal"} {
			if fi, err := os.Stat(filepath.Join(c.Dir, f)); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	before := size()
	// Small comments: the amplification.
	for i := range 25 {
		r := c.As(alice, nil, "scontrol", "update", fmt.Sprintf("JobId=%s_%d", first, i), fmt.Sprintf("Comment=task-%d", i))
		if r.Code != 0 {
			t.Fatalf("scontrol update of task %d's comment: exit %d: %s", i, r.Code, r.Stderr)
		}
	}
	if grew := size() - before; grew > 1<<20 {
		t.Errorf("25 comment updates grew state.db and its WAL by %d KiB; want under 1 MiB (before the fix, about 4 MB each)", grew>>10)
	}
	if j := c.ShowJob(first + "_7"); j["comment"] != "task-7" {
		t.Errorf("task 7's comment is %v; want task-7", j["comment"])
	}
	// Long comments count against max_submit_size_per_user (5M; the
	// array holds about 4 MB).
	long := strings.Repeat("c", 60000)
	var over e2etest.Result
	updated := 0
	for i := range 25 {
		over = c.As(alice, nil, "scontrol", "update", fmt.Sprintf("JobId=%s_%d", first, i), "Comment="+long)
		if over.Code != 0 {
			break
		}
		updated++
	}
	if updated == 25 || over.Code != 3 || !strings.Contains(over.Stderr, "max_submit_size_per_user is 5 MiB") {
		t.Errorf("after %d long comments: exit %d %q; want refused (exit 3) at the 5 MiB max_submit_size_per_user", updated, over.Code, over.Stderr)
	}
}
