package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpud/gpud/gpud/spec"
)

// Issue 12, hole 10: nothing capped one user's pending jobs (100,000 held
// jobs took the controller from 110 MB to 900 MB). The default cap
// refuses what goes past it, array tasks counted, naming the limit and
// the count; ending or cancelling jobs makes room again, other users
// and root are not affected, and a restart counts the stored jobs.
// Failed before the cap (every submission accepted), passes after.
func TestUserSubmitLimitDefault(t *testing.T) {
	store := newFakeStore()
	h := newHarness(t, store, func(c *Config) { c.MaxSubmitJobsPerUser, c.AllowRootJobs = 5, true })
	ctx := context.Background()
	h.register("n1", 1)
	array := func(who Caller, spec_ string) error {
		_, err := h.c.SubmitAll(ctx, who, spec.JobSpec{Name: "a", Script: "#!/bin/sh\ntrue\n", WorkDir: "/tmp", Array: spec_})
		return err
	}
	if err := array(alice, "0-3"); err != nil {
		t.Fatal(err)
	}
	err := array(alice, "0-1")
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "user alice has 4 jobs pending or running and [limits] max_submit_jobs_per_user is 5, so these 2 jobs would exceed it") {
		t.Fatalf("second array: %v; want refused naming the limit (5) and alice's count (4)", err)
	}
	if _, err := h.c.TestSubmit(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Array: ""}); err != nil {
		t.Fatalf("--test-only of one more job: %v", err)
	}
	if err := array(bob, "0-4"); err != nil {
		t.Fatalf("bob's 5 jobs: %v; alice's count is hers alone", err)
	}
	if err := array(root, "0-9"); err != nil {
		t.Fatalf("root's 10 jobs: %v; root is not limited", err)
	}
	h.submit(alice, nil) // the 5th
	if err := array(alice, "7"); !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "so this job would exceed it") {
		t.Fatalf("6th job: %v; want refused", err)
	}

	// A running job that ends and a cancelled one make room for two.
	h.settle()
	jobs, _ := h.c.ListJobs(ctx, JobFilter{Users: []string{"alice"}})
	var running spec.Job
	var pending spec.JobID
	for _, v := range jobs {
		switch j := v.Job(); j.State {
		case spec.StateRunning:
			running = j
		case spec.StatePending:
			pending = j.ID
		}
	}
	if running.ID == 0 || pending == 0 {
		t.Fatalf("want one of alice's jobs running and others pending; have %d jobs", len(jobs))
	}
	h.exit("n1", running, spec.StateCompleted, 0)
	if _, err := h.c.JobAction(ctx, alice, pending, ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	if err := array(alice, "0-1"); err != nil {
		t.Fatalf("after one job ended and one was cancelled: %v; want 2 more accepted", err)
	}
	if err := array(alice, "9"); !errors.Is(err, spec.ErrRefused) {
		t.Fatalf("over the limit again: %v; want refused", err)
	}

	// A restarted controller counts the stored jobs.
	h.stop()
	h2 := newHarness(t, store, func(c *Config) { c.MaxSubmitJobsPerUser = 5 })
	if _, err := h2.c.SubmitAll(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp"}); !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "has 5 jobs") {
		t.Fatalf("after restart: %v; want refused with alice's 5 jobs counted", err)
	}
}

// A QOS's or account's max_submit_jobs_per_user replaces the default for
// its jobs, and counts the user's jobs there.
func TestUserSubmitLimitQOSAndAccount(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) {
		c.MaxSubmitJobsPerUser = 2
		c.QOS = []QOS{{Name: "normal"}, {Name: "bulk", MaxSubmitJobsPerUser: 6}, {Name: "tiny", MaxSubmitJobsPerUser: 1}}
		c.Accounts = []Account{{Name: "lab", Shares: 1, MaxSubmitJobsPerUser: 3}, {Name: "other", Shares: 1}}
		c.DefaultAccount = "other"
	})
	ctx := context.Background()
	sub := func(qos, account string, n int) error {
		js := spec.JobSpec{Script: "x", WorkDir: "/tmp", QOS: qos, Account: account, Hold: true}
		if n > 1 {
			js.Array = fmt.Sprintf("1-%d", n)
		}
		_, err := h.c.SubmitAll(ctx, alice, js)
		return err
	}
	for _, tc := range []struct {
		qos, account string
		n            int
		want         string // "" for accepted
	}{
		{"normal", "other", 2, ""},
		{"normal", "other", 1, "user alice has 2 jobs pending or running and [limits] max_submit_jobs_per_user is 2"},
		{"bulk", "other", 6, ""}, // above the default: bulk's own limit
		{"bulk", "other", 1, "user alice has 6 jobs pending or running in QOS bulk and QOS bulk's max_submit_jobs_per_user is 6"},
		{"normal", "lab", 3, ""}, // lab's own limit, counting lab's jobs only
		{"normal", "lab", 1, "user alice has 3 jobs pending or running in account lab and account lab's max_submit_jobs_per_user is 3"},
		{"tiny", "lab", 1, ""}, // the QOS's limit wins over the account's
		{"tiny", "lab", 1, "in QOS tiny"},
		{"normal", "other", 1, "user alice has 12 jobs pending or running and [limits] max_submit_jobs_per_user is 2"},
	} {
		err := sub(tc.qos, tc.account, tc.n)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d jobs in QOS %s, account %s: %v; want accepted", tc.n, tc.qos, tc.account, err)
		case tc.want != "" && (!errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d jobs in QOS %s, account %s: %v; want refused with %q", tc.n, tc.qos, tc.account, err, tc.want)
		}
	}
}

// Issue 12 hole 4: what one submission may store is capped (the script
// once, plus each task's record), and the refusal says by how much and
// what to do. Failed before (any size accepted), passes after.
func TestMaxSubmitBytes(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.MaxSubmitBytes, c.MaxSubmitJobsPerUser = 1<<20, 0 })
	ctx := context.Background()
	script := "#!/bin/sh\n" + strings.Repeat("# padding\n", 20<<10) // 200 KiB
	sub := func(s, array string, env []string) error {
		_, err := h.c.SubmitAll(ctx, alice, spec.JobSpec{Script: s, WorkDir: "/tmp", Array: array, Env: env, Hold: true})
		return err
	}
	// The script counts once per array, not once per task.
	if err := sub(script, "0-99", nil); err != nil {
		t.Fatalf("100 tasks of a 200 KiB script: %v; want accepted (the script is stored once)", err)
	}
	// Each task's record counts.
	err := sub("x", "0-9999", nil)
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "for each of its 10000 jobs), more than the controller's max_submit_size of 1 MiB; split the array") {
		t.Fatalf("10,000 tasks under a 1 MiB cap: %v; want refused naming the cap and what to do", err)
	}
	// The payload alone: 24 entries of 60 KiB (each entry is under the
	// 64 KiB that spec.JobSpec.Validate allows one).
	var env []string
	for i := range 24 {
		env = append(env, fmt.Sprintf("V%d=%s", i, strings.Repeat("E", 60<<10)))
	}
	err = sub(script, "", env)
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "--export=NONE") {
		t.Fatalf("1.4 MiB of environment: %v; want refused", err)
	}
	// 0 turns the cap off.
	h2 := newHarness(t, newFakeStore(), func(c *Config) { c.MaxSubmitBytes, c.MaxSubmitJobsPerUser = 0, 0 })
	if _, err := h2.c.SubmitAll(ctx, alice, spec.JobSpec{Script: "x", WorkDir: "/tmp", Array: "0-9999", Hold: true}); err != nil {
		t.Fatalf("no cap: %v", err)
	}
}

// What one user's pending and running jobs store is capped too: without
// it the job cap alone let one user keep 10,000 jobs of a 4 MiB script
// each (40 GB). An array's script counts once, while any task is left.
func TestUserSubmitSize(t *testing.T) {
	store := newFakeStore()
	cfg := func(c *Config) { c.MaxSubmitBytesPerUser, c.MaxSubmitJobsPerUser, c.MaxSubmitBytes = 1<<20, 0, 0 }
	h := newHarness(t, store, cfg)
	ctx := context.Background()
	script := "#!/bin/sh\n" + strings.Repeat("# padding\n", 30<<10) // 300 KiB
	sub := func(who Caller, array string) ([]spec.JobID, error) {
		return h.c.SubmitAll(ctx, who, spec.JobSpec{Script: script, WorkDir: "/tmp", Array: array, Hold: true})
	}
	var plain []spec.JobID
	for range 3 {
		ids, err := sub(alice, "")
		if err != nil {
			t.Fatalf("plain job of a 300 KiB script: %v", err)
		}
		plain = append(plain, ids...)
	}
	_, err := sub(alice, "")
	if !errors.Is(err, spec.ErrRefused) || !strings.Contains(err.Error(), "user alice's pending and running jobs store 903.1 KiB (scripts, environments and job records) and [limits] max_submit_size_per_user is 1 MiB; this submission would add 301 KiB") {
		t.Fatalf("4th 300 KiB job: %v; want refused naming what alice's jobs store and the limit", err)
	}
	// An array of 100 tasks of the same script counts it once.
	arr, err := sub(bob, "0-99")
	if err != nil {
		t.Fatalf("bob's 100 tasks of a 300 KiB script: %v; want accepted (about 400 KiB)", err)
	}
	// Cancelling a job makes room.
	if _, err := h.c.JobAction(ctx, alice, plain[0], ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := sub(alice, ""); err != nil {
		t.Fatalf("after cancelling one: %v", err)
	}
	bytes := func(who Caller) int64 {
		var n int64
		_ = h.c.query(ctx, func() error { n = h.c.st.active.bytes[who.UID]; return nil })
		return n
	}
	// The array's script is released with its last task only.
	for _, id := range arr[1:] { // arr[0], the array's id, would cancel them all
		if _, err := h.c.JobAction(ctx, bob, id, ActionCancel, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := bytes(bob); n < int64(len(script)) {
		t.Errorf("bob's one task left counts %d bytes; want its script (%d) and record", n, len(script))
	}
	// A restart counts the same from the stored jobs.
	before := bytes(alice)
	h.stop()
	h = newHarness(t, store, cfg)
	if n := bytes(alice); n != before {
		t.Errorf("alice's jobs count %d bytes after a restart, %d before", n, before)
	}
	if _, err := h.c.JobAction(ctx, bob, arr[0], ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	if n := bytes(bob); n != 0 {
		t.Errorf("bob has no job left but counts %d bytes", n)
	}
}

// A user's consecutive submissions with an equal script and environment
// share one copy in memory; a different one is kept as given.
func TestSubmissionsShareEqualScriptAndEnv(t *testing.T) {
	h := newHarness(t, newFakeStore(), nil)
	ctx := context.Background()
	mk := func(script string, env ...string) spec.JobID {
		id, err := h.c.Submit(ctx, alice, spec.JobSpec{Script: strings.Clone(script), Env: slices.Clone(env), WorkDir: "/tmp", Hold: true})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a := mk("#!/bin/sh\ntrue\n", "A=1", "B=2")
	b := mk("#!/bin/sh\ntrue\n", "A=1", "B=2")
	c := mk("#!/bin/sh\nfalse\n", "A=1", "B=3")
	var ja, jb, jc spec.Job
	_ = h.c.query(ctx, func() error { ja, jb, jc = h.c.st.jobs[a].job, h.c.st.jobs[b].job, h.c.st.jobs[c].job; return nil })
	if &ja.Env[0] != &jb.Env[0] || unsafe.StringData(ja.Script) != unsafe.StringData(jb.Script) {
		t.Errorf("equal submissions hold separate copies of the script or environment")
	}
	if jc.Script != "#!/bin/sh\nfalse\n" || !slices.Equal(jc.Env, []string{"A=1", "B=3"}) {
		t.Errorf("a different submission got script %q env %v", jc.Script, jc.Env)
	}
}

// Issue 24, hole 6: scontrol update of each task's comment of an array
// is not free. A comment is the task's own (gpud/store keeps it in the
// task's row, the script once per array), so an update that lengthens it
// counts against [limits] max_submit_size_per_user like a submission,
// and what the user's jobs store is back to nothing once they end.
// Before, updates were not counted at all (and each rewrote the array's
// 4 MB script into the task's row).
func TestUpdatesCountAgainstSubmitSize(t *testing.T) {
	h := newHarness(t, newFakeStore(), func(c *Config) { c.MaxSubmitBytesPerUser = 5 << 20 })
	ctx := context.Background()
	script := "#!/bin/sh\n" + strings.Repeat("#", 4<<20-64)
	ids, err := h.c.SubmitAll(ctx, alice, spec.JobSpec{Script: script, WorkDir: "/tmp", Array: "0-24", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	bytes := func() int64 {
		var n int64
		if err := h.c.query(ctx, func() error { n = h.c.st.active.bytes[alice.UID]; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := bytes()
	comment := strings.Repeat("c", 60<<10)
	var refused error
	updated := 0
	for _, id := range ids {
		if _, err := h.c.UpdateJob(ctx, alice, spec.JobRef{ID: id}, JobUpdate{Comment: &comment}); err != nil {
			refused = err
			break
		}
		updated++
	}
	if grew := bytes() - before; grew != int64(updated)*int64(len(comment)) {
		t.Errorf("%d comment updates of %d bytes counted %d bytes; want each counted", updated, len(comment), grew)
	}
	if updated == len(ids) || !errors.Is(refused, spec.ErrRefused) || !strings.Contains(refused.Error(), "max_submit_size_per_user is 5 MiB; this update would add 60 KiB") {
		t.Fatalf("after %d updates: %v; want refused at the 5 MiB per-user limit, naming it", updated, refused)
	}
	// A shorter comment frees what it held.
	short := "s"
	if _, err := h.c.UpdateJob(ctx, alice, spec.JobRef{ID: ids[0]}, JobUpdate{Comment: &short}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.c.CancelJobs(ctx, alice, CancelFilter{JobFilter: JobFilter{Users: []string{"alice"}}}, ""); err != nil {
		t.Fatal(err)
	}
	if n := bytes(); n != 0 {
		t.Errorf("alice's ended jobs still count %d bytes; want 0", n)
	}
}
